"""`ddplab sweep`'s grid: scenarios x varied keys x seeds, every run simulated as `ddplab
simulate` would simulate it, and the runs of each grid point gathered over their seeds into a
mean and a 95 % Student-t interval.

The grid is checked whole before anything runs: every scenario with every combination of the
varied values is built (and so validated by sim/config.py) here, in the caller's process. What
travels to a worker is that combination's scenario data (a plain dict, sim/scenario_file.py)
with its seed, so a worker, local or on a Dask cluster, needs the package but none of the
caller's files. Which engine runs the list is workflow/sweep_engines.py's business; the rows
come back in grid order whichever it is. A grid point whose per-GPU memory exceeds its device
(sim/memory_fit.py; memory does not depend on the seed) is not run: its row says out of memory,
with its peak, and carries no metric. This module knows no command line.
"""

import itertools
import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from output.export import SUMMARY_COLUMNS
from sim.config import Scenario, inert_key
from sim.limits import SimCost, simulation_cost
from sim.mfu import compute_basis
from sim.patches import Patch, check_assigned_keys, flag_patches, parse_sets, parse_value
from sim.scenario_file import resolve, scenario_from_dict
from workflow import limits
from workflow.simulation import refuse_3d
from workflow.sweep_engines import WORKER_BYTES

# Keys the grid itself owns: the seed is --seeds, so a --set or --vary of it would be ambiguous.
OWN_KEYS = {"seed": "the sweep's own axis; give it with --seeds"}

# What a run keeps of the engine's summary (sim/summary.py): its numbers, as the
# summary's CSV columns name and read them (output/export.py), and not wall_s, which is this
# machine's speed, not the model's answer.
METRIC_NAMES = (
    "step_time_mean_s",
    "step_time_p50_s",
    "step_time_p95_s",
    "step_time_p99_s",
    "compute_s",
    "exposed_comm_s",
    "straggler_wait_s",
    "comm_s",
    "comm_compute_ratio",
    "scaling_efficiency",
    "tokens_per_s",
    "mfu",
)
_COLUMNS = dict(SUMMARY_COLUMNS)
METRICS = tuple((name, _COLUMNS[name]) for name in METRIC_NAMES)
# Identity columns a run's summary carries besides its metrics.
IDENTITY = ("ranks", "nodes", "steps", "stack", "mode")
CONFIDENCE = 0.95


class Vary(NamedTuple):
    key: str
    values: tuple[str, ...]  # as typed: the row's label
    patches: tuple[Patch, ...]  # each value parsed once, as --set parses one


class Point(NamedTuple):
    """One grid point: a scenario with one value of each varied key; its runs differ by seed."""

    scenario: str  # as typed (a preset or a .toml path)
    label: str  # the table's name for it (a file's stem)
    vary: tuple[tuple[str, str], ...]  # (key, value as typed) in --vary order
    patches: tuple[Patch, ...]  # the same, parsed


class Grid(NamedTuple):
    scenarios: tuple[str, ...]
    sets: tuple[str, ...]  # --set as typed (the record's)
    set_patches: tuple[Patch, ...]  # the same, parsed once
    vary: tuple[Vary, ...]
    seeds: Sequence[int]  # a range for --seeds N
    ranks: int | None
    steps: int | None

    @property
    def runs(self) -> int:
        """How many simulations, from the sizes alone (nothing is built)."""
        return len(self.scenarios) * math.prod(len(v.values) for v in self.vary) * len(self.seeds)

    def describe(self) -> str:
        parts = [f"{len(self.scenarios)} scenario{'s' * (len(self.scenarios) != 1)}"]
        parts += [f"{len(v.values)} {v.key}" for v in self.vary]
        parts.append(f"{len(self.seeds)} seed{'s' * (len(self.seeds) != 1)}")
        return " x ".join(parts)

    def points(self) -> list[Point]:
        """Scenario outermost, then the varied keys in the order given, the last fastest."""
        out = []
        for scenario in self.scenarios:
            label = Path(scenario).stem if scenario.endswith(".toml") else scenario
            for picks in itertools.product(*(range(len(v.values)) for v in self.vary)):
                chosen = list(zip(self.vary, picks, strict=True))
                typed = tuple((v.key, v.values[i]) for v, i in chosen)
                out.append(Point(scenario, label, typed, tuple(v.patches[i] for v, i in chosen)))
        return out


def parse_vary(tokens: list[str]) -> Vary:
    """``--vary KEY V1 V2 ...``: one key and its values, each value one argument, so a value may
    hold commas (``stragglers 17:1.4,100:2.0``)."""
    if not tokens:
        raise ValueError("--vary: expected KEY V1 V2 ..., got nothing")
    key, *values = tokens
    if "=" in key:
        raise ValueError(f"--vary {key}: expected KEY V1 V2 ... (the key, then each value as its own argument)")
    if not values:
        raise ValueError(f"--vary {key}: no values, so the grid is empty; give KEY V1 V2 ...")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"--vary {key}: value {repeated[0]!r} given twice")
    return Vary(key, tuple(values), tuple(Patch(key, parse_value(v, f"--vary {key}"), "--vary") for v in values))


def parse_seeds(text: str) -> Sequence[int]:
    """``N``: seeds 0..N-1 (a range: its size is known without building it, so the grid's is
    too); ``A,B,C`` (a comma, even a trailing one: ``7,``): exactly those."""
    pieces = [p.strip() for p in text.split(",")]
    try:
        numbers = [int(p) for p in pieces if p]
    except ValueError:
        raise ValueError(f"--seeds: expected a count N or a list like 3,7,11, got {text!r}") from None
    if "," not in text:
        if not numbers or numbers[0] < 1:
            raise ValueError(f"--seeds: must be at least 1 (seeds 0..N-1), got {text!r}; an empty grid runs nothing")
        return range(numbers[0])
    if not numbers:
        raise ValueError(f"--seeds: no seeds in {text!r}; an empty grid runs nothing")
    bad = [n for n in numbers if n < 0]
    if bad:
        raise ValueError(f"--seeds: must be >= 0, got {bad[0]} in {text!r}")
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise ValueError(f"--seeds: seed {repeated[0]} given twice in {text!r} (it would count one run twice)")
    return tuple(numbers)


def make_grid(scenarios, sets, vary_tokens, seeds: str, ranks: int | None, steps: int | None) -> Grid:
    """The grid as given, its shape checked (not yet its values: build() does that)."""
    if not scenarios:
        raise ValueError("SCENARIO: give at least one preset or .toml file, e.g. `ddplab sweep h100-1024 --vary ...`")
    repeated = sorted({s for s in scenarios if scenarios.count(s) > 1})
    if repeated:
        raise ValueError(f"SCENARIO: {repeated[0]!r} given twice")
    vary = [parse_vary(t) for t in vary_tokens]
    keys = [v.key for v in vary]
    set_patches = parse_sets(sets)
    top = {"ranks": ("--ranks", ranks), "steps": ("--steps", steps)}
    check_assigned_keys([("--set", p.key) for p in set_patches] + [("--vary", k) for k in keys], OWN_KEYS)
    for key in keys:
        if key in top and top[key][1] is not None:
            raise ValueError(f"--vary {key}: also fixed by {top[key][0]} {top[key][1]}; give one of them")
    return Grid(tuple(scenarios), tuple(sets), set_patches, tuple(vary), parse_seeds(seeds), ranks, steps)


# What the caller's process keeps per grid point (its scenario data and checked Scenario) and per
# run (the task sent to a worker, the result back, its row): upper envelopes of tracemalloc's
# peaks for h100-1024 grids (~10 kB and ~6 kB measured), for the memory check before build().
BYTES_PER_POINT = 16_000
BYTES_PER_RUN = 12_000


def bookkeeping_bytes(grid: Grid) -> int:
    """The caller's memory for the grid's points and runs, from the sizes alone."""
    points = grid.runs // len(grid.seeds)
    return points * BYTES_PER_POINT + grid.runs * BYTES_PER_RUN


class Built(NamedTuple):
    point: Point
    data: dict  # its scenario data, with the first seed (a run sets its own)
    scenario: Scenario  # checked, with the first seed: what the cost estimate reads


def build(grid: Grid) -> list[Built]:
    """Every grid point resolved once (sim/scenario_file.py: its file, --set, its --vary values,
    the flags) and so checked as the dataclasses check a scenario, before any simulation runs:
    a bad value anywhere fails here, naming its point."""
    out = []
    flags = flag_patches(ranks=grid.ranks, steps=grid.steps, seed=grid.seeds[0])
    for point in grid.points():
        where = point.label + "".join(f", {k}={v}" for k, v in point.vary)
        try:
            resolved = resolve(point.scenario, grid.set_patches, point.patches, flags, inert=False)
            refuse_3d(resolved.scenario)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        out.append(Built(point, resolved.data, resolved.scenario))
    _check_inert(grid, out)
    return out


def _check_inert(grid: Grid, built: list[Built]) -> None:
    """A --set or --vary key that changes nothing at every point of the grid is refused (sim/config.py
    inert_key); one idle at some points only is what a grid crossing it with its switch is for
    (--vary noise.distribution none lognormal --set noise.sigma=0.05)."""
    keys = [p.key for p in grid.set_patches] + [v.key for v in grid.vary]
    for key in dict.fromkeys(keys):
        whys = [inert_key(b.scenario, key) for b in built]
        if all(whys):
            raise ValueError(f"{key}: {whys[0]}, at every point of the grid")


def out_of_memory(built: list[Built], ignore: bool = False) -> list[dict | None]:
    """Per grid point: None when it fits its device (or ``ignore``), else its verdict (the peak,
    the device's memory and what would fit)."""
    from sim.memory_fit import fit, verdict

    if ignore:
        return [None] * len(built)
    fits = [fit(b.scenario) for b in built]
    return [None if f.fits else verdict(b.scenario, f) for b, f in zip(built, fits, strict=True)]


def tasks(built: list[Built], seeds) -> list[dict]:
    """One run per grid point and seed, seed fastest: what a worker simulates."""
    return [{**b.data, "seed": seed} for b in built for seed in seeds]


def simulate_run(data: dict) -> dict:
    """One run, in a worker: the scenario data (with its seed) simulated as `ddplab simulate`
    simulates it, reduced to the numbers a sweep keeps. Module-level, so both engines pickle it
    by reference."""
    from sim.engine import simulate

    summary = simulate(scenario_from_dict(data)).summary()
    return {k: getattr(summary, k) for k in ("seed", *IDENTITY)} | {name: float(get(summary)) for name, get in METRICS}


def run_rows(built: list[Built], seeds, results: list[dict]) -> list[dict]:
    """Each run's row: its grid point, then what simulate_run returned, in grid order."""
    points = [b.point for b in built for _ in seeds]
    assert len(points) == len(results), (len(points), len(results))
    return [{"scenario": p.label, "vary": dict(p.vary)} | r for p, r in zip(points, results, strict=True)]


def interval(values: list[float]) -> dict:
    """Mean and the 95 % Student-t interval of the mean over the seeds: mean +- t(0.975, n-1)
    x s / sqrt(n), s the sample standard deviation. One seed has no spread to measure, so its
    interval is None (undefined), never a zero-width one."""
    from scipy.stats import t

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "ci95_low": None, "ci95_high": None}
    half = float(t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half}


def aggregate(rows: list[dict], n_seeds: int) -> list[dict]:
    """One row per grid point: its runs (consecutive, n_seeds of them) summarised per metric."""
    out = []
    for i in range(0, len(rows), n_seeds):
        group = rows[i : i + n_seeds]
        first = group[0]
        out.append(
            {"scenario": first["scenario"], "vary": first["vary"]}
            | {k: first[k] for k in IDENTITY}
            | {"seeds": [r["seed"] for r in group]}
            | {name: interval([r[name] for r in group]) for name in METRIC_NAMES}
        )
    return out


def run(grid: Grid, built, engine, on_done=None, oom: list[dict | None] | None = None) -> dict:
    """The whole sweep on ``engine`` (workflow/sweep_engines.py): {grid, runs, rows}; the points
    ``oom`` (out_of_memory's list) marks are not run, and their rows say so in grid order."""
    from sim.memory_fit import fit

    oom = oom or [None] * len(built)
    todo = [b for b, o in zip(built, oom, strict=True) if o is None]
    results = engine.map(simulate_run, tasks(todo, grid.seeds), on_done)
    runs = run_rows(todo, grid.seeds, results)
    simulated = iter(aggregate(runs, len(grid.seeds)))
    rows = []
    for b, o in zip(built, oom, strict=True):
        f = fit(b.scenario)
        memory = {"memory_gib": f.total_gib, "device_memory_gib": f.device_gib, "out_of_memory": not f.fits}
        rows.append(next(simulated) | memory if o is None else _oom_row(b, grid.seeds, o))
    return {"grid": grid_dict(grid), "runs": runs, "rows": rows}


def _oom_row(b: Built, seeds, verdict: dict) -> dict:
    """A grid point not run: its identity and memory, every metric None."""
    sc = b.scenario
    identity = {"ranks": sc.ranks, "nodes": -(-sc.ranks // sc.network.gpus_per_node), "steps": sc.steps}
    identity |= {"stack": compute_basis(sc), "mode": sc.training.mode}
    return (
        {"scenario": b.point.label, "vary": dict(b.point.vary)}
        | identity
        | {"seeds": list(seeds)}
        | dict.fromkeys(METRIC_NAMES)
        | {"memory_gib": verdict["peak_gib"], "device_memory_gib": verdict["device_memory_gib"], "out_of_memory": True}
        | {"alternatives": verdict["alternatives"]}
    )


def grid_dict(grid: Grid) -> dict:
    return {
        "scenarios": list(grid.scenarios),
        "set": list(grid.sets),
        "vary": {v.key: list(v.values) for v in grid.vary},
        "seeds": list(grid.seeds),
        "ranks": grid.ranks,
        "steps": grid.steps,
        "runs": grid.runs,
        "shape": grid.describe(),
        "confidence": CONFIDENCE,
    }


def check_cost(grid, built, engine, *, yes: bool) -> None:
    """The whole grid's time here (sim/limits.py's estimate per run, over the workers) and,
    for processes on this machine, the memory of as many runs at once as there are workers."""
    costs = [simulation_cost(b.scenario) for b in built]
    remote = engine.name == "dask" and engine.scheduler is not None  # its memory and cores are not ours
    at_once = min(engine.parallelism, grid.runs)
    # Each worker process here is an interpreter of its own before it simulates anything; local's
    # one worker is this process.
    in_here = engine.name == "local" and engine.workers == 1
    workers = 0 if remote or in_here else engine.workers * WORKER_BYTES
    peak = max(c.peak_bytes for c in costs) * (1 if remote else at_once) + workers
    # Processes here share this machine's cores: more workers than cores are no faster.
    cores = at_once if remote else min(at_once, os.cpu_count() or 1)
    seconds = sum(c.seconds for c in costs) * len(grid.seeds) / cores
    limits.check_simulation(SimCost(peak, 0.0, seconds), f"{grid.runs:,} runs ({grid.describe()})", yes=yes)
