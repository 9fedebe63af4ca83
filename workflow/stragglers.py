"""Which rank is slow, from a real train run's records or a simulation's: the analysis
(calibrate/stragglers.py) and its per-rank plot (output/calib_plots.py), as `ddplab
stragglers RUN_DIR` runs them.

    rep, plot = find_stragglers(Path("runs/train-1"))
    print(verdict(rep))  # "rank 1 is a straggler: score 0.60, ..."
    print("\n".join(stragglers_lines(rep)))  # the table `ddplab stragglers` prints
"""

from pathlib import Path

from calibrate import stragglers as st
from calibrate.stragglers import verdict
from output import calib_plots
from output.ownfiles import check_target

__all__ = ["find_stragglers", "stragglers_lines", "verdict"]

FULL_TABLE_RANKS = 64  # up to this many ranks every row is printed; beyond, the slowest
SHOWN_RANKS = 16  # rows printed beyond FULL_TABLE_RANKS (every flagged rank too)


def find_stragglers(run_dir: Path, ranks: int | None = None, plot: Path | None = None):
    """(report, plot path): the records in ``run_dir`` (``ranks``: which rank count of a
    simulated sweep) analysed, and the PNG written to ``plot`` (default: stragglers.png beside
    the records). Bad arguments are one ValueError line, raised before any analysis."""
    if ranks is not None and ranks < 1:
        raise ValueError(f"--ranks: {ranks}: must be >= 1")
    if plot is not None:  # before the analysis: only a new file or ddplab's own (output/ownfiles.py)
        check_target(plot, "--plot")
    rep = st.analyse(st.load(run_dir, ranks))
    return rep, calib_plots.stragglers(rep, plot or rep.path / "stragglers.png")


def stragglers_lines(rep) -> list[str]:
    """`ddplab stragglers`' per-rank table and verdict (calibrate/stragglers.py)."""
    out = []
    n = len(rep.ranks)
    skipped = f" after {rep.skipped_steps} warm-up steps" if rep.skipped_steps else ""
    out.append(f"{rep.source} records in {rep.path}: {n} ranks, {rep.steps} steps{skipped}")
    if n <= FULL_TABLE_RANKS:
        rows = list(rep.ranks)
    else:  # the slowest first: every flagged rank, then the least-waiting rank if not among them
        slowest = sorted(rep.ranks, key=lambda r: r.score)
        rows = slowest[: max(SHOWN_RANKS, len(rep.flagged))]
        for k in (rep.least_waiting_rank, *rep.late):
            if k not in {r.rank for r in rows}:
                rows.append(rep.ranks[k])
    # One unit for the table: milliseconds for cluster steps, seconds for the home lab's tens of seconds.
    slowest = max(max(r.compute_s_p50, r.wait_s_mean) for r in rep.ranks)
    unit, scale, places = ("s", 1.0, 3) if slowest >= 10 else ("ms", 1e3, 1)
    head = f"{'rank':>5} {f'compute p50 ({unit})':>17} {'score':>6} {'flag':<9} {f'mean wait ({unit})':>15}"
    out.append(f"{head} {f'late ({unit})':>10}")
    for r in rows:
        flag = "FLAGGED" if r.flagged else "LATE" if r.late_flagged else ""
        marks = flag + (" *" if r.rank == rep.least_waiting_rank else "")
        out.append(
            f"{r.rank:>5} {r.compute_s_p50 * scale:>17.{places}f} {r.score:>6.3f} {marks:<9}"
            f" {r.wait_s_mean * scale:>15.{places}f} {round(r.late_s * scale, places) + 0.0:>10.{places}f}"
        )
    if len(rows) < n:
        rest = [r.score for r in rep.ranks if r not in rows]
        out.append(
            f"  ... {n - len(rows)} more ranks, scores {min(rest):.3f}-{max(rest):.3f} (--json lists every rank)"
        )
    out.append(
        "  * waits least; late: how much longer the others wait for the rank than its compute explains,"
        f" LATE above {rep.late_flag_s * scale:.{places}f} {unit} (as long as for a flagged rank)"
    )
    if rep.injected:
        out.append("injected (--straggler): " + ", ".join(f"rank {k} x{v:g}" for k, v in sorted(rep.injected.items())))
    out.append(verdict(rep))
    return out
