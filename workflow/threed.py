"""A tensor- or pipeline-parallel scenario (training.tp or training.pp > 1) simulated as
`ddplab simulate` does: one step of sim/parallel3d.py per scale, its memory per stage, and what
a straggler costs and which stage it is charged to.

    for sc, step, summary in simulate(scenarios):
        print(summary["step_time_s"], summary.get("verdict", "fits"))
"""

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np

from sim.parallel3d import ASSUMED, Step3D, layout, simulate_3d

__all__ = ["ASSUMED", "is_3d", "run", "simulate"]


def is_3d(sc) -> bool:
    return sc.training.tp * sc.training.pp > 1


def run(sc) -> tuple[Step3D, dict]:
    """The step and its summary; with stragglers, the same job without them beside it."""
    step = simulate_3d(sc, np.random.default_rng(sc.seed))
    s = step.summary() | {"scenario": sc.name, "model": sc.model.shape.name, "ranks": sc.ranks, "mode": _mode(sc)}
    if sc.straggler_map:  # the same draws without the stragglers (they scale after the draw)
        lay = layout(sc)
        base = simulate_3d(dataclasses.replace(sc, stragglers=""), np.random.default_rng(sc.seed))
        stages = sorted({lay.stage_of(r) for r in sc.straggler_map})
        s["straggler"] = {
            "ranks": sorted(sc.straggler_map),
            "stages": stages,
            "step_time_without_s": base.step_s,
            "cost_s": step.step_s - base.step_s,
            "cost_fraction": step.step_s / base.step_s - 1.0,
        }
    return step, s


def _mode(sc) -> str:
    t = sc.training
    return f"tp{t.tp} x pp{t.pp} x {t.mode}{sc.dp}"


def simulate(scenarios: Iterable, *, ignore_memory: bool = False) -> Iterator[tuple[object, Step3D, dict]]:
    """(scenario, step, summary) for each scenario, one at a time; a step that does not fit the
    GPU's memory has ``summary["verdict"]`` (unless ``ignore_memory``)."""
    for sc in scenarios:
        step, s = run(sc)
        device = sc.compute.device_memory_gib
        if not (ignore_memory or not device or step.peak_memory_gib <= device):
            s["verdict"] = f"out of memory: {step.peak_memory_gib:.1f} GiB per GPU > {device:g} GiB"
        yield sc, step, s
