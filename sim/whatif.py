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

A tensor-, context- or pipeline-parallel or zero1 row (Scenario.parallel3d) is simulated as
`ddplab simulate` simulates it, by sim/steps3d.py, whose model has no data loader, pauses,
episodes or per-rank work sizing: there only KEY=VALUE rows are tried, and a named fix, an
episode or a pause is refused in one line rather than shown as changing nothing (rebalance by
the scenario itself: sim/config.py).
"""

import math
from typing import NamedTuple

import numpy as np

from sim.config import Scenario, keys_for, parse_host_delays, parse_stragglers
from sim.engine import simulate
from sim.episode_cost import expected_cost, states
from sim.memory_fit import fit
from sim.patches import Patch, apply_patches, check_assigned_keys, parse_set, split_assignments, value_text
from sim.rebalance import describe
from sim.scenario_file import check_inert, scenario_from_dict
from sim.steps3d import simulate_3d_steps
from sim.summary import own_time_s
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
    host_delay_s: float
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
    bubble_s: float | None = 0.0  # a pipeline's own idle (3D rows), the step's last part


# The mean step's parts (sim/results.py), per rank; they add up to the step (a 3D row's with its
# bubble_s).
PARTS = ("compute_s", "optimizer_s", "dataloader_s", "host_delay_s", "exposed_comm_s", "straggler_wait_s")
# What a row measures; None in a row that is not simulated (out of memory).
NUMBERS = (
    "bubble_s",
    "step_time_s",
    "step_time_p95_s",
    "tokens_per_s",
    "scaling_efficiency",
    "gpu_h_per_btok",
    "compute_s",
    "optimizer_s",
    "dataloader_s",
    "host_delay_s",
    "exposed_comm_s",
    "straggler_wait_s",
)


def _slowest_group(sc: Scenario) -> tuple[list[int], str]:
    """The slowest rank by its persistent per-step time (loader, host delay and compute at its
    speed factor: stragglers x spread) and what leaves with it."""
    wl = build_workload(sc, np.random.default_rng(sc.seed))
    per_step_s = wl.dataloader_s + wl.host_delay_s + wl.grad_accum * (wl.forward_s + wl.backward_s)
    factors = per_step_s / np.min(per_step_s)
    slow = int(np.argmax(per_step_s))
    g = sc.network.gpus_per_node
    if sc.ranks > g:
        node = slow // g
        return list(range(node * g, node * g + g)), f"node {node} with rank {slow} (x{factors[slow]:.3g})"
    return [slow], f"rank {slow} (x{factors[slow]:.3g})"


def _exclude(sc: Scenario, removed: list[int]) -> tuple[Patch, ...]:
    """The patches that drop ``removed`` ranks: fewer ranks, explicit stragglers renumbered."""
    keep = [r for r in range(sc.ranks) if r not in removed]
    new_index = {old: new for new, old in enumerate(keep)}

    def renumber(items: dict[int, float]) -> str:
        return ",".join(f"{new_index[r]}:{f:g}" for r, f in sorted(items.items()) if r in new_index)

    return (
        Patch("ranks", len(keep), "--try"),
        Patch("stragglers", renumber(sc.straggler_map), "--try"),
        Patch("loader_stragglers", renumber(parse_stragglers(sc.loader_stragglers, "loader_stragglers")), "--try"),
        Patch("host_delays_s", renumber(parse_host_delays(sc.host_delays_s)), "--try"),
    )


# Keys a --try may not set: every row runs on the one seed (--seed), or the rows would differ by
# their jitter draws as well as by the mitigation.
OWN_KEYS = {"seed": "every row runs on the same seed, so the rows differ by the mitigation alone; give it with --seed"}

# The named fixes that are fixed patches: (key, value, note).
_FIXED = {
    "rebalance": ("rebalance", True, "work sized to speed"),
    "sync-gc": ("pauses.synchronized", True, "every rank pauses at the same steps"),
    "fix-loader": ("loader_stragglers", "", "every loader at the healthy speed"),
}
EXCLUDE = "exclude-slowest"


class Part(NamedTuple):
    """One piece of a --try row: a patch (a fixed named fix or KEY=VALUE) with its note, or
    exclude-slowest (``patch`` None), whose patches depend on the scenario it applies to;
    ``named``: the fix's name where it is one."""

    patch: Patch | None
    note: str = ""
    named: str = ""


def _full_key(key: str) -> str:
    key = ALIASES.get(key, key)
    return f"{SECTION_OF[key]}.{key}" if key in SECTION_OF else key


def parse_try(text: str) -> list[Part]:
    """One --try row parsed once into its parts, in order: no key twice (``accum=2,grad_accum=4``),
    no seed, no unknown named fix."""
    pieces = [p.strip() for p in split_assignments(text, NAMED)]
    assigned = [parse_set(p, "--try") for p in pieces if "=" in p]
    check_assigned_keys([("--try", _full_key(a.key)) for a in assigned], OWN_KEYS)
    parts = []
    for piece in pieces:
        if piece in _FIXED:
            key, value, note = _FIXED[piece]
            parts.append(Part(Patch(key, value, "--try"), note, piece))
        elif piece.startswith(EXCLUDE):
            parts.append(Part(None, named=EXCLUDE))
        elif "=" in piece:
            patch = assigned.pop(0)
            patch = patch._replace(key=_full_key(patch.key))
            note = f"{patch.value} x the tokens per step" if patch.key == "training.grad_accum" else ""
            parts.append(Part(patch, note))
        else:
            raise ValueError(
                f"--try: unknown mitigation {piece!r} (rebalance, exclude-slowest, sync-gc, fix-loader, accum=K,"
                " workers=N, or KEY=VALUE)"
            )
    return parts


class Row(NamedTuple):
    mitigation: str  # as typed ("nothing" for the scenario as it is)
    scenario: Scenario
    restart_s: float | None  # paid once over the horizon; None: exclude-slowest's, the caller's --restart-min
    note: str


class Plan(NamedTuple):
    """A whatif's rows before any runs: the base's data and Scenario, each --try parsed, and each
    row's Scenario without exclude-slowest's change (the base's when that is all it does), which
    sizes the comparison: finding the slowest rank draws every rank's speed."""

    data: dict
    base: Scenario
    tries: list[tuple[str, list[Part]]]
    sized: list[Scenario]


def _mode_keys(parts: list[Part], base: Scenario) -> list[Part]:
    """A row that changes training.mode also sets the keys the new mode has no use for to its
    values (sim/config.py keys_for: a DDP job's bf16 hook or bucket cap under mode=fsdp), which
    the scenario would refuse; its note says which. Keys the row sets itself stay as given."""
    given = {p.patch.key: p.patch.value for p in parts if p.patch}
    if "training.mode" not in given:
        return parts
    t, mode = base.training, given["training.mode"]
    tp, cp, pp = (int(given.get(f"training.{k}", getattr(t, k))) for k in ("tp", "cp", "pp"))
    resets = {k: v for k, v in keys_for(t, mode, tp, cp, pp).items() if f"training.{k}" not in given}
    if not resets:
        return parts
    said = ", ".join(f"{k}={value_text(v)}" for k, v in resets.items())
    note = f"with {said} ({mode} has no use for the job's)"
    out = [p._replace(note=note) if p.patch and p.patch.key == "training.mode" else p for p in parts]
    return out + [Part(Patch(f"training.{k}", v, "--try")) for k, v in resets.items()]


def _build(data: dict, patches) -> Scenario:
    return scenario_from_dict(apply_patches(data, patches)[0])


def plan(data: dict, tries: list[str], base: Scenario | None = None) -> Plan:
    """Each --try parsed and its row built once (``base``: the Scenario of ``data``, if built)."""
    base = base or scenario_from_dict(data)
    parsed = [(text, _mode_keys(parse_try(text), base)) for text in tries]
    sized = []
    for text, parts in parsed:
        patches = [p.patch for p in parts if p.patch]
        try:
            sized.append(_build(data, patches) if patches else base)
            check_inert(sized[-1], patches)  # a key that would change nothing in this row
        except ValueError as e:  # the row's own scenario refused it: say which row
            raise ValueError(f"--try {text!r}: {e}") from None
        if sized[-1].parallel3d:  # a row that leaves TP/PP/zero1 runs as `simulate` runs it, fixes and all
            _check_3d(text, parts, sized[-1])
    if base.parallel3d:
        _check_3d("nothing", [], base)
    return Plan(data, base, parsed, sized)


THREE_D = "a tensor-, context- or pipeline-parallel or zero1 job (sim/steps3d.py)"


def _check_3d(text: str, parts: list[Part], sc: Scenario) -> None:
    """A 3D row: a named fix or an episode would show as changing nothing, which the 3D model
    does not say: refused (module docstring)."""
    named = [p.named for p in parts if p.named]
    if named:
        raise ValueError(f"--try {text!r}: {named[0]} is not modelled for {THREE_D}; try KEY=VALUE changes")
    if sc.episodes.active:
        raise ValueError(f"episodes: not simulated for {THREE_D} (row {text!r}); whatif needs them off there")
    if sc.pauses.every_steps > 0:  # as episodes: every row would show them costing nothing
        why = "whatif needs them off there (pauses.every_steps=0)"
        raise ValueError(f"pauses: not simulated for {THREE_D} (row {text!r}); {why}")


def rows(p: Plan) -> list[Row]:
    """Doing nothing, then each --try's row: its scenario (built once; a row with
    exclude-slowest after other changes builds the scenario it excludes from too)."""
    out = [Row("nothing", p.base, 0.0, "")]
    for (text, parts), sized in zip(p.tries, p.sized, strict=True):
        if all(part.patch for part in parts):
            notes = _notes([part.note for part in parts], parts, sized)
            accum = any(part.patch.key == "training.grad_accum" for part in parts)  # its note says the batch
            batch = "" if accum else _batch_change(p.base, sized)
            out.append(Row(text, sized, 0.0, "; ".join(n for n in (notes, batch) if n)))
            continue
        patches: list[Patch] = []
        notes = []
        for part in parts:
            if part.patch:
                patches.append(part.patch)
                notes.append(part.note)
                continue
            sc = _build(p.data, patches) if patches else p.base
            removed, what = _slowest_group(sc)
            patches += _exclude(sc, removed)
            # Each remaining rank keeps its samples, so the job now steps a smaller global batch:
            # said, since a practitioner who needs the batch would raise grad_accum to keep it.
            per_rank = sc.training.grad_accum * sc.training.micro_batch_size
            kept = (sc.ranks - len(removed)) * per_rank
            batch = f"global batch {kept:,} samples a step, was {sc.global_batch_samples:,}"
            notes.append(f"restart without {what}; {batch}")
        final = _build(p.data, patches)
        out.append(Row(text, final, None, _notes(notes, parts, final)))
    return out


def _batch_change(base: Scenario, sc: Scenario) -> str:
    """A row whose global batch differs from the base's says so (a smaller micro-batch that fits
    memory, more ranks): its tokens/s is then of another job, whose batch a practitioner would
    restore with grad_accum."""
    if base.seq_len != sc.seq_len:
        was, now = base.global_batch_tokens, sc.global_batch_tokens
        return "" if was == now else f"global batch {now:,} tokens a step, was {was:,}"
    was, now = base.global_batch_samples, sc.global_batch_samples
    return "" if was == now else f"global batch {now:,} samples a step, was {was:,}"


def _notes(notes: list[str], parts: list[Part], sc: Scenario) -> str:
    """A row's notes joined; rebalance's says how its whole samples fell (sim/rebalance.py), and
    a comm hook's what it sends: PowerSGD trades exactness for bytes, and a 16-bit hook on
    gradients already 2 bytes sends as many."""
    out = []
    t = sc.training
    for note, part in zip(notes, parts, strict=True):
        if part.named == "rebalance" and not sc.parallel3d:
            split = build_workload(sc, np.random.default_rng(sc.seed)).samples_per_step
            note = f"{note}: {describe(split, t.grad_accum * t.micro_batch_size)}"
        hook = part.patch.value if part.patch and part.patch.key == "training.comm_hook" else None
        if hook == "powersgd":
            note = f"gradients as rank-{t.powersgd_rank} factors, error fed back: fewer bytes, an approximate update"
        elif hook in ("fp16", "bf16") and t.dtypes.grad_bytes == 2:
            note = f"gradients already 2 bytes ({t.precision}): the {hook} hook sends no fewer"
        if note:
            out.append(note)
    return "; ".join(out)


def row_scenarios(p: Plan) -> list[Scenario]:
    """What each row will simulate, to size the comparison before it runs: nothing is drawn or
    allocated per rank. exclude-slowest's row is sized without the exclusion (it has fewer ranks,
    so costs less). A row with episodes simulates each episode state (sim/episode_cost.py), so it
    stands for as many runs."""
    return [sc for row in [p.base, *p.sized] for sc in [row] * runs_per_row(row)]


def runs_per_row(sc: Scenario) -> int:
    """Simulations one row takes (sim/episode_cost.py): one; with episodes, each state's, and with
    a diurnal swing (whose states all have a phase) the clear job and each kind held alone too."""
    ep = sc.episodes
    if not ep.active:
        return 1
    alone = 1 + (ep.comm_per_h > 0) + (ep.compute_per_h > 0) if ep.diurnal_amplitude > 0 else 0
    return len(states(ep, 0)) + alone


def compare(p: Plan, *, horizon_h: float, restart_min: float, ignore_memory: bool = False) -> list[WhatIf]:
    """Doing nothing, then each mitigation, on the same seed."""
    # `not >`: NaN fails every comparison, so it is refused here rather than printed as a result.
    if not (horizon_h > 0 and math.isfinite(horizon_h)):
        raise ValueError(f"--horizon-h: must be > 0 and finite, got {horizon_h}")
    if not (restart_min >= 0 and math.isfinite(restart_min)):
        raise ValueError(f"--restart-min: must be >= 0 and finite, got {restart_min}")
    out = []
    for row in rows(p):
        restart_s = restart_min * 60.0 if row.restart_s is None else row.restart_s
        out.append(_run(row.mitigation, row.scenario, restart_s, row.note, horizon_h, ignore_memory))
    return out


def _run(name: str, sc: Scenario, restart_s: float, note: str, horizon_h: float, ignore_memory: bool) -> WhatIf:
    f = fit(sc)
    memory = {"memory_gib": f.total_gib, "device_memory_gib": f.device_gib}
    if not (f.fits or ignore_memory):
        unknown = dict.fromkeys(NUMBERS)  # an out-of-memory error has no step time
        return WhatIf(name, sc.ranks, restart_s=restart_s, note=note, **unknown, **memory, oom=True)
    if sc.parallel3d:
        s, episodes = _steps_3d(sc), {}
    elif sc.episodes.active:
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
    horizon_s = horizon_h * 3600.0
    tokens_per_s = s["tokens_per_s"] * max(0.0, 1.0 - restart_s / horizon_s)
    return WhatIf(
        mitigation=name,
        ranks=sc.ranks,
        step_time_s=s["step_time_s"],
        step_time_p95_s=s["step_time_p95_s"],
        tokens_per_s=tokens_per_s,
        scaling_efficiency=own_time_s(s) / s["step_time_s"],
        gpu_h_per_btok=sc.ranks * 1e9 / tokens_per_s / 3600.0 if tokens_per_s > 0 else float("inf"),
        restart_s=restart_s,
        note=note,
        **{k: s[k] for k in PARTS},
        **episodes,
        **memory,
        oom=not f.fits,
        bubble_s=s.get("bubble_s", 0.0),
    )


def _steps_3d(sc: Scenario) -> dict:
    """A 3D row's numbers, as `ddplab simulate` gets them (sim/steps3d.py): the step, its p95,
    tokens/s and its parts; no data loader there. sim/steps3d.py counts a block's exposed TP and
    CP collectives in its compute (they sit between its kernels); here they move to exposed
    communication, so that efficiency is the matmuls' and kernels' share of the step."""
    summary = simulate_3d_steps(sc).summary()
    parts = summary["parts_s"]
    inside = min(summary["tp_comm_exposed_s"], parts["compute_s"])  # the busiest stage's, per step
    return {
        "step_time_s": summary["step_time_s"],
        "step_time_p95_s": summary["step_time_percentiles_s"]["p95"],
        "tokens_per_s": summary["tokens_per_s"],
        "optimizer_s": summary["optimizer_s"],
        "dataloader_s": 0.0,
        "host_delay_s": 0.0,
        "compute_s": parts["compute_s"] - inside,
        "exposed_comm_s": parts["exposed_comm_s"] + inside,
        **{k: parts[k] for k in ("bubble_s", "straggler_wait_s")},
    }
