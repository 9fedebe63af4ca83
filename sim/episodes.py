"""What changes from step to step beyond per-micro-step jitter: fail-slow episodes,
the diurnal swing and stop-the-world pauses (sim/config.py EpisodesConfig,
PausesConfig; the numbers in docs/references.md "Stragglers and failures").

Episodes are drawn lazily as simulated time passes (Poisson starts, so the draw
depends only on time, not on steps) from their own generators, seeded from the
scenario's seed: turning an episode kind on does not change the jitter draws, so
what-if comparisons see the same noise (common random numbers).
"""

from typing import NamedTuple

import numpy as np

from sim.config import EpisodesConfig, PausesConfig

# Fail-slow durations: 30 s to ~10 h (Alibaba Falcon); lognormal with this log-sd around
# the configured mean, clipped to that range.
DURATION_SIGMA = 1.2
# The hours an episode's expected cost (and whatif's restart) is stated over unless told: a day.
HORIZON_H = 24.0
DURATION_RANGE_S = (30.0, 36000.0)


class StepEffects(NamedTuple):
    """None where the effect is absent this step (every rank's factor 1, no rank paused): the
    engines skip what would multiply by 1 or add 0, the same floats at less cost per rank-step."""

    compute_factor: np.ndarray | None  # (ranks,) compute time multiplier for this step
    comm_factor: float  # every collective's time x this
    pause_s: np.ndarray | None  # (ranks,) stop-the-world time before this step's first forward

    def apply(self, noise: np.ndarray, jitter: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's (ranks, micro-steps) compute noise and (collectives,) jitter with these effects."""
        if self.compute_factor is not None:
            noise = noise * self.compute_factor[:, None]
        return noise, jitter * self.comm_factor


class Held(NamedTuple):
    """One episode state held for a whole run (sim/episode_cost.py weighs such runs by the
    share of time each state holds): the network degraded or not, one rank throttled or none,
    and the diurnal swing at one phase (radians) or absent."""

    comm: bool
    compute_rank: int | None
    diurnal_phase: float | None


class _Poisson:
    """Episode intervals of one kind, extended on demand up to a time; every episode drawn is
    kept in ``drawn`` (start, end, rank), for a check of what a run contained."""

    def __init__(self, rng: np.random.Generator, per_h: float, mean_s: float, ranks: int):
        self.rng, self.rate_s, self.ranks = rng, per_h / 3600.0, ranks
        self.mu = np.log(mean_s) - DURATION_SIGMA**2 / 2  # lognormal with this mean
        self.next_start = rng.exponential(1.0 / self.rate_s) if self.rate_s > 0 else np.inf
        self.live: list[tuple[float, float, int]] = []  # (start, end, rank)
        self.drawn: list[tuple[float, float, int]] = []

    def active(self, t: float) -> list[int]:
        """Ranks hit by an episode covering time t (one entry per episode)."""
        while self.next_start <= t:
            d = float(np.clip(self.rng.lognormal(self.mu, DURATION_SIGMA), *DURATION_RANGE_S))
            self.live.append((self.next_start, self.next_start + d, int(self.rng.integers(self.ranks))))
            self.drawn.append(self.live[-1])
            self.next_start += self.rng.exponential(1.0 / self.rate_s)
        self.live = [e for e in self.live if e[1] > t]
        return [r for s, _, r in self.live if s <= t]


class Effects:
    def __init__(self, episodes: EpisodesConfig, pauses: PausesConfig, ranks: int, seed: int, held: Held | None = None):
        self.ep, self.pa, self.ranks, self.held = episodes, pauses, ranks, held
        self.comm = _Poisson(np.random.default_rng([seed, 1]), episodes.comm_per_h, episodes.comm_mean_s, ranks)
        self.compute = _Poisson(
            np.random.default_rng([seed, 2]), episodes.compute_per_h, episodes.compute_mean_s, ranks
        )
        self.pause_rng = np.random.default_rng([seed, 3])

    @staticmethod
    def needed(episodes: EpisodesConfig, pauses: PausesConfig, held: Held | None = None) -> bool:
        return episodes.active or pauses.every_steps > 0 or held is not None

    def at(self, step: int, t_s: float) -> StepEffects:
        """The effects on the step that starts at simulated time t_s (episodes last minutes
        to hours; a step, seconds: what holds at its start holds for the step). With a held
        state, that state instead of the episodes drawn."""
        ep, held = self.ep, self.held
        if held is not None:
            throttled = [] if held.compute_rank is None else [held.compute_rank]
            phase, comm_on = held.diurnal_phase, held.comm
        else:
            throttled = self.compute.active(t_s)
            phase = 2 * np.pi * t_s / (ep.diurnal_period_h * 3600.0) if ep.diurnal_amplitude else None
            comm_on = bool(self.comm.active(t_s))
        factor = None
        if throttled or phase is not None:
            factor = np.ones(self.ranks)
            for rank in throttled:
                factor[rank] = ep.compute_slowdown
            if phase is not None:
                factor *= 1.0 + ep.diurnal_amplitude * np.sin(phase)
        comm = 1.0 / ep.comm_bandwidth_factor if comm_on else 1.0
        return StepEffects(factor, comm, self._pauses(step))

    def _pauses(self, step: int) -> np.ndarray | None:
        """Each rank's pause this step, None when no rank pauses (the same draws either way)."""
        pa = self.pa
        if pa.every_steps == 0:
            return None
        if pa.synchronized:  # every rank collects at the same steps (gc.freeze + gc.collect every k steps)
            every = max(1, round(pa.every_steps))
            if (step + 1) % every:
                return None
            return np.full(self.ranks, self.pause_rng.uniform(pa.min_s, pa.max_s))
        hit = self.pause_rng.random(self.ranks) < 1.0 / pa.every_steps
        pause_s = self.pause_rng.uniform(pa.min_s, pa.max_s, self.ranks)  # drawn for every rank, hit or not
        return np.where(hit, pause_s, 0.0) if hit.any() else None
