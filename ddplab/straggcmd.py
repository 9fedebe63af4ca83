"""`ddplab stragglers RUN_DIR`: which rank is slow, from a real train run's records or a
simulation's (the analysis is workflow/stragglers.py's). Like calcmds.py it returns what
`--json` prints and otherwise prints for people; the plot is written either way."""

from pathlib import Path

from ddplab import options
from output.terminal import show


def add_parser(sub) -> None:
    """The `stragglers` subcommand on an argparse subparsers object."""
    p = sub.add_parser("stragglers", help="per-rank straggler scores, waits and lateness of a run or simulation")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a train run or a `simulate --out` (a sweep: --ranks)")
    p.add_argument("--ranks", type=int, metavar="N", help="which rank count of a simulated sweep (ranks-NNNN)")
    p.add_argument("--plot", type=Path, metavar="FILE", help="per-rank PNG (default: stragglers.png by the records)")
    options.json_flag(p)
    p.set_defaults(func=stragglers)


def stragglers(args):
    from workflow.stragglers import find_stragglers, stragglers_lines  # matplotlib and numpy: only when asked

    rep, plot = find_stragglers(args.run_dir, args.ranks, args.plot)
    out = rep.to_json() | {"plot": str(plot)}
    if args.json:
        return out
    show(stragglers_lines(rep))
    print(f"plot: {plot}")
    return out
