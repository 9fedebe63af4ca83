"""Jitter: which mean-1 distribution the per-iteration compute multipliers follow.

Candidates are the simulator's (sim/noise.py): lognormal, gamma and normal, each
fitted by maximum likelihood (scipy.stats ``fit``) and ranked by AIC = 2k - 2 ln L
(Akaike 1974; k = 2 free parameters each). The Kolmogorov-Smirnov statistic of the
chosen fit is reported so a poor best is visible as such. The simulator's ``sigma``
is the lognormal's log-sd, the gamma's and normal's sd (for gamma shape k with mean
1, sd = 1/sqrt(k)). The simulator takes a normal only up to sigma 0.25 (sim/config.py
NoiseConfig: wider, a mean-1 normal multiplier goes negative too often), so a normal
wider than that gives way to the next candidate by AIC, lognormal or gamma, which are
positive at any sigma. When the KS test rejects the best the simulator would take at
1 % (CPU jitter here is a sharp peak with wide tails), calibrate hands the
simulator the measured multipliers themselves (``empirical``).

``measured_noise`` builds the calibration's jitter section the same way for probes
(calibrate/calib.py) and traces (calibrate/trace_calib.py), from compute_fit's multipliers.
Under MIN_FIT_SAMPLES multipliers (a trace of one rank and a few steps) no distribution is
fitted: the section says ``none`` and keeps the multipliers and their sd; a scenario keeps its
own jitter (calibrate/apply.py), and everything else a calibration holds does not need them.
"""

import numpy as np
from scipy import stats

from calibrate import compute_fit
from calibrate.calibration import Noise, NoiseCandidate, RankNoise
from sim.config import NORMAL_SIGMA_MAX

# NVIDIA resiliency-ext's straggler score (docs/references.md "Stragglers and failures"):
STRAGGLER_SCORE_FLAG = 0.75  # fastest median / this median below 0.75 flags a rank
MIN_FIT_SAMPLES = 8  # fewer multipliers than this pin no two-parameter distribution
KS_ALPHA_1PCT = 1.628  # large-sample KS critical value at 1 %: D > 1.628 / sqrt(n) rejects (Smirnov 1948)


def _candidate(name: str, x: np.ndarray) -> NoiseCandidate:
    if name == "lognormal":
        s, loc, scale = stats.lognorm.fit(x, floc=0.0)
        dist, sigma, params = stats.lognorm(s, loc, scale), float(s), (s, loc, scale)
    elif name == "gamma":
        a, loc, scale = stats.gamma.fit(x, floc=0.0)
        dist, sigma, params = stats.gamma(a, loc, scale), float(1.0 / np.sqrt(a)), (a, loc, scale)
    elif name == "normal":
        loc, scale = stats.norm.fit(x)
        dist, sigma, params = stats.norm(loc, scale), float(scale), (loc, scale)
    else:
        raise ValueError(f"noise: unknown distribution {name!r}")
    loglik = float(np.sum(dist.logpdf(x)))
    return NoiseCandidate(name, sigma, loglik, 2 * 2 - 2 * loglik, float(stats.kstest(x, dist.cdf).statistic), params)


def fit_noise(x: np.ndarray) -> list[NoiseCandidate]:
    """Every candidate fitted to mean-1 multipliers, best AIC first."""
    x = np.asarray(x, float)
    if len(x) < MIN_FIT_SAMPLES:
        raise ValueError(f"noise: {len(x)} compute samples, a distribution fit needs at least {MIN_FIT_SAMPLES}")
    if np.ptp(x) == 0:
        raise ValueError("noise: every compute sample is identical; nothing to fit")
    return sorted((_candidate(n, x) for n in ("lognormal", "gamma", "normal")), key=lambda c: c.aic)


def choose(candidates: list[NoiseCandidate], critical: float) -> tuple[NoiseCandidate | None, str | None]:
    """(the candidate the simulator gets, None for ``empirical``; why that is not the best by
    AIC, None when it is): the best by AIC of those the simulator accepts, unless the KS test
    rejects it at 1 %."""
    refused = [c for c in candidates if c.distribution == "normal" and c.sigma > NORMAL_SIGMA_MAX]
    best = next(c for c in candidates if c not in refused)  # lognormal and gamma take any sigma
    why = (
        f"normal sigma {refused[0].sigma:.3g} > {NORMAL_SIGMA_MAX} (the simulator refuses it: a mean-1"
        " normal multiplier would go negative)"
        if refused
        else None
    )
    if best.ks > critical:
        if why:
            why += f"; {best.distribution}, the next by AIC, rejected (KS {best.ks:.3f} > {critical:.3f} at 1 %)"
        return None, why
    return best, why


def ks_critical(n: int) -> float:
    """The KS statistic above which a fit is rejected at 1 %. With parameters fitted to
    the same data the test is conservative (Lilliefors 1967): a rejection stands."""
    return KS_ALPHA_1PCT / np.sqrt(n)


def measured_noise(samples: compute_fit.ComputeSamples, *, count: int, source: str, steps_together: bool) -> Noise:
    """The jitter of these compute samples: each iteration over its (rank, size) mean
    (compute_fit.normalised_compute), pooled over ranks for the fits, per size, and, with
    ``steps_together`` (the ranks' k-th samples are one step they ran together), per rank in
    step order, for the simulator to draw whole steps."""
    per_rank = compute_fit.normalised_compute(samples)
    x = np.concatenate(list(per_rank.values()))
    critical = ks_critical(len(x))

    def rounded(v):
        return [round(float(m), 6) for m in v]

    if len(x) < MIN_FIT_SAMPLES or np.ptp(x) == 0:
        why = (
            f"{len(x)} compute sample{'s' * (len(x) != 1)}: a distribution fit needs at least {MIN_FIT_SAMPLES}"
            if len(x) < MIN_FIT_SAMPLES
            else f"every one of the {len(x)} compute samples is the same"
        )
        return Noise(
            distribution="none", sigma=float(np.std(x)), best_fit="none", ks=0.0, ks_critical_1pct=critical,
            samples=count, source=source, candidates=[], multipliers=rounded(x),
            chosen_because=why,
        )  # fmt: skip
    candidates = fit_noise(x)
    chosen, because = choose(candidates, critical)
    return Noise(
        distribution=chosen.distribution if chosen else "empirical",
        sigma=chosen.sigma if chosen else float(np.std(x)),
        best_fit=candidates[0].distribution,
        ks=candidates[0].ks,
        ks_critical_1pct=critical,
        samples=count,
        source=source,
        candidates=candidates,
        multipliers=rounded(x),
        chosen_because=because,
        multipliers_by_micro_batch={b: rounded(v) for b, v in compute_fit.normalised_by_micro_batch(samples).items()},
        by_rank_step={r: rounded(v) for r, v in per_rank.items()} if steps_together else None,
    )


def rank_noise(x: np.ndarray) -> RankNoise:
    """One rank's own jitter: the best fit by AIC and its KS, so a rank that jitters unlike the
    others shows; "none" when it has too few distinct samples to fit."""
    sd = float(np.std(x))
    if len(x) < MIN_FIT_SAMPLES or np.ptp(x) == 0:
        return RankNoise(best_fit="none", sigma=sd, ks=0.0, samples=len(x), sd=sd)
    best = fit_noise(x)[0]
    return RankNoise(best_fit=best.distribution, sigma=best.sigma, ks=best.ks, samples=len(x), sd=sd)


def pdf(c: NoiseCandidate, x: np.ndarray) -> np.ndarray:
    dist = {"lognormal": stats.lognorm, "gamma": stats.gamma, "normal": stats.norm}[c.distribution]
    return dist(*c.params).pdf(x)


def straggler_scores(factors: dict[int, float]) -> dict[int, dict]:
    """Per rank: score = fastest median / this rank's median (1 = the fastest), flagged
    below 0.75."""
    out = {}
    for rank, f in sorted(factors.items()):
        score = 1.0 / f
        out[rank] = {"speed_factor": f, "score": score, "flagged": score < STRAGGLER_SCORE_FLAG}
    return out
