"""An option that would change nothing is refused in one line (exit 2), not taken without a
word: each of these was accepted and ignored. Where the option does apply, it is used."""

import json

import pytest
from conftest import ROOT, in_process


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["simulate", "h100-1024", "--ranks", "16", "--force"],
         "--force: only with --out DIR (it moves an earlier run there aside)"),
        (["simulate", "h100-1024", "--ranks", "16", "--calib-network", "1gbit"],
         "--calib-network 1gbit: only with --calib calib.json"),
        (["simulate", "h100-1024", "--ranks", "16", "--calib-mode", "device"],
         "--calib-mode device: only with --calib calib.json"),
        (["simulate", "h100-1024", "--ranks", "16", "--horizon-h", "5"],
         "--horizon-h 5: h100-1024 has no fail-slow, throttling or diurnal episodes"),
        (["whatif", "straggler-lemon", "--ranks", "32", "--try", "accum=2", "--restart-min", "5"],
         "--restart-min 5: no row restarts (only exclude-slowest pays one)"),
        (["whatif", "straggler-lemon", "--ranks", "32", "--try", "accum=2", "--horizon-h", "5"],
         "--horizon-h 5: no row restarts or has episodes"),
        (["whatif", "straggler-lemon", "--ranks", "32", "--try", "accum=2", "--calib-mode", "shape"],
         "--calib-mode shape: only with --calib calib.json"),
        (["goodput", "--mtbf-h", "10", "--timeout-min", "5"],
         "--timeout-min 5: only with --stalls-per-day > 0 (it shapes the stalls)"),
        (["goodput", "--mtbf-h", "10", "--stall-mean-min", "3"],
         "--stall-mean-min 3: only with --stalls-per-day > 0 (it shapes the stalls)"),
        (["collective", "h100-1024", "--ranks", "16", "--set", "training.bucket_cap_mb=5"],
         "--set training.bucket_cap_mb: a collective is timed from network keys and ranks alone"),
        # Two keys in one --set (sim/patches.py parse_sets): the second is checked too.
        (["collective", "h100-1024", "--ranks", "16", "--set", "network.intra_efficiency=0.5,noise.sigma=0.1"],
         "--set noise.sigma: a collective is timed from network keys and ranks alone"),
    ],
    ids=["force", "calib-network", "calib-mode", "horizon", "restart-min", "whatif-horizon", "whatif-calib-mode",
         "timeout", "stall-mean",
         "collective-set", "collective-set-two"],
)  # fmt: skip
def test_an_option_that_changes_nothing_is_refused(capsys, argv, line):
    steps = ["--steps", "3"] if argv[0] in ("simulate", "whatif") else []
    code, out, err = in_process(capsys, *argv, *steps)
    assert code == 2 and out == ""
    assert err.startswith(f"ddplab {argv[0]}: error: {line}") and len(err.strip().splitlines()) == 1


def test_where_they_apply_they_are_used(capsys):
    """The horizon an episode cost is stated over, and a restart's length and horizon: 5 min
    over 2 h is 1/24 of the throughput, against 10 min over 24 h by default."""
    code, out, err = in_process(
        capsys, "simulate", "straggler-failslow", "--ranks", "64", "--steps", "10", "--horizon-h", "5", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["episodes"]["horizon_h"] == 5.0
    argv = ["whatif", "straggler-lemon", "--ranks", "64", "--steps", "10", "--try", "exclude-slowest", "--json"]
    code, out, err = in_process(capsys, *argv, "--restart-min", "5", "--horizon-h", "2")
    assert code == 0, err
    short = json.loads(out)[1]
    code, out, err = in_process(capsys, *argv)
    assert code == 0, err
    default = json.loads(out)[1]
    assert (short["restart_s"], default["restart_s"]) == (300.0, 600.0)
    clear = default["tokens_per_s"] / (1 - 600 / 86400)  # the same row before its restart
    assert short["tokens_per_s"] == pytest.approx(clear * (1 - 300 / 7200), rel=1e-12)
    code, out, err = in_process(capsys, "collective", "h100-1024", "--sizes", "1M", "--set", "ranks=16", "--json")
    assert code == 0 and json.loads(out)[0]["ranks"] == 16, err


def test_calibrate_refuses_a_job_shape_for_probe_runs(capsys, tmp_path):
    """--model, --seq-len, --micro-batch, --precision and --grad-accum describe a trace's job; a probe run
    records its own, so with probe runs they were ignored. Nothing is written."""
    probe = ROOT / "measurements" / "validation" / "1gbit" / "probe"
    for flag, value in (("--model", "gpt2-124m"), ("--seq-len", "64"), ("--precision", "fp32"), ("--grad-accum", "2")):
        code, out, err = in_process(capsys, "calibrate", str(probe), "-o", str(tmp_path / "c.json"), flag, value)
        assert code == 2 and out == ""
        assert (
            err
            == f"ddplab calibrate: error: {flag} {value}: only with profiler traces (a probe run records its own job)\n"
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        # homelab-1gbe fixes its compute by compute.mfu: the roofline's knobs do nothing there.
        (["simulate", "homelab-1gbe", "--set", "compute.matmul_efficiency=0.5"],
         "compute.matmul_efficiency: compute.mfu fixes the compute time, so the roofline this tunes is not used"
         " (compute.mfu=none unsets it), got 0.5"),
        (["whatif", "homelab-1gbe", "--try", "compute.stack=compiled"],
         "--try 'compute.stack=compiled': compute.stack: compute.mfu fixes the compute time"),
        (["simulate", "h100-1024", "--ranks", "16", "--set", "noise.distribution=none", "--set", "noise.sigma=0.3"],
         "noise.sigma: noise.distribution = none draws no sigma (set noise.distribution=lognormal too), got 0.3"),
        (["simulate", "h100-1024", "--ranks", "16", "--set", "network.enabled=false", "--set", "network.nic_gbit_s=1"],
         "network.nic_gbit_s: network.enabled = false: communication is free, so no link key applies, got 1"),
        (["simulate", "homelab-1gbe", "--set", "network.tuner=rccl-mi300x"],
         "network.tuner: network.backend = gloo times its own ring; this NCCL/RCCL key is not used"),
        (["sweep", "homelab-1gbe", "--vary", "compute.attention_efficiency", "0.3", "0.5"],
         "compute.attention_efficiency: compute.mfu fixes the compute time"),
    ],
    ids=["roofline-under-mfu", "whatif-stack", "sigma-without-noise", "link-without-network", "nccl-key-on-gloo",
         "sweep-vary"],
)  # fmt: skip
def test_a_key_the_user_sets_that_changes_nothing_is_refused(capsys, argv, line):
    """sim/config.py inert_key: refused where the user set it; the same values carried by a file
    stay (h100-1024's noise.sigma under `--set noise.distribution=none` runs, quiet)."""
    code, out, err = in_process(capsys, *argv, "--steps", "3")
    assert code == 2 and out == "", err
    assert line in err and len(err.strip().splitlines()) == 1
    code, out, err = in_process(
        capsys, "simulate", "h100-1024", "--ranks", "16", "--steps", "3", "--set", "noise.distribution=none", "--json"
    )
    assert code == 0, err
    s = json.loads(out)["step_time_s"]
    assert s["p5"] == pytest.approx(s["p99"], rel=0.01)  # no compute jitter drawn


def test_a_grid_may_cross_a_key_with_the_switch_that_idles_it(capsys):
    """A sweep refuses a key idle at every point, not one idle at some: noise.sigma set beside
    `--vary noise.distribution none lognormal` is what the lognormal point draws."""
    argv = ["sweep", "h100-1024", "--ranks", "16", "--steps", "3", "--json"]
    code, out, err = in_process(capsys, *argv, "--vary", "noise.distribution", "none", "lognormal",
                                "--set", "noise.sigma=0.05")  # fmt: skip
    assert code == 0, err
    code, out, err = in_process(capsys, *argv, "--vary", "noise.sigma", "0.01", "0.05",
                                "--set", "noise.distribution=none")  # fmt: skip
    assert code == 2 and err.rstrip().endswith("at every point of the grid")
