"""`ddplab train --profile` then `ddplab calibrate` on its traces (CPU, 2 ranks, gloo, gpt2-tiny):
the trace and the same run's step records agree on compute within 5 %, on the bucket count and
the bucket sizes exactly; validate predicts the run's mean step from its traces within 5 % (its
p50, counted over several runs: bench/trace_validate.py). One run of 202 steps, 200 of them
profiled (~30 s, most of it the profiler writing its traces), calibrated once.

Why 200: validate's p50 is a median of the measured steps, and the steps' spread on this box
(coefficient of variation 0.2-0.4) puts a median of 48 steps within a few per cent of its own
run's only by luck (2026-12-06: p50 -0.1, +5.5, +1.1, -3.8, +7.3, +0.9, +1.5 % in seven runs of
50 steps; with 200, -3.0 to +2.2 % in seven that day, -7.0 to -1.8 % in seven on 2026-12-07).
Profiling fewer steps of a longer run does not help: the profiler slows these CPU steps by
14-37 % (four runs of 150 steps, 48 profiled: validate +10 to +17 %), so the records and the
trace must be the same steps."""

import json

import numpy as np
import pytest
from conftest import ROOT, run_here

from calibrate import compute_fit
from calibrate.kineto import read_trace
from calibrate.trace_fit import fit_traces
from realrun.records import read_run

SEQ_LEN, MICRO, PROFILED = 64, 8, 200
ARGS = (
    *("--model", "gpt2-tiny", "--seq-len", str(SEQ_LEN), "--micro-batch", str(MICRO)),
    *("--bucket-cap-mb", "0.05", "--data", str(ROOT / "README.md"), "--steps", str(2 + PROFILED)),
)


def ddplab(*args, timeout=240):
    return run_here(*map(str, args), timeout=timeout)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profiled")
    p = ddplab("train", "--nproc", "2", "--out", out, *ARGS, "--profile", str(PROFILED))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def calibrated(profiled, tmp_path_factory):
    """`ddplab calibrate` on the run's two traces: (calib.json, its stdout)."""
    out = tmp_path_factory.mktemp("calibrated") / "calib.json"
    p = ddplab("calibrate", *sorted(profiled.glob("trace-rank*.json.gz")), "-o", out)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, p.stdout


def test_train_profile_refuses_too_few_steps(tmp_path):
    p = ddplab("train", "--nproc", "2", "--out", tmp_path / "x", "--steps", "4", "--profile", "3")
    assert p.returncode == 2 and "--profile 3: needs --steps >= 5" in p.stderr


@pytest.mark.parametrize(
    "value,line",
    [
        ("1:0", "argument --loader-straggler: '1:0': expected RANK:MS with MS > 0, like 1:20"),
        ("1", "argument --loader-straggler: '1': expected RANK:MS"),
        ("2:10", "--loader-straggler: rank 2 out of range for --nproc 2"),
    ],
)
def test_a_bad_loader_straggler_is_one_line(tmp_path, value, line):
    p = ddplab("train", "--nproc", "2", "--out", tmp_path / "x", "--loader-straggler", value)
    assert p.returncode == 2 and line in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "x").exists()


def test_trace_and_records_of_one_run_agree(profiled):
    traces = sorted(profiled.glob("trace-rank*.json.gz"))
    assert [t.name for t in traces] == ["trace-rank0000.json.gz", "trace-rank0001.json.gz"]
    fit = fit_traces([read_trace(t) for t in traces])
    records = {r.meta["rank"]: {s["step"]: s for s in r.of_type("step")} for r in read_run(profiled, "train")}
    trace_by_rank, records_by_rank = {}, {}
    for rank, f in fit.ranks.items():
        assert [s.step for s in f.steps] == list(range(2, 2 + PROFILED))  # ProfilerStep#k is step k
        assert f.provenance == f"measured in trace-rank{rank:04d}.json.gz, rank {rank}, steps 2-{1 + PROFILED}"
        rows_t, rows_r = [], []
        for s in f.steps:
            rec = records[rank][s.step]
            # Bucket count exactly; sizes exactly. Not their order: two buckets ready together are
            # issued within microseconds, and on a loaded box the traced spans of the two can
            # start in either order (seen once in a full suite beside another).
            assert len(s.buckets) == rec["bucket_count"] == 7
            assert sorted(b.bytes for b in s.buckets) == sorted(b["bytes"] for b in rec["buckets"])
            assert all(c.bytes in {b["bytes"] for b in rec["buckets"]} for c in s.collectives)
            rows_t.append((s.forward_s, s.backward_s))
            rows_r.append((rec["forward_s"], rec["backward_s"]))
        trace_by_rank[rank] = {MICRO: np.array(rows_t)}
        records_by_rank[rank] = {MICRO: np.array(rows_r)}
        # Per step, forward + backward: the records time its end in the comm hook, the trace at
        # the all-reduce the hook then issues. Typically 0.03 % apart; on the 2-core box a thread
        # preempted between the two moves one step now and then (by 4 ms, +10 %, once in 3 runs).
        t_sum, r_sum = np.array(rows_t).sum(axis=1), np.array(rows_r).sum(axis=1)
        assert np.median(np.abs(t_sum / r_sum - 1)) < 0.01, (t_sum, r_sum)
    # The compute fit calibrate makes (compute_fit's speed factors, then the speed-1 mean per
    # micro-step) from either source agrees within 5 %.
    fits = {}
    for name, by_rank in (("trace", trace_by_rank), ("records", records_by_rank)):
        samples = compute_fit.ComputeSamples("gpt2-tiny", SEQ_LEN, by_rank, [])
        fits[name] = compute_fit.fit_compute(samples, compute_fit.speed_factors(samples))
    # Compute (forward + backward) within 5 %. The split moves more: the records' forward also
    # holds the loss's sum, and a thread preempted at the boundary moves time across it (-6 %
    # for forward once in 3 runs of 5 steps here).
    for part, within in (("step", 0.05), ("forward", 0.15), ("backward", 0.15)):
        t, r = getattr(fits["trace"], part).points[0][1], getattr(fits["records"], part).points[0][1]
        assert abs(t / r - 1) < within, (part, t, r)
    t, r = fits["trace"].step.points[0][1], fits["records"].step.points[0][1]
    print(
        f"compute per micro-step of the speed-1 rank: trace {t * 1e3:.3f} ms,"
        f" records {r * 1e3:.3f} ms ({t / r - 1:+.2%})"
    )


def test_calibrate_writes_the_trace_calibration(calibrated):
    out, stdout = calibrated
    c = json.loads(out.read_text())
    assert c["world_size"] == 2 and c["backend"] == "gloo" and c["device"] == "cpu" and c["precision"] == "fp32"
    assert c["compute"]["model"] == "gpt2-tiny" and c["compute"]["step_s"]["points"][0][0] == MICRO * SEQ_LEN
    # The traced buckets are DDP's layout of gpt2-tiny at 50 KB: each parameter gets its bucket's time.
    assert len(c["compute"]["ready_fractions"]["value"]) == 28
    assert [b["bytes"] for b in c["trace"]["buckets"]] == [66304, 66560, 67072, 66304, 66560, 67072, 82432]
    traced = f"steps 2-{1 + PROFILED}"
    assert c["trace"]["ranks"]["1"]["provenance"] == f"measured in trace-rank0001.json.gz, rank 1, {traced}"
    # Every rank at the median speed also slows the faster rank: with two near-equal ranks and
    # their jitter kept, that counterfactual can come out a little slower than the run itself.
    assert -0.02 < c["trace"]["straggler_cost"]["value"] < 1
    assert f"source    rank 0: measured in trace-rank0000.json.gz, rank 0, {traced}" in stdout
    # What the traced compute rests on, printed beside it: the profiler ran in those steps.
    assert "assumed   the traced steps are the job's: they ran under the profiler" in stdout
    # The trace network was neither probed nor fitted: no latency, link rate, R^2 or gamma is
    # printed as if it were, and the busbw says it was set to the traced wait.
    row = next(x for x in stdout.splitlines() if x.startswith("trace      allreduce"))
    busbw = c["networks"]["trace"]["collectives"]["allreduce"]["busbw_gb_s"]
    assert row.split()[2:4] == ["-", f"{busbw:.4g}"] and row.split()[-5:] == ["-"] * 5, row
    assert "note      trace: busbw set so the simulated wait after backward equals the traced" in stdout
    # The what-if in words that keep its sign: a cost that rounds to 0.0 % or below is no cost,
    # not "0.0% less time" or "-0.1% less time"; below -0.05 % the rest is the steps' noise.
    cost = round(c["trace"]["straggler_cost"]["value"], 3)
    said = f"{cost:.1%} less time" if cost > 0 else "no less time (no straggler cost"
    assert f"every rank at the median speed: {said}" in stdout
    assert ("more: noise)" in stdout) == (cost < 0) and "0.0% less time" not in stdout
    assert "jitter none" not in stdout  # a rank with too few steps to fit says so


def test_validate_predicts_the_runs_mean_step_from_its_trace_within_5pct(profiled, calibrated):
    """The home-lab tier (5 %) on the mean step: the calibration from the run's traces alone
    (compute, jitter, ranks, the all-reduce busbw set to the traced wait, and the step's time
    outside them) predicts the run's own records.

    The p50 is printed, not held here: on this shared box one run's median of 200 steps moves
    with the load by several per cent (p50 -6.6, -5.4, -1.8, -5.6, -4.8, -7.0, -2.3 % in seven
    runs on 2026-12-07, the mean -0.8 to +0.4 %; docs/traces.md, Limits), so how many runs meet
    the tier on their p50 is counted over several by bench/trace_validate.py
    (measurements/trace_validate.txt), as the speed targets are."""
    p = ddplab("validate", profiled, "--calib", calibrated[0], "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json.loads(p.stdout)["rows"]
    print(f"validate from the trace: p50 {row['error_p50']:+.1%}, mean {row['error_mean']:+.1%}")
    # Whole traced steps are drawn (both ranks' jitter of one step together: docs/validation.md
    # "Jitter from a trace"); the all-reduces run at the busbw tuned to the traced wait (the
    # least-waiting rank's), each call's time drawn from that rank's spans, so the mean is half
    # fitted: what it holds apart from that is compute, the optimizer and the rest of the step
    # (data, host work; trace_calib._after_the_wait), each measured in the trace.
    assert abs(row["error_mean"]) < 0.05, row
    # The wait after backward: the trace's and the records' are the same moments.
    assert row["predicted_wait_s"] == pytest.approx(row["measured_wait_s"], rel=0.10)


def test_a_ranks_slow_loader_is_its_lateness_not_the_network(tmp_path):
    """A real run whose rank 1 builds each batch 40 ms late (`--loader-straggler 1:40`, a sleep in
    its loop): its compute is rank 0's, and rank 0 waits for it in the gradient all-reduce. The
    trace calibration names rank 1 as the rank the others wait for, nearly all of its lateness
    outside compute, and gives it as rank 1's host delay, which the simulator puts before its
    forward; the rest of the step is rank 1's less that; the what-if with every rank at the median
    rank's speed (the midpoint of two) takes about half the delay off a step; validate predicts the
    ranks' mean wait, rank 0's for rank 1 in it. (Before 2026-12-07 the delay went into the
    network, tuned to the ranks' mean wait; until that day's second session it was held after the
    wait on both ranks, and validate's mean wait was the run's less rank 0's wait for rank 1: 9.1
    against 19 ms with a 20 ms delay.)"""
    out = tmp_path / "run"
    args = (*ARGS[:-2], "--steps", "12", "--profile", "10", "--loader-straggler", "1:40")
    p = ddplab("train", "--nproc", "2", "--out", out, *args)
    assert p.returncode == 0, p.stderr[-3000:]
    calib = tmp_path / "calib.json"
    p = ddplab("calibrate", *sorted(out.glob("trace-rank*.json.gz")), "-o", calib)
    assert p.returncode == 0, p.stderr[-3000:]
    c = json.loads(calib.read_text())
    t = c["trace"]
    # 40 ms of sleep a step; the ranks' host work and a loaded box move it by a few ms.
    assert t["late_rank"] == 1 and 0.030 < t["late_lead_s"] < 0.050 and t["late_by_s"] > 0.030, t
    delays = c["compute"]["host_delays_s"]["value"]
    assert list(delays) == ["1"] and 0.030 < delays["1"] < 0.050, delays
    assert c["compute"]["outside_s"]["value"] < 0.010, c["compute"]["outside_s"]
    assert "rank 1's, the last to join the gradient sync" in c["compute"]["outside_s"]["source"]
    steps = np.array(t["ranks"]["1"]["step_s"])
    assert t["straggler_cost"]["value"] > 0.5 * 0.020 / steps.mean(), (t["straggler_cost"], steps.mean())
    assert "rank 1 joins the gradient sync last" in p.stdout
    p = ddplab("validate", out, "--calib", calib, "--json", "--plot", tmp_path / "v.png")
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json.loads(p.stdout)["rows"]
    # Rank 0 waits ~40 ms for rank 1 each step, rank 1 for the all-reduce alone: a mean near 20 ms.
    assert row["predicted_wait_s"] == pytest.approx(row["measured_wait_s"], rel=0.25), row
    assert row["measured_wait_s"] > 0.015, row
