"""A sweep's files (`ddplab sweep --out DIR`), each written whole: runs.csv (every run, full
precision), sweep.csv (a row per grid point: each metric's mean and 95 % interval; an empty
cell where one seed leaves it undefined), sweep.json (what --json prints) and sweep.png."""

from pathlib import Path

from output.atomic import write_csv_atomic
from output.jsonfile import write_json_atomic
from workflow.sweep import IDENTITY, METRIC_NAMES
from workflow.sweep_plot import plot_sweep

FILES = ("runs.csv", "sweep.csv", "sweep.json", "sweep.png")


def _point_columns(vary_keys: list[str]) -> list[str]:
    # A varied key that is also an identity column (--vary ranks 8 64) is shown once, as varied.
    return ["scenario", *vary_keys, *(k for k in IDENTITY if k not in vary_keys)]


def _point_cells(row: dict, vary_keys: list[str]) -> list:
    return [row["scenario"], *(row["vary"][k] for k in vary_keys), *(row[k] for k in IDENTITY if k not in vary_keys)]


def write_sweep(result: dict, out: Path) -> list[Path]:
    vary_keys = list(result["grid"]["vary"])
    write_json_atomic(out / "sweep.json", result)
    write_csv_atomic(
        out / "runs.csv",
        [*_point_columns(vary_keys), "seed", *METRIC_NAMES],
        [[*_point_cells(r, vary_keys), r["seed"], *(r[m] for m in METRIC_NAMES)] for r in result["runs"]],
    )
    stats = ("mean", "ci95_low", "ci95_high")
    write_csv_atomic(
        out / "sweep.csv",
        [
            *_point_columns(vary_keys),
            "seeds",
            *(f"{m}_{s}" for m in METRIC_NAMES for s in stats),
            "memory_gib",
            "out_of_memory",
        ],
        [
            [
                *_point_cells(r, vary_keys),
                len(r["seeds"]),
                # An out-of-memory point was not run: no metric, every cell empty.
                *("" if r[m] is None or r[m][s] is None else r[m][s] for m in METRIC_NAMES for s in stats),
                r["memory_gib"],
                r["out_of_memory"],
            ]
            for r in result["rows"]
        ],
    )
    ran = [r for r in result["rows"] if r[METRIC_NAMES[0]] is not None]
    if not ran:  # nothing to draw: every point out of memory
        return [out / name for name in FILES[:-1]]
    plot_sweep(ran, vary_keys, out / "sweep.png")
    return [out / name for name in FILES]
