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


def comm_multipliers(rng: np.random.Generator, sigma: float, samples, size, pools=None) -> np.ndarray:
    """Per-collective time multipliers: measured ones (over the median) resampled as they are,
    or lognormal with this sigma, mean 1 (none at sigma 0: no draw is made). With ``pools``
    (SizePools), each collective draws from the multipliers timed at the size nearest its own."""
    if pools is not None:
        return pools.draw(rng, size)
    if samples:
        return rng.choice(np.asarray(samples, dtype=float), size=size)
    return multipliers(rng, "lognormal", sigma, size)


class SizePools:
    """Measured multipliers grouped by the call size they were timed at, and for each of a
    step's collectives the group of the measured size nearest its own (in log bytes; a tie
    takes the larger). A transfer's spread depends on its size: on the emulated 10 Gbit/s link
    the probe's allreduce times varied by sd 88 % of their median at 1 MiB, 32 % at 4 MiB and
    7 % at 64 MiB (docs/validation.md, sixth sitting), and one pool over all sizes from 4 MiB
    gave gpt2-mini's 63 MB bucket the tails of the small ones."""

    def __init__(self, samples, samples_bytes, call_bytes):
        values = np.asarray(samples, dtype=float)
        sizes = np.asarray(samples_bytes, dtype=float)
        measured = np.unique(sizes)
        order = np.argsort(sizes, kind="stable")
        self.values = values[order]
        self.start = np.searchsorted(sizes[order], measured)
        self.length = np.diff(np.append(self.start, len(values)))
        calls = np.log2(np.maximum(np.asarray(call_bytes, dtype=float), 1.0))
        gap = np.abs(calls[:, None] - np.log2(measured)[None, :])
        # argmin takes the first of equal gaps; reversed, the first is the larger size.
        self.pool = len(measured) - 1 - np.argmin(gap[:, ::-1], axis=1)

    @classmethod
    def of(cls, samples, samples_bytes, call_bytes) -> "SizePools | None":
        """The pools for these calls, or None where the multipliers carry no sizes (then
        comm_multipliers draws from all of them, as before)."""
        if not samples or samples_bytes is None or len(call_bytes) == 0:
            return None
        return cls(samples, samples_bytes, call_bytes)

    def draw(self, rng: np.random.Generator, size) -> np.ndarray:
        """Multipliers of shape ``size``, whose last axis is the calls: one uniform draw each."""
        u = rng.random(size)
        pool = np.broadcast_to(self.pool, np.shape(u))
        index = self.start[pool] + np.minimum((u * self.length[pool]).astype(np.int64), self.length[pool] - 1)
        return self.values[index]


def speed_factors(rng: np.random.Generator, ranks: int, spread_sd: float, stragglers: dict[int, float]) -> np.ndarray:
    """Persistent per-rank compute-time factors: a lognormal spread (identical GPUs
    differ by ~1.2 % sd, Sinha et al. arXiv 2208.11035) times explicit stragglers."""
    factors = multipliers(rng, "lognormal", spread_sd, ranks)
    for rank, slowdown in stragglers.items():
        factors[rank] *= slowdown
    return factors
