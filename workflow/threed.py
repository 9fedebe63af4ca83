"""A tensor- or pipeline-parallel scenario (training.tp or training.pp > 1, or the distributed
optimizer: Scenario.parallel3d) simulated as
`ddplab simulate` does: ``steps`` steps of sim/steps3d.py per scale (sim/parallel3d.py's step,
each with its own draws), its memory per stage, what a straggler costs and which TP group the
records put it in, and with ``out`` the records written (output/export3d.py).

    for sc, run, summary in simulate(scenarios):
        print(summary["step_time_s"] if run else summary["peak_gib"])  # run None: out of memory
"""

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from calibrate.record import track_record
from output.export3d import write_run3d, write_summaries_3d
from sim.memory_fit import Fit, communicators, stage_peaks_gib, verdict
from sim.parallel3d import layout, layout_keys
from sim.steps3d import ASSUMED, Run3D, simulate_3d_steps
from workflow import train_cost

__all__ = ["ASSUMED", "run", "simulate"]


def run(sc, *, records: bool = False, progress: Callable | None = None) -> tuple[Run3D, dict]:
    """The steps and their summary; with stragglers, the same job without them beside it (the
    same draws: the stragglers scale after them) and where the records put the slowdown."""
    r = simulate_3d_steps(sc, records=records, progress=progress)
    s = r.summary() | {"scenario": sc.name, "model": sc.model.shape.name, "ranks": sc.ranks, "mode": _mode(sc)}
    if sc.straggler_map:
        lay = r.layout
        base = simulate_3d_steps(dataclasses.replace(sc, stragglers=""))
        replica, stage = r.slowed_group()
        s["straggler"] = {
            "ranks": sorted(sc.straggler_map),
            "stages": sorted({lay.stage_of(x) for x in sc.straggler_map}),
            "step_time_without_s": base.mean_step_s,
            "cost_s": r.mean_step_s - base.mean_step_s,
            "cost_fraction": r.mean_step_s / base.mean_step_s - 1.0,
            # From the records, not the scenario: the TP group whose compute grew most.
            "charged_to": {"stage": stage, "replica": replica},
        }
    return r, s


def memory(sc) -> tuple[Fit, list[float]]:
    """The fullest stage's peak against the device, and each stage's (sim/memory_fit.py
    stage_peaks_gib), before any step: always the estimate, as a measured peak is of the job it
    measured, not of this layout."""
    by_stage = stage_peaks_gib(sc)
    return Fit(max(by_stage), sc.compute.device_memory_gib, False, communicators(sc)), by_stage


def out_of_memory(sc, f: Fit, by_stage: list[float]) -> dict:
    """What is reported in place of a summary for a job that does not fit: who it is, its layout,
    sim/memory_fit.py's verdict with what would fit, and the memory of each stage."""
    return {
        "scenario": sc.name,
        "model": sc.model.shape.name,
        "ranks": sc.ranks,
        "mode": _mode(sc),
        "steps": sc.steps,
        "seed": sc.seed,
        "layout": layout_keys(layout(sc)),
        "memory_gib_by_stage": [round(g, 3) for g in by_stage],
    } | verdict(sc, f)


def _mode(sc) -> str:
    t = sc.training
    dp = f" dp{sc.dp}" if t.mode[-1].isdigit() else sc.dp  # "zero164" would read as one number
    cp = f" x cp{t.cp}" if t.cp > 1 else ""
    return f"tp{t.tp}{cp} x pp{t.pp} x {t.mode}{dp}"


def simulate(
    scenarios: Iterable,
    *,
    ignore_memory: bool = False,
    records: bool = False,
    out: Path | None = None,
    sweep: bool = False,
    progress: Callable | None = None,
    provenance: list[dict] | None = None,
    to_train: tuple = (None, None),
) -> Iterator[tuple[object, Run3D, dict]]:
    """(scenario, run, summary) for each scenario, one at a time. A job whose fullest stage does
    not fit the GPU's memory is not simulated (unless ``ignore_memory``), as `simulate` refuses a
    DDP one: its run is None and its summary sim/memory_fit.py's verdict, what would fit and the
    memory by stage (``out_of_memory``). With ``out`` (claimed: workflow/simulation.py
    claim_out) each scale that fits is written as it ends, and the summaries at the end.
    ``progress(sc)``: a step progress callback with close(), per scale. With ``provenance`` (a
    calib.json laid on each scale: workflow/simulation.py build_scenarios) each summary carries
    its "calibration" and "parameters", as a DDP one does; without it, ``summary["record"]`` is
    what the public record says of jobs like it (calibrate/record.py). ``to_train``: (tokens,
    price) as `--tokens` and `--usd-per-gpu-hour` give them, for ``summary["to_train"]``
    (workflow/train_cost.py)."""
    written = []
    for i, sc in enumerate(scenarios):
        f, by_stage = memory(sc)
        if not (ignore_memory or f.fits):
            yield sc, None, out_of_memory(sc, f, by_stage)
            continue
        bar = progress(sc) if progress else None
        try:
            r, s = run(sc, records=records, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        if f.checked:
            s |= {"device_memory_gib": f.device_gib, "fits": f.fits}  # not fitting: --ignore-memory
        if f.tight:  # fits with less spare than NCCL's own buffers take (sim/memory_fit.py)
            s["memory_tight"] = {"spare_gib": f.spare_gib, "nccl_communicators": f.communicators}
        if provenance:  # a calibration's compute is the user's own measurement, not the presets' the record judges
            s |= {k: provenance[i][k] for k in ("calibration", "parameters")}
        elif (record := track_record(sc, step_s=s["step_time_s"])) is not None:
            s["record"] = record
        if to_train[0] is not None:
            s["to_train"] = train_cost.cost(sc, s["tokens_per_s"], *to_train)
        if out is not None:
            write_run3d(r, out)
            written.append(s)
        yield sc, r, s
    if out is not None and written:
        write_summaries_3d(written, out, sweep=sweep)
