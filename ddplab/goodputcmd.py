"""`ddplab goodput`: wall time per unit of useful work under fail-stop failures and checkpoints, simulated
(workflow/goodput.py) and from Daly's formula, with the best checkpoint interval each way. Like commands.py, `goodput`
returns what `--json` prints and otherwise prints a table for people too."""

from ddplab import options
from output.terminal import show
from workflow.goodput import AUTO_WORK_MTBFS, study
from workflow.render_studies import goodput_lines


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
    g.add_argument("--stall-mean-min", type=float, help="their mean duration, minutes (default 5; with stalls)")
    g.add_argument(
        "--timeout-min",
        type=float,
        help="collective timeout: a longer stall becomes a failure (default 10, NCCL's; with stalls)",
    )
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--yes", action="store_true", help="run even when the estimate says it takes over 5 minutes")
    options.out_dir(g, "goodput.csv, goodput.json and goodput.png")
    options.json_flag(
        g,
        "mtbf_h, wall_per_work and goodput {simulated, analytic}, best_interval_min, failures, lost_work_h,"
        " restart_h, checkpoint_h, ...",
    )
    g.set_defaults(func=goodput)


def goodput(args):
    out = options.call(study, args)
    if not args.json:
        show(goodput_lines(out))
        if args.out:
            print(f"goodput.csv, goodput.json and goodput.png in {args.out}/")
    return out
