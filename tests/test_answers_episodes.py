"""Issue 22 item 5: episodes that show up (sim/episode_cost.py, docs/episodes.md).

Rare episodes get an expected cost over a horizon from each state's steady step weighed by its
share of time; here that is checked against brute-force runs made cheap by frequent, short
episodes on 16 ranks (the presets' own brute force is bench/episodes_check.py,
measurements/episodes-check.txt)."""

import math

import numpy as np
import pytest

from sim.engine import simulate
from sim.episode_check import predicted_tokens_per_s, realised_shares
from sim.episode_cost import clipped_duration_moments_s, expected_cost, horizon_warning, on_share, states
from sim.episodes import DURATION_RANGE_S, DURATION_SIGMA, Held
from sim.scenario_file import load_scenario
from tests.conftest import in_process

# Many short episodes: a few simulated hours contain dozens of each kind.
FAST = [
    "episodes.comm_per_h=12",
    "episodes.comm_mean_s=120",
    "episodes.comm_bandwidth_factor=0.25",
    "episodes.compute_per_h=12",
    "episodes.compute_mean_s=120",
    "episodes.compute_slowdown=1.5",
    "episodes.diurnal_period_h=4",  # the brute-force horizon holds one whole swing
    "training.grad_accum=8",  # ~2.5 s steps: fewer of them per simulated hour
]


def test_clipped_lognormal_moments_match_sampling():
    rng = np.random.default_rng(0)
    for mean_s in (60.0, 1440.0):
        mu = math.log(mean_s) - DURATION_SIGMA**2 / 2
        d = np.clip(rng.lognormal(mu, DURATION_SIGMA, 2_000_000), *DURATION_RANGE_S)
        m1, m2 = clipped_duration_moments_s(mean_s)
        assert m1 == pytest.approx(d.mean(), rel=0.005)
        assert m2 == pytest.approx((d**2).mean(), rel=0.03)


def test_state_shares_are_the_m_g_infinity_occupancy_and_sum_to_one():
    sc = load_scenario("straggler-failslow", ranks=16, steps=2)
    ep = sc.episodes
    p = 1 - math.exp(-ep.comm_per_h * clipped_duration_moments_s(ep.comm_mean_s)[0] / 3600)
    assert on_share(ep.comm_per_h, ep.comm_mean_s) == pytest.approx(p)
    assert 0.30 < p < 0.36  # one an hour, ~24 min each
    sts = states(ep, throttled_rank=3)
    assert len(sts) == 4 and sum(s.share for s in sts) == pytest.approx(1.0)
    diurnal = states(load_scenario("straggler-throttle", ranks=16, steps=2).episodes, throttled_rank=3)
    assert len(diurnal) == 16 and sum(s.share for s in diurnal) == pytest.approx(1.0)


def test_a_held_state_is_the_episode_itself():
    """Holding the network degraded is the run with every collective 1 / factor as long: with
    communication fully exposed (no overlap), the step grows by exactly that."""
    sc = load_scenario("h100-1024", ["training.overlap=false", "episodes.comm_bandwidth_factor=0.5"], ranks=16, steps=5)
    clear = simulate(sc, trace_steps=0, held=Held(False, None, None))
    slow = simulate(sc, trace_steps=0, held=Held(True, None, None))
    comm = clear.workload.collective_s.sum()
    assert slow.step_time_s.mean() - clear.step_time_s.mean() == pytest.approx(comm, rel=1e-6)


@pytest.mark.parametrize("preset", ["straggler-failslow", "straggler-throttle"])
def test_expected_cost_matches_a_brute_force_run_that_contains_the_episodes(preset):
    sc = load_scenario(preset, FAST, ranks=16, steps=150)
    hours = 4.0
    e = expected_cost(sc, horizon_h=hours)
    assert e.cost > 0.01  # these episodes cost something
    steps = math.ceil(hours * 3600 / e.clear_step_time_s)
    brute = simulate(load_scenario(preset, FAST, ranks=16, steps=steps), trace_steps=0)
    end_s = float(brute.step_time_s.sum())
    tps = brute.workload.tokens_per_step * steps / end_s
    shares = realised_shares(sc, end_s)
    # The weighting itself: the run's own episode shares predict its throughput closely ...
    assert predicted_tokens_per_s(e, shares) == pytest.approx(tps, rel=0.01)
    # ... and the expectation holds within its stated interval for this horizon.
    assert abs((1 - tps / e.clear_tokens_per_s) - e.cost) <= 1.96 * e.cost_sd


def test_a_run_too_short_for_its_episodes_is_warned():
    sc = load_scenario("straggler-failslow", ranks=16, steps=300)
    line = horizon_warning(sc, simulated_s=300 * 0.3)
    assert line and "too short" in line and "1.25 times an hour" in line
    assert horizon_warning(sc, simulated_s=4 * 3600) is None
    assert horizon_warning(load_scenario("h100-1024", ranks=16, steps=3), simulated_s=1.0) is None


@pytest.mark.parametrize("preset", ["straggler-failslow", "straggler-throttle"])
def test_whatif_at_the_defaults_shows_the_presets_cost(capsys, preset):
    code, out, _ = in_process(capsys, "whatif", preset, "--ranks", "64", "--steps", "60", "--json")
    assert code == 0
    import json

    nothing = json.loads(out)[0]
    assert nothing["mitigation"] == "nothing" and nothing["episode_cost"] > 0.005
    assert nothing["tokens_per_s"] == pytest.approx(nothing["clear_tokens_per_s"] * (1 - nothing["episode_cost"]))


def test_simulate_prints_the_expected_cost_and_the_warning(capsys):
    code, out, _ = in_process(capsys, "simulate", "straggler-failslow", "--ranks", "64", "--steps", "50")
    assert code == 0
    assert "too short to contain them" in out
    assert "episodes         expected over 24 h" in out and "network degraded 33% of the time" in out


def test_row_4_rebalance_on_failslow_is_no_longer_plain_h100_1024(capsys):
    """The issue's row 4: `whatif straggler-failslow --try rebalance` printed a "nothing" row
    identical to plain h100-1024 to the token (300 steps contain no episode). Now it is the
    expected throughput over the horizon, below the clear job's by the episodes' cost."""
    import json

    argv = ["--ranks", "64", "--steps", "60", "--json"]
    code, out, _ = in_process(capsys, "whatif", "straggler-failslow", "--try", "rebalance", *argv)
    assert code == 0
    nothing, rebalance = json.loads(out)
    _, plain_out, _ = in_process(capsys, "whatif", "h100-1024", "--try", "rebalance", *argv)
    plain = json.loads(plain_out)[0]
    assert nothing["tokens_per_s"] < 0.995 * plain["tokens_per_s"]
    assert nothing["clear_tokens_per_s"] == pytest.approx(plain["tokens_per_s"], rel=1e-9)
    assert rebalance["episode_cost"] > 0.005  # rebalance acts on persistent speeds, not episodes
