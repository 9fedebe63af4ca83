"""Many steps of a 3D-parallel job (sim/steps3d.py): one step is simulate_3d's step exactly,
each step's parts add up to it, the jitter is the stated draws on the DP reduction and moves
no compute draw, a lemon in one pipeline stage costs what the event model says and is
charged to its TP group, and `simulate --records --out` writes what `ddplab stragglers` reads."""

import json

import numpy as np
import pytest

from sim.noise import comm_multipliers
from sim.parallel3d import dtypes_3d, simulate_3d
from sim.pipeline import run_pipeline
from sim.scenario_file import load_scenario
from sim.steps3d import FIELDS, JITTER_STREAM, simulate_3d_steps
from workflow import threed

BASE = ["model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1"]
CALM = ["noise.distribution=none", "noise.speed_spread_sd=0"]


def _sc(*sets, ranks=128, steps=1):
    return load_scenario("h100-1024", [*BASE, *sets], ranks=ranks, steps=steps)


@pytest.mark.parametrize(
    "sets",
    [
        ("training.tp=8", "training.pp=4", "training.grad_accum=8"),
        ("training.tp=4", "training.pp=4", "training.grad_accum=8", "stragglers=40:1.3", "noise.sigma=0.05"),
        ("training.tp=8", "training.pp=2", "training.grad_accum=8", "training.mode=fsdp",
         "training.pp_schedule=interleaved", "training.pp_virtual_stages=2"),
    ],
)  # fmt: skip
def test_the_first_step_is_todays_one_step(sets):
    """Noise on (the preset's lognormal 2 %) and the spread: the draws come in today's order."""
    for steps in (1, 4):
        sc = _sc(*sets, steps=steps)
        today = simulate_3d(sc, np.random.default_rng(sc.seed))
        run = simulate_3d_steps(sc)
        assert run.step_time_s[0] == today.step_s  # exactly: the same draws, the same arithmetic
        assert run.pipeline_s[0] == today.pipeline_s
    assert len(set(run.step_time_s)) == 4  # each step its own noise


def test_without_noise_every_step_is_the_one_step():
    sc = _sc("training.tp=8", "training.pp=4", "training.grad_accum=8", "stragglers=9:1.2", *CALM, steps=3)
    run = simulate_3d_steps(sc)
    assert list(run.step_time_s) == [simulate_3d(sc, np.random.default_rng(0)).step_s] * 3


def test_each_gpus_parts_add_up_to_the_step():
    sc = _sc("training.tp=4", "training.pp=4", "training.grad_accum=8", "stragglers=70:1.5",
             "network.jitter_sigma=0.1", steps=6)  # fmt: skip
    run = simulate_3d_steps(sc, records=True)
    rec = run.records
    assert all(rec[k].shape == (6, 128) for k in FIELDS)
    opt = run.per_rank(np.broadcast_to(run.first.costs.optimizer_s, (run.layout.dp, run.layout.pp)))
    parts = rec["compute_s"] + rec["bubble_s"] + rec["exposed_comm_s"] + rec["straggler_wait_s"] + opt
    assert parts == pytest.approx(np.broadcast_to(run.step_time_s[:, None], parts.shape), rel=1e-12)
    assert min(rec[k].min() for k in FIELDS) >= 0.0
    # The means kept without records are the records' means.
    for k in FIELDS:
        assert run.rank_mean[k] == pytest.approx(rec[k].mean(axis=0), rel=1e-12)
        assert run.step_mean[k] == pytest.approx(rec[k].mean(axis=1), rel=1e-12)


def test_jitter_is_the_stated_draws_on_the_dp_reduction_and_moves_no_compute():
    # pp 1, no overlap, no noise: the step is the pipeline, then each stage's reduction, n equal
    # buckets each scaled by its draw, the stage waiting for its slowest of tp concurrent groups.
    sets = ["training.tp=8", "training.grad_accum=2", "training.overlap=false", *CALM]
    calm = simulate_3d_steps(_sc(*sets, steps=3), records=True)
    run = simulate_3d_steps(_sc(*sets, "network.jitter_sigma=0.2", steps=3), records=True)
    c = calm.first.costs  # run.first's are step 0's, jittered
    n = round(c.dp_s[0] / c.dp_last_bucket_s[0])
    assert n > 1
    rng = np.random.default_rng((0, JITTER_STREAM))
    for k in range(3):
        draws = comm_multipliers(rng, 0.2, None, (8, n))
        expected = calm.step_time_s[k] - c.dp_s[0] + c.dp_s[0] * draws.mean(axis=1).max()
        assert run.step_time_s[k] == pytest.approx(expected, rel=1e-12)
    assert np.array_equal(run.records["compute_s"], calm.records["compute_s"])


def test_measured_jitter_is_drawn_at_the_stages_collective_size():
    """Multipliers timed at 4 KiB (all x3) and at the stage's bucket size (all x1): drawn by size,
    the reduction takes none of the small calls' spread and every step is the calm one; pooled
    (no sizes), the same multipliers slow it. The bucket size is the stage's gradient bytes over
    its buckets: sim/parallel3d.py's bucketed_s split."""
    sets = ["training.tp=8", "training.grad_accum=2", "training.overlap=false", *CALM]
    calm = simulate_3d_steps(_sc(*sets, steps=3))
    c = calm.first.costs
    n = round(c.dp_s[0] / c.dp_last_bucket_s[0])
    grad_bytes = dtypes_3d(_sc(*sets)).grad_bytes
    assert c.dp_bucket_bytes[0] * n == pytest.approx(c.params[0] * grad_bytes, rel=1e-12)
    big = int(c.dp_bucket_bytes[0])
    samples = "network.jitter_samples=[" + ",".join(["3.0"] * 4 + ["1.0"] * 4) + "]"
    sizes = "network.jitter_samples_bytes=[" + ",".join(["4096"] * 4 + [str(big)] * 4) + "]"
    by_size = simulate_3d_steps(_sc(*sets, samples, sizes, steps=3))
    assert list(by_size.step_time_s) == list(calm.step_time_s)
    pooled = simulate_3d_steps(_sc(*sets, samples, steps=3))
    assert all(pooled.step_time_s > calm.step_time_s + 0.5 * c.dp_s[0])  # about half the draws are x3


def test_jitter_moves_an_overlapped_reduction_too():
    # One micro-batch at tp 8: the overlapped reduction outlasts the backward it hides under, so
    # its jitter shows in every step (the per-chunk shares the overlap reads are jittered too).
    sets = ["training.tp=8", "training.grad_accum=1", "training.overlap=true", *CALM]
    calm = simulate_3d_steps(_sc(*sets, steps=3))
    run = simulate_3d_steps(_sc(*sets, "network.jitter_sigma=0.2", steps=3))
    assert calm.first.dp_exposed_s > 0.0
    assert len(set(calm.step_time_s)) == 1
    assert len(set(run.step_time_s)) == 3 and calm.step_time_s[0] not in set(run.step_time_s)


def test_a_lemon_in_one_stage_costs_what_the_event_model_says_and_is_charged_to_it():
    sets = ["training.tp=4", "training.pp=4", "training.grad_accum=8", "training.overlap=false", *CALM]
    calm_sc = _sc(*sets, steps=2)
    lay = simulate_3d(calm_sc, None, factors=np.ones((8, 4))).layout
    rank = 2 * lay.tp * lay.dp + 3 * lay.tp + 1  # stage 2, pipeline 3
    run, s = threed.run(_sc(*sets, f"stragglers={rank}:1.4", steps=2), records=True)
    c = run.first.costs
    # The event model, by hand: pipeline 3 replayed with stage 2 at 1.4x, the other 7 at 1x;
    # each stage's reduction starts when that stage has ended in every pipeline (no overlap).
    slow = np.ones((4, 1))
    slow[2] = 1.4
    fast = run_pipeline("1f1b", 4, 8, 1, c.forward_s, c.backward_s, c.p2p_s)
    lemon = run_pipeline("1f1b", 4, 8, 1, c.forward_s * slow, c.backward_s * slow, c.p2p_s)
    ends = np.maximum(fast.stage_end_s, lemon.stage_end_s) + c.dp_s
    ends[[0, -1]] += c.tie_s
    expected = float(np.max(ends + c.optimizer_s))
    base = float(np.max(fast.stage_end_s + c.dp_s + c.optimizer_s + np.where([1, 0, 0, 1], c.tie_s, 0.0)))
    assert s["step_time_s"] == pytest.approx(expected, rel=1e-12)
    assert s["straggler"]["cost_s"] == pytest.approx(expected - base, rel=1e-9)
    assert s["straggler"]["cost_s"] > 0.25 * 8 * 0.4 * (c.forward_s[2, 0] + c.backward_s[2, 0])
    # Charged to its TP group by the records: its compute is 1.4x the calm one's, everyone
    # else's is unchanged, and it is the one GPU group of its pipeline that waits least.
    assert s["straggler"]["charged_to"] == {"stage": 2, "replica": 3}
    g = run.group_mean
    assert g["compute_s"][3, 2] == pytest.approx(1.4 * run.calm.busy_s[3, 2], rel=1e-12)
    assert int(np.argmin(g["straggler_wait_s"][3])) == 2
    # Every other pipeline's stage 2 waits for it at the reduction.
    others = np.delete(g["straggler_wait_s"][:, 2], 3)
    assert others == pytest.approx(np.full(7, lemon.stage_end_s[2] - fast.stage_end_s[2]), rel=1e-9)


def test_simulate_out_writes_records_stragglers_reads(tmp_path, capsys):
    from calibrate.stragglers import read_sim
    from ddplab.cli import main

    sets = [*BASE, "training.tp=8", "training.pp=2", "training.grad_accum=4", "stragglers=9:1.5"]
    argv = ["simulate", "h100-1024", "--ranks", "64", "--steps", "5", "--records", "--out", str(tmp_path)]
    assert main([*argv, *(x for s in sets for x in ("--set", s))]) == 0
    capsys.readouterr()
    d = tmp_path / "ranks-0064"
    assert sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) == [
        "ranks.csv",
        "records.npz",
        "steps.csv",
    ]
    rec = read_sim(d)
    assert rec.compute_s.shape == (5, 64)
    # Rank 9's TP group (ranks 8-15: stage 0, pipeline 1) computes most and waits least.
    mean = rec.compute_s.mean(axis=0)
    assert set(np.flatnonzero(mean == mean.max())) == set(range(8, 16))
    assert set(np.flatnonzero(rec.wait_s.mean(axis=0) == rec.wait_s.mean(axis=0).min())) >= set(range(8, 16))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["straggler"]["charged_to"] == {"stage": 0, "replica": 1}
    steps_csv = (d / "steps.csv").read_text().splitlines()
    assert len(steps_csv) == 6 and steps_csv[0].startswith("step,step_time_s,pipeline_s")


def test_records_without_out_is_one_line(capsys):
    from ddplab.cli import main

    sets = [x for s in [*BASE, "training.tp=8"] for x in ("--set", s)]
    assert main(["simulate", "h100-1024", "--ranks", "64", "--records", *sets]) == 2
    assert capsys.readouterr().err.count("\n") == 1
