"""Which rank is slow, from a real train run's records or a simulation's: the analysis
(calibrate/stragglers.py) and its per-rank plot (output/calib_plots.py), as `ddplab
stragglers RUN_DIR` runs them.

    rep, plot = find_stragglers(Path("runs/train-1"))
    print(verdict(rep))  # "rank 1 is a straggler: score 0.60, ..."
"""

from pathlib import Path

from calibrate import stragglers as st
from calibrate.stragglers import verdict
from output import calib_plots
from output.ownfiles import check_target

__all__ = ["find_stragglers", "verdict"]


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
