"""Estimates built on sim/goodput.py's campaign: wall/work with a standard error from independent
replications, and the best checkpoint interval found by simulation (to set beside Daly's).

Minutes throughout.
"""

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sim.checkpointing import daly_interval_min, need_finite_optimum
from sim.goodput import Campaign, SlowEpisodes, Stalls, simulate_campaign


class Estimate(NamedTuple):
    """Wall/work from independent replications (each work_min / replications long) with its standard error."""

    wall_per_work: float
    wall_per_work_stderr: float
    goodput: float
    failures: int
    lost_work_min: float
    restart_min: float
    checkpoint_min: float
    replications: int
    timeouts: int = 0  # stalls that outlasted the collective timeout (in failures too)
    stalled_min: float = 0.0


def estimate(
    campaign: Campaign,
    *,
    seed: int,
    replications: int = 10,
    slow: SlowEpisodes | None = None,
    stalls: Stalls | None = None,
) -> Estimate:
    """Split the campaign's work into independent replications: their spread gives a standard error."""
    if not isinstance(replications, int) or replications < 2:
        raise ValueError(f"replications: must be an integer >= 2, got {replications!r}")
    part = Campaign(
        work_min=campaign.work_min / replications,
        mtbf_min=campaign.mtbf_min,
        restart_min=campaign.restart_min,
        checkpoint_min=campaign.checkpoint_min,
        interval_min=campaign.interval_min,
    )
    seeds = np.random.SeedSequence(seed).generate_state(replications)
    runs = [simulate_campaign(part, seed=int(s), slow=slow, stalls=stalls) for s in seeds]
    ratios = np.array([r.wall_per_work for r in runs])
    mean = float(ratios.mean())  # equal work each, so this is total wall / total work
    return Estimate(
        wall_per_work=mean,
        wall_per_work_stderr=float(ratios.std(ddof=1) / math.sqrt(replications)),
        goodput=1.0 / mean,
        failures=sum(r.failures for r in runs),
        lost_work_min=sum(r.lost_work_min for r in runs),
        restart_min=sum(r.restart_min for r in runs),
        checkpoint_min=sum(r.checkpoint_min for r in runs),
        replications=replications,
        timeouts=sum(r.timeouts for r in runs),
        stalled_min=sum(r.stalled_min for r in runs),
    )


def default_grid(daly_min: float) -> np.ndarray:
    """best_interval_simulated's intervals: 13 geometric points from 0.4x to 2.5x Daly's."""
    return daly_min * np.geomspace(0.4, 2.5, 13)


class BestInterval(NamedTuple):
    interval_min: float
    wall_per_work: float  # of the fitted curve at interval_min
    grid_interval_min: tuple[float, ...]
    grid_wall_per_work: tuple[float, ...]  # simulated, one campaign each, common random numbers


def best_interval_simulated(
    *,
    work_min: float,
    mtbf_min: float,
    restart_min: float,
    checkpoint_min: float,
    seed: int,
    grid_interval_min: Sequence[float] | None = None,
) -> BestInterval:
    """Simulate one campaign per interval of a grid (default: 13 geometric points from 0.4x to 2.5x Daly's),
    every one with the same failure times (common random numbers, so the differences between intervals are
    not swamped by different failure counts), fit a + b/tau + c tau + d tau^2 by least squares and return its
    minimum on the grid's range. The form is the expansion of Daly's wall/work to second order in tau/M
    (b ~ delta, c ~ 1/2M, d ~ 1/6M^2); the curve is flat near its minimum, so a fit over a wide grid locates it
    far better than the grid's smallest point does."""
    from scipy.optimize import minimize_scalar

    need_finite_optimum(mtbf_min, checkpoint_min)
    if grid_interval_min is None:
        grid_interval_min = default_grid(daly_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min))
    taus = np.asarray(grid_interval_min, dtype=float)
    if taus.ndim != 1 or len(taus) < 4 or not np.all(taus > 0):
        raise ValueError(f"grid_interval_min: need >= 4 intervals > 0, got {grid_interval_min!r}")
    ys = np.array(
        [
            simulate_campaign(
                Campaign(
                    work_min=work_min,
                    mtbf_min=mtbf_min,
                    restart_min=restart_min,
                    checkpoint_min=checkpoint_min,
                    interval_min=float(t),
                ),
                seed=seed,
            ).wall_per_work
            for t in taus
        ]
    )
    scale = float(np.median(taus))  # fit in tau / scale: a well-conditioned design matrix
    x = taus / scale
    coef, *_ = np.linalg.lstsq(np.column_stack([np.ones_like(x), 1.0 / x, x, x * x]), ys, rcond=None)

    def fitted(u: float) -> float:
        return float(coef[0] + coef[1] / u + coef[2] * u + coef[3] * u * u)

    res = minimize_scalar(fitted, bounds=(x.min(), x.max()), method="bounded", options={"xatol": 1e-10})
    return BestInterval(
        interval_min=float(res.x) * scale,
        wall_per_work=fitted(float(res.x)),
        grid_interval_min=tuple(float(t) for t in taus),
        grid_wall_per_work=tuple(float(y) for y in ys),
    )
