"""`ddplab train --tp/--pp` (realrun/train3d.py): real 2-rank tensor-parallel and 2-stage pipeline
runs (1F1B, and interleaved with 2 chunks a stage) of llama-tiny on CPU with gloo, held to a
one-rank run of the same model and data (TP and PP
must not change the math), their records, MemTracker's peak against sim/memory3d.py, the
prediction `validate` makes of them, and the one-line refusals of impossible layouts."""

import os
import subprocess

import pytest
from conftest import run_here

from calibrate.validate3d import WARMUP_STEPS
from realrun.parallel import layout_problem, stage_layers
from realrun.records import read_run
from scenarios import load_models
from sim.parallel3d import chunk_layers

# 16 steps: the PP stage-walls check sums the 14 after validate's warm-up. Over 4 (6 steps, until
# 2026-12-06) a loaded box's between-step delays, ~0.7 ms on one stage's ~16 ms steps, put the
# stages 4.0 % apart beside a second make test; the sum's share of that noise falls with 1/sqrt(n).
STEPS = 16
COMMON = ("--model", "llama-tiny", "--seq-len", "32", "--micro-batch", "2", "--grad-accum", "4", "--steps", str(STEPS))
LOSS_RTOL = 1e-4  # float32 sums in another order (sharded matmuls, the schedule's gradient scaling)
# Set before the first comparison was looked at: MemTracker's peak and sim/memory3d.py's estimate
# (model states, the schedule's activations in flight, the logits) within 30 %. The estimate's
# inventory is Korthikanti et al.'s for a GPT block and a vocabulary-parallel embedding and output
# layer; these runs keep both whole on every TP rank (realrun/tp.py), which it does not know.
MEMORY_RTOL = 0.30
# validate's p50 step time over the measured one (test_validate_reports_the_prediction).
PREDICTED_OVER_MEASURED = (0.3, 3.0)


def run_cli(*args, timeout=170) -> subprocess.CompletedProcess:
    """`ddplab ...` (tests/conftest.py run_here), one OpenMP thread a rank, as torchrun sets for
    several ranks: the one-rank reference run would otherwise spin two on a shared 2-core box
    (tens of seconds here)."""
    return run_here(*args, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


def losses(out) -> list[float]:
    return [s["loss"] for s in read_run(out, "train")[0].of_type("step")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The probe, then the three layouts it predicts right after it, then the one-rank reference:
    a prediction of a run from a probe of this box reads a load that moves, so the two are taken
    as close together as they can be (test_validate_reports_the_prediction)."""
    base = tmp_path_factory.mktemp("train3d")
    out = {"probe": base / "probe"}
    # 4 iterations x 2 micro-batch sizes: calibrate's jitter fit needs 8 compute samples or more.
    # Micro-batches 1 and 16 (16x the tokens): with 1 and 2, and again with 1 and 4 (twice beside
    # a second make test, 2026-12-02), a loaded box's noise tilted the per-token slope negative,
    # a fixed cost being most of this model's micro-step; sizes below 64K let latency hide the
    # bandwidth: calibrate refuses both fits (issue 25, D8).
    p = run_cli(
        "probe", "--nproc", "2", "--out", str(out["probe"]), "--model", "llama-tiny", "--seq-len", "32",
        "--sizes", "64K:4M", "--iters", "4", "--warmup", "1", "--micro-batches", "1,16",
        "--parts", "collectives,link,compute,overlap,tp,pp",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    out["probe_stdout"] = p.stdout
    interleaved = ("--pp", "2", "--pp-schedule", "interleaved", "--pp-virtual-stages", "2")
    layouts = (("tp", "2", ("--tp", "2")), ("pp", "2", ("--pp", "2")), ("il", "2", interleaved), ("one", "1", ()))
    for name, nproc, extra in layouts:
        out[name] = base / name
        p = run_cli("train", "--nproc", nproc, "--out", str(out[name]), *COMMON, *extra)
        assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_stage_layers_is_the_simulators_split():
    for n in (2, 5, 7, 12, 80):
        for pp in range(1, min(n, 8) + 1):
            assert stage_layers(n, pp) == chunk_layers(n, pp), (n, pp)


@pytest.mark.parametrize("name", ["tp", "pp", "il"])
def test_loss_matches_one_rank(runs, name):
    one, par = losses(runs["one"]), losses(runs[name])
    assert len(par) == len(one) == STEPS
    for a, b in zip(par, one, strict=True):
        assert a == pytest.approx(b, rel=LOSS_RTOL)


@pytest.mark.parametrize("name,tp,pp,v", [("tp", 2, 1, 1), ("pp", 1, 2, 1), ("il", 1, 2, 2)])
def test_records_have_the_layout(runs, name, tp, pp, v):
    ranks = read_run(runs[name], "train")
    for r in ranks:
        lay = r.meta["layout"]
        assert (lay["tp"], lay["pp"], lay["dp"], lay["micro_batches"], lay["virtual"]) == (tp, pp, 1, 4, v)
        assert lay["stage"] == (r.meta["rank"] if pp > 1 else 0)
        steps = r.of_type("step")
        assert all(s["stage"] == lay["stage"] and s["micro_batches"] == 4 for s in steps)
        for s in steps:  # the phases validate reads, each a time
            assert s["forward_s"] > 0 and s["backward_s"] > 0 and s["wait_s"] >= 0
            assert s["step_wall_s"] >= s["forward_s"] + s["backward_s"]
        assert len(r.of_type("mem_tracker")) == 1
    if pp > 1:
        # The stages leave each step together (the loss broadcast is inside it) and each step is
        # timed from the end of the one before (realrun/train3d.py), so each stage's steps add up
        # to the same wall time, the pipeline's: a few ms apart at most, at the ends only. With the
        # broadcast outside the timing the last stage's came out 5-12 % short; timed from each
        # step's own start, the work between steps left the sums 3.0 % apart alone in the quiet
        # pass (2026-12-07).
        # After validate's warm-up: step 1 runs under MemTracker, 5x a later step, and beside a
        # second `make test` the last stage began it up to 20 ms after the first (2026-12-06:
        # 7.3 % apart from step 1 on, 0.6 % from step 2 on, in the same run).
        walls = [sum(s["step_wall_s"] for s in r.of_type("step")[WARMUP_STEPS:]) for r in ranks]
        assert max(walls) - min(walls) < 0.03 * max(walls), walls


@pytest.mark.parametrize("name", ["tp", "pp", "il"])
def test_memtracker_peak_near_memory3d(runs, name):
    from calibrate.records import read_run as read_calib_run
    from calibrate.validate3d import memory_rows
    from sim.parallel3d import simulate_3d
    from sim.scenario_file import scenario_from_dict

    run = read_calib_run(runs[name])
    lay = run.layout
    schedule = "1f1b" if lay["virtual"] == 1 else "interleaved"
    sc = scenario_from_dict(
        {
            "ranks": 2, "model": {"preset": "llama-tiny"},
            "training": {"micro_batch_size": 2, "seq_len": 32, "grad_accum": 4, "precision": "fp32",
                         "tp": lay["tp"], "pp": lay["pp"], "pp_schedule": schedule,
                         "pp_virtual_stages": lay["virtual"]},
            "network": {"backend": "gloo", "gpus_per_node": 2},
        }
    )  # fmt: skip
    for row in memory_rows(run, simulate_3d(sc, None).memory):
        assert row["estimated_bytes"] == pytest.approx(row["measured_peak_bytes"], rel=MEMORY_RTOL), row


def test_validate_reports_the_prediction(runs, tmp_path):
    from calibrate.calibration import Calibration
    from calibrate.validate import validate

    calib_path = tmp_path / "calib.json"
    c = run_cli("calibrate", str(runs["probe"]), "-o", str(calib_path))
    assert c.returncode == 0, c.stderr[-3000:]
    calib = Calibration.read(calib_path)
    assert calib.compute.tp_block is not None and calib.compute.tp_block.tp == 2  # realrun/probe_tp.py ran
    # realrun/probe_pp.py ran every schedule at both sizes (interleaved at 2 chunks a stage);
    # torch's pipelining costs something per action beyond the stages' compute on any machine
    # (its sends, at least).
    pps = calib.compute.pp_schedules
    assert set(pps) == {"gpipe", "1f1b", "interleaved"}
    assert all(s.pp == 2 and s.micro_batches == 8 for s in pps.values()) and pps["interleaved"].virtual == 2
    assert all([p[0] for p in s.points] == [32.0, 16 * 32.0] and s.action_at(64) > 0 for s in pps.values())
    assert "# pipeline schedules (realrun/probe_pp.py), pp 2" in runs["probe_stdout"]
    report = validate(calib, str(calib_path), [runs["tp"], runs["pp"], runs["il"]])
    assert report["rows"][2]["layout"]["virtual"] == 2
    assert all("unprobed_schedule" not in r for r in report["rows"])
    for row, (tp, pp) in zip(report["rows"], [(2, 1), (1, 2), (1, 2)], strict=True):
        assert (row["layout"]["tp"], row["layout"]["pp"]) == (tp, pp)
        assert row["predicted_p50_s"] > 0 and row["measured_p50_s"] > 0
        # Issue 28's bar is 10 %; this box meets it for neither (docs/parallelism.md, "Prediction":
        # predicted / measured 0.41-1.44 for TP over repeats, the probe's TP model and the run's a
        # few minutes apart differing as much). Held: the order of magnitude, in a band wide enough
        # for that noise; a whole-machine slowdown moves prediction and measurement together, a
        # load that comes and goes between probe and run does not (3.25x for TP in the serial
        # pass beside a second make test, 2026-12-06): hence the probe right before the runs and
        # this module in the quiet pass (tests/conftest.py QUIET_MODULES).
        # tests/test_validate3d.py holds the model's costs exactly.
        ratio = row["predicted_p50_s"] / row["measured_p50_s"]
        assert PREDICTED_OVER_MEASURED[0] < ratio < PREDICTED_OVER_MEASURED[1], (tp, pp, ratio)


@pytest.mark.parametrize(
    "args,says",
    [
        (("--nproc", "2", "--tp", "3"), "--tp 3: must divide the model's 4 attention heads"),
        (("--nproc", "3", "--pp", "3"), "--pp 3: the model has 2 layers"),
        (("--nproc", "3", "--tp", "2"), "--nproc 3: not divisible by --tp 2 x --pp 1 = 2"),
        (
            ("--nproc", "2", "--pp", "2", "--pp-schedule", "interleaved", "--pp-virtual-stages", "3"),
            "--pp-virtual-stages 3: 2 x 3 chunks exceed the model's 2 layers + 2",
        ),
        (
            ("--nproc", "2", "--pp", "2", "--pp-schedule", "interleaved", "--grad-accum", "3"),
            "--grad-accum 3: the interleaved schedule needs a multiple of --pp (2)",
        ),
        # Options the run would not use: it would say 1f1b where chunks were asked for.
        (
            ("--nproc", "2", "--pp", "2", "--pp-virtual-stages", "2"),
            "--pp-virtual-stages 2: only --pp-schedule interleaved (with --pp > 1) splits a stage into"
            " chunks, and this run's is 1f1b at --pp 2",
        ),
        (("--nproc", "2", "--pp-schedule", "gpipe"), "--pp-schedule gpipe: schedules pipeline stages, and --pp is 1"),
    ],
)
def test_impossible_layout_is_one_line_exit_2(tmp_path, args, says):
    p = run_cli("train", "--out", str(tmp_path / "x"), "--model", "llama-tiny", *args, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_layout_problem_names_tied_embeddings_and_mlp_width():
    models = load_models()
    assert "ties its embedding" in layout_problem(1, 2, 2, models["gpt2-tiny"])
    assert layout_problem(2, 1, 2, models["llama-tiny"]) is None
    assert layout_problem(2, 2, 4, models["llama-tiny"]) is None
