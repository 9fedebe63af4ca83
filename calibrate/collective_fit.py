"""Alpha-beta fits of measured collectives: t(S) = alpha + S x bus_factor / busbw.

Per op and world size, the per-size medians of the slowest rank's time are fitted
by robust least squares (scipy ``least_squares``, Cauchy loss on relative
residuals, so the small sizes that set the latency count as much as the large
ones that set the bandwidth, and a scheduler hiccup does not pull the line).
Confidence intervals come from a bootstrap over iterations within each size,
with an explicit, seeded ``numpy.random.Generator``. The ring model turns alpha
into a per-hop latency: 2(n-1) hops for allreduce, n-1 for allgather and
reduce-scatter (Patarasuk & Yuan 2009; sim/collectives.py uses the same model).
"""

import numpy as np
from scipy.optimize import least_squares

from calibrate.calibration import CollectiveFit
from sim.collectives import bus_factor


def ring_steps(op: str, ranks: int) -> int:
    return 2 * (ranks - 1) if op == "allreduce" else ranks - 1


def _fit_line(sizes: np.ndarray, medians: np.ndarray) -> tuple[float, float]:
    """(alpha_s, seconds per bus byte) minimising Cauchy-loss relative residuals, both >= 0."""
    big = sizes > np.median(sizes)
    slope0 = max(np.polyfit(sizes[big], medians[big], 1)[0], 1e-15) if big.sum() >= 2 else medians[-1] / sizes[-1]
    x0 = [max(medians.min() * 0.5, 1e-9), slope0]
    scale = np.array([medians.min(), slope0])
    res = least_squares(
        lambda p: (p[0] + p[1] * sizes - medians) / medians,
        x0,
        x_scale=scale,
        bounds=([0.0, 0.0], [np.inf, np.inf]),
        loss="cauchy",
        f_scale=0.05,
    )
    # At its bound the solver stops a rounding error inside it (an alpha of 1.7e-22 s was seen on
    # a loaded box, which the scenario's range check then refuses): a latency within a millionth
    # of the smallest median of zero is zero. The slope keeps its value: a vanishing one is a
    # bandwidth calibrate/plausible.py refuses by name.
    alpha = float(res.x[0]) if res.x[0] > 1e-6 * scale[0] else 0.0
    return alpha, float(res.x[1])


def fit_collective(
    op: str, ranks: int, times: dict[int, list[float]], *, rng: np.random.Generator, bootstrap: int = 200
) -> CollectiveFit:
    """Fit one op at one world size from {size_bytes: [per-iteration times]}."""
    if len(times) < 3:
        raise ValueError(f"{op} on {ranks} ranks: {len(times)} sizes measured, a fit needs at least 3")
    sizes = np.array(sorted(times), dtype=float)
    samples = [np.asarray(times[int(s)], dtype=float) for s in sizes]
    factor = bus_factor(op, ranks)
    bus_sizes = sizes * factor
    medians = np.array([np.median(x) for x in samples])
    alpha, per_byte = _fit_line(bus_sizes, medians)
    boots = np.empty((bootstrap, 2))
    for i in range(bootstrap):
        resampled = np.array([np.median(rng.choice(x, size=len(x))) for x in samples])
        boots[i] = _fit_line(bus_sizes, resampled)
    lo, hi = np.percentile(boots, [2.5, 97.5], axis=0)
    pred = alpha + per_byte * bus_sizes
    log_m, log_p = np.log(medians), np.log(pred)
    spread = np.sum((log_m - log_m.mean()) ** 2)
    # Equal medians at every size (no bandwidth term: calibrate/plausible.py refuses the fit) leave
    # nothing to explain; R^2 is then 1 if the line hits them, else 0, not a division by zero.
    r2 = 1.0 - np.sum((log_m - log_p) ** 2) / spread if spread > 0 else float(np.allclose(log_m, log_p))
    steps = ring_steps(op, ranks)
    # Resamples whose bandwidth term adds under 0.1 % to the largest size's time saw no bandwidth
    # at all (a slope of 2.6e-25 s per byte was seen, a 3.9e15 GB/s "bound" that the
    # calibration's own reader then refused): when the lower 2.5 % of them are such, the sizes
    # measured do not bound the bandwidth from above, and the interval is open there (None).
    fastest = 1e-9 / float(lo[1]) if lo[1] * bus_sizes[-1] > 1e-3 * medians[-1] else None
    return CollectiveFit(
        op=op,
        ranks=ranks,
        sizes=len(sizes),
        samples=int(sum(len(x) for x in samples)),
        alpha_s=alpha,
        alpha_ci_s=(float(lo[0]), float(hi[0])),
        busbw_gb_s=1e-9 / per_byte,
        busbw_ci_gb_s=(1e-9 / float(hi[1]), fastest),
        hop_latency_us=alpha / steps * 1e6 if steps else 0.0,
        r2_log=float(r2),
    )


def predict_s(fit: CollectiveFit, size_bytes: float) -> float:
    return fit.alpha_s + size_bytes * bus_factor(fit.op, fit.ranks) / (fit.busbw_gb_s * 1e9)


def holdout_errors(op: str, ranks: int, times: dict[int, list[float]], *, rng: np.random.Generator) -> dict[int, float]:
    """Fit on every other size, predict the rest: {size: relative error of the median}."""
    sizes = sorted(times)
    train = {s: times[s] for s in sizes[0::2]}
    fit = fit_collective(op, ranks, train, rng=rng, bootstrap=20)
    return {s: predict_s(fit, s) / float(np.median(times[s])) - 1.0 for s in sizes[1::2]}
