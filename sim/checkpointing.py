"""Failure rates and the closed forms of Daly's checkpoint/restart model: the expected wall time per
unit of work, and Young's and Daly's checkpoint intervals. sim/goodput.py simulates the same model;
tests/test_goodput.py holds the two together.

Minutes throughout.
"""

import math
import numbers

MIN_PER_DAY = 1440.0


def check_minutes(name: str, value, *, positive: bool = False, allow_inf: bool = False) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and (value > 0 if positive else value >= 0)
    if not ok or (math.isinf(value) and not allow_inf):
        raise ValueError(
            f"{name}: must be {'> 0' if positive else '>= 0'}{'' if allow_inf else ' and finite'}, got {value!r}"
        )


def job_mtbf_min(*, failures_per_1000_node_days: float, nodes: int) -> float:
    """The whole job's MTBF: independent nodes' Poisson failures superpose, so the job fails at nodes x the
    per-node rate. Kokolis et al. (HPCA'25) report 6.5 (RSC-1) and 2.34 (RSC-2) failures per 1000 node-days:
    128 nodes at 6.5 gives 1731 min (28.8 h). Per GPU works the same: failures per 1000 GPU-days and GPUs."""
    check_minutes("failures_per_1000_node_days", failures_per_1000_node_days, positive=True)
    if not isinstance(nodes, numbers.Integral) or isinstance(nodes, bool) or nodes < 1:
        raise ValueError(f"nodes: must be an integer >= 1, got {nodes!r}")
    return 1000.0 * MIN_PER_DAY / (failures_per_1000_node_days * nodes)


def wall_per_work_analytic(*, mtbf_min: float, restart_min: float, checkpoint_min: float, interval_min: float) -> float:
    """Expected wall / useful work in Daly's model (Daly, FGCS 2006; docs/design.md "Failures and checkpoints"):
    M e^(R/M) (e^((tau+delta)/M) - 1) / tau. M = 49.5 h, R = 10, delta = 1, tau = 60 min: 1.0306.
    Without failures (M = inf) it is (tau + delta) / tau."""
    m, r, d, t = mtbf_min, restart_min, checkpoint_min, interval_min
    if math.isinf(m):
        return (t + d) / t
    return m * math.exp(r / m) * math.expm1((t + d) / m) / t  # expm1: exact for small (tau+delta)/M


def young_interval_min(*, checkpoint_min: float, mtbf_min: float) -> float:
    """Young's first-order optimum, sqrt(2 delta M) (J. W. Young, CACM 17(9), 1974)."""
    return math.sqrt(2.0 * checkpoint_min * mtbf_min)


def daly_interval_min(*, checkpoint_min: float, mtbf_min: float) -> float:
    """Daly's higher-order optimum (FGCS 2006): sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9)(delta/2M)] - delta
    for delta < 2M, else M. M = 49.5 h, delta = 1 min: 76.4 min."""
    d, m = checkpoint_min, mtbf_min
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def best_interval_analytic(*, mtbf_min: float, restart_min: float, checkpoint_min: float) -> float:
    """The tau minimising `wall_per_work_analytic` (bounded Brent in log tau, three decades around Daly's)."""
    from scipy.optimize import minimize_scalar  # lazily: scipy.optimize costs ~0.3 s to import

    need_finite_optimum(mtbf_min, checkpoint_min)
    centre = math.log(daly_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min))

    def f(log_tau: float) -> float:
        return wall_per_work_analytic(
            mtbf_min=mtbf_min, restart_min=restart_min, checkpoint_min=checkpoint_min, interval_min=math.exp(log_tau)
        )

    res = minimize_scalar(f, bounds=(centre - 7.0, centre + 7.0), method="bounded", options={"xatol": 1e-10})
    return math.exp(res.x)


def need_finite_optimum(mtbf_min: float, checkpoint_min: float) -> None:
    # Free checkpoints want tau -> 0, no failures want tau -> inf: neither has an interval to report.
    if not checkpoint_min > 0:
        raise ValueError(f"checkpoint_min: must be > 0 for a best interval, got {checkpoint_min!r}")
    if not (mtbf_min > 0 and math.isfinite(mtbf_min)):
        raise ValueError(f"mtbf_min: must be > 0 and finite for a best interval, got {mtbf_min!r}")
