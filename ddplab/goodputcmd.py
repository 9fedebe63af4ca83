"""`ddplab goodput`: wall time per unit of useful work under fail-stop failures and checkpoints, simulated
(workflow/goodput.py) and from Daly's formula, with the best checkpoint interval each way. Like commands.py, `goodput`
returns what `--json` prints and otherwise prints a table for people too.

Wire it in with ``goodputcmd.add_parser(sub)`` on the subcommands of `ddplab`.
"""

from pathlib import Path

from workflow.goodput import AUTO_WORK_MTBFS, study


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


def goodput(args):
    out = study(
        mtbf_h=args.mtbf_h,
        failures_per_1000_node_days=args.failures_per_1000_node_days,
        nodes=args.nodes,
        restart_min=args.restart_min,
        checkpoint_min=args.checkpoint_min,
        interval_min=args.interval_min,
        work_h=args.work_h,
        stalls_per_day=args.stalls_per_day,
        stall_mean_min=args.stall_mean_min,
        timeout_min=args.timeout_min,
        seed=args.seed,
        yes=args.yes,
        out=args.out,
    )
    if not args.json:
        _print(out)
        if args.out:
            print(f"goodput.csv, goodput.json and goodput.png in {args.out}/")
    return out


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
