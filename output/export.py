"""Writing a simulation's records to a run directory (the engine itself does no I/O).

Layout of ``--out DIR`` (schema ``ddplab.sim/1``):
  summary.json       the summary printed by --json (a list for a sweep)
  ranks-NNNN/        one per simulated rank count
    steps.csv        step, step_time_s, comm_busy_s, and each quantity's mean over ranks
    ranks.csv        rank, speed_factor, each quantity's mean over steps, and the median
                     compute (exact with records, else a streaming estimate: sim/online.py)
    records.npz      only when records were kept (`simulate --records`): per-step per-rank
                     arrays compute_s, exposed_comm_s, straggler_wait_s, collective_wait_s
                     (steps x ranks); step_time_s, comm_busy_s (steps); speed_factor
                     (ranks); bucket_bytes, bucket_collective_s (buckets)
    trace.json       Chrome Trace Event JSON of the first steps (open in ui.perfetto.dev)
  scaling.png        step time and breakdown vs ranks, for a sweep
  scaling.csv        the sweep's table, a row per rank count (SUMMARY_COLUMNS)
  breakdown.png      the mean step split into its parts, for a single scale
"""

import json
from pathlib import Path

import numpy as np

from output.atomic import write_atomic, write_csv_atomic, write_text_atomic
from output.outdir import ensure
from output.plot import plot_breakdown, plot_scaling, run_title
from sim.online import RANK_FIELDS
from sim.results import SCHEMA, SimResult
from sim.summary import Summary
from sim.trace import chrome_trace


def write_result(result: SimResult, run_dir: Path, progress=None) -> Path:
    """``progress(line)``: told as records.npz is written, table by table (minutes at 64k ranks)."""
    d = Path(run_dir) / f"ranks-{result.scenario.ranks:04d}"
    ensure(d)
    wl = result.workload
    if result.records is not None:
        arrays = {
            "schema": SCHEMA,
            "step_time_s": result.step_time_s,
            "comm_busy_s": result.comm_busy_s,
            **{k: result.records[k] for k in RANK_FIELDS},
            "speed_factor": wl.speed_factor,
            "bucket_bytes": wl.wire_bytes,
            "bucket_collective_s": wl.collective_s,
        }
        write_atomic(d / "records.npz", lambda tmp: _savez(tmp, arrays, progress))
    means = [f"{k}_mean" for k in RANK_FIELDS]
    step_cols = [result.step_time_s, result.comm_busy_s, *(result.step_mean[k] for k in RANK_FIELDS)]
    write_csv_atomic(
        d / "steps.csv",
        ["step", "step_time_s", "comm_busy_s", *means],
        [[i, *(f"{c[i]:.9g}" for c in step_cols)] for i in range(result.scenario.steps)],
    )
    p50 = result.compute_p50_s
    rank_cols = [wl.speed_factor, *(result.rank_mean[k] for k in RANK_FIELDS)]
    write_csv_atomic(
        d / "ranks.csv",
        ["rank", "speed_factor", *means, *(["compute_s_p50"] if p50 is not None else [])],
        [
            [r, *(f"{c[r]:.9g}" for c in rank_cols), *([f"{p50[r]:.9g}"] if p50 is not None else [])]
            for r in range(result.scenario.ranks)
        ],
    )
    write_chrome_trace(result, d / "trace.json")
    return d


def write_summaries(summaries: list[Summary], run_dir: Path, *, sweep: bool, extra: list[dict] | None = None) -> None:
    """summary.json (the summaries as --json prints them, each with its ``extra`` keys), and for a
    sweep scaling.csv and scaling.png, else breakdown.png."""
    run_dir = Path(run_dir)
    rows = [s.to_json_dict() | (extra[i] if extra else {}) for i, s in enumerate(summaries)]
    body = rows if sweep else rows[0]
    # Standard JSON: a NaN (a bug: inputs are checked finite) raises here, before anything is made.
    text = json.dumps(body, indent=2, allow_nan=False) + "\n"
    ensure(run_dir)
    write_text_atomic(run_dir / "summary.json", text)
    if sweep:
        header = [h for h, _ in SUMMARY_COLUMNS]
        write_csv_atomic(run_dir / "scaling.csv", header, [[f(s) for _, f in SUMMARY_COLUMNS] for s in summaries])
        title = run_title([s.scenario for s in summaries], [s.ranks for s in summaries], [s.mode for s in summaries])
        plot_scaling(summaries, run_dir / "scaling.png", title=title)
    else:
        s = summaries[0]
        label = f"{s.ranks} ranks, {s.steps} steps, seed {s.seed}"
        title = f"{run_title([s.scenario], [s.ranks], [s.mode])}: where a step goes"
        plot_breakdown([rows[0]], [label], run_dir / "breakdown.png", title=title)


# A summary (sim/summary.py) as one CSV row (scaling.csv; compare.csv around it): every number the
# table prints, at full precision (a float's str round-trips), units in the names.
SUMMARY_COLUMNS = (
    ("scenario", lambda s: s.scenario),
    ("model", lambda s: s.model),
    ("mode", lambda s: s.mode),
    ("ranks", lambda s: s.ranks),
    ("nodes", lambda s: s.nodes),
    ("steps", lambda s: s.steps),
    ("seed", lambda s: s.seed),
    ("step_time_mean_s", lambda s: s.step_time_s.mean),
    ("step_time_p5_s", lambda s: s.step_time_s.p5),
    ("step_time_p50_s", lambda s: s.step_time_s.p50),
    ("step_time_p95_s", lambda s: s.step_time_s.p95),
    ("step_time_p99_s", lambda s: s.step_time_s.p99),
    ("compute_s", lambda s: s.compute_s),
    ("optimizer_s", lambda s: s.optimizer_s),
    ("dataloader_s", lambda s: s.dataloader_s),
    ("host_delay_s", lambda s: s.host_delay_s),
    ("exposed_comm_s", lambda s: s.exposed_comm_s),
    ("straggler_wait_s", lambda s: s.straggler_wait_s),
    ("comm_s", lambda s: s.comm_s),
    ("comm_compute_ratio", lambda s: s.comm_compute_ratio),
    ("scaling_efficiency", lambda s: s.scaling_efficiency),
    ("tokens_per_s", lambda s: s.tokens_per_s),
    # `ddplab simulate` adds the memory estimate; a summary straight from the engine has none.
    ("memory_total_gib", lambda s: s.memory_gib["total_gib"] if s.memory_gib else ""),
    ("algorithms", lambda s: "+".join(s.algorithms)),
    ("stack", lambda s: s.stack),  # what the compute time rests on (sim/mfu.py)
    ("mfu", lambda s: s.mfu),
    ("compute_mfu", lambda s: s.compute_mfu),
)


def _savez(path: Path, arrays: dict, progress=None) -> None:
    """What np.savez_compressed writes (a deflated zip of .npy files, read by np.load), one
    array at a time, so that ``progress`` can say how far it is: its four (steps x ranks)
    tables are most of the time."""
    import time
    import zipfile

    from sim.limits import RECORD_WRITE_SECONDS_PER_RANK_STEP

    big = [k for k in RANK_FIELDS if k in arrays]
    cells = sum(np.asarray(arrays[k]).size for k in big)
    t0 = time.perf_counter()
    if progress:
        estimate = cells / max(len(big), 1) * RECORD_WRITE_SECONDS_PER_RANK_STEP
        progress(f"writing records.npz: {len(big)} tables of {cells // max(len(big), 1):,} rank-steps,"
                 f" ~{estimate:.0f} s estimated")  # fmt: skip
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        done = 0
        for name, value in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)
            if progress and name in big:
                done += 1
                progress(f"  {name}: table {done}/{len(big)} written, {time.perf_counter() - t0:.0f} s")


def write_chrome_trace(result: SimResult, path) -> Path:
    """Write ``chrome_trace(result)`` (sim/trace.py) as JSON to ``path``; returns the path."""
    text = json.dumps(chrome_trace(result), allow_nan=False)  # a NaN raises before any file exists
    return write_atomic(path, lambda tmp: tmp.write_text(text))
