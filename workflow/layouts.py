"""The TP x PP x DP layouts of a model on a cluster that fit in memory, fastest first
(sim/planner.py), with the scenario keys that give each to `ddplab simulate`: what `ddplab plan
MODEL CLUSTER` prints.

    found = plan_layouts("llama3-70b", "h100-1024", gpus=512)
    found["layouts"][0]["sets"]  # ["training.tp=8", ...]: the fastest layout's keys
"""

import contextlib
import time

from calibrate.record import track_record
from sim.config import tp_overlap_level
from sim.memory_fit import Fit, communicators
from sim.parallel3d import ASSUMED
from sim.patches import Patch, parse_sets, split_assignments, value_text
from sim.planner import grid, kept_stragglers, mode_resets, plan, scenario_for
from sim.scenario_file import resolve


def scenario_sets(model: str, sets=(), seq_len: int | None = None) -> list[str]:
    """The ``--set`` keys of the planned scenario as `ddplab plan` prints them for `simulate`: the
    model, the user's keys (one assignment each, as plan_layouts returns them in "sets"), the
    sequence length (0: the model's context)."""
    return [f"model.preset={model}", *sets, f"training.seq_len={seq_len or 0}"]


def _layers(model: str, sets, seq_len: int | None) -> tuple:
    """The same keys as patches (sim/patches.py): the model and sequence are plan's own
    arguments, the user's --set texts parsed once between them."""
    return (
        (Patch("model.preset", model, "MODEL"),),
        parse_sets(sets),
        (Patch("training.seq_len", seq_len or 0, "--seq-len"),),
    )


def plan_layouts(
    model: str,
    cluster: str,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    seq_len: int | None = None,
    sets=(),
    top: int = 10,
    finalists: int = 12,
    engine=None,
    started=None,
) -> dict:
    """The search's answer as `ddplab plan --json` prints it: the ``top`` layouts that fit,
    fastest first (the first ``finalists`` replayed event by event, the rest estimated), with
    how many were considered and fit. No layout that fits is one ValueError line. ``engine``:
    a sweep engine (workflow/sweep_engines.py) to run the search's tasks on, entered once the
    inputs are checked (a bad one starts no worker), ``started(engine)`` called once it is up;
    None: here, one after another."""
    sets = [piece for text in sets for piece in split_assignments(text)]  # one assignment each, as parsed
    parsed = parse_sets(sets)
    fp8_gather = [x for x, p in zip(sets, parsed, strict=True) if p.key == "training.fp8_all_gather"]
    if fp8_gather:  # modelled for FSDP alone (sim/config.py), where the search tries every mode and layout
        raise ValueError(
            "training.fp8_all_gather: plan searches ddp, zero1, fsdp and hsdp layouts with tp, cp and pp, and it is"
            " modelled for FSDP alone; leave it out here and give it to simulate for an FSDP layout,"
            f" got {fp8_gather[0]!r}"
        )
    # TP overlap applies where a layout has TP: taken off the base (whose tp is 1) and given to
    # each candidate with tp > 1, which then prints it among its own keys.
    overlap = [p.value for p in parsed if p.key == "training.tp_comm_overlap"]
    tp_overlap = tp_overlap_level(overlap[-1]) if overlap else "none"
    sets = [x for x, p in zip(sets, parsed, strict=True) if p.key != "training.tp_comm_overlap"]
    base = resolve(cluster, *_layers(model, sets, seq_len)).scenario
    gpus = gpus or base.ranks
    batch = global_batch or gpus
    if gpus < 1 or batch < 1:
        raise ValueError(f"--gpus and --global-batch: must be >= 1, got {gpus} and {batch}")
    with engine or contextlib.nullcontext():
        if engine is not None and started is not None:
            started(engine)
        t0 = time.perf_counter()
        ranked, considered = plan(
            base, gpus, batch, finalists=max(1, finalists), map_fn=engine and engine.map, tp_overlap=tp_overlap
        )
        took = time.perf_counter() - t0
    if not considered:  # nothing to put in memory: no tp x cp x pp x dp splits these GPUs and this batch
        raise ValueError(_no_layout(base, model, gpus, batch, tp_overlap))
    if not ranked:
        raise ValueError(f"no layout of {model} on {gpus} GPUs at global batch {batch} fits in memory")
    shown = [(s, scenario_for(base, s.candidate, gpus)) for s in ranked[:top]]
    # The cluster's named slow GPUs: planned where the job has their ranks (sim/planner.py);
    # otherwise dropped, and each layout's command unsets them, which simulate would refuse.
    named = base.stragglers.strip()
    applied = bool(named) and kept_stragglers(base, gpus) == base.stragglers
    drop = ["stragglers="] if named and not applied else []
    # Slow loaders and late hosts: modelled by neither pass (sim/planner.py), so unset in every
    # layout's command too (a tp, cp or pp layout would be refused with host_delays_s).
    unmodelled = [k for k in ("loader_stragglers", "host_delays_s") if getattr(base, k).strip()]
    drop += [f"{k}=" for k in unmodelled]
    return {"model": model, "cluster": cluster, "gpus": gpus, "global_batch": batch, "sets": sets,
            "seq_len": base.seq_len, "considered": considered, "fitting": len(ranked),
            "seconds": took, "assumed": ASSUMED,
            "stragglers": {"named": named, "applied": applied, "dropped": unmodelled},
            "tied_embeddings": base.model.shape.tied_embeddings,
            "n_layer": base.model.shape.n_layer,
            # The best layout's class in the public record (calibrate/record.py): the table's
            # other layouts share its device and stack, and nearly always its TP/PP/CP class.
            "record": track_record(shown[0][1]),
            "layouts": [_row(s, Fit(s.memory_gib, base.compute.device_memory_gib, False, communicators(sc)),
                             mode_resets(base, s.candidate), drop)
                        for s, sc in shown]}  # fmt: skip


def _row(s, fit: Fit, resets: dict, drop: list[str]) -> dict:
    """One layout as `plan --json` gives it. ``resets``: the base's training keys its mode has no
    use for, with the value it takes (sim/planner.py mode_resets). They join the layout's own
    ``sets``, since the cluster file may be where they were set, and ``unset`` names them: a
    user's --set of one is left out of the layout's `simulate` command. ``drop``: the cluster's
    stragglers unset where the job lacks their ranks, its slow loaders and host delays always
    (``unset`` names them as well)."""
    c, step = s.candidate, s.step
    reset = [f"training.{k}={value_text(v)}" for k, v in sorted(resets.items())]
    return c._asdict() | {
        "nccl_communicators": fit.communicators,
        "tight": fit.tight,
        "step_time_s": s.step_s,
        "estimate_s": s.estimate_s,
        "replayed": step is not None,
        "memory_gib": s.memory_gib,
        "mfu": step.mfu if step else None,
        "tokens_per_s": step.tokens_per_s if step else None,
        "bubble_fraction": step.bubble_fraction if step else None,
        "tp_comm_s": step.tp_comm_s if step else None,
        "dp_exposed_s": step.dp_exposed_s if step else None,
        "sets": c.sets() + reset + drop,
        "unset": [f"training.{k}" for k in sorted(resets)] + [d.removesuffix("=") for d in drop],
    }


def _no_layout(base, model: str, gpus: int, batch: int, tp_overlap: str) -> str:
    """Why the grid is empty (sim/planner.py grid): every layout needs tp x cp x pp x dp = the
    GPUs and dp x micro-batch x accumulation = the global batch; and the nearest global batches
    that have a layout, so the refusal says what to ask instead."""
    limit = 64 * gpus  # a bound on the search; every multiple of the GPUs up to it has ddp's layout
    above = next((b for b in range(batch + 1, limit + 1) if grid(base, gpus, b, tp_overlap)), None)
    below = next((b for b in range(batch - 1, 0, -1) if grid(base, gpus, b, tp_overlap)), None)
    near = " or ".join(f"--global-batch {b}" for b in (below, above) if b is not None)
    return (
        f"--global-batch {batch}: no layout of {model} splits {gpus} GPUs into tp x cp x pp x dp with dp"
        f" x micro-batch (1-8) x accumulation = {batch} sequences (tp divides a node's"
        f" {base.network.gpus_per_node} GPUs and the heads, pp the {base.model.shape.n_layer} layers)"
        + (f"; the nearest that have one: {near}" if near else "")
    )
