"""Bulk-synchronous steps take the max over ranks (docs/design.md "Order statistics").

With free communication and i.i.d. compute noise X, mean step / mean compute must
equal E[max of N X] / E[X], computed here by numerical integration, within three
standard errors of the simulated mean."""

import numpy as np
import pytest
from scipy import integrate, stats

from sim.engine import simulate
from sim.scenario_file import load_scenario

N = 1024
STEPS = 400


def run(distribution: str, sigma: float):
    overrides = [
        "network.enabled=false",
        f"noise.distribution={distribution}",
        f"noise.sigma={sigma}",
        "noise.speed_spread_sd=0",
        "compute.optimizer_s=0",
        "stragglers=",
    ]
    return simulate(load_scenario("h100-1024", overrides, ranks=N, steps=STEPS, seed=7), records=True)


def expected_max(dist) -> float:
    f = lambda x: x * N * dist.pdf(x) * dist.cdf(x) ** (N - 1)  # noqa: E731
    lo, hi = dist.ppf(1e-12), dist.ppf(1 - 1e-15)
    return integrate.quad(f, lo, hi, limit=500, points=[dist.ppf(1 - 1 / N)])[0]


def assert_ratio(result, expected_ratio: float) -> None:
    step, compute = result.step_time_s, result.compute_s
    ratio = step.mean() / compute.mean()
    se = step.std(ddof=1) / np.sqrt(len(step)) / compute.mean()
    assert abs(ratio - expected_ratio) < 3 * se, (ratio, expected_ratio, se)


def test_lognormal_sigma_005_at_1024():
    sigma = 0.05
    dist = stats.lognorm(s=sigma, scale=np.exp(-(sigma**2) / 2))  # mean 1, as the engine draws
    ratio = expected_max(dist) / dist.mean()
    assert ratio == pytest.approx(1.1751, abs=1e-4)  # docs/references.md "Stragglers and failures"
    assert_ratio(run("lognormal", sigma), ratio)


def test_normal_gives_mu_plus_3_248_sigma():
    sigma = 0.05
    e_max_z = expected_max(stats.norm())
    assert e_max_z == pytest.approx(3.248, abs=1e-3)
    assert_ratio(run("normal", sigma), 1 + e_max_z * sigma)


def test_exponential_gives_harmonic_number():
    # gamma with sigma = 1 is exponential(mean 1): E[max of N] = H_N.
    h_n = np.sum(1.0 / np.arange(1, N + 1))
    assert_ratio(run("gamma", 1.0), h_n)


def test_no_noise_no_penalty():
    r = run("none", 0.0)
    np.testing.assert_allclose(r.step_time_s, r.compute_s.mean(), rtol=1e-12)
