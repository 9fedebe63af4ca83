"""Search TP x CP x PP x DP (x micro-batch, schedule, recompute, mode) for the layouts of a model
on a cluster that fit in memory, and rank them by predicted step time (`ddplab plan`).

Two passes, so thousands of layouts take seconds:

1. every layout's costs (sim/parallel3d.py ``step_costs``: per-stage compute from the roofline,
   TP and DP collectives, sends) and memory per stage (sim/memory3d.py, closed forms), and an
   analytical step time: the busiest stage's m micro-batches, plus the fill and drain of the
   others, (p - 1) / v stage times and 2 (p - 1) sends, plus the exposed DP reduction and the
   optimizer. Layouts that do not fit are dropped here.
2. the ``finalists`` fastest by that estimate are replayed event by event (``simulate_3d``,
   one step without noise) and ranked by the replay.

GPUs are identical but for the cluster's named stragglers (``stragglers``, e.g. the home lab's
M2 at 8x the RTX 4070's compute time), which both passes apply where the planned job has the
ranks they name: that is where `simulate --ranks GPUS` puts them, so the best layout's printed
command gives the step the plan ranked it by. A job with fewer GPUs has no such ranks; there
they are dropped (``kept_stragglers``) and the command unsets them. Slow loaders and host delays
(``loader_stragglers``, ``host_delays_s``) are dropped from every candidate: neither pass models
them.

The grid: tp over the divisors of the node's GPU count that divide the heads, pp where the
layers split evenly (``splits``: alone, or with the embedding and loss counted as layers, as
Megatron-Core can and Llama 3 405B ran) and leave whole data-parallel groups, micro-batches of
1-8 that divide the global batch per pipeline, 1F1B and (pp > 1) interleaved with v = 2 and 4
chunks where the layers split so and ZB-H1 where there are at least pp micro-batches, recompute none,
selective and full (and torchtitan's per-op, op, for Llama blocks without tp or cp), ddp, fsdp
and zero1 (Megatron's distributed optimizer) over the DP group,
and hsdp where that group spans nodes with more than one of its ranks in a node, its shard
group those ranks (the gathers on NVLink, each shard allreduced across the nodes;
sim/parallel3d.py). Context parallelism, 2-16 ranks with each K/V exchange (Llama 3's
all-gather, ring attention, and Ulysses' all-to-alls where the heads split over cp; sim/tp.py),
only from CP_MIN_SEQ tokens a sequence: below it
the sequence's activations are small and CP only adds exchanges (Llama 3 405B trained its
8k-token stage without CP and its 128k stage with 16; Grattafiori et al. 2024, Table 4), and
searching it there would multiply the grid a dozenfold for nothing.
Sequence parallelism is on whenever tp > 1 (in this model it moves the same bytes and only
removes work and memory). GPipe is left out: its bubble is 1F1B's and it holds more.

Both passes are lists of independent tasks (chunks of the grid, then one finalist each) handed
to a ``map_fn(fn, tasks) -> results in task order``: by default run here, one after another;
`ddplab plan --engine` gives a sweep engine's map (workflow/sweep_engines.py: local processes
or Dask). The tasks are module-level functions of picklable arguments, and each result is
computed as it would be here, so the ranking is the same whichever ran them.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from sim.config import Scenario, keys_for, op_refusal
from sim.parallel3d import Step3D, layout, memory_by_stage, simulate_3d, step_costs, straggler_factors
from sim.pipeline import W_SHARE
from sim.transformer import ulysses_refusal

MICRO_BATCHES = (1, 2, 4, 8)
RECOMPUTES = ("none", "selective", "full", "op")  # op where sim/config.py op_refusal allows it
MODES = ("ddp", "fsdp", "zero1", "hsdp")
CP = (2, 4, 8, 16)
CP_COMMS = ("all_gather", "p2p", "a2a")
CP_MIN_SEQ = 16384
VIRTUAL = (2, 4)
# Candidates per pass-1 task: a task costs ~2 ms a candidate here, so 64 make ~0.1 s, long
# enough that a Dask task's own overhead (a few ms) stays small, and 720 layouts still make
# a dozen tasks to spread over workers.
CHUNK = 64


class Candidate(NamedTuple):
    tp: int
    pp: int
    dp: int
    micro_batch: int
    grad_accum: int
    schedule: str
    virtual: int
    recompute: str
    mode: str
    shard: int = 0  # hsdp: data-parallel ranks per shard group
    cp: int = 1
    cp_comm: str = "all_gather"
    tp_overlap: str = "none"  # training.tp_comm_overlap where this layout has TP (none without)

    def sets(self) -> list[str]:
        """The --set keys that give this layout to `ddplab simulate`."""
        out = [
            f"training.tp={self.tp}", f"training.pp={self.pp}", f"training.micro_batch_size={self.micro_batch}",
            f"training.grad_accum={self.grad_accum}", f"training.activation_checkpointing={self.recompute}",
            f"training.mode={self.mode}", f"training.sequence_parallel={'true' if self.tp > 1 else 'false'}",
        ]  # fmt: skip
        if self.mode == "hsdp":
            out.append(f"training.hsdp_shard_size={self.shard}")
        if self.tp_overlap != "none":
            out.append(f"training.tp_comm_overlap={self.tp_overlap}")
        if self.cp > 1:
            out += [f"training.cp={self.cp}", f"training.cp_comm={self.cp_comm}"]
        if self.schedule == "interleaved":
            out += ["training.pp_schedule=interleaved", f"training.pp_virtual_stages={self.virtual}"]
        elif self.schedule == "zb-h1":
            out.append("training.pp_schedule=zb-h1")
        return out


class Scored(NamedTuple):
    candidate: Candidate
    estimate_s: float  # pass 1
    memory_gib: float  # the fullest stage's GPU
    step: Step3D | None  # pass 2 (finalists only)

    @property
    def step_s(self) -> float:
        return self.step.step_s if self.step is not None else self.estimate_s


def splits(n_layer: int, chunks: int) -> bool:
    """The layers go evenly into ``chunks`` model chunks (pp x v), either alone or with the
    embedding and the loss each counted as a layer: Megatron-Core's
    account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split, the split
    Llama 3 405B ran (126 layers + 2 in 16 x 8 chunks, the two end chunks one layer short).
    sim/parallel3d.py chunk_layers gives both splits exactly."""
    return n_layer % chunks == 0 or (n_layer + 2) % chunks == 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _context(seq_len: int, shape, tp: int) -> list[tuple[int, str]]:
    """(cp, cp_comm) pairs searched at this sequence length and tp (module docstring)."""
    if seq_len < CP_MIN_SEQ:
        return [(1, "all_gather")]
    ok = {
        "all_gather": lambda cp: seq_len % (2 * cp) == 0,
        "p2p": lambda cp: seq_len % (2 * cp) == 0,
        "a2a": lambda cp: seq_len % cp == 0 and ulysses_refusal(shape, tp, cp) is None,
    }
    return [(1, "all_gather"), *((cp, comm) for cp in CP for comm in CP_COMMS if ok[comm](cp))]


def grid(base: Scenario, gpus: int, global_batch: int, tp_overlap: str = "none") -> list[Candidate]:
    """Every layout searched; ``tp_overlap``: training.tp_comm_overlap wherever tp > 1."""
    shape, g = base.model.shape, base.network.gpus_per_node
    out = []
    for tp in (d for d in _divisors(g) if shape.n_head % d == 0 and (shape.n_kv_head < d or shape.n_kv_head % d == 0)):
        for cp, comm in _context(base.seq_len, shape, tp):
            op = op_refusal(shape, tp=tp, cp=cp, fused_attention=base.training.fused_attention) is None
            recomputes = [r for r in RECOMPUTES if r != "op" or op]
            pps = (d for d in range(1, shape.n_layer + 1) if gpus % (tp * cp * d) == 0 and splits(shape.n_layer, d))
            for pp in pps:
                dp = gpus // (tp * cp * pp)
                for b in MICRO_BATCHES:
                    if global_batch % (dp * b):
                        continue
                    m = global_batch // (dp * b)
                    schedules = [("1f1b", 1)]
                    if pp > 1 and m % pp == 0:
                        schedules += [("interleaved", v) for v in VIRTUAL if splits(shape.n_layer, pp * v)]
                    if pp > 1 and m >= pp:
                        schedules.append(("zb-h1", 1))
                    # hsdp: the DP group's ranks in one node; with all of them it is fsdp, with one ddp.
                    shard, group = g // tp, dp * cp
                    modes = [x for x in MODES if x != "hsdp" or 1 < shard < group] if group > 1 else ["ddp"]
                    for sched, v in schedules:
                        for rc in recomputes:
                            for mode in modes:
                                s = shard if mode == "hsdp" else 0
                                over = tp_overlap if tp > 1 else "none"
                                c = Candidate(tp, pp, dp, b, m, sched, v, rc, mode, s, cp, comm, over)
                                out.append(c)
    return out


def mode_resets(base: Scenario, c: Candidate) -> dict:
    """The base's training keys the candidate's layout has no use for, with the values it takes
    (sim/config.py keys_for): `plan` sets them so in that layout's `simulate` command."""
    resets = keys_for(base.training, c.mode, c.tp, c.cp, c.pp)
    resets.pop("hsdp_shard_size", None)  # every candidate sets its own
    return resets


def scenario_for(base: Scenario, c: Candidate, gpus: int) -> Scenario:
    t = dataclasses.replace(
        base.training,
        tp=c.tp, pp=c.pp, micro_batch_size=c.micro_batch, grad_accum=c.grad_accum,
        pp_schedule=c.schedule if c.pp > 1 else "1f1b", pp_virtual_stages=c.virtual,
        activation_checkpointing=c.recompute, mode=c.mode, sequence_parallel=c.tp > 1,
        hsdp_shard_size=c.shard, cp=c.cp, cp_comm=c.cp_comm, tp_comm_overlap=c.tp_overlap,
        **mode_resets(base, c),
    )  # fmt: skip
    # Neither pass models a loader or a host delay (and a tp, cp or pp candidate refuses the latter).
    return dataclasses.replace(
        base, ranks=gpus, training=t, stragglers=kept_stragglers(base, gpus), loader_stragglers="", host_delays_s=""
    )


def kept_stragglers(base: Scenario, gpus: int) -> str:
    """The cluster's named stragglers if the planned job has every rank they name, else ""
    (module docstring)."""
    named = base.straggler_map
    return base.stragglers if named and max(named) < gpus else ""


def estimate(sc: Scenario) -> tuple[float, float]:
    """(analytical step time, the fullest GPU's memory) of one layout (module docstring)."""
    lay = layout(sc)
    c = step_costs(sc, lay)
    slow = straggler_factors(sc, lay).max(axis=0)  # each stage as slow as its slowest replica
    fwd, bwd = c.forward_s.sum(axis=1) * slow, c.backward_s.sum(axis=1) * slow
    stage = fwd + bwd
    # The fill and drain of the others, and the backward the DP reduction may hide behind.
    if lay.schedule == "zb-h1":  # (p - 1)(T_F + T_B - T_W); the drain's W's end the step
        fill, last = (lay.pp - 1) * float((fwd + (1 - 2 * W_SHARE) * bwd).mean()), W_SHARE * bwd
    else:
        fill, last = (lay.pp - 1) / lay.v * float(stage.mean()), bwd / lay.v
    fill += 2 * (lay.pp - 1) * c.p2p_s
    gather = c.gather_wait_s if sc.training.overlap and c.gather_wait_s is not None else c.gather_s
    pipeline = lay.m * float(stage.max()) + fill + float(gather.max())
    if sc.training.overlap:
        dp = float(np.max(np.maximum(c.dp_last_bucket_s, c.dp_s - last)))
    else:
        dp = float(c.dp_s.max())
    memory = max(m.total_gib for m in memory_by_stage(sc, lay, c))
    return pipeline + dp + 2 * c.tie_s + float(c.optimizer_s.max()), memory


def _in_process(fn, tasks: list) -> list:
    return [fn(t) for t in tasks]


def score_chunk(task: tuple[Scenario, int, list[Candidate]]) -> list[Scored]:
    """Pass 1 on one chunk of the grid: the layouts that fit, with their estimates, in order."""
    base, gpus, chunk = task
    device = base.compute.device_memory_gib
    out = []
    for c in chunk:
        est, mem = estimate(scenario_for(base, c, gpus))
        if not (device and mem > device):
            out.append(Scored(c, est, mem, None))
    return out


def replay(task: tuple[Scenario, int, Candidate]) -> Step3D:
    """Pass 2 on one finalist: its step event by event, the named stragglers where they sit."""
    base, gpus, c = task
    sc = scenario_for(base, c, gpus)
    return simulate_3d(sc, None, factors=straggler_factors(sc, layout(sc)))


def plan(
    base: Scenario,
    gpus: int,
    global_batch: int,
    *,
    finalists: int = 12,
    map_fn: Callable | None = None,
    tp_overlap: str = "none",
) -> tuple[list[Scored], int]:
    """(the fitting layouts, fastest first: finalists replayed, the rest by estimate; how many
    layouts were considered). ``map_fn``: where the tasks run (module docstring); ``tp_overlap``:
    training.tp_comm_overlap on every layout with TP."""
    run = map_fn or _in_process
    candidates = grid(base, gpus, global_batch, tp_overlap)
    chunks = [(base, gpus, candidates[i : i + CHUNK]) for i in range(0, len(candidates), CHUNK)]
    scored = [s for part in run(score_chunk, chunks) for s in part]
    scored.sort(key=lambda s: s.estimate_s)  # stable: ties keep the grid's order, wherever scored
    steps = run(replay, [(base, gpus, s.candidate) for s in scored[:finalists]])
    top = [s._replace(step=step) for s, step in zip(scored, steps, strict=False)]
    top.sort(key=lambda s: s.step_s)
    return top + scored[finalists:], len(candidates)
