"""sim.goodput against Daly's closed form (docs/design.md "Failures and checkpoints"), Young's and Daly's
intervals, Poisson failure counts, exact no-failure and slow-episode cases; and the `ddplab goodput` command
function."""

import argparse
import itertools
import math

import numpy as np
import pytest

from ddplab.goodputcmd import add_parser
from sim.checkpointing import (
    best_interval_analytic,
    daly_interval_min,
    job_mtbf_min,
    wall_per_work_analytic,
    young_interval_min,
)
from sim.goodput import Campaign, SlowEpisode, check_episodes, fail_slow_episodes, simulate_campaign
from sim.goodput_estimate import best_interval_simulated, estimate

# docs/design.md "Failures and checkpoints": M = 49.5 h, R = 10 min, delta = 1 min, tau = 60 min -> 1.0306
M_MIN = 49.5 * 60
COSTS = {"mtbf_min": M_MIN, "restart_min": 10.0, "checkpoint_min": 1.0}
LONG_WORK_MIN = 200_000 * 60.0  # ~4000 failures: wall/work standard error ~3e-4


def campaign(**kw) -> Campaign:
    return Campaign(**{"work_min": LONG_WORK_MIN, "interval_min": 60.0, **COSTS, **kw})


def test_analytic_wall_per_work_is_designs_number():
    assert wall_per_work_analytic(interval_min=60.0, **COSTS) == pytest.approx(1.0306, abs=1e-4)


def test_simulated_wall_per_work_matches_the_analytic_formula():
    r = simulate_campaign(campaign(), seed=1)
    analytic = wall_per_work_analytic(interval_min=60.0, **COSTS)
    assert r.wall_per_work == pytest.approx(1.0306, abs=0.003)
    assert r.wall_per_work == pytest.approx(analytic, abs=0.0015)  # ~5 standard errors
    assert r.goodput == pytest.approx(1.0 / r.wall_per_work, rel=1e-12)


@pytest.mark.parametrize(
    ("mtbf_min", "restart_min", "checkpoint_min", "interval_min", "work_min", "tolerance"),
    [
        # Harsh regimes, where restarts (39 % of them here) and checkpoints fail often: the formula holds only
        # if a failed restart starts again from scratch and a failed checkpoint loses its segment. Tolerances
        # are ~4 standard deviations of one campaign (measured over 20 seeds: 0.014 and 0.0027).
        (60.0, 30.0, 2.0, 20.0, 6e5, 0.056),
        (300.0, 30.0, 5.0, 60.0, 3e6, 0.011),
    ],
)
def test_simulation_matches_daly_where_failures_strike_restarts_and_checkpoints(
    mtbf_min, restart_min, checkpoint_min, interval_min, work_min, tolerance
):
    costs = {"mtbf_min": mtbf_min, "restart_min": restart_min, "checkpoint_min": checkpoint_min}
    r = simulate_campaign(Campaign(work_min=work_min, interval_min=interval_min, **costs), seed=5)
    assert r.failures_in_restart > 500 and r.failures_in_checkpoint > 500
    assert r.wall_per_work == pytest.approx(wall_per_work_analytic(interval_min=interval_min, **costs), abs=tolerance)


def test_wall_splits_exactly_into_its_parts_with_failures_and_slow_episodes():
    slow = fail_slow_episodes(mean_gap_min=120.0)
    r = simulate_campaign(campaign(work_min=20_000 * 60.0, mtbf_min=300.0), seed=3, slow=slow)
    parts = r.work_min + r.slow_extra_min + r.checkpoint_min + r.lost_wall_min + r.restart_min
    assert r.wall_min == pytest.approx(parts, rel=1e-9)
    assert r.failures_in_restart > 0 and r.failures_in_checkpoint > 0 and r.slow_episodes > 0
    assert r.slow_extra_min > 0 and r.lost_work_min <= r.lost_wall_min


def test_failure_count_is_poisson_in_wall_time():
    r = simulate_campaign(campaign(), seed=2)
    expected = r.work_min * wall_per_work_analytic(interval_min=60.0, **COSTS) / M_MIN
    assert abs(r.failures - expected) < 4 * math.sqrt(expected)


def test_young_and_daly_intervals():
    assert young_interval_min(checkpoint_min=1.0, mtbf_min=M_MIN) == pytest.approx(math.sqrt(2 * M_MIN), rel=1e-12)
    assert daly_interval_min(checkpoint_min=1.0, mtbf_min=M_MIN) == pytest.approx(76.4, abs=0.05)
    assert daly_interval_min(checkpoint_min=30.0, mtbf_min=10.0) == 10.0  # delta >= 2M: tau = M
    # Daly's higher-order estimate is the analytic optimum to well under 0.1 % here.
    assert best_interval_analytic(**COSTS) == pytest.approx(76.4, rel=1e-3)


def test_best_simulated_interval_is_dalys_within_5_percent():
    best = best_interval_simulated(work_min=LONG_WORK_MIN, seed=0, **COSTS)
    assert best.interval_min == pytest.approx(daly_interval_min(checkpoint_min=1.0, mtbf_min=M_MIN), rel=0.05)
    # and the fitted minimum is no worse than the best grid point by more than the noise
    assert best.wall_per_work < min(best.grid_wall_per_work) + 0.001


@pytest.mark.parametrize("work_min", [6000.0, 6000.5, 59.0])
def test_no_failures_costs_exactly_the_checkpoints(work_min):
    r = simulate_campaign(campaign(work_min=work_min, mtbf_min=math.inf), seed=0)
    n = math.ceil(work_min / 60.0)
    assert r.wall_min == pytest.approx(work_min + n * 1.0, rel=1e-12)
    assert r.failures == 0 and r.checkpoints == n
    if work_min == 6000.0:  # a whole number of intervals: (tau + delta) / tau
        assert r.wall_per_work == pytest.approx(61.0 / 60.0, rel=1e-12)


def test_same_seed_same_result_and_another_seed_differs():
    c = campaign(work_min=5000 * 60.0)
    slow = fail_slow_episodes(mean_gap_min=240.0)
    assert simulate_campaign(c, seed=7, slow=slow) == simulate_campaign(c, seed=7, slow=slow)
    assert simulate_campaign(c, seed=7) != simulate_campaign(c, seed=8)


@pytest.mark.parametrize(
    ("episode", "checkpoint_min", "extra_min"),
    [
        (SlowEpisode(10.0, 40.0, 0.5), 1.0, 15.0),  # inside the first work phase: X/2
        (SlowEpisode(100.0, 400.0, 0.5), 0.0, 150.0),  # across checkpoints that cost nothing: X/2
        (SlowEpisode(100.0, 400.0, 0.8), 0.0, 60.0),  # X (1 - rate)
    ],
)
def test_slow_episode_adds_its_lost_rate_in_wall(episode, checkpoint_min, extra_min):
    c = campaign(work_min=6000.0, mtbf_min=math.inf, checkpoint_min=checkpoint_min)
    base = simulate_campaign(c, seed=0)
    r = simulate_campaign(c, seed=0, slow=[episode])
    assert r.wall_min - base.wall_min == pytest.approx(extra_min, rel=1e-12)
    assert r.slow_extra_min == pytest.approx(extra_min, rel=1e-9)
    assert r.goodput == pytest.approx(6000.0 / (6000.0 + 100 * checkpoint_min + extra_min), rel=1e-12)


def test_fail_slow_episodes_are_ordered_clipped_and_long_tailed():
    episodes = list(itertools.islice(fail_slow_episodes(mean_gap_min=60.0)(np.random.default_rng(0)), 4000))
    check_episodes(episodes)  # sorted, not overlapping
    durations = np.array([e.end_min - e.start_min for e in episodes])
    assert durations.min() >= 0.5 and durations.max() <= 600.0
    assert 18.0 < durations.mean() < 30.0 and np.median(durations) < durations.mean() / 2
    assert all(0.5 <= e.rate <= 0.8 for e in episodes)


def test_job_mtbf_from_per_node_rate():
    # Kokolis et al. HPCA'25, RSC-1: 6.5 per 1000 node-days; 128 nodes (1024 GPUs).
    assert job_mtbf_min(failures_per_1000_node_days=6.5, nodes=128) == pytest.approx(1000 * 1440 / (6.5 * 128))


def test_estimate_gives_a_standard_error():
    e = estimate(campaign(work_min=20_000 * 60.0), seed=0, replications=10)
    assert 0 < e.wall_per_work_stderr < 0.003
    assert e.wall_per_work == pytest.approx(wall_per_work_analytic(interval_min=60.0, **COSTS), abs=0.005)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mtbf_min": -1.0}, "mtbf_min: must be > 0"),
        ({"interval_min": 0.0}, "interval_min: must be > 0"),
        ({"restart_min": math.nan}, "restart_min: must be >= 0"),
    ],
)
def test_campaign_rejects_bad_values(kw, message):
    with pytest.raises(ValueError, match=message):
        campaign(**kw)


def test_overlapping_episodes_are_rejected():
    with pytest.raises(ValueError, match="slow episode 1"):
        check_episodes([SlowEpisode(0.0, 10.0, 0.5), SlowEpisode(5.0, 20.0, 0.5)])


# --- the command function ----------------------------------------------------------------------------------------


def run(*argv: str):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["goodput", *argv])
    return args.func(args)


def test_command_json_keys_and_numbers():
    out = run("--mtbf-h", "49.5", "--interval-min", "60", "--work-h", "40000", "--json")
    for key in ("wall_per_work", "goodput", "best_interval_min"):
        assert set(out[key]) == {"simulated", "analytic"}
    for key in ("young_interval_min", "daly_interval_min", "failures", "interval_min", "wall_per_work_stderr"):
        assert key in out
    assert out["interval_min"] == 60.0 and out["interval_rule"] == "given"
    assert out["wall_per_work"]["analytic"] == pytest.approx(1.0306, abs=1e-4)
    assert out["wall_per_work"]["simulated"] == pytest.approx(1.0306, abs=0.004)
    assert out["goodput"]["analytic"] == pytest.approx(1 / out["wall_per_work"]["analytic"])
    assert out["daly_interval_min"] == pytest.approx(76.4, abs=0.05)


def test_command_auto_interval_is_daly_and_prints_a_table(capsys):
    out = run("--failures-per-1000-node-days", "6.5", "--nodes", "128", "--work-h", "20000")
    assert out["interval_rule"] == "daly" and out["interval_min"] == out["daly_interval_min"]
    assert out["mtbf_h"] == pytest.approx(1000 * 24 / (6.5 * 128))
    printed = capsys.readouterr().out
    assert "wall / work" in printed and "best interval" in printed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mtbf-h", "-1"], "--mtbf-h: must be > 0, got -1.0"),
        (["--mtbf-h", "nan"], "--mtbf-h: must be > 0, got nan"),
        (["--mtbf-h", "49.5", "--interval-min", "soon"], "--interval-min: expected minutes or 'auto', got 'soon'"),
        (["--mtbf-h", "49.5", "--interval-min", "-5"], "--interval-min: must be > 0, got -5.0"),
        (["--mtbf-h", "49.5", "--restart-min", "-2"], "--restart-min: must be >= 0, got -2.0"),
        (["--mtbf-h", "49.5", "--checkpoint-min", "0"], "--checkpoint-min: must be > 0, got 0.0"),
        (["--mtbf-h", "49.5", "--work-h", "0"], "--work-h: must be > 0, got 0.0"),
        ([], "--mtbf-h: required"),
        (["--nodes", "128"], "--failures-per-1000-node-days: required with --nodes"),
        (["--failures-per-1000-node-days", "6.5"], "--nodes: required with --failures-per-1000-node-days"),
        (["--failures-per-1000-node-days", "6.5", "--nodes", "0"], "--nodes: must be >= 1, got 0"),
        (["--mtbf-h", "1", "--nodes", "2"], "--mtbf-h: give it or"),
    ],
)
def test_command_bad_input_is_one_line_value_error(argv, message):
    with pytest.raises(ValueError) as e:
        run(*argv)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_stalls_that_outlast_the_timeout_are_failures_paying_the_timeout():
    """Every stall outlasts the 10 min timeout (mean 10^6 min) and there are no other failures:
    a Poisson process of failures (mean gap M_s = 60 / per_h) each costing a fixed downtime
    D = timeout + restart that nothing interrupts, so wall/work = (M_s + D)(e^((tau+delta)/M_s) - 1)/tau."""
    from sim.goodput import Stalls

    c = campaign(mtbf_min=math.inf, work_min=100_000 * 60.0)
    r = simulate_campaign(c, seed=3, stalls=Stalls(per_h=1 / 40, mean_min=1e6, timeout_min=10.0))
    m_s, d = 40 * 60.0, 10.0 + 10.0
    expected = (m_s + d) * math.expm1(61.0 / m_s) / 60.0
    assert r.timeouts == r.failures > 2000 and r.stalls == r.timeouts
    assert r.wall_per_work == pytest.approx(expected, abs=0.002)
    assert r.stalled_min == pytest.approx(10.0 * r.timeouts)
    split = r.work_min + r.slow_extra_min + r.checkpoint_min + r.lost_wall_min + r.restart_min + r.stalled_min
    assert r.wall_min == pytest.approx(split, rel=1e-12)


def test_stalls_within_the_timeout_only_wait():
    """Stalls shorter than the timeout lose no work: the job waits them out, so
    wall = busy x (1 + rate x mean stall), busy = work x (tau + delta) / tau."""
    from sim.goodput import Stalls

    c = campaign(mtbf_min=math.inf, work_min=100_000 * 60.0)
    r = simulate_campaign(c, seed=4, stalls=Stalls(per_h=1.0, mean_min=2.0, timeout_min=1e9))
    assert r.timeouts == 0 and r.failures == 0 and r.lost_work_min == 0.0
    assert r.wall_per_work == pytest.approx(61.0 / 60.0 * (1 + 2.0 / 60.0), rel=0.003)


def test_command_stalls_time_out_into_failures():
    """Stalls averaging 5 min against a 10 min timeout: some time out (the lognormal's tail), and they
    only add wall time to what failures alone cost."""
    base = run("--mtbf-h", "49.5", "--interval-min", "60", "--work-h", "20000", "--json")
    out = run("--mtbf-h", "49.5", "--interval-min", "60", "--work-h", "20000", "--stalls-per-day", "4", "--json")
    assert out["timeouts"] > 0 and out["stalled_h"] > 0
    assert out["failures"]["simulated"] > base["failures"]["simulated"] + out["timeouts"] * 0.8
    assert out["wall_per_work"]["simulated"] > base["wall_per_work"]["simulated"]
    with pytest.raises(ValueError, match="--timeout-min: must be > 0, got 0.0"):
        run("--mtbf-h", "49.5", "--timeout-min", "0")
