"""`ddplab stragglers RUN_DIR`: which rank is slow, from a real train run's records or a
simulation's (the analysis is workflow/stragglers.py's). Like calcmds.py it returns what
`--json` prints and otherwise prints for people; the plot is written either way."""

from pathlib import Path

FULL_TABLE_RANKS = 64  # up to this many ranks every row is printed; beyond, the slowest
SHOWN_RANKS = 16  # rows printed beyond FULL_TABLE_RANKS (every flagged rank too)


def add_parser(sub) -> None:
    """The `stragglers` subcommand on an argparse subparsers object."""
    p = sub.add_parser("stragglers", help="per-rank straggler scores and waits of a train run or a simulation")
    p.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="a `ddplab train` run, or `ddplab simulate --out` output (a sweep needs --ranks)",
    )
    p.add_argument("--ranks", type=int, metavar="N", help="which rank count of a simulated sweep (ranks-NNNN)")
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="per-rank PNG (default: stragglers.png in the records' directory)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=stragglers)


def stragglers(args):
    from workflow.stragglers import find_stragglers  # matplotlib and numpy: only when asked

    rep, plot = find_stragglers(args.run_dir, args.ranks, args.plot)
    out = rep.to_json() | {"plot": str(plot)}
    if args.json:
        return out
    print_report(rep)
    print(f"plot: {plot}")
    return out


def print_report(rep) -> None:
    from workflow.stragglers import verdict

    n = len(rep.ranks)
    skipped = f" after {rep.skipped_steps} warm-up steps" if rep.skipped_steps else ""
    print(f"{rep.source} records in {rep.path}: {n} ranks, {rep.steps} steps{skipped}")
    if n <= FULL_TABLE_RANKS:
        rows = list(rep.ranks)
    else:  # the slowest first: every flagged rank, then the least-waiting rank if not among them
        slowest = sorted(rep.ranks, key=lambda r: r.score)
        rows = slowest[: max(SHOWN_RANKS, len(rep.flagged))]
        if rep.least_waiting_rank not in {r.rank for r in rows}:
            rows.append(rep.ranks[rep.least_waiting_rank])
    # One unit for the table: milliseconds for cluster steps, seconds for the home lab's tens of seconds.
    slowest = max(max(r.compute_s_p50, r.wait_s_mean) for r in rep.ranks)
    unit, scale = ("s", 1.0) if slowest >= 10 else ("ms", 1e3)
    print(f"{'rank':>5} {f'compute p50 ({unit})':>17} {'score':>6} {'flag':<9} {f'mean wait ({unit})':>15}")
    for r in rows:
        marks = ("FLAGGED" if r.flagged else "") + (" *" if r.rank == rep.least_waiting_rank else "")
        print(f"{r.rank:>5} {r.compute_s_p50 * scale:>17.4g} {r.score:>6.3f} {marks:<9} {r.wait_s_mean * scale:>15.4g}")
    if len(rows) < n:
        rest = [r.score for r in rep.ranks if r not in rows]
        print(f"  ... {n - len(rows)} more ranks, scores {min(rest):.3f}-{max(rest):.3f} (--json lists every rank)")
    print("  * waits least")
    if rep.injected:
        print("injected (--straggler): " + ", ".join(f"rank {k} x{v:g}" for k, v in sorted(rep.injected.items())))
    print(verdict(rep))
