"""`ddplab validate`: the prediction for a train run equals the closed form of the
calibrated machines, the error is measured against the run, and runs the calibration
saw (or that do not match it) are refused in one line."""

import json

import numpy as np
import pytest
from fake_runs import probe_run, train_run
from scipy.stats import ks_2samp

from calibrate import stepdist
from calibrate.calib import calibrate
from calibrate.records import read_run
from calibrate.stepdist import at_least, compare, ks_distance, ks_reach, lag1_autocorrelation, shape_test
from calibrate.validate import (
    SIM_STEPS,
    WARMUP_STEPS,
    _predicted,
    scenario_for,
    summarise,
)
from sim.scenario_file import scenario_from_dict
from sim.workload import build_workload


@pytest.fixture(scope="module")
def calib_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("val")
    probe = probe_run(d / "1gbit" / "probe", sigma=0.01, gamma=0.0)
    calib = calibrate([probe], seed=0)
    path = d / "calib.json"
    path.write_text(json.dumps(calib.to_json()))
    return path, calib, probe


def _closed_form_no_overlap(calib, cfg_mb=4, seq=64) -> float:
    """Step = forward + backward + every bucket's allreduce after backward (no overlap)
    + the optimizer: alpha + bytes / busbw per bucket (2 ranks: bus factor 1)."""
    k = calib.compute
    compute = k.step_s.intercept_s + k.step_s.per_token_s * cfg_mb * seq
    ar = calib.networks["1gbit"].allreduce
    sc = scenario_from_dict(
        {"ranks": 2, "model": {"preset": "gpt2-tiny"}, "training": {"seq_len": seq, "precision": "fp32"}}
    )
    buckets = build_workload(sc, np.random.default_rng(0)).buckets
    comm = sum(ar.alpha_s + b.size_bytes / (ar.busbw_gb_s * 1e9) for b in buckets)
    return compute + comm + k.optimizer_s.value


def test_prediction_is_the_closed_form_and_error_is_measured(calib_file, tmp_path, ddplab):
    path, calib, _ = calib_file
    expect = _closed_form_no_overlap(calib)
    run = train_run(tmp_path / "1gbit" / "train-a", config={"no_overlap": True}, step_s=expect * 1.1, wait_s=0.01)
    code, out, err = ddplab("validate", "--calib", str(path), str(run), "--json")
    assert code == 0, err
    v = json.loads(out)
    row = v["rows"][0]
    # Jitter sigma 0.01 on 2 ranks: the step waits for the larger draw, +0.56 sigma x compute.
    assert row["predicted_p50_s"] == pytest.approx(expect, rel=0.01)
    assert row["measured_p50_s"] == pytest.approx(expect * 1.1)
    assert v["mape"] == pytest.approx(abs(row["predicted_p50_s"] / (expect * 1.1) - 1))
    assert v["mape"] == pytest.approx(1 - 1 / 1.1, abs=0.01)
    assert row["measured_wait_s"] == pytest.approx(0.01) and row["measured_straggler_wait_s"] == pytest.approx(0.0)
    assert v["plot"] == str(path.with_name("validation.png"))
    assert path.with_name("validation.png").read_bytes()[:4] == b"\x89PNG"


def test_ks_p_is_the_exact_two_sample_p_value():
    """Two samples of 5 that do not overlap: D = 1, and under the null every one of the
    C(10, 5) = 252 orderings of the 10 pooled values is equally likely; 2 of them (all of one
    sample below all of the other, either way round) reach D = 1, so p = 2/252 exactly."""
    rng = np.random.default_rng(0)
    out = compare(np.arange(1.0, 6.0), np.arange(6.0, 11.0), rng)
    assert out["ks"] == 1.0
    assert out["ks_p"] == pytest.approx(2 / 252, rel=1e-9)
    same = compare(np.arange(1.0, 101.0), np.arange(1.0, 101.0), rng)
    assert same["ks"] == 0.0 and same["ks_p"] == 1.0
    # One sample the other shifted by half its range: D = 0.5 (the ECDFs part for 50 of 100).
    half = compare(np.arange(100.0), np.arange(100.0) + 50, rng)
    assert half["ks"] == pytest.approx(0.5) and half["ks_p"] < 1e-5


def test_p99_error_is_the_ratio_of_99th_percentiles():
    """Only the two largest predicted steps differ (doubled): the p50 and p95 errors are 0,
    and the p99 error is 198.02 / 99.01 - 1 = 1 exactly (numpy's linear interpolation at
    rank 0.99 x 99 = 98.01 on both sides), not the max's or the p95's."""
    measured = np.arange(1.0, 101.0)
    predicted = measured.copy()
    predicted[-2:] *= 2
    out = compare(measured, predicted, np.random.default_rng(0))
    assert out["error_p50"] == 0.0 and out["error_p95"] == 0.0
    assert np.percentile(predicted, 99) == pytest.approx(198.02) and np.percentile(measured, 99) == pytest.approx(99.01)
    assert out["error_p99"] == pytest.approx(1.0)
    assert out["error_mean"] == pytest.approx((measured.sum() + 199) / measured.sum() - 1)


def test_ks_distance_is_scipys_statistic():
    rng = np.random.default_rng(3)
    for n, m in ((100, 2000), (7, 5), (50, 50)):
        a, b = np.sort(rng.normal(size=n)), np.sort(rng.normal(0.2, 1.5, size=m))
        assert ks_distance(a, b) == pytest.approx(ks_2samp(a, b).statistic, abs=1e-12)
    ties = np.array([1.0, 1.0, 2.0, 2.0])  # ties between and within the samples
    assert ks_distance(ties, np.array([1.0, 2.0, 2.0, 3.0])) == pytest.approx(ks_2samp(ties, [1, 2, 2, 3]).statistic)


def test_shape_test_takes_out_the_level_and_nothing_else():
    """A run 3 % slower than a model whose steps spread 1 %: the plain test refuses it, the
    shape test does not, and its distance does not depend on the level at all. A run at the
    model's median whose steps spread twice as wide is refused by both."""
    rng = np.random.default_rng(5)
    model = rng.lognormal(0.0, 0.01, 2000)
    slow = 1.03 * rng.lognormal(0.0, 0.01, 100)
    out = compare(slow, model, np.random.default_rng(0))
    assert out["ks"] > 0.8 and out["ks_p"] < 1e-30
    assert out["ks_shape"] < 0.15 and out["ks_shape_p"] > 0.05
    for level in (0.5, 1.0, 7.0):
        assert shape_test(level * slow, model, np.random.default_rng(0)) == pytest.approx(
            (out["ks_shape"], out["ks_shape_p"])
        )
    wide = compare(rng.lognormal(0.0, 0.02, 100), model, np.random.default_rng(0))
    assert wide["ks_shape_p"] < 0.01 and wide["ks_p"] < 0.01


def test_shape_p_is_uniform_when_the_run_is_the_model(monkeypatch):
    """Calibration of the bootstrap p-value: 100 runs drawn from the model itself, each at its
    own level, are refused at 5 % about 5 times (binomial: more than 12 has probability
    0.001), and their p-values average about 0.5 (sd of the mean of 100 uniforms: 0.029)."""
    monkeypatch.setattr(stepdist, "SHAPE_DRAWS", 100)
    rng = np.random.default_rng(11)
    model = rng.gamma(50.0, 1.0 / 50, 2000)  # skewed, so a level fit alone cannot hide a shape error
    ps = [shape_test(rng.uniform(0.9, 1.1) * rng.gamma(50.0, 1.0 / 50, 100), model, rng)[1] for _ in range(100)]
    assert sum(p < 0.05 for p in ps) <= 12
    assert 0.38 < float(np.mean(ps)) < 0.62


def test_at_least_is_the_poisson_binomial():
    # Ten fair coins: P(8 or more heads) = (C(10,8) + C(10,9) + C(10,10)) / 2^10 = 56 / 1024.
    assert at_least([0.5] * 10, 8) == pytest.approx(56 / 1024)
    assert [at_least([1.0, 0.0, 0.5], k) for k in range(4)] == pytest.approx([1.0, 1.0, 0.5, 0.0])
    assert at_least([0.9, 0.8], 2) == pytest.approx(0.72)


def _reach_rows(levels: list[float], rng, compute_s: float = 1.0) -> list[dict]:
    """Runs whose steps spread by sd 1 % around 1 s (gamma, skewed) and whose compute came out
    at these multiples of the prediction."""
    return [
        {
            "measured_step_s": list(rng.gamma(10_000.0, 1.0 / 10_000, 100)),
            "simulated_steps": 2000,
            "measured_compute_s": compute_s * level,
            "predicted_compute_s": compute_s,
        }
        for level in levels
    ]


def test_ks_reach_without_level_scatter_passes_at_the_tests_own_rate():
    """Runs whose levels agree exactly: a model right in every shape passes each at about 1 - alpha
    (400 trials: sd 0.011 around 0.95; the asymptotic p-value is a little conservative), and 4 of
    4 passing then has probability about 0.95^4."""
    rng = np.random.default_rng(5)
    r = ks_reach(_reach_rows([1.0] * 4, rng), rng)
    assert r["level_sd"] == 0.0 and r["level_range"] == [0.0, 0.0] and r["reach_need"] == 4
    assert all(0.91 <= p <= 0.99 for p in r["reach_rates"])
    assert r["reach_p_bar"] == pytest.approx(np.prod(r["reach_rates"]))
    assert r["reach_expected"] == pytest.approx(sum(r["reach_rates"]))


def test_ks_reach_falls_with_the_level_scatter():
    """Levels scattered by sd 2 % under steps 1 % wide: a level must sit within about a third of a
    step's sd (KS distance 2 Phi(d / 2 sd) - 1 under the 5 % critical 1.36 sqrt(1/100 + 1/2000) =
    0.139), which N(0, 2 %) does about 14 % of the time; the sample's own noise blurs the edge, so
    between 5 and 35 %. The given level_sd replaces the scatter: 0 gives the full rate back."""
    rng = np.random.default_rng(6)
    rows = _reach_rows([0.98, 1.0, 1.02, 0.99, 1.01], rng)
    r = ks_reach(rows, rng)
    assert r["level_sd"] == pytest.approx(np.std([0.98, 1.0, 1.02, 0.99, 1.01], ddof=1))
    assert r["level_range"] == pytest.approx([-0.02, 0.02])
    assert 0.05 < r["reach_expected"] / 5 < 0.35 and r["reach_need"] == 4 and r["reach_p_bar"] < 0.01
    assert ks_reach(rows, rng, level_sd=0.0)["reach_expected"] > 0.9 * 5


def test_ks_reach_through_the_command(calib_file, tmp_path, ddplab):
    """validate over three runs whose compute came out at 0.97, 1.0 and 1.04 of one figure carries
    ks_reach in --json, from the rows' own compute levels (measured over predicted), and says it
    in one line of the text."""
    path, calib, _ = calib_file
    expect = _closed_form_no_overlap(calib)
    rng = np.random.default_rng(2)
    runs = [
        train_run(
            tmp_path / "1gbit" / f"train-{i}",
            config={"no_overlap": True},
            step_s=0,
            step_times=list(expect * rng.lognormal(0.0, 0.01, 30)),
            compute_s=0.5 * expect * level,
        )
        for i, level in enumerate((0.97, 1.0, 1.04))
    ]
    code, out, err = ddplab("validate", "--calib", str(path), *map(str, runs), "--json")
    assert code == 0, err
    v = json.loads(out)
    level = [r["measured_compute_s"] / r["predicted_compute_s"] for r in v["rows"]]
    assert np.array(level) / level[1] == pytest.approx([0.97, 1.0, 1.04])  # the same prediction for all three
    r = v["ks_reach"]
    assert r["level_sd"] == pytest.approx(np.std(level, ddof=1))
    assert r["level_range"] == pytest.approx([min(level) - 1, max(level) - 1])
    assert r["reach_runs"] == 3 and r["reach_need"] == 3 and len(r["reach_rates"]) == 3
    assert r["reach_p_bar"] == pytest.approx(at_least(r["reach_rates"], 3))
    code, text, err = ddplab("validate", "--calib", str(path), *map(str, runs))
    assert code == 0, err
    assert f"in {r['reach_expected']:.1f} of 3 runs on average, 3 or more with probability" in text


def test_ks_reach_needs_three_runs_with_a_compute_level():
    rng = np.random.default_rng(7)
    rows = _reach_rows([1.0, 1.0], rng) + [{"measured_step_s": [1.0] * 100, "predicted_compute_s": 1.0}]
    assert ks_reach(rows, rng) is None


def test_lag1_autocorrelation():
    # d = -2 -1 0 1 2: sum of neighbour products 2 + 0 + 0 + 2 = 4 over sum of squares 10.
    assert lag1_autocorrelation(np.array([1.0, 2, 3, 4, 5])) == pytest.approx(0.4)
    assert lag1_autocorrelation(np.array([1.0, -1] * 50)) == pytest.approx(-0.99)
    assert lag1_autocorrelation(np.ones(10)) == 0.0  # no spread: no correlation to speak of


def test_summary_counts_signs_and_passes():
    rows = [
        {"name": f"r{i}", "error_p50": e, "error_p95": 0.0, "error_p99": 0.0, "ks": 0.1, "ks_p": p}
        | {"lag1": lag, "steps": 100, "error_mean": -e / 2, "ks_shape_p": shape}
        for i, (e, p, lag, shape) in enumerate(
            [(0.01, 0.5, 0.0, 0.5), (0.02, 0.04, 0.3, 0.3), (0.03, 0.05, 0.1, 0.049), (-0.03, 0.9, 0.0, 0.05)]
        )
    ]
    s = summarise(rows)
    assert (s["over"], s["under"]) == (3, 1)
    assert s["mean_error_p50"] == pytest.approx(0.0075) and s["mape"] == pytest.approx(0.0225)
    assert s["sign_test_p"] == pytest.approx(10 / 16)  # P(3 or more of 4 on one side) = 2 x 5/16
    assert (s["over_mean"], s["under_mean"]) == (1, 3) and s["mean_error_mean"] == pytest.approx(-0.00375)
    assert s["ks_pass"] == 3  # ks_p >= 0.05, the boundary included
    assert s["ks_shape_pass"] == 3  # ks_shape_p >= 0.05 likewise: all but 0.049
    assert s["autocorrelated"] == 1  # lag1 above 2/sqrt(100) = 0.2
    assert s["worst"] in ("r2", "r3")


def test_distribution_numbers_through_the_command(calib_file, tmp_path, ddplab):
    """validate --json and its table: per run ks, ks_p (ks_2samp of the measured steps after
    warm-up against the simulated ones), p50/p95/p99 errors, lag1; the summary over runs."""
    path, calib, _ = calib_file
    expect = _closed_form_no_overlap(calib)
    rng = np.random.default_rng(1)
    times = list(expect * rng.lognormal(0.0, 0.01, 40))
    run = train_run(tmp_path / "1gbit" / "train-d", config={"no_overlap": True}, step_s=0, step_times=times)
    code, out, err = ddplab("validate", "--calib", str(path), str(run), "--json")
    assert code == 0, err
    v = json.loads(out)
    row = v["rows"][0]
    assert row["steps"] == 40 - WARMUP_STEPS and row["measured_step_s"] == pytest.approx(times[WARMUP_STEPS:])
    assert row["simulated_steps"] == SIM_STEPS == len(row["predicted_quantiles_s"]) * 20
    predicted = _predicted(scenario_for(read_run(run), calib, str(path), seed=0)[0])["step_s"]
    assert len(predicted) == SIM_STEPS
    ks = ks_2samp(times[WARMUP_STEPS:], predicted)
    assert (row["ks"], row["ks_p"]) == (pytest.approx(ks.statistic), pytest.approx(ks.pvalue))
    shape = shape_test(np.array(times[WARMUP_STEPS:]), predicted, stepdist.shape_rng(0, row["name"]))
    assert (row["ks_shape"], row["ks_shape_p"]) == (pytest.approx(shape[0]), pytest.approx(shape[1]))
    assert v["ks_shape_pass"] == (shape[1] >= 0.05)
    for q in (50, 95, 99):
        want = np.percentile(predicted, q) / np.percentile(times[WARMUP_STEPS:], q) - 1
        assert row[f"error_p{q}"] == pytest.approx(want)
    assert row["lag1"] == pytest.approx(lag1_autocorrelation(np.array(times[WARMUP_STEPS:])))
    assert v["ks_pass"] == (ks.pvalue >= 0.05) and v["mean_error_p50"] == pytest.approx(row["error_p50"])
    assert v["over"] + v["under"] == 1
    assert path.with_name("validation-cdf.png").read_bytes()[:4] == b"\x89PNG"
    code, text, err = ddplab("validate", "--calib", str(path), str(run))
    assert code == 0, err
    head = text.splitlines()[0].split()
    assert {"p99", "KS", "lag1"} <= set(head) and "KS p" in text.splitlines()[0]
    assert f"{v['ks_pass']} of 1 runs pass the two-sample KS test at p >= 0.05" in text
    assert "shape p" in text.splitlines()[0]
    assert f"shape: {v['ks_shape_pass']} of 1 pass it with each run's level taken out" in text
    assert f"({row['steps']} measured against {SIM_STEPS} simulated steps" in text


def test_run_configuration_reaches_the_simulator(calib_file, tmp_path):
    path, calib, _ = calib_file
    cfg = {"bucket_cap_mb": 0.1, "grad_accum": 3, "comm_hook": "fp16", "straggler": [[1, 2.0]], "micro_batch": 2}
    data, label = scenario_for(read_run(train_run(tmp_path / "r", config=cfg, step_s=1.0)), calib, str(path), seed=0)
    sc = scenario_from_dict(data)
    assert label == "1gbit"
    t = sc.training
    assert (t.bucket_cap_mb, t.grad_accum, t.comm_hook, t.micro_batch_size, t.overlap) == (0.1, 3, "fp16", 2, True)
    fit = calib.compute.step_s
    # 2 x 64 tokens were probed: the measured mean there, not the affine fit's value.
    assert sc.compute.step_compute_s == pytest.approx(dict(fit.points)[128])
    assert sc.compute.step_compute_s != pytest.approx(fit.seconds(128), rel=1e-6)
    # ... and the jitter of that size's own iterations.
    assert sc.noise.distribution == "empirical" and sc.noise.samples == calib.noise.multipliers_by_micro_batch[2]
    assert sc.straggler_map[1] == pytest.approx(2.0 * calib.ranks[1].speed_factor, rel=1e-5)
    # Uneven micro-batches: the smaller rank's work is its share, at the measured sizes.
    data, _ = scenario_for(
        read_run(train_run(tmp_path / "u", config={"micro_batch_per_rank": [4, 1]}, step_s=1.0)), calib, "c", seed=0
    )
    share = dict(fit.points)[64] / dict(fit.points)[256]
    assert scenario_from_dict(data).straggler_map[1] == pytest.approx(share * calib.ranks[1].speed_factor, rel=1e-5)


@pytest.mark.parametrize(
    "cfg,compute,top",
    [
        # Workers and a delay on every batch: the loader model's keys; a straggler's extra 20 ms
        # on 10 ms batches is a factor of 3 on that rank's.
        (
            {"loader_delay_ms": 10.0, "loader_workers": 2, "loader_prefetch": 1, "loader_straggler": [[1, 20.0]]},
            {"dataloader_batch_s": 0.01, "dataloader_workers": 2, "dataloader_prefetch_factor": 1},
            {"loader_stragglers": "1:3"},
        ),
        # Built in the loop with no base delay: each of the K = 3 batches blocks 20 ms, 60 ms a step
        # before the last backward, as a host delay.
        ({"loader_straggler": [[1, 20.0]], "grad_accum": 3}, {}, {"host_delays_s": "1:0.06"}),
        ({}, {}, {}),
    ],
)
def test_a_runs_slowed_loader_reaches_the_simulator(calib_file, tmp_path, cfg, compute, top):
    """A probe calibration knows nothing of the run's --loader-delay-ms or --loader-straggler:
    until 2026-12-07 (second session) validate left both out and predicted such a run as if its
    batches were free. (A trace calibration measured them: calibrate/validate.py leaves them to it.)"""
    path, calib, _ = calib_file
    data, _ = scenario_for(read_run(train_run(tmp_path / "r", config=cfg, step_s=1.0)), calib, str(path), seed=0)
    sc = scenario_from_dict(data)
    for key, value in compute.items():
        assert getattr(sc.compute, key) == pytest.approx(value), key
    assert (sc.loader_stragglers, sc.host_delays_s) == (top.get("loader_stragglers", ""), top.get("host_delays_s", ""))
    if not cfg:
        assert sc.compute.dataloader_batch_s == 0.0
    bad = {"loader_straggler": [[1, 20.0]], "loader_workers": 2}
    with pytest.raises(ValueError, match="--loader-straggler with --loader-workers 2 and no --loader-delay-ms") as e:
        scenario_for(read_run(train_run(tmp_path / "bad", config=bad, step_s=1.0)), calib, str(path), seed=0)
    assert "\n" not in str(e.value)


def _refused(ddplab, *args) -> str:
    code, out, err = ddplab("validate", *map(str, args))
    assert code == 2, (out, err)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err
    return errors[0]


def test_refusals(calib_file, tmp_path, ddplab):
    path, calib, probe = calib_file
    assert "used to make the calibration" in _refused(ddplab, "--calib", path, probe)
    other_probe = probe_run(tmp_path / "p")
    assert "a probe run; validate compares against train runs" in _refused(ddplab, "--calib", path, other_probe)
    wide = train_run(tmp_path / "w", config={}, step_s=1.0, world=3)
    assert "3 ranks on gloo; the calibration is 2 ranks on gloo" in _refused(ddplab, "--calib", path, wide)
    short = train_run(tmp_path / "s", config={}, step_s=1.0, steps=4)
    assert "2 complete steps after 2 warm-up steps" in _refused(ddplab, "--calib", path, short)
    assert "not JSON" in _refused(ddplab, "--calib", probe / "probe-rank0000.jsonl", short)
    two = tmp_path / "two.json"
    both = calibrate([probe_run(tmp_path / "a"), probe_run(tmp_path / "b", rate="10gbit")])
    two.write_text(json.dumps(both.to_json()))
    elsewhere = train_run(tmp_path / "e", config={}, step_s=1.0, rate="200mbit")
    assert "ran on network '200mbit'; the calibration measured 10gbit, 1gbit" in _refused(
        ddplab, "--calib", two, elsewhere
    )
