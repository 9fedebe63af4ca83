"""`ddplab goodput`: wall time per unit of useful work under fail-stop failures and checkpoints, simulated
(sim.goodput) and from Daly's formula, with the best checkpoint interval each way. Like commands.py, `goodput`
returns what `--json` prints and otherwise prints a table for people too.

Wire it in with ``goodputcmd.add_parser(sub)`` on the subcommands of `ddplab`.
"""

import math
from pathlib import Path

from sim.checkpointing import (
    best_interval_analytic,
    daly_interval_min,
    job_mtbf_min,
    wall_per_work_analytic,
    young_interval_min,
)
from sim.goodput import Campaign, Stalls
from sim.goodput_estimate import best_interval_simulated, default_grid, estimate

# Default campaign: 4000 MTBFs of work, so ~4000 failures whatever the MTBF: the simulated wall/work has a
# standard error ~2e-4 and the simulated best interval lands within ~1 % of the analytic one.
AUTO_WORK_MTBFS = 4000
REPLICATIONS = 10


def add_parser(sub) -> None:
    """Add `goodput` to an argparse subparsers object (``sub = parser.add_subparsers(...)``)."""
    g = sub.add_parser("goodput", help="fail-stop failures and checkpoints: wall/work, goodput, best interval")
    g.add_argument("--mtbf-h", type=float, help="the whole job's mean time between failures, hours")
    g.add_argument(
        "--failures-per-1000-node-days",
        type=float,
        metavar="F",
        help="instead of --mtbf-h: per-node failure rate (Kokolis et al. HPCA'25: RSC-1 6.5, RSC-2 2.34)",
    )
    g.add_argument("--nodes", type=int, help="nodes in the job (with --failures-per-1000-node-days)")
    g.add_argument("--restart-min", type=float, default=10.0, help="restart after a failure, minutes (default 10)")
    g.add_argument("--checkpoint-min", type=float, default=1.0, help="writing one checkpoint, minutes (default 1)")
    g.add_argument(
        "--interval-min", default="auto", metavar="T|auto", help="work between checkpoints; auto: Daly's (default)"
    )
    g.add_argument(
        "--work-h",
        type=float,
        help=f"useful work simulated, hours (default {AUTO_WORK_MTBFS} MTBFs: ~{AUTO_WORK_MTBFS} failures)",
    )
    g.add_argument("--stalls-per-day", type=float, default=0.0, help="hangs in a collective per day (default 0)")
    g.add_argument("--stall-mean-min", type=float, default=5.0, help="their mean duration, minutes (default 5)")
    g.add_argument(
        "--timeout-min",
        type=float,
        default=10.0,
        help="collective timeout: a longer stall becomes a failure (default 10, NCCL's)",
    )
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--yes", action="store_true", help="run even when the estimate says it takes over 5 minutes")
    g.add_argument("--out", type=Path, metavar="DIR", help="write goodput.csv, goodput.json and goodput.png here")
    g.add_argument(
        "--json",
        action="store_true",
        help="print JSON: mtbf_h, wall_per_work and goodput {simulated, analytic}, best_interval_min, failures,"
        " lost_work_h, restart_h, checkpoint_h, ...",
    )
    g.set_defaults(func=goodput)


def _positive(option: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{option}: must be > 0, got {value}")
    return value


def _mtbf_h(args) -> tuple[float, str]:
    """(MTBF in hours, where it came from)."""
    rate, nodes = args.failures_per_1000_node_days, args.nodes
    if args.mtbf_h is not None:
        if rate is not None or nodes is not None:
            raise ValueError("--mtbf-h: give it or --failures-per-1000-node-days with --nodes, not both")
        return _positive("--mtbf-h", args.mtbf_h), "--mtbf-h"
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


def goodput(args):
    mtbf_h, mtbf_from = _mtbf_h(args)
    if not (math.isfinite(args.restart_min) and args.restart_min >= 0):
        raise ValueError(f"--restart-min: must be >= 0, got {args.restart_min}")
    checkpoint_min = _positive("--checkpoint-min", args.checkpoint_min)
    if args.seed < 0:
        raise ValueError(f"--seed: must be >= 0, got {args.seed}")
    mtbf_min, restart_min = mtbf_h * 60.0, args.restart_min
    daly = daly_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min)
    young = young_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min)
    interval_min, rule = _interval_min(args.interval_min, daly)
    work_h = AUTO_WORK_MTBFS * mtbf_h if args.work_h is None else _positive("--work-h", args.work_h)

    if not (args.stalls_per_day >= 0 and math.isfinite(args.stalls_per_day)):
        raise ValueError(f"--stalls-per-day: must be >= 0 and finite, got {args.stalls_per_day}")
    stall_mean, timeout = (
        _positive("--stall-mean-min", args.stall_mean_min),
        _positive("--timeout-min", args.timeout_min),
    )
    stalls = Stalls(per_h=args.stalls_per_day / 24.0, mean_min=stall_mean, timeout_min=timeout)
    costs = {"mtbf_min": mtbf_min, "restart_min": restart_min, "checkpoint_min": checkpoint_min}
    _check_size(args, mtbf_from, work_h * 60.0, [interval_min, *default_grid(daly)], stalls, costs)
    if args.out:  # fail before simulating, not after
        from output.outdir import ensure

        ensure(args.out)  # marked as ours: a rerun may replace what it wrote, nothing else
    sim = estimate(
        Campaign(work_min=work_h * 60.0, interval_min=interval_min, **costs),
        seed=args.seed,
        replications=REPLICATIONS,
        stalls=stalls if stalls.per_h > 0 else None,
    )
    analytic = wall_per_work_analytic(interval_min=interval_min, **costs)
    best_sim = best_interval_simulated(work_min=work_h * 60.0, seed=args.seed, **costs)
    out = {
        "mtbf_h": mtbf_h,
        "mtbf_from": mtbf_from,
        "restart_min": restart_min,
        "checkpoint_min": checkpoint_min,
        "interval_min": interval_min,
        "interval_rule": rule,
        "work_h": work_h,
        "seed": args.seed,
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
        "stalls": {"per_day": args.stalls_per_day, "mean_min": stall_mean, "timeout_min": timeout},
        "timeouts": sim.timeouts,
        "stalled_h": sim.stalled_min / 60.0,
    }
    if args.out:
        _write(out, args.out)
    if not args.json:
        _print(out)
        if args.out:
            print(f"goodput.csv, goodput.json and goodput.png in {args.out}/")
    return out


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


def _write(o: dict, out: Path) -> None:
    """goodput.json (what --json prints), goodput.csv (the table) and goodput.png (output/plot.py)."""
    from output.atomic import write_csv_atomic
    from output.jsonfile import write_json_atomic
    from output.plot import plot_goodput

    write_json_atomic(out / "goodput.json", o)
    write_csv_atomic(out / "goodput.csv", ["quantity", "unit", "simulated", "analytic"], _csv_rows(o))
    plot_goodput(o, out / "goodput.png")


def _check_size(args, mtbf_from: str, work_min: float, intervals: list[float], stalls: Stalls, costs: dict) -> None:
    """Refuse, before any campaign runs, one this machine cannot finish (sim/limits.py estimates
    its failures and stalls from the closed forms; ddplab/limits.py holds the thresholds)."""
    from ddplab import limits
    from sim.limits import campaign_cost

    est = campaign_cost(
        work_min=work_min,
        intervals_min=[float(t) for t in intervals],
        stalls_per_min=stalls.per_h / 60.0,
        stall_mean_min=stalls.mean_min,
        timeout_min=stalls.timeout_min,
        **costs,
    )
    refusal = limits.time_refusal(est.seconds, yes=args.yes)
    if refusal is None:
        return
    mtbf = f"the MTBF of {costs['mtbf_min']:.3g} min ({mtbf_from})"
    field = {
        "restart": f"--restart-min {costs['restart_min']:g} with {mtbf}",
        "segment": f"--interval-min {intervals[0]:.4g} + --checkpoint-min {costs['checkpoint_min']:g} with {mtbf}",
        "stalls": f"--stalls-per-day {args.stalls_per_day:g}",
        "work": f"--work-h {work_min / 60.0:g}",
    }[est.kind]
    events = f"~{est.events:.3g}" if math.isfinite(est.events) else "over 1e300"
    raise ValueError(f"{field}: {est.why}; simulating its {events} failures and stalls {refusal}")


def _print(o: dict) -> None:
    rule = "Daly's" if o["interval_rule"] == "daly" else "given"
    print(
        f"goodput: MTBF {o['mtbf_h']:.4g} h ({o['mtbf_from']}), restart {o['restart_min']:g} min,"
        f" checkpoint {o['checkpoint_min']:g} min every {o['interval_min']:.4g} min ({rule})"
    )
    w, g, b, f = o["wall_per_work"], o["goodput"], o["best_interval_min"], o["failures"]
    print(f"  {'':<16} {'simulated':>18} {'analytic':>10}")
    print(f"  {'wall / work':<16} {w['simulated']:>9.4f} +- {o['wall_per_work_stderr']:.4f} {w['analytic']:>10.4f}")
    print(f"  {'goodput':<16} {g['simulated']:>18.2%} {g['analytic']:>10.2%}")
    print(f"  {'best interval':<16} {b['simulated']:>14.1f} min {b['analytic']:>6.1f} min")
    print(f"  {'failures':<16} {f['simulated']:>18,} {f['expected']:>10,.0f}")
    print(
        f"  intervals: Young {o['young_interval_min']:.1f} min, Daly {o['daly_interval_min']:.1f} min;"
        f" {o['work_h']:,.0f} h of work in {o['replications']} replications, seed {o['seed']}"
    )
    print(
        f"  lost work {o['lost_work_h']:,.1f} h, restarts {o['restart_h']:,.1f} h,"
        f" checkpoints {o['checkpoint_h']:,.1f} h"
    )
    st = o["stalls"]
    if st["per_day"]:
        print(
            f"  stalls: {st['per_day']:g}/day, mean {st['mean_min']:g} min, timeout {st['timeout_min']:g} min:"
            f" {o['timeouts']:,} timed out into failures, {o['stalled_h']:,.1f} h waiting in stalled collectives"
            " (simulated only; the analytic column has no stalls)"
        )
