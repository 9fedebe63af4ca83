"""A calibration in the simulator: `simulate --calib` replaces what was measured,
keeps what does not transfer, and says which is which; the measured bucket-ready
profile drives DDP's bucket assignment."""

import json

import numpy as np
import pytest
from fake_runs import probe_run

from calibrate.apply import apply_calibration
from calibrate.calib import calibrate
from sim.config import ComputeConfig
from sim.scenario_file import scenario_data, scenario_from_dict
from sim.transformer import gradient_ready_order, model_shape
from sim.workload import build_workload


@pytest.fixture(scope="module")
def calib_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    calib = calibrate([probe_run(d / "1gbit" / "probe", speed={1: 1.5})], seed=0)
    path = d / "calib.json"
    path.write_text(json.dumps(calib.to_json()))
    return path, calib


def _params(summary) -> dict:
    return {p["key"]: p for p in summary["parameters"]}


def test_home_lab_takes_every_measured_value(calib_file, ddplab):
    path, calib = calib_file
    code, out, err = ddplab("simulate", "homelab-1gbe", "--calib", str(path), "--json", "--steps", "5")
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "all"
    p = _params(s)
    net = calib.networks["1gbit"]
    assert p["network.nic_gbit_s"]["value"] == 0.96
    assert p["network.nic_efficiency"]["value"] == pytest.approx(min(net.stack_efficiency.value, 1.0))
    assert p["network.gloo_hop_latency_us"]["value"] == pytest.approx(net.allreduce.hop_latency_us)
    # gpt2-760m was not measured: compute transfers through FLOP counts at the achieved rate,
    # a fixed MFU of the preset's peak (homelab-1gbe trains in bf16: its bf16 peak).
    achieved = calib.compute.achieved_tflop_s.value
    assert p["compute.peak_tflop_s"]["value"] == 58.0
    assert p["compute.mfu"]["value"] * 58.0 == pytest.approx(achieved, rel=1e-12)
    assert p["stragglers"]["value"] == f"1:{calib.ranks[1].speed_factor:.4g}"
    assert p["compute.ready_fractions"]["source"].startswith("assumed: homelab-1gbe.toml")
    for key in ("network.nic_gbit_s", "noise.sigma", "compute.interference_gamma", "compute.optimizer_s"):
        assert p[key]["source"].startswith(f"measured on cpu, 2 ranks: {path}"), key
    # The optimizer scales with parameters (AdamW is memory-bound): 760M / 0.12M.
    params = {"gpt2-760m": 760_300_032, "gpt2-tiny": 120_576}
    expect = calib.compute.optimizer_s.value * params["gpt2-760m"] / params["gpt2-tiny"]
    assert p["compute.optimizer_s"]["value"] == pytest.approx(expect)


def test_cluster_takes_only_shape_parameters(calib_file, ddplab):
    path, calib = calib_file
    code, out, err = ddplab(
        "simulate", "h100-1024", "--calib", str(path), "--json", "--steps", "3", "--ranks", "64",
        "--set", "noise.sigma=0.02",
    )  # fmt: skip
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "shape"
    p = _params(s)
    assert p["network.nic_gbit_s"]["value"] == 400.0
    assert p["network.nic_gbit_s"]["source"].startswith("assumed: h100-1024.toml (")
    assert p["compute.peak_tflop_s"]["source"].startswith("assumed")
    # A CPU's gloo interference (0.12 measured) and its TCP stack efficiency are not an H100's
    # under NCCL; a CPU's scheduler jitter is not an H100's: the preset's values stay, and the
    # summary lists each measured value it left out, with why (issue 22).
    assert p["compute.interference_gamma"]["value"] == 0.0
    assert p["network.nic_efficiency"]["value"] == 0.94
    assert p["noise.distribution"]["value"] == "lognormal" and p["noise.distribution"]["source"].startswith("assumed")
    held = {w["key"]: w for w in s["calibration"]["withheld"]}
    assert held["compute.interference_gamma"]["value"] == pytest.approx(0.12)
    assert "a CPU's cores" in held["compute.interference_gamma"]["reason"]
    net = calib.networks["1gbit"]
    assert held["network.nic_efficiency"]["value"] == pytest.approx(min(net.stack_efficiency.value, 1.0))
    assert held["network.nic_efficiency"]["reason"] == "gloo's stack measured, h100-1024 runs nccl"
    assert held["noise.distribution"]["value"] == calib.noise.distribution
    assert held["noise.distribution"]["reason"] == "a CPU's scheduler jitter: h100-1024's h100 GPUs keep their own"
    assert held["network.nic_gbit_s"]["value"] == 0.96
    assert held["stragglers"]["value"] == f"1:{calib.ranks[1].speed_factor:.4g}"
    assert "noise.sigma" not in held  # the user's --set noise.sigma decides it, so nothing is left out
    # What the user types wins over the calibration, and the table credits the user: not the
    # calibration, and not the preset file's comment (issue 27).
    assert p["noise.sigma"]["value"] == 0.02 and p["noise.sigma"]["source"] == "set: --set on the command line"
    assert p["noise.distribution"]["source"].startswith("assumed")  # a key not typed keeps its origin
    assert p["stragglers"]["value"] == "" and p["stragglers"]["source"].startswith("assumed")


def test_two_networks_need_a_name(tmp_path, ddplab):
    ten = probe_run(tmp_path / "b", rate="10gbit", busbw_gb_s=1.18, link_gbit_s=9.6)
    calib = calibrate([probe_run(tmp_path / "a", rate="1gbit"), ten])
    path = tmp_path / "calib.json"
    path.write_text(json.dumps(calib.to_json()))
    code, _, err = ddplab("simulate", "homelab-1gbe", "--calib", str(path))
    assert code == 2 and "--calib-network: the calibration measured 10gbit, 1gbit; name one" in err
    code, out, err = ddplab(
        "simulate", "homelab-1gbe", "--calib", str(path), "--calib-network", "10gbit", "--json", "--steps", "3"
    )
    assert code == 0, err
    assert _params(json.loads(out))["network.nic_gbit_s"]["source"].endswith("(10gbit: raw TCP, 6 transfers)")
    # `whatif --calib` lays the calibration as simulate does: the same choice asked, and the
    # named network's link under every row (a raw 10 Gbit/s TCP rate, not the preset's 1 GbE).
    whatif = ("whatif", "homelab-1gbe", "--calib", str(path), "--try", "accum=2", "--steps", "3", "--json")
    code, _, err = ddplab(*whatif)
    assert code == 2 and "--calib-network: the calibration measured 10gbit, 1gbit; name one" in err
    rates = {}
    for label in ("1gbit", "10gbit"):
        code, out, err = ddplab(*whatif, "--calib-network", label)
        assert code == 0, err
        rates[label] = [r["exposed_comm_s"] for r in json.loads(out)]
    assert all(slow > 5 * fast for slow, fast in zip(rates["1gbit"], rates["10gbit"], strict=True)), rates
    code, out, err = ddplab(*whatif[:-1], "--calib-network", "10gbit", "--calib-mode", "shape")
    assert code == 0 and f"calibration {path} applied in mode 'shape' (as asked (--calib-mode))" in out, err
    path.write_text("{}")
    code, _, err = ddplab("simulate", "homelab-1gbe", "--calib", str(path))
    assert code == 2 and "not a ddplab-calib v1 file" in err


def _tiny(ready=None, cap=0.05):
    return scenario_from_dict(
        {
            "ranks": 2,
            "model": {"preset": "gpt2-tiny"},
            "training": {"seq_len": 64, "bucket_cap_mb": cap, "precision": "fp32"},
            "compute": {"step_compute_s": 0.01, **({"ready_fractions": ready} if ready else {})},
            "network": {"backend": "gloo", "algorithm": "ring", "gpus_per_node": 1, "nics_per_node": 1},
        }
    )


def test_measured_ready_profile_sets_bucket_order():
    order = gradient_ready_order(model_shape("gpt2-tiny"), 64)
    flops = build_workload(_tiny(), np.random.default_rng(0)).buckets
    # The FLOP profile fed back as a measurement (scaled by 0.9) builds the same buckets.
    same = build_workload(_tiny({n: 0.9 * f for n, f in order}), np.random.default_rng(0)).buckets
    assert [b.params for b in same] == [b.params for b in flops]
    assert [b.ready_fraction for b in same] == pytest.approx([b.ready_fraction for b in flops])
    # Reversed order: the tensor FLOPs call first becomes ready last, and buckets follow.
    rev = {n: 1.0 - i / len(order) for i, (n, _) in enumerate(order)}
    buckets = build_workload(_tiny(rev), np.random.default_rng(0)).buckets
    assert buckets[0].params[0] == order[-1][0] and buckets[-1].params[-1] == order[0][0]
    assert buckets[-1].ready_fraction == 1.0


def test_ready_profile_errors_name_the_key():
    order = dict(gradient_ready_order(model_shape("gpt2-tiny"), 64))
    order.pop("transformer.wte.weight")
    with pytest.raises(ValueError, match=r"compute.ready_fractions: no value for transformer.wte.weight of gpt2-tiny"):
        build_workload(_tiny(order), np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"compute.ready_fractions.x: must be in \[0, 1\], got 2.0"):
        ComputeConfig(ready_fractions={"x": 2.0})
    with pytest.raises(ValueError, match=r"compute.ready_fractions.x: expected float, got 'fast'"):
        scenario_from_dict({"compute": {"ready_fractions": {"x": "fast"}}})


def test_calibration_follows_the_users_model(calib_file, ddplab):
    """--set model.preset=gpt2-tiny (the calibrated model) on the 760M preset: the
    measured compute fit and ready profile apply, not the FLOP-count transfer."""
    path, calib = calib_file
    code, out, err = ddplab(
        "simulate", "homelab-1gbe", "--calib", str(path), "--json", "--steps", "3",
        "--set", "model.preset=gpt2-tiny", "--set", "training.seq_len=64", "--set", "training.micro_batch_size=8",
    )  # fmt: skip
    assert code == 0, err
    p = _params(json.loads(out))
    fit = calib.compute.step_s
    # 8 x 64 tokens were probed: the measured mean there (calibration.py AffineFit.at).
    assert p["compute.step_compute_s"]["value"] == pytest.approx(dict(fit.points)[8 * 64])
    assert p["compute.step_compute_s"]["source"].endswith("(measured at 512 tokens)")
    assert p["compute.ready_fractions"]["value"] == "measured"
    assert "compute.peak_tflop_s" not in p
    assert p["compute.optimizer_s"]["value"] == pytest.approx(calib.compute.optimizer_s.value)


def test_a_size_with_too_few_iterations_uses_the_fit_over_every_size(tmp_path):
    """A probe of 2 sizes x 4 iterations on one rank (the GPU check's fp32 probe) has 8
    multipliers in all but 4 at each size: too few to resample, so the run's own size yields to
    the fit over both (before, the calibration was refused: 'empirical noise needs at least 8
    samples')."""
    calib = calibrate([probe_run(tmp_path / "p", world=1, micro_batches=(2, 8), iters=4)], seed=0)
    assert {b: len(x) for b, x in calib.noise.multipliers_by_micro_batch.items()} == {2: 4, 8: 4}
    sets = ["model.preset=gpt2-tiny", "training.seq_len=64", "training.micro_batch_size=8", "stragglers="]
    data = scenario_data("homelab-1gbe", sets, ranks=1)
    applied = apply_calibration(data, calib, calib_path="c.json", mode="all")
    assert "at micro-batch 8" not in applied.measured.get("noise.samples", "")
    scenario_from_dict(applied.data)  # accepted by the simulator


def test_a_set_key_is_credited_to_set_not_to_the_preset_file(calib_file, ddplab):
    """Issue 27's acceptance: `simulate h100-1024 --calib X --set noise.sigma=0.01` credits the
    user's --set for noise.sigma (its value, 0.01, is theirs), not the preset file's comment and
    not the calibration; every other reported key keeps its own origin."""
    path, _ = calib_file
    code, out, err = ddplab(
        "simulate", "h100-1024", "--calib", str(path), "--set", "noise.sigma=0.01", "--json", "--steps", "3"
    )  # fmt: skip
    assert code == 0, err
    s = json.loads(out)
    p = _params(s)
    assert p["noise.sigma"]["value"] == 0.01
    assert p["noise.sigma"]["source"] == "set: --set on the command line"
    assert [k for k, row in p.items() if row["source"].startswith("set:")] == ["noise.sigma"]
    assert "noise.sigma" not in {w["key"] for w in s["calibration"]["withheld"]}


def _gpt2_tiny(hook: str) -> dict:
    data = scenario_data("homelab-1gbe")
    data["model"] = {"preset": "gpt2-tiny"}
    data["training"] |= {"comm_hook": hook, "micro_batch_size": 4, "seq_len": 64, "precision": "fp32"}
    return data


def test_a_comm_hooks_casts_are_measured_and_put_on_its_comm_path(tmp_path):
    # The slowest rank's casts (the step waits for it): rank 1 at 1.5x takes 1.5 x 0.3 s/GB.
    run = probe_run(tmp_path / "1gbit" / "probe", speed={1: 1.5}, hook_cast_s_per_gb={"fp16": 0.3})
    calib = calibrate([run], seed=0)
    cast = calib.compute.hook_cast_s_per_gb["fp16"]
    assert cast.value == pytest.approx(0.45, rel=1e-12) and cast.samples == 2 * 30
    assert "bf16" not in calib.compute.hook_cast_s_per_gb
    applied = apply_calibration(_gpt2_tiny("fp16"), calib, calib_path="c.json", mode="all")
    assert applied.data["training"]["compress_s_per_gb"] == pytest.approx(0.45)
    assert "fp16 hook's casts, 60 passes" in applied.measured["training.compress_s_per_gb"]
    # On the comm path: each bucket's collective is longer by exactly its casts.
    sc = scenario_from_dict(applied.data)
    plain = scenario_from_dict(applied.data | {"training": applied.data["training"] | {"compress_s_per_gb": 0.0}})
    with_casts, without = (build_workload(s, np.random.default_rng(0)) for s in (sc, plain))
    sizes = np.array([b.size_bytes for b in with_casts.buckets])
    assert np.allclose(with_casts.collective_s - without.collective_s, 0.45 * sizes / 1e9, rtol=1e-9)
    # No hook, no casts; a hook the probe did not time keeps the scenario's value and says so.
    none = apply_calibration(_gpt2_tiny("none"), calib, calib_path="c.json", mode="all")
    assert "training.compress_s_per_gb" not in none.measured
    bf16 = apply_calibration(_gpt2_tiny("bf16"), calib, calib_path="c.json", mode="all")
    assert bf16.data["training"].get("compress_s_per_gb", 0.0) == 0.0
    assert "not measured" in bf16.measured["training.compress_s_per_gb"]


def test_a_negative_cast_time_is_refused(tmp_path):
    from calibrate.plausible import problems

    calib = calibrate([probe_run(tmp_path / "p", hook_cast_s_per_gb={"bf16": -0.1})], seed=0)
    assert problems(calib) == ["compute.hook_cast_s_per_gb.bf16: a time cannot be negative, got -0.1 s/GB"]
