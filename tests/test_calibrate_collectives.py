"""Alpha-beta fits of probe records (calibrate/collective_fit.py): exact recovery on
synthetic data with known parameters, and sane numbers on the committed 1 Gbit probe."""

import json

import numpy as np
import pytest
from conftest import ROOT

from calibrate.collective_fit import fit_collective, holdout_errors, predict_s
from calibrate.records import collective_times, link_gbit_s, read_run
from sim.collectives import bus_factor

MEASURED = ROOT / "measurements" / "validation" / "1gbit" / "probe"  # docs/validation/measure.sh


def synthetic(op, ranks, alpha_s, busbw_gb_s, rng, sigma=0.03, outliers=True):
    sizes = [2**k for k in range(10, 29)]
    times = {}
    for s in sizes:
        t = alpha_s + s * bus_factor(op, ranks) / (busbw_gb_s * 1e9)
        x = t * rng.lognormal(0.0, sigma, 20)
        if outliers:
            x[:2] *= 20  # scheduler hiccups: the median and the robust loss must shrug them off
        times[s] = list(x)
    return times


@pytest.mark.parametrize("op,ranks", [("allreduce", 2), ("allreduce", 8), ("allgather", 4), ("reduce_scatter", 16)])
def test_recovers_known_alpha_and_busbw(op, ranks):
    rng = np.random.default_rng(1)
    alpha, busbw = 120e-6, 0.118
    fit = fit_collective(op, ranks, synthetic(op, ranks, alpha, busbw, rng), rng=rng)
    assert fit.busbw_gb_s == pytest.approx(busbw, rel=0.01)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.05)
    assert fit.busbw_ci_gb_s[0] <= busbw <= fit.busbw_ci_gb_s[1]
    assert fit.alpha_ci_s[0] <= alpha <= fit.alpha_ci_s[1]
    steps = 2 * (ranks - 1) if op == "allreduce" else ranks - 1
    assert fit.hop_latency_us == pytest.approx(fit.alpha_s / steps * 1e6)
    assert fit.r2_log > 0.99


def test_a_latency_at_its_bound_is_zero_not_a_rounding_error():
    # Times with no latency at all (and a small one's worth of noise): the fit's alpha sits on
    # its bound. The solver stopped 1e-22 s inside it once, which the scenario's range check
    # refuses ("must be 0 or between 1e-12 and 1e+12"); a hop latency must be 0 or a real one.
    rng = np.random.default_rng(3)
    fit = fit_collective("allreduce", 2, synthetic("allreduce", 2, 0.0, 0.118, rng, outliers=False), rng=rng)
    assert fit.alpha_s == 0.0 and fit.hop_latency_us == 0.0
    assert fit.busbw_gb_s == pytest.approx(0.118, rel=0.02)


def test_a_bandwidth_the_sizes_cannot_bound_has_an_open_interval_that_reads_back():
    # Flat times but for the largest size, where three of four iterations took 30 % longer:
    # one resample in twenty draws three or four of the fast ones, so the slope's lower 2.5 %
    # sits at zero (a loaded box's probe wrote 3.9e15 GB/s there, which the calibration's own
    # reader refused). The upper end is open (None), and a calibration file carries it.
    from calibrate.calibration import CollectiveFit
    from calibrate.typed_json import dump, load

    times = {1000: [1e-3] * 4, 100_000: [1e-3] * 4, 10_000_000: [1e-3, 1.3e-3, 1.3e-3, 1.3e-3]}
    fit = fit_collective("allreduce", 2, times, rng=np.random.default_rng(0))
    assert fit.busbw_gb_s == pytest.approx(10_000_000 / 0.3e-3 / 1e9, rel=0.05)
    lo, hi = fit.busbw_ci_gb_s
    assert hi is None and 0 < lo <= fit.busbw_gb_s
    assert load(CollectiveFit, json.loads(json.dumps(dump(fit))), "fit") == fit


def test_holdout_half_the_sizes_within_10_percent_on_synthetic():
    rng = np.random.default_rng(2)
    errors = holdout_errors("allreduce", 2, synthetic("allreduce", 2, 100e-6, 1.1, rng), rng=rng)
    assert len(errors) >= 9 and max(abs(e) for e in errors.values()) < 0.10


def test_too_few_sizes_is_refused():
    with pytest.raises(ValueError, match="at least 3"):
        fit_collective("allreduce", 2, {1024: [1e-4], 2048: [2e-4]}, rng=np.random.default_rng(0))


def test_measured_1gbit_allreduce():
    run = read_run(MEASURED)
    times = collective_times(run)[("allreduce", 2)]
    rng = np.random.default_rng(0)
    fit = fit_collective("allreduce", 2, times, rng=rng)
    big = max(times)
    measured_busbw = big * bus_factor("allreduce", 2) / np.mean(times[big]) / 1e9
    assert fit.busbw_gb_s == pytest.approx(measured_busbw, rel=0.08)
    # The stack over the wire: busbw / raw TCP (0.959 Gbit/s here), the seed's comparison.
    efficiency = fit.busbw_gb_s * 8 / link_gbit_s(run)[0]
    assert 0.9 < efficiency < 1.1
    assert predict_s(fit, 64 * 2**20) == pytest.approx(np.median(times[64 * 2**20]), rel=0.10)
    # From 128 KiB up, the other half of the sizes predicts each held-out one within 10 %
    # (from 32 KiB up in the sitting of 2026-11-29; 32 KiB missed by +17 % in 2026-12-02's).
    # Below, netlab's token bucket refills while a ring step waits on latency and lets
    # the next few KiB through at memory speed: 4-16 KiB all take ~0.15 ms, and the line
    # that the larger sizes set puts 8 KiB at under half that (docs/validation.md).
    errors = holdout_errors("allreduce", 2, times, rng=rng)
    assert all(abs(e) < 0.10 for s, e in errors.items() if s >= 128 * 1024), errors
    assert errors[8 * 1024] < -0.25, errors


def test_incomplete_or_foreign_files_are_named(tmp_path):
    (tmp_path / "probe-rank0000.jsonl").write_text(json.dumps({"type": "meta", "schema": "other"}) + "\n")
    with pytest.raises(ValueError, match="not a ddplab.realrun"):
        read_run(tmp_path)
    meta = {"type": "meta", "schema": "ddplab.realrun", "schema_version": 1, "rank": 0, "world_size": 1}
    (tmp_path / "probe-rank0000.jsonl").write_text(json.dumps(meta) + "\n")
    with pytest.raises(ValueError, match="incomplete"):
        read_run(tmp_path)
