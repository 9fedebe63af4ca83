"""Writing a simulation's records to a run directory (the engine itself does no I/O).

Layout of ``--out DIR`` (schema ``ddplab.sim/1``):
  summary.json       the summary printed by --json (a list for a sweep)
  ranks-NNNN/        one per simulated rank count
    records.npz      per-step per-rank arrays: compute_s, exposed_comm_s,
                     straggler_wait_s, collective_wait_s (steps x ranks);
                     step_time_s, comm_busy_s (steps); speed_factor (ranks);
                     bucket_bytes, bucket_collective_s (buckets)
    steps.csv        step, step_time_s, comm_busy_s
    ranks.csv        rank, speed_factor, median compute_s, mean collective_wait_s
    trace.json       Chrome Trace Event JSON of the first steps (open in ui.perfetto.dev)
  scaling.png        step time and breakdown vs ranks, for a sweep
"""

import csv
import json
from pathlib import Path

import numpy as np

from sim.results import SimResult

SCHEMA = "ddplab.sim/1"


def write_result(result: SimResult, run_dir: Path) -> Path:
    from sim.trace import write_chrome_trace

    d = Path(run_dir) / f"ranks-{result.scenario.ranks:04d}"
    d.mkdir(parents=True, exist_ok=True)
    wl = result.workload
    np.savez_compressed(
        d / "records.npz",
        schema=SCHEMA,
        step_time_s=result.step_time_s,
        comm_busy_s=result.comm_busy_s,
        compute_s=result.compute_s,
        exposed_comm_s=result.exposed_comm_s,
        straggler_wait_s=result.straggler_wait_s,
        collective_wait_s=result.collective_wait_s,
        speed_factor=wl.speed_factor,
        bucket_bytes=wl.wire_bytes,
        bucket_collective_s=wl.collective_s,
    )
    with open(d / "steps.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "step_time_s", "comm_busy_s"])
        for i, (t, c) in enumerate(zip(result.step_time_s, result.comm_busy_s, strict=True)):
            w.writerow([i, f"{t:.9g}", f"{c:.9g}"])
    with open(d / "ranks.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "speed_factor", "compute_s_p50", "collective_wait_s_mean"])
        med = np.median(result.compute_s, axis=0)
        wait = result.collective_wait_s.mean(axis=0)
        for r in range(result.scenario.ranks):
            w.writerow([r, f"{wl.speed_factor[r]:.6g}", f"{med[r]:.9g}", f"{wait[r]:.9g}"])
    write_chrome_trace(result, d / "trace.json")
    return d


def write_summaries(summaries: list[dict], run_dir: Path, *, sweep: bool) -> None:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    body = summaries if sweep else summaries[0]
    # Standard JSON: a NaN (a bug: inputs are checked finite) raises here, not in a reader.
    (run_dir / "summary.json").write_text(json.dumps(body, indent=2, allow_nan=False) + "\n")
    if sweep:
        from sim.plot import plot_scaling

        plot_scaling(summaries, run_dir / "scaling.png", title=summaries[0]["scenario"])
