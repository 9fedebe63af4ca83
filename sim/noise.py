"""Random draws, all from one ``numpy.random.Generator`` passed in (never a global).

Every multiplier has mean 1 so noise adds variance, not average work: lognormal
with mu = -sigma^2/2, normal(1, sigma) clipped at 0, gamma with shape 1/sigma^2, or
``empirical``: measured multipliers resampled with replacement (rescaled to mean 1),
for when none of the three fits (a bootstrap of the measured jitter, Efron 1979); with
measured multipliers per rank and step (a trace's), whole steps are resampled, every rank's
multiplier of one measured step together (a moving-block bootstrap with blocks one step long
across ranks): ranks on one shared box slow down together (correlation +0.83 between two
ranks' steps under load, docs/validation.md), and independent draws turn that common slowdown
into a straggler wait the run never had.
Draws are made for all ranks at once, in a fixed order, so results do not depend
on how ranks are grouped into simulation processes.
"""

import numpy as np


def multipliers(
    rng: np.random.Generator, distribution: str, sigma: float, size, samples=None, by_rank=None
) -> np.ndarray:
    """Mean-1 multiplicative noise of the given shape (``samples``: for ``empirical``;
    ``by_rank``: per rank, its multipliers step by step, used when there is one row per rank
    of ``size[0]``: a draw per micro-step, the drawn step's multipliers for every rank)."""
    if distribution == "empirical" and by_rank is not None and len(by_rank) == size[0]:
        rows = np.asarray(by_rank, dtype=float)
        rows = rows / rows.mean(axis=1, keepdims=True)
        return rows[:, rng.integers(0, rows.shape[1], size=size[1:])]
    if distribution == "empirical":
        pool = np.asarray(samples, dtype=float)
        return rng.choice(pool / pool.mean(), size=size)
    if distribution == "none" or sigma == 0.0:
        return np.ones(size)
    if distribution == "lognormal":
        return rng.lognormal(-0.5 * sigma * sigma, sigma, size)
    if distribution == "normal":
        return np.maximum(rng.normal(1.0, sigma, size), 0.0)
    if distribution == "gamma":
        var = sigma * sigma
        shape = 1.0 / var if var > 0.0 else np.inf
        if not np.isfinite(shape):  # sigma^2 underflows: the multiplier is 1 to double precision
            return np.ones(size)
        return rng.gamma(shape, 1.0 / shape, size)
    raise ValueError(f"noise.distribution: unknown {distribution!r}")


def comm_multipliers(rng: np.random.Generator, sigma: float, samples, size) -> np.ndarray:
    """Per-collective time multipliers: measured ones (over the median) resampled as they are,
    or lognormal with this sigma, mean 1 (none at sigma 0: no draw is made)."""
    if samples:
        return rng.choice(np.asarray(samples, dtype=float), size=size)
    return multipliers(rng, "lognormal", sigma, size)


def speed_factors(rng: np.random.Generator, ranks: int, spread_sd: float, stragglers: dict[int, float]) -> np.ndarray:
    """Persistent per-rank compute-time factors: a lognormal spread (identical GPUs
    differ by ~1.2 % sd, Sinha et al. arXiv 2208.11035) times explicit stragglers."""
    factors = multipliers(rng, "lognormal", spread_sd, ranks)
    for rank, slowdown in stragglers.items():
        factors[rank] *= slowdown
    return factors
