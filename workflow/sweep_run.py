"""`ddplab sweep` from Python: the grid checked whole before any worker starts (its run count,
the memory its bookkeeping takes, each point's memory on its device, the time on the engine),
then run on the engine and, with ``out``, written (workflow/sweep_out.py).

    from workflow.sweep_run import run_sweep
    result, files = run_sweep(["h100-1024"], vary=["noise.sigma", "0.01", "0.05"], seeds="5", ranks=8)
"""

from pathlib import Path

from workflow import limits
from workflow import sweep as grid_sweep
from workflow.progress import RunProgress
from workflow.sweep_engines import make_engine


def run_sweep(
    scenarios: list[str],
    sets: list[str] = (),
    vary: list[list[str]] | list[str] = (),
    seeds: str = "5",
    *,
    ranks: int | None = None,
    steps: int | None = None,
    engine: str = "local",
    workers: int = 1,
    scheduler: str | None = None,
    dashboard: str | None = None,
    yes: bool = False,
    ignore_memory: bool = False,
    out: Path | None = None,
    say=None,
) -> tuple[dict, list[Path]]:
    """(what `sweep --json` prints: grid, runs, rows; the files written in ``out``). ``vary``: one
    key and its values, or a list of such (the product over the keys); ``say(line)``: where the
    engine says what listens (Dask). Raises ValueError, naming the flag, before anything runs."""
    vary = [vary] if vary and isinstance(vary[0], str) else list(vary)
    grid = grid_sweep.make_grid(scenarios, list(sets), vary, seeds, ranks, steps)
    # The count first: a million-run grid is refused before a million scenarios are built.
    limits.check_runs(grid.runs, f"the grid ({grid.describe()})", yes=yes)
    limits.check_memory(
        grid_sweep.bookkeeping_bytes(grid), f"the grid ({grid.describe()}, {grid.runs:,} runs)", "sweep fewer values"
    )
    runner = make_engine(engine, workers, scheduler, dashboard)
    built = grid_sweep.build(grid)
    oom = grid_sweep.out_of_memory(built, ignore_memory)  # not run: an OOM error has no step time
    runnable = [b for b, o in zip(built, oom, strict=True) if o is None]
    if out:  # fail before simulating, not after
        from output.outdir import ensure

        ensure(out)  # marked as ours: a rerun may replace what it wrote, nothing else
    if runner.parallelism is not None and runnable:  # refuse before starting any worker
        grid_sweep.check_cost(grid, runnable, runner, yes=yes)
    with runner:
        if runner.name == "dask" and say:  # what listens, and where (issue 25 D5)
            say(runner.listens())
        if runner.parallelism is not None and scheduler and runnable:  # a cluster's size: known only now
            grid_sweep.check_cost(grid, runnable, runner, yes=yes)
        result = grid_sweep.run(grid, built, runner, RunProgress(len(runnable) * len(grid.seeds)), oom)
    if not out:
        return result, []
    from workflow.sweep_out import write_sweep

    return result, write_sweep(result, out)
