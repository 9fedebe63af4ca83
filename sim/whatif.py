"""Mitigations side by side: the same scenario, the same seed (so the same jitter
draws: common random numbers), with one fix applied per row.

A mitigation is a named change to the scenario's data:
  rebalance          micro-batches sized to each rank's speed (Scenario.rebalance)
  exclude-slowest    restart without the slowest rank's node (or the rank, within one
                     node): fewer ranks, and a restart paid once over the horizon
  sync-gc            pauses on every rank at the same steps (PausesConfig.synchronized)
  fix-loader         every rank's loader at the scenario's healthy speed (no loader_stragglers)
  workers=N          N DataLoader workers per rank (compute.dataloader_workers)
  accum=K            gradient accumulation K (note: K x the tokens per step)
  KEY=VALUE          any scenario key, as --set (bucket_cap_mb=100, comm_hook=bf16:
                     bare training keys are found in their section)
Several in one row, comma-separated, apply in order (network.nics_per_node=4,network.nic_gbit_s=200;
rebalance,accum=4); a piece without ``=`` that names no fix continues the value before it
(stragglers=17:1.4,100:2.0 is one change).
Throughput is tokens per second of wall time; cost is GPU-hours per billion tokens. A row whose
per-GPU memory exceeds its device (sim/memory_fit.py) is not simulated: its numbers are None and
``oom`` is set, unless ``ignore_memory``.
"""

import math
from typing import NamedTuple

import numpy as np

from sim.config import Scenario, parse_stragglers
from sim.engine import simulate
from sim.episode_cost import expected_cost, states
from sim.memory_fit import fit
from sim.scenario_file import apply_overrides, check_assigned_keys, scenario_from_dict, split_assignments
from sim.workload import build_workload

NAMED = ("rebalance", "exclude-slowest", "sync-gc", "fix-loader")
SECTION_OF = {"bucket_cap_mb": "training", "comm_hook": "training", "grad_accum": "training", "overlap": "training"}
SECTION_OF |= {"mode": "training", "hsdp_shard_size": "training"}  # --try mode=hsdp
ALIASES = {"accum": "grad_accum", "workers": "dataloader_workers"}
SECTION_OF |= {"dataloader_workers": "compute", "dataloader_prefetch_factor": "compute"}


class WhatIf(NamedTuple):
    mitigation: str
    ranks: int
    step_time_s: float  # mean
    step_time_p95_s: float
    tokens_per_s: float  # after the restart cost, if any, over the horizon
    scaling_efficiency: float
    gpu_h_per_btok: float  # GPU-hours per 1e9 tokens
    restart_s: float  # paid once over the horizon
    note: str
    # The mean step split as sim/results.py splits it (per rank, they add up to step_time_s).
    compute_s: float
    optimizer_s: float
    dataloader_s: float
    exposed_comm_s: float
    straggler_wait_s: float
    memory_gib: float = 0.0  # per GPU at the peak (sim/memory_fit.py)
    device_memory_gib: float = 0.0  # compute.device_memory_gib; 0 = not checked
    oom: bool = False  # the peak exceeds the device: not simulated (every number above None) unless ignore_memory
    # With episodes (sim/episode_cost.py): the numbers above are expected over the horizon, each
    # episode state weighed by its share of time; this is the throughput they cost, and its sd.
    episode_cost: float | None = None
    episode_cost_sd: float | None = None
    clear_tokens_per_s: float | None = None  # the same row without episodes


# The mean step's parts (sim/results.py), per rank; they add up to the step.
PARTS = ("compute_s", "optimizer_s", "dataloader_s", "exposed_comm_s", "straggler_wait_s")
# What a row measures; None in a row that is not simulated (out of memory).
NUMBERS = (
    "step_time_s",
    "step_time_p95_s",
    "tokens_per_s",
    "scaling_efficiency",
    "gpu_h_per_btok",
    "compute_s",
    "optimizer_s",
    "dataloader_s",
    "exposed_comm_s",
    "straggler_wait_s",
)


def _slowest_group(sc: Scenario) -> tuple[list[int], str]:
    """The slowest rank by its persistent per-step time (loader + compute at its speed factor:
    stragglers x spread) and what leaves with it."""
    wl = build_workload(sc, np.random.default_rng(sc.seed))
    per_step_s = wl.dataloader_s + wl.grad_accum * (wl.forward_s + wl.backward_s)
    factors = per_step_s / np.min(per_step_s)
    slow = int(np.argmax(per_step_s))
    g = sc.network.gpus_per_node
    if sc.ranks > g:
        node = slow // g
        return list(range(node * g, node * g + g)), f"node {node} with rank {slow} (x{factors[slow]:.3g})"
    return [slow], f"rank {slow} (x{factors[slow]:.3g})"


def _exclude(data: dict, sc: Scenario, removed: list[int]) -> dict:
    """The scenario without ``removed`` ranks: fewer ranks, explicit stragglers renumbered."""
    keep = [r for r in range(sc.ranks) if r not in removed]
    new_index = {old: new for new, old in enumerate(keep)}

    def renumber(text: str, key: str) -> str:
        items = parse_stragglers(text, key)
        return ",".join(f"{new_index[r]}:{f:g}" for r, f in sorted(items.items()) if r in new_index)

    out = apply_overrides(data, [])
    out["ranks"] = len(keep)
    out["stragglers"] = renumber(sc.stragglers, "stragglers")
    out["loader_stragglers"] = renumber(sc.loader_stragglers, "loader_stragglers")
    return out


# Keys a --try may not set: every row runs on the one seed (--seed), or the rows would differ by
# their jitter draws as well as by the mitigation.
OWN_KEYS = {"seed": "every row runs on the same seed, so the rows differ by the mitigation alone; give it with --seed"}


def _full_key(key: str) -> str:
    key = ALIASES.get(key, key)
    return f"{SECTION_OF[key]}.{key}" if key in SECTION_OF else key


def check_try(text: str) -> None:
    """One --try row's KEY=VALUE parts: no key twice (``accum=2,grad_accum=4``), no seed."""
    keys = [_full_key(p.partition("=")[0].strip()) for p in split_assignments(text, NAMED) if "=" in p]
    check_assigned_keys([("--try", k) for k in keys], OWN_KEYS)


def apply_mitigation(data: dict, text: str) -> tuple[dict, float | None, str]:
    """(scenario data with the mitigation, restart seconds paid once (None: exclude-slowest's,
    the caller's --restart-min), note). Several comma-separated apply in order."""
    check_try(text)
    restart_s, notes = 0.0, []
    for part in split_assignments(text, NAMED):
        data, restart, note = _apply_one(data, part.strip())
        restart_s = None if restart is None or restart_s is None else restart_s + restart
        notes += [note] if note else []
    return data, restart_s, "; ".join(notes)


def _apply_one(data: dict, text: str) -> tuple[dict, float | None, str]:
    sc = scenario_from_dict(data)
    if text == "rebalance":
        return apply_overrides(data, ["rebalance=true"]), 0.0, "work sized to speed (continuous micro-batches)"
    if text == "sync-gc":
        return apply_overrides(data, ["pauses.synchronized=true"]), 0.0, "every rank pauses at the same steps"
    if text == "fix-loader":
        return apply_overrides(data, ['loader_stragglers=""']), 0.0, "every loader at the healthy speed"
    if text.startswith("exclude-slowest"):
        removed, what = _slowest_group(sc)
        return _exclude(data, sc, removed), None, f"restart without {what}"
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(
            f"--try: unknown mitigation {text!r} (rebalance, exclude-slowest, sync-gc, fix-loader, accum=K,"
            " workers=N, or KEY=VALUE)"
        )
    key = ALIASES.get(key, key)
    full = _full_key(key)
    note = f"{value} x the tokens per step" if key == "grad_accum" else ""
    return apply_overrides(data, [f"{full}={value}"]), 0.0, note


def row_scenarios(data: dict, tries: list[str]) -> list[Scenario]:
    """What each row will simulate, to size the comparison before it runs: nothing is drawn or
    allocated per rank. exclude-slowest's row is the base (it has fewer ranks, so costs less):
    finding its slowest rank draws every rank's speed. A row with episodes simulates each episode
    state (sim/episode_cost.py), so it stands for as many runs."""
    base = scenario_from_dict(data)
    rows = [base]
    for text in tries:
        kept = [p for p in split_assignments(text, NAMED) if not p.strip().startswith("exclude-slowest")]
        rows.append(scenario_from_dict(apply_mitigation(data, ",".join(kept))[0]) if kept else base)
    return [sc for row in rows for sc in [row] * runs_per_row(row)]


def runs_per_row(sc: Scenario) -> int:
    """Simulations one row takes (sim/episode_cost.py): one; with episodes, each state's, and with
    a diurnal swing (whose states all have a phase) the clear job and each kind held alone too."""
    ep = sc.episodes
    if not ep.active:
        return 1
    alone = 1 + (ep.comm_per_h > 0) + (ep.compute_per_h > 0) if ep.diurnal_amplitude > 0 else 0
    return len(states(ep, 0)) + alone


def compare(
    data: dict, tries: list[str], *, horizon_h: float, restart_min: float, ignore_memory: bool = False
) -> list[WhatIf]:
    """Doing nothing, then each mitigation, on the same seed."""
    # `not >`: NaN fails every comparison, so it is refused here rather than printed as a result.
    if not (horizon_h > 0 and math.isfinite(horizon_h)):
        raise ValueError(f"--horizon-h: must be > 0 and finite, got {horizon_h}")
    if not (restart_min >= 0 and math.isfinite(restart_min)):
        raise ValueError(f"--restart-min: must be >= 0 and finite, got {restart_min}")
    rows = [_run("nothing", data, 0.0, "", horizon_h, ignore_memory)]
    for text in tries:
        changed, restart_s, note = apply_mitigation(data, text)
        if restart_s is None:
            restart_s = restart_min * 60.0
        rows.append(_run(text, changed, restart_s, note, horizon_h, ignore_memory))
    return rows


def _run(name: str, data: dict, restart_s: float, note: str, horizon_h: float, ignore_memory: bool) -> WhatIf:
    sc = scenario_from_dict(data)
    f = fit(sc)
    memory = {"memory_gib": f.total_gib, "device_memory_gib": f.device_gib}
    if not (f.fits or ignore_memory):
        unknown = dict.fromkeys(NUMBERS)  # an out-of-memory error has no step time
        return WhatIf(name, sc.ranks, restart_s=restart_s, note=note, **unknown, **memory, oom=True)
    if sc.episodes.active:
        # Rare episodes: a run of sc.steps would contain none, so each state's steady step,
        # weighed by its share of the horizon (sim/episode_cost.py).
        e = expected_cost(sc, horizon_h=horizon_h)
        s = {k: e.weighted(k) for k in ("step_time_s", *PARTS)}
        s |= {"tokens_per_s": e.tokens_per_s, "step_time_p95_s": e.percentile_s(95)}
        episodes = {"episode_cost": e.cost, "episode_cost_sd": e.cost_sd, "clear_tokens_per_s": e.clear_tokens_per_s}
    else:
        full = simulate(sc, trace_steps=0).summary()
        s = {k: getattr(full, k) for k in ("tokens_per_s", *PARTS)}
        s |= {"step_time_s": full.step_time_s.mean, "step_time_p95_s": full.step_time_s.p95}
        episodes = {}
    busy = s["compute_s"] + s["dataloader_s"] + s["optimizer_s"]
    horizon_s = horizon_h * 3600.0
    tokens_per_s = s["tokens_per_s"] * max(0.0, 1.0 - restart_s / horizon_s)
    return WhatIf(
        mitigation=name,
        ranks=sc.ranks,
        step_time_s=s["step_time_s"],
        step_time_p95_s=s["step_time_p95_s"],
        tokens_per_s=tokens_per_s,
        scaling_efficiency=busy / s["step_time_s"],
        gpu_h_per_btok=sc.ranks * 1e9 / tokens_per_s / 3600.0 if tokens_per_s > 0 else float("inf"),
        restart_s=restart_s,
        note=note,
        **{k: s[k] for k in PARTS},
        **episodes,
        **memory,
        oom=not f.fits,
    )
