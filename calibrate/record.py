"""The public record beside a prediction: how the published step times of jobs like this one
came out against the same model, and the published collective runs of the very command a user
types (calibrate/public.py, docs/validation-public.md).

A step time from the roofline rests on the preset's efficiencies, and the public table shows
where they run fast or slow (docs/validation-public.md, "The record beside each prediction").
A user sizing a job should see that beside the number, not only in a document. ``regime`` puts
a scenario in one of a few classes (device, stack, layout, whether attention takes 40 % of the
forward or more), and ``track_record`` summarises the public step rows of that class.

The rows' errors are the model's as committed: ``public_record.json`` beside this module holds
them, written by `make record` (workflow/public_record.py), and
tests/test_validation_public.py fails when it differs from a fresh evaluation of the table, so
the record printed is always the current model's. Running the whole table takes seconds, which
`simulate` must not spend.
"""

import json
import statistics
from functools import lru_cache
from pathlib import Path

from calibrate.public import SOURCES, TIERS, table_rows
from sim.patches import flag_patches, parse_sets
from sim.scenario_file import resolve
from sim.workload import forward_shares

RECORD_PATH = Path(__file__).with_name("public_record.json")
# Attention's share of a forward's time from which a step is "attention-heavy": the roofline's
# attention efficiency then sets much of the step, not its matmuls' (sim/roofline.py). Llama 3
# 8B's attention is 17-21 % of the forward at seq 8192 (eager, compiled), 45-52 % at 32,768; the
# record's rows are below 30 % or above 55 %, so any bound between puts them in the same classes.
ATTENTION_HEAVY_SHARE = 0.4
STEP_UNITS = ("s", "TFLOP/s", "MFU")  # the step tier's rows; a throughput is a step's inverse


def attention_share(sc) -> float:
    """Attention's share of one forward's time on the roofline (every block's core together)."""
    _, core = forward_shares(sc)
    return core * sc.model.shape.n_layer


def regime(sc) -> str | None:
    """The class of job the public record is read in, or None when the compute time is not the
    roofline's (a given step time or MFU): the record does not speak to it."""
    c = sc.compute
    if c.step_compute_s is not None or c.mfu is not None:
        return None
    # An attention-heavy step's error is mostly its attention rate's whatever the layout (CP
    # splits the attention, not its rate), so those rows are one class.
    if attention_share(sc) >= ATTENTION_HEAVY_SHARE:
        layout = "attention-heavy (any layout)"
    else:
        t = sc.training  # the layout, not the simulator: ZeRO-1 without TP/PP/CP is data parallel
        layout = "TP/PP/CP" if t.tp * t.cp * t.pp > 1 else "data parallel"
    return f"{c.device_class or 'unnamed device'}, {c.stack}, {layout}"


def step_error(unit: str, error: float) -> float:
    """A row's error as predicted step / measured step - 1: a throughput row's inverted."""
    return error if unit == "s" else 1.0 / (1.0 + error) - 1.0


def record_rows(results) -> list[dict]:
    """The step rows of an evaluated public table (calibrate/public.py Result), as the record
    file holds them: what, source, regime, the step error, and whether within its tier."""
    out = []
    for r in results:
        row, job = r.row, r.row.job
        if row.unit not in STEP_UNITS:
            continue
        sc = resolve(job.preset, job.sets, flag_patches(ranks=job.ranks, steps=job.steps)).scenario
        out.append(
            {
                "what": row.what,
                "source": row.source,
                "regime": regime(sc),
                "step_error": round(step_error(row.unit, r.error), 6),
                "within": bool(r.ok),
                "held_out": row.held_out,
            }
        )
    return out


@lru_cache(maxsize=1)
def load_record(path: Path = RECORD_PATH) -> tuple[dict, ...]:
    return tuple(json.loads(path.read_text())["rows"])


def track_record(sc, rows=None, step_s: float | None = None) -> dict | None:
    """What the public record says of jobs like ``sc``: its regime, how many step rows share it,
    how many are within the step tier (``bound``), and their step errors' range and median;
    ``rows``: 0 when none does. None when the compute is not the roofline's (``regime``). With
    ``step_s`` (the mean step predicted) and two rows or more, ``step_s_at_errors``: the step
    those runs' errors make of it, step_s / (1 + e) with e = predicted / measured - 1 (their
    fastest, median and slowest): a range to plan with, not a correction."""
    key = regime(sc)
    if key is None:
        return None
    rows = load_record() if rows is None else rows
    found = class_summary(key, [r for r in rows if r["regime"] == key])
    if step_s is not None and found["rows"] > 1:
        found["step_s_at_errors"] = {
            "fastest": step_s / (1 + found["step_error_max"]),
            "median": step_s / (1 + found["step_error_median"]),
            "slowest": step_s / (1 + found["step_error_min"]),
        }
    return found


def class_summary(key: str, like: list[dict]) -> dict:
    """One class's rows (record_rows' dicts) in a few numbers; ``rows``: 0 and nothing else when
    the class has none."""
    if not like:
        return {"regime": key, "rows": 0}
    errors = [r["step_error"] for r in like]
    return {
        "regime": key,
        "rows": len(like),
        "within": sum(r["within"] for r in like),
        "bound": TIERS["step"],
        "step_error_min": min(errors),
        "step_error_max": max(errors),
        "step_error_median": statistics.median(errors),
        "sources": sorted({r["source"] for r in like}),
    }


def by_class(rows: list[dict]) -> list[dict]:
    """Every class the record's rows fall in, summarised (``class_summary``), the most rows first."""
    keys = sorted({r["regime"] for r in rows}, key=lambda k: (-sum(r["regime"] == k for r in rows), k))
    return [class_summary(k, [r for r in rows if r["regime"] == k]) for k in keys]


def _assignments(patches) -> frozenset:
    return frozenset((p.key, p.value) for p in patches)


def published_collectives(scenario: str, ranks: int, op: str, sets=()) -> dict[int, list[dict]]:
    """The published runs of this very collective, by size: the public table's rows whose
    command is this one (the preset by name, the rank count, the op, the same --set keys and
    values; a row that forced NCCL_ALGO sets network.algorithm, and so must the user). Each with
    its source, the figure as printed (time in us below 1 MiB, busbw in GB/s from it) and its
    tier's bound; the caller, which has just predicted that size, sets the error against it
    (``against``). The rows are static, so nothing is precomputed."""
    wanted = _assignments(parse_sets(sets))
    out: dict[int, list[dict]] = {}
    for row in table_rows():
        job = row.job
        if job.kind != "collective" or (job.preset, job.ranks, job.op) != (scenario, ranks, op):
            continue
        if _assignments(job.sets) != wanted:
            continue
        out.setdefault(job.size, []).append(
            {
                "source": row.source,
                "citation": SOURCES[row.source][0],
                "conditions": SOURCES[row.source][1],
                "unit": row.unit,
                "measured": row.measured,
                "bound": row.bound,
                "held_out": row.held_out,
            }
        )
    return out


def against(published: dict, time_us: float, busbw_gb_s: float) -> dict:
    """A published figure with the prediction's error against it, in its unit (validate's
    error: calibrate/public.py evaluate), and whether that is within its tier."""
    ours = time_us if published["unit"] == "us" else busbw_gb_s
    error = ours / published["measured"] - 1.0
    return published | {"error": error, "within": abs(error) <= published["bound"]}
