"""What rare episodes cost over a horizon, without simulating the horizon step by step.

Fail-slow and throttling episodes start as a Poisson process in wall time and last minutes to
hours (sim/episodes.py); a step lasts a fraction of a second, so a run of a few hundred steps
usually contains none, and one long enough to contain many takes minutes. Since an episode
holds for thousands of steps, the job spends its time in a few steady states: the network
degraded or not, one rank throttled or none, the diurnal swing at some phase. This module
simulates each state's steady step (a short run with the state held, sim/episodes.py Held) and
weighs the states by the share of wall time each holds:

  expected tokens/s = sum over states of share_s x tokens/s_s

With episodes of one kind starting at rate lambda and lasting D (lognormal, clipped to 30 s -
10 h), the number in progress at a moment is Poisson with mean lambda E[D] (an M/G/infinity
queue), so the share of time with at least one is 1 - exp(-lambda E[D]). Kinds are independent,
and the diurnal phase is uniform in time (taken at 8 phases). Two compute episodes at once are
taken as one: the step waits for the slowest rank either way.

Over a finite horizon H the share actually seen varies: the time episodes cover is a compound
Poisson sum with variance lambda H E[D^2], so the cost's standard deviation is
sqrt(sum over kinds of loss_k^2 lambda_k E[D_k^2] / H), loss_k being the throughput lost while
kind k holds alone (the diurnal swing averages out over whole days and is left out of it).
docs/episodes.md derives this; measurements/episodes-check.txt checks it
against brute-force runs long enough to contain the episodes.
"""

import dataclasses
import itertools
import math
from typing import NamedTuple

import numpy as np
from scipy.stats import norm

from sim.config import EpisodesConfig, Scenario
from sim.engine import simulate
from sim.episodes import DURATION_RANGE_S, DURATION_SIGMA, Held

DIURNAL_PHASES = 8  # midpoint rule in phase: exact for a sinusoid's harmonics below the 8th


def clipped_duration_moments_s(mean_s: float) -> tuple[float, float]:
    """(E[D], E[D^2]) of sim/episodes.py's durations: lognormal with mean ``mean_s`` and log-sd
    DURATION_SIGMA, clipped to DURATION_RANGE_S."""
    s = DURATION_SIGMA
    mu = math.log(mean_s) - s * s / 2
    lo, hi = (math.log(x) for x in DURATION_RANGE_S)

    def partial(k: int) -> float:  # E[D^k; lo < ln D < hi] for a lognormal
        shift = mu + k * s * s
        return math.exp(k * mu + k * k * s * s / 2) * (norm.cdf((hi - shift) / s) - norm.cdf((lo - shift) / s))

    below, above = norm.cdf((lo - mu) / s), norm.sf((hi - mu) / s)
    a, b = DURATION_RANGE_S
    return a * below + partial(1) + b * above, a * a * below + partial(2) + b * b * above


def on_share(per_h: float, mean_s: float) -> float:
    """Share of wall time with at least one episode of a kind in progress."""
    if per_h <= 0:
        return 0.0
    return 1.0 - math.exp(-per_h / 3600.0 * clipped_duration_moments_s(mean_s)[0])


class State(NamedTuple):
    share: float  # of wall time
    held: Held


def states(ep: EpisodesConfig, throttled_rank: int) -> list[State]:
    """The steady states of a scenario's episodes with their shares of wall time (they sum to 1)."""
    p_comm = on_share(ep.comm_per_h, ep.comm_mean_s)
    p_compute = on_share(ep.compute_per_h, ep.compute_mean_s)
    comm = [(False, 1 - p_comm)] + ([(True, p_comm)] if p_comm > 0 else [])
    compute = [(None, 1 - p_compute)] + ([(throttled_rank, p_compute)] if p_compute > 0 else [])
    if ep.diurnal_amplitude > 0:
        phases = [(2 * math.pi * (j + 0.5) / DIURNAL_PHASES, 1 / DIURNAL_PHASES) for j in range(DIURNAL_PHASES)]
    else:
        phases = [(None, 1.0)]
    out = []
    for (c, pc), (r, pr), (ph, pp) in itertools.product(comm, compute, phases):
        out.append(State(pc * pr * pp, Held(comm=c, compute_rank=r, diurnal_phase=ph)))
    return out


@dataclasses.dataclass(frozen=True)
class EpisodeCost:
    """The expected throughput over a horizon with the scenario's episodes, against the same job
    with none."""

    tokens_per_s: float  # expected, the states weighed by time
    clear_tokens_per_s: float  # no episode in progress, no diurnal swing
    clear_step_time_s: float  # the mean step then
    horizon_h: float
    cost_sd: float  # of the cost over the horizon (share of throughput)
    comm_share: float  # of time with a network episode in progress
    compute_share: float  # of time with a throttled rank
    states: tuple  # State: each steady state and its share of time
    state_summaries: dict  # Held -> its run's summary() (sim/summary.py)
    state_step_times_s: dict  # Held -> its run's step times

    @property
    def cost(self) -> float:
        """Throughput lost to the episodes over the horizon, a share (0.012 = 1.2 %)."""
        return 1.0 - self.tokens_per_s / self.clear_tokens_per_s

    def weighted(self, key: str) -> float:
        """A per-step quantity of the states' summaries, averaged over steps (a state's steps
        are its time share over its step time)."""
        return sum(p * self.state_summaries[h].part_s(key) for h, p in self._step_weights().items())

    def _step_weights(self) -> dict:
        """Each state's share of the steps: its share of time over its mean step."""
        steps = {st.held: st.share / self.state_summaries[st.held].step_time_s.mean for st in self.states}
        total = sum(steps.values())
        return {h: n / total for h, n in steps.items()}

    def percentile_s(self, q: float) -> float:
        """The q-th percentile of the step time over the horizon: the states' steps pooled, each
        weighed by its state's share of the steps."""
        weights = self._step_weights()
        times = np.concatenate([self.state_step_times_s[h] for h in weights])
        w = np.concatenate(
            [np.full(len(self.state_step_times_s[h]), p / len(self.state_step_times_s[h])) for h, p in weights.items()]
        )
        order = np.argsort(times)
        cum = np.cumsum(w[order])
        return float(times[order][np.searchsorted(cum, q / 100.0 * cum[-1])])


def throttled_rank(sc: Scenario) -> int:
    """The rank the held compute state throttles, drawn from the compute episodes' seed: any
    rank will do, the step waits for it either way (up to its own speed spread)."""
    return int(np.random.default_rng([sc.seed, 2]).integers(sc.ranks))


def expected_cost(sc: Scenario, *, horizon_h: float) -> EpisodeCost:
    """Each state's steady step over ``sc.steps`` steps (same seed: the same jitter draws in every
    state), weighed by its share of wall time; the cost's spread over ``horizon_h`` hours."""
    ep = sc.episodes
    rank = throttled_rank(sc)
    sts = states(ep, rank)
    results = {st.held: simulate(sc, trace_steps=0, held=st.held) for st in sts}
    summaries = {h: r.summary() for h, r in results.items()}
    clear_held = Held(comm=False, compute_rank=None, diurnal_phase=None)
    clear = summaries.get(clear_held) or simulate(sc, trace_steps=0, held=clear_held).summary()
    tps = {h: s.tokens_per_s for h, s in summaries.items()}
    expected = sum(st.share * tps[st.held] for st in sts)
    horizon_s = horizon_h * 3600.0
    var = 0.0
    for per_h, mean_s, alone in (
        (ep.comm_per_h, ep.comm_mean_s, Held(True, None, None)),
        (ep.compute_per_h, ep.compute_mean_s, Held(False, rank, None)),
    ):
        if per_h <= 0:
            continue
        alone_tps = tps.get(alone) or simulate(sc, trace_steps=0, held=alone).summary().tokens_per_s
        loss = 1.0 - alone_tps / clear.tokens_per_s
        var += loss**2 * per_h / 3600.0 * clipped_duration_moments_s(mean_s)[1] / horizon_s
    return EpisodeCost(
        tokens_per_s=expected,
        clear_tokens_per_s=clear.tokens_per_s,
        clear_step_time_s=clear.step_time_s.mean,
        horizon_h=horizon_h,
        cost_sd=math.sqrt(var),
        comm_share=on_share(ep.comm_per_h, ep.comm_mean_s),
        compute_share=on_share(ep.compute_per_h, ep.compute_mean_s),
        states=tuple(sts),
        state_summaries=summaries,
        state_step_times_s={h: r.step_time_s for h, r in results.items()},
    )


def horizon_warning(sc: Scenario, simulated_s: float) -> str | None:
    """A line when a run of ``simulated_s`` seconds is too short to expect one of the episodes
    its scenario models (fewer than one start expected), else None."""
    ep = sc.episodes
    per_h = ep.comm_per_h + ep.compute_per_h
    if per_h <= 0 and ep.diurnal_amplitude <= 0:
        return None
    expected_starts = per_h * simulated_s / 3600.0
    if per_h > 0 and expected_starts >= 1:
        return None
    if per_h <= 0 and simulated_s >= ep.diurnal_period_h * 3600.0:
        return None
    minutes = simulated_s / 60.0
    if per_h > 0:
        what = f"episodes start about {per_h:g} times an hour, so this run is too short to contain them"
    else:
        what = f"the diurnal swing takes {ep.diurnal_period_h:g} h, so this run sees a sliver of it"
    return (
        f"warning: {sc.steps} steps cover {minutes:.1f} simulated minutes; {what}: the expected cost below"
        " weighs each episode state by its share of time (docs/episodes.md)"
    )
