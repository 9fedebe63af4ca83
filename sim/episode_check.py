"""What a brute-force run with episodes contained, for checking sim/episode_cost.py against it.

A long run draws its episodes as simulated time passes (sim/episodes.py); this draws them again
from the same seeds up to the run's end (the draws depend only on time) and measures the share
of that time each steady state held. Weighing the states' steady throughput by these realised
shares predicts the run's own throughput, a check of the weighting free of the horizon's luck;
the expected shares (sim/episode_cost.py) predict it up to that luck, which cost_sd states.
"""

import math

import numpy as np

from sim.config import Scenario
from sim.episode_cost import DIURNAL_PHASES, EpisodeCost, throttled_rank
from sim.episodes import Effects, Held

GRID_S = 1.0  # episodes last 30 s or more: a 1 s grid measures their shares to < 1 %


def realised_shares(sc: Scenario, end_s: float) -> dict[Held, float]:
    """The share of [0, end_s) each steady state of ``sc``'s episodes held in a run with its
    seed, keyed as sim/episode_cost.py keys its states."""
    ep = sc.episodes
    fx = Effects(ep, sc.pauses, sc.ranks, sc.seed)
    t = np.arange(0.0, end_s, GRID_S)
    fx.comm.active(end_s), fx.compute.active(end_s)  # draw every episode up to the end

    def covered(drawn) -> np.ndarray:
        on = np.zeros(len(t), dtype=bool)
        for start, end, _ in drawn:
            on[(t >= start) & (t < end)] = True
        return on

    comm, compute = covered(fx.comm.drawn), covered(fx.compute.drawn)
    rank = throttled_rank(sc)
    if ep.diurnal_amplitude > 0:
        phase_bin = np.floor((t / (ep.diurnal_period_h * 3600.0)) % 1.0 * DIURNAL_PHASES).astype(int)
    else:
        phase_bin = None
    shares: dict[Held, float] = {}
    for c in (False, True):
        for r in (None, rank):
            mask = (comm == c) & (compute == (r is not None))
            if phase_bin is None:
                shares[Held(c, r, None)] = float(mask.mean())
                continue
            for j in range(DIURNAL_PHASES):
                phase = 2 * math.pi * (j + 0.5) / DIURNAL_PHASES
                shares[Held(c, r, phase)] = float((mask & (phase_bin == j)).mean())
    return shares


def predicted_tokens_per_s(cost: EpisodeCost, shares: dict[Held, float]) -> float:
    """Throughput predicted from the states' steady runs weighed by realised shares; a state the
    expectation left out (its kind never happens) must not have held."""
    steady = {h: s.tokens_per_s for h, s in cost.state_summaries.items()}
    missing = [h for h, p in shares.items() if p > 0 and h not in steady]
    if missing:
        raise ValueError(f"states held but not simulated: {missing}")
    return sum(p * steady[h] for h, p in shares.items() if p > 0)
