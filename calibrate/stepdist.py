"""Measured against predicted step times, as distributions (calibrate/validate.py's DDP runs and
calibrate/validate3d.py's tensor- and pipeline-parallel ones): the same percentiles on both
sides, the signed errors, the two-sample Kolmogorov-Smirnov test, and the measured steps'
lag-1 autocorrelation."""

import numpy as np
from scipy.stats import ks_2samp

KS_ALPHA = 0.05  # a run's step times pass the two-sample KS test at ks_p >= 5 %
PERCENTILES = (50, 95, 99)


def percentiles(step_s: np.ndarray) -> dict[str, float]:
    """{"p50_s": ..., "p95_s": ..., "p99_s": ...}: the same definition on both sides."""
    return {f"p{q}_s": float(np.percentile(step_s, q)) for q in PERCENTILES}


def lag1_autocorrelation(x: np.ndarray) -> float:
    """r1 = sum (x_t - m)(x_t+1 - m) / sum (x_t - m)^2 (Box & Jenkins' estimator); about
    -1/n +- 1/sqrt(n) for independent steps, so above 2/sqrt(n) the steps come in stretches."""
    d = np.asarray(x, float) - np.mean(x)
    den = float(np.sum(d * d))
    return float(np.sum(d[:-1] * d[1:]) / den) if den > 0 else 0.0


def compare(measured: np.ndarray, predicted: np.ndarray) -> dict:
    """Per-run distribution numbers of measured against simulated step times: the signed
    errors of p50, p95, p99 and the mean (predicted / measured - 1), and the two-sample
    KS distance and p-value."""
    m, p = percentiles(measured), percentiles(predicted)
    out = {f"error_p{q}": p[f"p{q}_s"] / m[f"p{q}_s"] - 1.0 for q in PERCENTILES}
    out["error_mean"] = float(np.mean(predicted) / np.mean(measured) - 1.0)
    # The whole distribution, not only its middle: the two-sample Kolmogorov-Smirnov test
    # (PRISM, arXiv 2510.15596, reports the distance, 20.8 % at 64k GPUs; the p-value says
    # whether a distance that size is what two samples of one distribution show at these n).
    ks = ks_2samp(measured, predicted)
    out["ks"], out["ks_p"] = float(ks.statistic), float(ks.pvalue)
    return out
