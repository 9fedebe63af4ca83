"""Wall time per unit of useful work under fail-stop failures, stalls and checkpoints: the
campaigns simulated (sim/goodput.py) beside Daly's closed form, with the best checkpoint interval
each way. `ddplab goodput` prints `study`; the demo's simulation study (workflow/simstudy.py) runs
`simulate_campaign` at Daly's interval.

    o = study(mtbf_h=24, restart_min=10, checkpoint_min=1)
    o["goodput"]  # {"simulated": 0.9..., "analytic": 0.9...}
"""

import math
from pathlib import Path

from output.atomic import write_csv_atomic
from output.jsonfile import write_json_atomic
from output.outdir import ensure
from output.plot import plot_goodput
from sim.checkpointing import (
    best_interval_analytic,
    daly_interval_min,
    job_mtbf_min,
    wall_per_work_analytic,
    young_interval_min,
)
from sim.goodput import TIMEOUT_MIN, Campaign, Stalls
from sim.goodput_estimate import Estimate, best_interval_simulated, default_grid, estimate
from sim.limits import campaign_cost
from workflow import limits

# Default campaign: 4000 MTBFs of work, so ~4000 failures whatever the MTBF: the simulated wall/work has a
# standard error ~2e-4 and the simulated best interval lands within ~1 % of the analytic one.
AUTO_WORK_MTBFS = 4000
REPLICATIONS = 10


def simulate_campaign(
    *,
    mtbf_min: float,
    restart_min: float,
    checkpoint_min: float,
    interval_min: float,
    work_min: float,
    seed: int = 0,
    stalls: Stalls | None = None,
    replications: int = REPLICATIONS,
) -> tuple[Estimate, float]:
    """(the simulated campaign, wall/work from the closed form) for checkpoints every
    ``interval_min`` of work; stalls are simulated only."""
    costs = {"mtbf_min": mtbf_min, "restart_min": restart_min, "checkpoint_min": checkpoint_min}
    campaign = Campaign(work_min=work_min, interval_min=interval_min, **costs)
    sim = estimate(campaign, seed=seed, replications=replications, stalls=stalls)
    return sim, wall_per_work_analytic(interval_min=interval_min, **costs)


def _positive(option: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{option}: must be > 0, got {value}")
    return value


def job_mtbf_h(
    mtbf_h: float | None = None, failures_per_1000_node_days: float | None = None, nodes: int | None = None
) -> tuple[float, str]:
    """(the job's MTBF in hours, where it came from): given, or from a per-node failure rate and
    the nodes; a missing or contradictory pair is one ValueError line naming the flag."""
    rate = failures_per_1000_node_days
    if mtbf_h is not None:
        if rate is not None or nodes is not None:
            raise ValueError("--mtbf-h: give it or --failures-per-1000-node-days with --nodes, not both")
        return _positive("--mtbf-h", mtbf_h), "--mtbf-h"
    if rate is None and nodes is None:
        raise ValueError("--mtbf-h: required (or --failures-per-1000-node-days F with --nodes N)")
    if rate is None:
        raise ValueError("--failures-per-1000-node-days: required with --nodes")
    if nodes is None:
        raise ValueError("--nodes: required with --failures-per-1000-node-days")
    _positive("--failures-per-1000-node-days", rate)
    if nodes < 1:
        raise ValueError(f"--nodes: must be >= 1, got {nodes}")
    mtbf_min = job_mtbf_min(failures_per_1000_node_days=rate, nodes=nodes)
    return mtbf_min / 60.0, f"{rate:g} failures per 1000 node-days x {nodes} nodes"


def _interval_min(text: str, daly_min: float) -> tuple[float, str]:
    if text.strip().lower() == "auto":
        return daly_min, "daly"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--interval-min: expected minutes or 'auto', got {text!r}") from None
    return _positive("--interval-min", value), "given"


STALL_MEAN_MIN = 5.0  # --stall-mean-min's default (the timeout's: sim/goodput.py TIMEOUT_MIN)


def study(
    *,
    mtbf_h: float | None = None,
    failures_per_1000_node_days: float | None = None,
    nodes: int | None = None,
    restart_min: float = 10.0,
    checkpoint_min: float = 1.0,
    interval_min: str | float = "auto",
    work_h: float | None = None,
    stalls_per_day: float = 0.0,
    stall_mean_min: float | None = None,
    timeout_min: float | None = None,
    seed: int = 0,
    yes: bool = False,
    out: Path | None = None,
) -> dict:
    """The study `ddplab goodput` prints (its ``--json``): wall/work and goodput simulated and from
    the closed form at ``interval_min`` ("auto": Daly's), the best interval each way, failures,
    lost work, restarts, checkpoints and stalls. With ``out``, goodput.json, goodput.csv and
    goodput.png are written there. Bad inputs, and a campaign this machine cannot finish (unless
    ``yes`` and under a day), are one ValueError line naming the flag, before anything runs."""
    mtbf_h, mtbf_from = job_mtbf_h(mtbf_h, failures_per_1000_node_days, nodes)
    interval_text = str(interval_min)
    if not (math.isfinite(restart_min) and restart_min >= 0):
        raise ValueError(f"--restart-min: must be >= 0, got {restart_min}")
    checkpoint_min = _positive("--checkpoint-min", checkpoint_min)
    if seed < 0:
        raise ValueError(f"--seed: must be >= 0, got {seed}")
    mtbf_min = mtbf_h * 60.0
    daly = daly_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min)
    young = young_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min)
    interval_min, rule = _interval_min(interval_text, daly)
    work_h = AUTO_WORK_MTBFS * mtbf_h if work_h is None else _positive("--work-h", work_h)

    if not (stalls_per_day >= 0 and math.isfinite(stalls_per_day)):
        raise ValueError(f"--stalls-per-day: must be >= 0 and finite, got {stalls_per_day}")
    stall_mean, timeout = (
        _positive("--stall-mean-min", STALL_MEAN_MIN if stall_mean_min is None else stall_mean_min),
        _positive("--timeout-min", TIMEOUT_MIN if timeout_min is None else timeout_min),
    )
    for flag, value in (("--stall-mean-min", stall_mean_min), ("--timeout-min", timeout_min)):
        if value is not None and stalls_per_day == 0:  # they shape stalls alone: taken, they changed nothing
            raise ValueError(f"{flag} {value:g}: only with --stalls-per-day > 0 (it shapes the stalls)")
    stalls = Stalls(per_h=stalls_per_day / 24.0, mean_min=stall_mean, timeout_min=timeout)
    costs = {"mtbf_min": mtbf_min, "restart_min": restart_min, "checkpoint_min": checkpoint_min}
    _check_size(stalls_per_day, yes, mtbf_from, work_h * 60.0, [interval_min, *default_grid(daly)], stalls, costs)
    if out:  # fail before simulating, not after
        ensure(out)  # marked as ours: a rerun may replace what it wrote, nothing else
    sim, analytic = simulate_campaign(
        interval_min=interval_min,
        work_min=work_h * 60.0,
        seed=seed,
        stalls=stalls if stalls.per_h > 0 else None,
        **costs,
    )
    best_sim = best_interval_simulated(work_min=work_h * 60.0, seed=seed, **costs)
    o = {
        "mtbf_h": mtbf_h,
        "mtbf_from": mtbf_from,
        "restart_min": restart_min,
        "checkpoint_min": checkpoint_min,
        "interval_min": interval_min,
        "interval_rule": rule,
        "work_h": work_h,
        "seed": seed,
        "replications": sim.replications,
        "wall_per_work": {"simulated": sim.wall_per_work, "analytic": analytic},
        "wall_per_work_stderr": sim.wall_per_work_stderr,
        "goodput": {"simulated": sim.goodput, "analytic": 1.0 / analytic},
        "best_interval_min": {"simulated": best_sim.interval_min, "analytic": best_interval_analytic(**costs)},
        "young_interval_min": young,
        "daly_interval_min": daly,
        # Failures are a Poisson process in wall time: W x wall/work / M of them are expected.
        "failures": {"simulated": sim.failures, "expected": work_h * analytic / mtbf_h},
        "lost_work_h": sim.lost_work_min / 60.0,
        "restart_h": sim.restart_min / 60.0,
        "checkpoint_h": sim.checkpoint_min / 60.0,
        # Stalls are simulated only: the analytic column is failures alone.
        "stalls": {"per_day": stalls_per_day, "mean_min": stall_mean, "timeout_min": timeout},
        "timeouts": sim.timeouts,
        "stalled_h": sim.stalled_min / 60.0,
    }
    if out:
        write(o, out)
    return o


def _csv_rows(o: dict) -> list[list]:
    """The printed table as rows of quantity, unit, simulated, analytic: the inputs (the same for
    both columns), then the results; empty where a column has no such number."""
    both = lambda key, unit: [key, unit, o[key], o[key]]  # noqa: E731
    return [
        both("mtbf_h", "h"),
        both("restart_min", "min"),
        both("checkpoint_min", "min"),
        both("interval_min", "min"),
        both("work_h", "h"),
        ["wall_per_work", "ratio", o["wall_per_work"]["simulated"], o["wall_per_work"]["analytic"]],
        ["wall_per_work_stderr", "ratio", o["wall_per_work_stderr"], ""],
        ["goodput", "fraction", o["goodput"]["simulated"], o["goodput"]["analytic"]],
        ["best_interval", "min", o["best_interval_min"]["simulated"], o["best_interval_min"]["analytic"]],
        ["failures", "count", o["failures"]["simulated"], o["failures"]["expected"]],
        ["young_interval", "min", "", o["young_interval_min"]],
        ["daly_interval", "min", "", o["daly_interval_min"]],
        ["lost_work", "h", o["lost_work_h"], ""],
        ["restarts", "h", o["restart_h"], ""],
        ["checkpoints", "h", o["checkpoint_h"], ""],
        ["stalled", "h", o["stalled_h"], ""],
        ["timeouts", "count", o["timeouts"], ""],
    ]


def write(o: dict, out: Path) -> None:
    """goodput.json (what --json prints), goodput.csv (the table) and goodput.png (output/plot.py)."""
    write_json_atomic(out / "goodput.json", o)
    write_csv_atomic(out / "goodput.csv", ["quantity", "unit", "simulated", "analytic"], _csv_rows(o))
    plot_goodput(o, out / "goodput.png")


def _check_size(
    stalls_per_day: float,
    yes: bool,
    mtbf_from: str,
    work_min: float,
    intervals: list[float],
    stalls: Stalls,
    costs: dict,
) -> None:
    """Refuse, before any campaign runs, one this machine cannot finish (sim/limits.py estimates
    its failures and stalls from the closed forms; workflow/limits.py holds the thresholds)."""
    est = campaign_cost(
        work_min=work_min,
        intervals_min=[float(t) for t in intervals],
        stalls_per_min=stalls.per_h / 60.0,
        stall_mean_min=stalls.mean_min,
        timeout_min=stalls.timeout_min,
        **costs,
    )
    refusal = limits.time_refusal(est.seconds, yes=yes)
    if refusal is None:
        return
    mtbf = f"the MTBF of {costs['mtbf_min']:.3g} min ({mtbf_from})"
    field = {
        "restart": f"--restart-min {costs['restart_min']:g} with {mtbf}",
        "segment": f"--interval-min {intervals[0]:.4g} + --checkpoint-min {costs['checkpoint_min']:g} with {mtbf}",
        "stalls": f"--stalls-per-day {stalls_per_day:g}",
        "work": f"--work-h {work_min / 60.0:g}",
    }[est.kind]
    events = f"~{est.events:.3g}" if math.isfinite(est.events) else "over 1e300"
    raise ValueError(f"{field}: {est.why}; simulating its {events} failures and stalls {refusal}")
