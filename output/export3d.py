"""Writing a 3D-parallel simulation's records (sim/steps3d.py) to a run directory, in the layout
and schema of output/export.py's DDP runs, so that `ddplab stragglers DIR` reads either:

  summary.json       the summary printed by --json (a list for a sweep)
  ranks-NNNN/
    steps.csv        step, step_time_s, pipeline_s, dp_exposed_s, and each part's mean over ranks
    ranks.csv        rank, stage, replica, speed_factor (its TP group's), each part's mean over steps
    records.npz      only with `simulate --records`: schema ddplab.sim/1, the (steps x ranks) tables
                     compute_s, bubble_s, exposed_comm_s, straggler_wait_s, collective_wait_s;
                     step_time_s (steps); speed_factor, stage, replica (ranks)

No trace.json or breakdown.png: the Chrome trace and the breakdown plot draw DDP's buckets.
"""

import json
from pathlib import Path

import numpy as np

from output.atomic import write_atomic, write_csv_atomic, write_text_atomic
from output.outdir import ensure
from sim.results import SCHEMA
from sim.steps3d import FIELDS, Run3D


def write_run3d(run: Run3D, run_dir: Path) -> Path:
    sc, lay = run.scenario, run.layout
    d = Path(run_dir) / f"ranks-{sc.ranks:04d}"
    ensure(d)
    ranks = np.arange(sc.ranks)
    stage, replica = lay.stage_of(ranks), lay.replica_of(ranks)
    if run.records is not None:
        arrays = {"schema": SCHEMA, "step_time_s": run.step_time_s, **run.records}
        arrays |= {"speed_factor": run.speed_factor, "stage": stage, "replica": replica}
        write_atomic(d / "records.npz", lambda tmp: _savez(tmp, arrays))
    means = [f"{k}_mean" for k in FIELDS]
    cols = [run.step_time_s, run.pipeline_s, run.dp_exposed_s, *(run.step_mean[k] for k in FIELDS)]
    write_csv_atomic(
        d / "steps.csv",
        ["step", "step_time_s", "pipeline_s", "dp_exposed_s", *means],
        [[i, *(f"{c[i]:.9g}" for c in cols)] for i in range(sc.steps)],
    )
    rank_mean = run.rank_mean
    cols = [run.speed_factor, *(rank_mean[k] for k in FIELDS)]
    write_csv_atomic(
        d / "ranks.csv",
        ["rank", "stage", "replica", "speed_factor", *means],
        [[r, stage[r], replica[r], *(f"{c[r]:.9g}" for c in cols)] for r in range(sc.ranks)],
    )
    return d


def write_summaries_3d(summaries: list[dict], run_dir: Path, *, sweep: bool) -> None:
    # Standard JSON: a NaN (a bug: inputs are checked finite) raises here, before anything is made.
    text = json.dumps(summaries if sweep else summaries[0], indent=2, allow_nan=False) + "\n"
    ensure(Path(run_dir))
    write_text_atomic(Path(run_dir) / "summary.json", text)


def _savez(path: Path, arrays: dict) -> None:
    with open(path, "wb") as f:  # a file, not a name: np.savez would add ".npz" to the temporary's
        np.savez_compressed(f, **arrays)
