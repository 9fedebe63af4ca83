"""Measured against predicted step times, as distributions (calibrate/validate.py's DDP runs and
calibrate/validate3d.py's tensor- and pipeline-parallel ones): the same percentiles on both
sides, the signed errors, the two-sample Kolmogorov-Smirnov test (as it is, and with the run's
level taken out), the measured steps' lag-1 autocorrelation, and what the KS count over runs can
say at the level scatter the runs show (ks_reach)."""

import math
import zlib

import numpy as np
from scipy.stats import ks_2samp

KS_ALPHA = 0.05  # a run's step times pass the two-sample KS test at ks_p >= 5 %
PERCENTILES = (50, 95, 99)
# Resamples of the model's own steps behind the shape test's p-value (ks_shape_p): its smallest
# is 1 / 1001, and its error at p = 0.05 about 0.007 (binomial).
SHAPE_DRAWS = 1000
# Trials per run behind ks_reach's pass rates: their error at 0.95 about 0.011 (binomial).
REACH_DRAWS = 400
# The share of runs the validation bar asks to pass KS (docs/validation.md: 8 of 10).
REACH_BAR = 0.8


def percentiles(step_s: np.ndarray) -> dict[str, float]:
    """{"p50_s": ..., "p95_s": ..., "p99_s": ...}: the same definition on both sides."""
    return {f"p{q}_s": float(np.percentile(step_s, q)) for q in PERCENTILES}


def lag1_autocorrelation(x: np.ndarray) -> float:
    """r1 = sum (x_t - m)(x_t+1 - m) / sum (x_t - m)^2 (Box & Jenkins' estimator); about
    -1/n +- 1/sqrt(n) for independent steps, so above 2/sqrt(n) the steps come in stretches."""
    d = np.asarray(x, float) - np.mean(x)
    den = float(np.sum(d * d))
    return float(np.sum(d[:-1] * d[1:]) / den) if den > 0 else 0.0


def ks_distance(a_sorted: np.ndarray, b_sorted: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov distance of two sorted samples: the largest gap between
    their empirical CDFs, which are step functions, so their right limits at every sample point
    find it (as scipy.stats.ks_2samp's statistic)."""
    x = np.concatenate([a_sorted, b_sorted])
    fa = np.searchsorted(a_sorted, x, side="right") / len(a_sorted)
    fb = np.searchsorted(b_sorted, x, side="right") / len(b_sorted)
    return float(np.max(np.abs(fa - fb)))


def shape_test(measured: np.ndarray, predicted: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """(distance, p-value) of the KS test with the run's level taken out: the measured steps
    scaled so their median is the prediction's, against the predicted steps. A box whose
    speed moves a few percent between runs moves a narrow distribution's level by more than
    the plain test allows; this asks whether the spread and the tails are the model's. The
    plain p-value does not hold once a scale has been fitted to the sample (the fit pulls the
    sample towards the model), so the p-value is a parametric bootstrap: the share of
    SHAPE_DRAWS samples of the measured size, drawn from the predicted steps and scaled the
    same way, whose distance is at least the measured one. Each is measured against its own
    resample of the predicted steps, not against them: the model's sample is finite too, and a
    draw held against the very sample it came from lies closer to it than an independent run
    does (the two-sample distance's spread grows as sqrt(1/n + 1/m), 2.5 % at 100 against 2000),
    which made the p-values a little too small."""
    ref = np.sort(np.asarray(predicted, float))
    target = float(np.median(ref))
    x = np.asarray(measured, float)
    observed = ks_distance(np.sort(x * (target / np.median(x))), ref)
    refs = np.sort(rng.choice(ref, size=(SHAPE_DRAWS, len(ref))), axis=1)
    draws = rng.choice(ref, size=(SHAPE_DRAWS, len(x)))
    draws *= np.median(refs, axis=1, keepdims=True) / np.median(draws, axis=1, keepdims=True)
    draws.sort(axis=1)
    null = np.array([ks_distance(d, r) for d, r in zip(draws, refs, strict=True)])
    return observed, float((1 + np.sum(null >= observed)) / (SHAPE_DRAWS + 1))


def shape_rng(seed: int, run_name: str) -> np.random.Generator:
    """The shape test's generator for one run: from the validate seed and the run's name, so a
    run's p-value does not depend on which other runs were validated with it, or in what order."""
    return np.random.default_rng([seed, zlib.crc32(run_name.encode())])


def compare(measured: np.ndarray, predicted: np.ndarray, rng: np.random.Generator) -> dict:
    """Per-run distribution numbers of measured against simulated step times: the signed
    errors of p50, p95, p99 and the mean (predicted / measured - 1), the two-sample KS
    distance and p-value, and the same test with the level taken out (shape_test)."""
    m, p = percentiles(measured), percentiles(predicted)
    out = {f"error_p{q}": p[f"p{q}_s"] / m[f"p{q}_s"] - 1.0 for q in PERCENTILES}
    out["error_mean"] = float(np.mean(predicted) / np.mean(measured) - 1.0)
    # The whole distribution, not only its middle: the two-sample Kolmogorov-Smirnov test
    # (PRISM, arXiv 2510.15596, reports the distance, 20.8 % at 64k GPUs; the p-value says
    # whether a distance that size is what two samples of one distribution show at these n).
    ks = ks_2samp(measured, predicted)
    out["ks"], out["ks_p"] = float(ks.statistic), float(ks.pvalue)
    out["ks_shape"], out["ks_shape_p"] = shape_test(measured, predicted, rng)
    return out


def at_least(rates: list[float], k: int) -> float:
    """P(k or more successes) of independent trials with these success probabilities (the
    Poisson-binomial distribution, by convolution)."""
    dist = np.array([1.0])
    for p in rates:
        dist = np.concatenate([dist * (1 - p), [0.0]]) + np.concatenate([[0.0], dist * p])
    return float(dist[k:].sum())


def _reach_rate(steps: np.ndarray, offset_sd_s: float, simulated: int, rng: np.random.Generator) -> float:
    """The share of REACH_DRAWS trials in which a run drawn from this shape, its level moved by a
    normal draw of offset_sd_s, passes the plain KS test against a model sample of the same shape.
    The shape is the run's own steps smoothed (Gaussian kernel, Silverman's rule-of-thumb
    bandwidth), so the model is right in every respect but the level."""
    n = len(steps)
    iqr = float(np.subtract(*np.percentile(steps, [75, 25])))
    spread = min(float(np.std(steps)), iqr / 1.349) or float(np.std(steps))
    width = 0.9 * spread * n**-0.2

    def draw(k):
        return rng.choice(steps, k) + rng.normal(0.0, width, k)

    ok = 0
    for _ in range(REACH_DRAWS):
        run = draw(n) + rng.normal(0.0, offset_sd_s)
        ok += ks_2samp(run, draw(simulated)).pvalue >= KS_ALPHA
    return ok / REACH_DRAWS


def ks_reach(rows: list[dict], rng: np.random.Generator, level_sd: float | None = None) -> dict | None:
    """How many runs a model right in everything but each run's level would pass the plain KS
    test, the level off by what these runs show. A run's level is its measured compute over the
    predicted (``measured_compute_s / predicted_compute_s``); across runs it scatters with the box
    (and with whatever the model gets wrong from one configuration to the next). A step distribution
    a few percent wide fails the plain test on a level off by a fraction of its width, so on a box
    whose level moves by more than that the plain count measures the box, not the model. With the
    scatter's sd (overall bias taken as zero, the kindest case) moving each run's compute: each
    run's pass rate (_reach_rate), their expected count, and P(at least REACH_BAR of the runs pass).
    ``level_sd`` replaces the scatter by another (docs/validation/level_repeat.py: the level's own
    repeatability on a quiet box). None with fewer than 3 runs that have a compute level (no
    scatter to speak of)."""
    use = [r for r in rows if r.get("measured_compute_s") and r.get("predicted_compute_s")]
    if len(use) < 3:
        return None
    level = np.array([r["measured_compute_s"] / r["predicted_compute_s"] for r in use])
    sd = float(np.std(level, ddof=1)) if level_sd is None else level_sd
    rates = [
        _reach_rate(np.asarray(r["measured_step_s"], float), sd * r["measured_compute_s"], r["simulated_steps"], rng)
        for r in use
    ]
    need = math.ceil(REACH_BAR * len(use))
    return {
        "level_sd": sd,
        "level_range": [float(level.min() - 1), float(level.max() - 1)],
        "reach_runs": len(use),
        "reach_rates": rates,
        "reach_expected": float(sum(rates)),
        "reach_need": need,
        "reach_p_bar": at_least(rates, need),
    }
