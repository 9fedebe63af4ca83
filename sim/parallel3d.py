"""One training step of a 3D-parallel job: tensor parallelism inside a node (sim/tp.py),
context parallelism over the sequence (sim/tp.py), a pipeline of stages (sim/pipeline.py,
replayed event by event), data parallelism over the rest.

Layout, as Megatron-LM lays ranks out (its initialize_model_parallel, order tp-cp-dp-pp; Llama 3
orders its dimensions the same way, Grattafiori et al. 2024 Sec. 3.3.2): tensor-parallel groups
are tp consecutive ranks; a context-parallel group is cp of them, tp apart; a pipeline stage is
tp x cp x dp consecutive ranks; the replicas (data-parallel ranks) of a GPU are the ranks with
its stage, its TP and its CP position, tp x cp apart; pipeline neighbours are tp x cp x dp ranks
apart, so on different nodes once that fills a node. The tp x cp GPUs of one replica and stage
move in lockstep (TP's and CP's collectives every block), so the replay treats them as one
group, which runs at its slowest GPU. Gradients are reduced over the replicas and the CP group
together, dp x cp ranks with the GPU's stage and TP position, tp apart (each CP rank's gradients
are partial sums over its share of the sequence; Megatron's data-parallel group "with CP"), and
fsdp and zero1 shard over those ranks too.

A step, on each of the dp pipelines (replicas):

1. the schedule runs grad_accum micro-batches through the stages; each stage's forward and
   backward per micro-batch is its layers' block time (compute + exposed TP collectives) plus
   the embedding on the first stage and the output layer and loss on the last; a send between
   stages is the activation, b s h 16-bit values, over the link between their GPUs (with
   tp > 1 Megatron sends 1/tp of it and allgathers it inside the node: the scatter-gather
   optimisation of Narayanan et al. 2021, Sec. 4.1);
2. each stage's gradients are reduced over its data-parallel group (dp ranks, one per node when
   tp x pp fills the node, each GPU on its own NIC: the concurrent groups of a node share its
   NICs, as sim/hsdp.py's replica groups do). The reduction waits for the slowest replica's
   stage. With training.overlap, bucket all-reduces run under the last micro-batch's backward
   (DDP's hooks; Megatron's ``--overlap-grad-reduce``), each model chunk's as soon as its own
   last backward ends (overlapped_dp_end); without, after it (Megatron-LM 2021's "local" DDP).
   fsdp: the stage's 16-bit weights are allgathered once before the first forward (prefetched
   layer by layer behind it when overlapping) and gradients reduce-scattered after the last
   backward, one collective per block (FSDP's unit, sim/fsdp.py), not in DDP's buckets: torchtitan's
   FSDP beside a pipeline. Without one (pp = 1) it reshards each block after its forward, so
   every micro-batch gathers each block twice and reduce-scatters it; that stream runs under the
   micro-batches' compute and what it has left when the last backward starts runs from there
   (step_costs), and the GPU holds ZeRO-3's shards (sim/memory3d.py).
   hsdp (FSDP2 on a (replicate, shard) mesh beside TP/PP, as torchtitan's ``dp_replicate``
   x ``dp_shard`` dimensions do): the same units inside shard groups of S consecutive ranks
   of the data-parallel group (``training.hsdp_shard_size``; by default the group's ranks in
   one node, so the gathers stay on NVLink/xGMI), then each unit's 1/S gradient shard
   allreduced across the R = dp x cp / S groups, one GPU per node per replica group on its
   share of the node's NICs (sim/hsdp.py's placement); the optimizer and the master weights
   sharded over S (with S = dp x cp it is fsdp).
   zero1 (Megatron's distributed optimizer): in DDP's buckets, each gradient bucket is
   reduce-scattered in the gradient dtype, where DDP allreduces it, and after the optimizer
   each GPU's updated shard of the 16-bit weights is allgathered, bucket by bucket; with
   overlap (Megatron's ``--overlap-param-gather``, NeMo's ``overlap_param_sync``) behind the
   next step's first forward, which waits for a bucket only when the gather runs behind it
   (``gather_start_s``). Megatron-Core's docs (distrib_optimizer) give the
   memory: 6 + 12 / dp bytes per parameter for bf16 weights and fp32 gradients;
3. a tied embedding spread over the first and last stages allreduces its gradient between them;
4. the optimizer steps the GPU's parameters (its shard under fsdp, hsdp and zero1).

Persistent slowness (``stragglers``, ``noise.speed_spread_sd``) scales a GPU's compute; a TP
group runs at its slowest member (its collectives are synchronous), so the stage of that
pipeline is slowed, the pipeline replay carries the delay to the stages that wait on it, and
the data-parallel reduction carries it to every other pipeline. Per-micro-step noise
(``noise.distribution``, ``noise.sigma``) is drawn per GPU for every forward and backward of
every micro-batch, and a TP group's operation takes its slowest GPU's draw; ``simulate_3d``
draws one step (its many micro-batches average it), sim/steps3d.py many (`ddplab simulate`).
Assumed: loader waits, episodes and compute interference are not applied here; the output
says so.
"""

import dataclasses
import functools
import math
from typing import NamedTuple

import numpy as np

from sim.collectives import SIMPLE, Fabric, collective_cost
from sim.config import SHARDED_MODES, Scenario
from sim.fsdp import unit_matrix_numels, unit_numels
from sim.memory import CUDA_CONTEXT_GIB
from sim.memory3d import StageMemory, layer_terms, stage_memory
from sim.nccl_time import INTRA_HOP_US, NET_HOP_US
from sim.noise import multipliers, speed_factors
from sim.optimizer import adamw_step_s
from sim.pipeline import PipelineRun, bubble_fraction, in_flight_closed_form, ops_per_stage, run_pipeline
from sim.precision import Precision, sharded
from sim.roofline import rates
from sim.tp import block_time, cp_kv_bytes, head_time
from sim.transformer import (
    TransformerShape,
    flops_per_token,
    kv_heads_per_rank,
    param_count,
    ulysses_kv_heads,
)
from sim.workload import fabric_for

MIB = float(1 << 20)
ASSUMED = (
    "one step drawn; loader waits, episodes, pauses and compute.interference_gamma are not applied (sim/parallel3d.py)"
)


class Layout(NamedTuple):
    tp: int
    pp: int
    dp: int
    v: int  # model chunks per stage (interleaved), else 1
    m: int  # micro-batches per step per pipeline (grad_accum)
    schedule: str
    cp: int = 1

    @property
    def group(self) -> int:
        """GPUs that move in lockstep inside one replica's stage: its TP x CP group."""
        return self.tp * self.cp

    def stage_of(self, rank):
        """The pipeline stage of ``rank`` (an int, or a numpy array of them)."""
        return rank // (self.group * self.dp)

    def replica_of(self, rank):
        """The data-parallel replica (pipeline) of ``rank`` (an int, or a numpy array)."""
        return (rank % (self.group * self.dp)) // self.group


def layout(sc: Scenario) -> Layout:
    t = sc.training
    v = t.pp_virtual_stages if t.pp_schedule == "interleaved" else 1
    schedule = t.pp_schedule if t.pp > 1 else "1f1b"
    return Layout(t.tp, t.pp, sc.dp, v, t.grad_accum, schedule, t.cp)


def chunk_layers(n_layer: int, chunks: int) -> list[int]:
    """Blocks per virtual stage: even, the remainder to the middle chunks first (the first holds
    the embedding, the last the output layer and loss)."""
    base, extra = divmod(n_layer, chunks)
    sizes = [base] * chunks
    order = sorted(range(chunks), key=lambda g: (g in (0, chunks - 1), abs(g - (chunks - 1) / 2)))
    for g in order[:extra]:
        sizes[g] += 1
    return sizes


def dtypes_3d(sc: Scenario) -> Precision:
    """Megatron's mixed precision: the module holds 16-bit weights (no autocast weight casts, a
    16-bit residual stream), the optimizer the precision's master copy: sim/precision.py's
    ``sharded`` arrangement, whatever training.mode."""
    return sharded(sc.training.dtypes)


def chunk_params(sc: Scenario, lay: Layout, sizes: list[int]) -> np.ndarray:
    """(pp, v) parameters of each model chunk on one GPU of its stage: the chunk's blocks'
    matmuls and their split biases / tp, norms (and row-split biases) whole; the
    vocabulary-parallel embedding / tp in the first chunk, the output layer / tp in the last (a
    tied one as a copy there, Megatron)."""
    shape = sc.model.shape
    d = shape.n_embd
    norms = (4 if shape.biases else 2) * d
    split_bias = (shape.qkv_dim if shape.qkv_bias else 0) + (shape.fc_dim if shape.biases else 0)
    row_bias = 2 * d if shape.biases else 0
    block = (shape.block_matmul_numel + split_bias) / lay.tp + norms + row_bias
    out = np.zeros((lay.pp, lay.v))
    for g, n in enumerate(sizes):
        out[g % lay.pp, g // lay.pp] += n * block
    out[0, 0] += shape.embedding_numel / lay.tp + (shape.block_size * d if shape.learned_positions else 0)
    out[-1, -1] += shape.embedding_numel / lay.tp + (2 if shape.biases else 1) * d  # output layer, ln_f
    if lay.pp == 1 and shape.tied_embeddings:
        out[0, 0] -= shape.embedding_numel / lay.tp  # one table serves both ends
    return out


def stage_params(sc: Scenario, lay: Layout, sizes: list[int]) -> np.ndarray:
    """Parameters on one GPU of each stage: its chunks' (chunk_params)."""
    return chunk_params(sc, lay, sizes).sum(axis=1)


def strided_fabric(sc: Scenario, ranks: int, stride: int) -> Fabric:
    """Where a group of ``ranks`` GPUs, ``stride`` apart, communicates: its ranks per node, and
    its share of the node's NICs with the node's other such groups, which run their collectives
    at the same time (the TP positions' data-parallel groups, the CP groups)."""
    g = sc.network.gpus_per_node
    per_node = min(ranks, max(1, g // stride))
    sharing = g // per_node if sc.ranks > g else 1
    full = fabric_for(sc, ranks=ranks)
    return dataclasses.replace(full, gpus_per_node=per_node, inter_busbw_gb_s=full.inter_busbw_gb_s / sharing)


def dp_fabric(sc: Scenario, lay: Layout) -> Fabric:
    """Where one data-parallel group reduces (module docstring): dp x cp ranks, tp apart (a CP
    group's ranks are consecutive in it)."""
    return strided_fabric(sc, lay.dp * lay.cp, lay.tp)


def hsdp_fabrics(sc: Scenario, lay: Layout) -> tuple[Fabric, Fabric]:
    """(shard group, replica group) of hsdp over the data-parallel group (module docstring): S
    consecutive ranks of the dp x cp group, tp apart, and the R = dp x cp / S ranks holding the
    same shard, S x tp apart, each replica group on its share of its nodes' NICs with the other
    groups on them (sim/hsdp.py's placement, with the TP positions' groups beside them)."""
    shard = sc.dp_shard_size
    return strided_fabric(sc, shard, lay.tp), strided_fabric(sc, lay.dp * lay.cp // shard, shard * lay.tp)


def cp_fabric(sc: Scenario, lay: Layout) -> Fabric:
    """Where one context-parallel group all-gathers K and V: cp ranks, tp apart."""
    return strided_fabric(sc, lay.cp, lay.tp)


def bucket_count(size_bytes: float, cap_mb: float, units: int = 0) -> int:
    """How many equal collectives ``size_bytes`` goes out in: buckets of the DDP cap, or with
    ``units`` > 0 one per FSDP unit (each block its own flat parameter, sim/fsdp.py; FSDP has no
    bucket cap)."""
    return units if units > 0 else max(1, math.ceil(size_bytes / (cap_mb * MIB)))


def bucketed_s(op: str, size_bytes: float, fabric: Fabric, cap_mb: float, units: int = 0) -> tuple[float, float]:
    """(all buckets, the last bucket) of a collective over ``size_bytes``, seconds, in
    bucket_count's split."""
    if size_bytes <= 0 or fabric.ranks == 1:
        return 0.0, 0.0
    n = bucket_count(size_bytes, cap_mb, units)
    one = collective_cost(op, size_bytes / n, fabric).time_s
    return n * one, one


def p2p_s(sc: Scenario, lay: Layout, dt: Precision) -> float:
    """One activation send between consecutive stages (module docstring)."""
    if lay.pp == 1:
        return 0.0
    net, t = sc.network, sc.training
    size = t.micro_batch_size * sc.seq_len / lay.cp * sc.model.shape.n_embd * dt.compute_bytes
    cross_node = lay.group * lay.dp >= net.gpus_per_node
    fabric = fabric_for(sc)
    if cross_node:  # rail-optimised: each GPU sends through its own NIC
        bw = fabric.inter_busbw_gb_s / net.gpus_per_node * 1e9
        latency = (net.net_hop_us + NET_HOP_US["ring"][SIMPLE]) * 1e-6
    else:
        bw = fabric.intra_busbw_gb_s * 1e9
        latency = INTRA_HOP_US[net.intra_link][SIMPLE] * 1e-6
    if net.backend == "gloo":  # a send is one of gloo's ring steps (a TCP message), on any link
        latency = net.gloo_hop_latency_us * 1e-6
    if lay.tp > 1 and cross_node:  # scatter-gather: 1/tp each over the network, then an allgather
        gather = collective_cost("allgather", size, fabric_for(sc, ranks=lay.tp)).time_s
        return latency + size / lay.tp / bw + gather
    return latency + size / bw


class StepCosts(NamedTuple):
    """What one step costs before any GPU's speed is applied."""

    forward_s: np.ndarray  # (pp, v) one micro-batch
    backward_s: np.ndarray  # (pp, v)
    tp_comm_s: np.ndarray  # (pp,) exposed TP (and CP) collectives per micro-batch (forward + backward)
    p2p_s: float
    dp_s: np.ndarray  # (pp,) the data-parallel reduction of the stage's gradients
    dp_last_bucket_s: np.ndarray  # (pp,) of the stage's last chunk to finish (chunk 0)
    gather_s: np.ndarray  # (pp,) fsdp's / zero1's allgather of the stage's weights before the first forward
    tie_s: float  # the tied embedding's allreduce between the first and last stages
    optimizer_s: np.ndarray  # (pp,)
    params: np.ndarray  # (pp,) on one GPU of each stage
    layers: list[int]  # per virtual stage
    # (pp, v) per micro-batch, added to forward_s/backward_s unscaled by speed and noise
    # (sim/pipeline.py run_pipeline); None: none (calibrate/validate3d.py sets them)
    sync_forward_s: np.ndarray | None = None
    sync_backward_s: np.ndarray | None = None
    # (pp, v) each model chunk's share of dp_s and its last bucket; None: one chunk per stage
    dp_chunk_s: np.ndarray | None = None
    dp_chunk_last_s: np.ndarray | None = None
    # (pp,) with overlap, how long the stage's first forward waits for the gather (gather_start_s)
    gather_wait_s: np.ndarray | None = None
    # (pp,) bytes of one collective of the stage's reduction (its first chunk's; the size that
    # dp_last_bucket_s times), so that measured jitter is drawn for that size (sim/steps3d.py)
    dp_bucket_bytes: np.ndarray | None = None


def step_costs(sc: Scenario, lay: Layout) -> StepCosts:
    c, t, shape = sc.compute, sc.training, sc.model.shape
    if c.step_compute_s is not None or c.mfu is not None:
        key, value = ("compute.mfu", c.mfu) if c.mfu is not None else ("compute.step_compute_s", c.step_compute_s)
        raise ValueError(
            f"{key}: tensor and pipeline parallelism time each kernel by the roofline, which a fixed {value:g}"
            f" would replace (--set {key}=none: the roofline of the preset's peak and efficiencies)"
        )
    dt = dtypes_3d(sc)
    r = rates(c, dt)
    # network.enabled = false: no wire, so the TP and CP collectives inside each block (and the
    # head's) cost nothing either, as the DP reduction and the sends below.
    tp_fabric = fabric_for(sc, ranks=lay.tp) if sc.network.enabled else None
    kw = {"tp": lay.tp, "sequence_parallel": t.sequence_parallel and lay.tp > 1, "fabric": tp_fabric, "cp": lay.cp}
    cp_net = cp_fabric(sc, lay) if lay.cp > 1 else None
    blk = block_time(
        shape, sc.seq_len, t.micro_batch_size, dt, r, recompute=t.recompute, cp_fabric=cp_net, cp_comm=t.cp_comm,
        fused_attention=t.fused_attention, dropout=t.dropout > 0, comm_overlap=t.tp_comm_overlap, **kw
    )  # fmt: skip
    if not sc.network.enabled:
        blk = blk._replace(forward_comm_s=0.0, backward_comm_s=0.0)
    head = head_time(shape, sc.seq_len, t.micro_batch_size, dt, r, fused_loss=t.fused_loss, **kw)
    sizes = list(t.pp_layers) if t.pp_layers is not None else chunk_layers(shape.n_layer, lay.pp * lay.v)
    fwd = np.zeros((lay.pp, lay.v))
    bwd = np.zeros((lay.pp, lay.v))
    comm = np.zeros(lay.pp)
    for g, n in enumerate(sizes):
        i, chunk = g % lay.pp, g // lay.pp
        fwd[i, chunk] = n * blk.forward_s
        bwd[i, chunk] = n * blk.backward_s
        comm[i] += n * (blk.forward_comm_s + blk.backward_comm_s)
    fwd[0, 0] += head.embedding_forward_s
    bwd[0, 0] += head.embedding_backward_s
    fwd[-1, -1] += head.output_forward_s
    bwd[-1, -1] += head.output_backward_s
    per_chunk = chunk_params(sc, lay, sizes)
    params = per_chunk.sum(axis=1)
    fabric = dp_fabric(sc, lay)
    if t.mode == "hsdp":
        fabric, replica = hsdp_fabrics(sc, lay)
    cap = t.bucket_cap_mb
    dp_c, last_c = np.zeros((lay.pp, lay.v)), np.zeros((lay.pp, lay.v))
    gather, first_gather = np.zeros(lay.pp), np.zeros(lay.pp)
    bucket_bytes = np.zeros(lay.pp)
    for g, n in enumerate(sizes):
        i, chunk = g % lay.pp, g // lay.pp
        size = per_chunk[i, chunk]
        if t.mode in ("fsdp", "hsdp"):  # one unit per block, and one for what the chunk holds besides blocks
            units = max(1, n + (g in (0, len(sizes) - 1)))
            grads = size * dt.grad_bytes
            whole, one = bucketed_s("reduce_scatter", grads, fabric, cap, units)
            if t.mode == "hsdp":  # fsdp's units in the shard group, then each shard allreduced across
                across, last = bucketed_s("allreduce", grads / fabric.ranks, replica, cap, units)
                whole, one = whole + across, one + last
            dp_c[i, chunk], last_c[i, chunk] = whole, one
            gather[i] += bucketed_s("allgather", size * dt.compute_bytes, fabric, cap, units)[0]
            wire, wire_units = grads, units
        elif t.mode == "zero1":  # DDP's buckets, reduce-scattered; the weights gathered in the same buckets
            dp_c[i, chunk], last_c[i, chunk] = bucketed_s("reduce_scatter", size * dt.grad_bytes, fabric, cap)
            whole, one = bucketed_s("allgather", size * dt.compute_bytes, fabric, cap)
            gather[i] += whole
            first_gather[i] = one if chunk == 0 else first_gather[i]
            wire, wire_units = size * dt.grad_bytes, 0
        else:  # a fp16/bf16 comm hook puts 2 bytes per gradient on the wire, and pays its casts
            wire = size * (2 if t.comm_hook in ("fp16", "bf16") else dt.grad_bytes)
            dp_c[i, chunk], last_c[i, chunk] = bucketed_s("allreduce", wire, fabric, cap)
            dp_c[i, chunk] += t.compress_s_per_gb * size * dt.grad_bytes / 1e9
            wire_units = 0
        if chunk == 0:  # the size of one of bucketed_s's collectives
            bucket_bytes[i] = wire / bucket_count(wire, cap, wire_units)
    if resharded_per_block(sc, lay):
        # Each block resharded after its forward: every micro-batch gathers it for its forward
        # and again for its backward and reduce-scatters its gradient (as sim/fsdp.py runs
        # FSDP), on one stream under the m micro-batches' compute. What that stream has left
        # when the last backward starts runs from there: at least the last reduce-scatter, at
        # most all of it beyond the compute before (planner and replay both read it as the
        # reduction, overlapped_dp_end).
        stream = lay.m * (2.0 * gather + dp_c.sum(axis=1))
        before_last = lay.m * (fwd.sum(axis=1) + bwd.sum(axis=1)) - bwd.sum(axis=1)
        if t.fsdp_prefetch == 0:  # nothing issued ahead: every collective waits and is waited for
            before_last = -bwd.sum(axis=1)
        dp_c[:, 0] = np.maximum(dp_c[:, 0], stream - before_last)
    dp_s, last = dp_c.sum(axis=1), last_c[:, 0]
    tie = 0.0
    if lay.pp > 1 and shape.tied_embeddings:
        pair = dataclasses.replace(fabric_for(sc, ranks=2), gpus_per_node=1)
        tie = collective_cost("allreduce", shape.embedding_numel / lay.tp * dt.grad_bytes, pair).time_s
    if not sc.network.enabled:
        comm[:] = 0.0
        dp_s[:], last[:], gather[:], first_gather[:] = 0.0, 0.0, 0.0, 0.0
        dp_c[:], last_c[:] = 0.0, 0.0
        tie = 0.0
    shard = sc.dp_shard_size
    opt = np.array([adamw_step_s(n / shard, dt, c.hbm_tb_s) for n in params])
    if c.optimizer_s is not None:  # the whole model's, given: each GPU its share
        opt = c.optimizer_s * params / param_count(shape) / shard
    p2p = p2p_s(sc, lay, dt) if sc.network.enabled else 0.0
    if t.mode == "zero1":
        wait = gather_start_s(gather, first_gather, fwd.sum(axis=1))
    else:  # fsdp, hsdp: one block's unit ahead of the forward
        wait = gather / np.array([max(1, sum(sizes[g] for g in range(i, len(sizes), lay.pp))) for i in range(lay.pp)])
    return StepCosts(
        fwd, bwd, comm, p2p, dp_s, last, gather, tie, opt, params, sizes, dp_chunk_s=dp_c, dp_chunk_last_s=last_c,
        gather_wait_s=wait, dp_bucket_bytes=bucket_bytes,
    )  # fmt: skip


def gather_start_s(gather_s: np.ndarray, first_bucket_s: np.ndarray, forward_s: np.ndarray) -> np.ndarray:
    """(pp,) how long an overlapped weight allgather delays each stage's first forward: its first
    bucket, and whatever of the rest does not fit under one micro-batch's forward (the buckets
    are gathered in turn, each layer's forward waiting for its own; Megatron-Core launches the
    next bucket's gather from the forward pre-hook of the current one)."""
    return first_bucket_s + np.maximum(0.0, gather_s - first_bucket_s - forward_s)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step3D:
    """One simulated step of a 3D-parallel job."""

    layout: Layout
    step_s: float
    pipeline_s: float  # the slowest pipeline's makespan
    dp_exposed_s: float  # what the data-parallel reduction adds after the slowest stage's backward
    optimizer_s: float
    bubble_fraction: float  # closed form for equal stages
    idle_fraction: np.ndarray  # (pp,) each stage's idle share of the slowest pipeline's makespan
    tp_comm_s: float  # exposed TP (and CP) collectives per step on the busiest stage
    p2p_s: float  # one send
    tokens_per_step: int
    model_flops_per_step: float  # 6N + 12 L d T per token
    peak_tflop_s: float
    memory: list[StageMemory]
    slowest_stage: int  # the stage whose group is slowest (the straggler's, when there is one)
    stage_factor: np.ndarray  # (dp, pp) each TP group's compute-time factor
    costs: StepCosts
    busy_s: np.ndarray  # (dp, pp) each TP group's compute in this step (its forwards and backwards)
    stage_end_s: np.ndarray  # (dp, pp) when its last backward ended
    reduced_s: np.ndarray  # (pp,) when each stage's data-parallel reduction (and the tie) ended

    @property
    def gpus(self) -> int:
        return self.layout.group * self.layout.pp * self.layout.dp

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / self.step_s / self.gpus / (self.peak_tflop_s * 1e12)

    @property
    def peak_memory_gib(self) -> float:
        return max(s.total_gib for s in self.memory)

    def summary(self) -> dict:
        return {
            "layout": layout_keys(self.layout),
            "step_time_s": self.step_s,
            "pipeline_s": self.pipeline_s,
            "dp_exposed_s": self.dp_exposed_s,
            "optimizer_s": self.optimizer_s,
            "bubble_fraction": self.bubble_fraction,
            "stage_idle_fraction": [float(x) for x in self.idle_fraction],
            "tp_comm_exposed_s": self.tp_comm_s,
            "p2p_send_s": self.p2p_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "peak_memory_gib": self.peak_memory_gib,
            "memory_gib_by_stage": [round(s.total_gib, 3) for s in self.memory],
            "slowest_stage": self.slowest_stage,
            "assumed": ASSUMED,
        }


def layout_keys(lay: Layout) -> dict:
    """A layout as the JSON of `simulate` has it."""
    return {
        "tp": lay.tp,
        "cp": lay.cp,
        "pp": lay.pp,
        "dp": lay.dp,
        "virtual_stages": lay.v,
        "micro_batches": lay.m,
        "schedule": lay.schedule,
    }


def group_factors(sc: Scenario, lay: Layout, rng: np.random.Generator) -> np.ndarray:
    """(dp, pp): each TP (x CP) group's compute-time factor, its slowest GPU's."""
    per_gpu = speed_factors(rng, sc.ranks, sc.noise.speed_spread_sd, sc.straggler_map)
    out = np.zeros((lay.dp, lay.pp))
    for rank, f in enumerate(per_gpu):
        j, i = lay.replica_of(rank), lay.stage_of(rank)
        out[j, i] = max(out[j, i], f)
    return out


def straggler_factors(sc: Scenario, lay: Layout) -> np.ndarray:
    """(dp, pp): each TP (x CP) group's factor from the named stragglers alone, its slowest
    GPU's (1 elsewhere): ``group_factors`` without the random spread, which `ddplab plan`
    replays so that a cluster's known slow GPU sits where `simulate` puts it."""
    out = np.ones((lay.dp, lay.pp))
    for rank, f in sc.straggler_map.items():
        j, i = lay.replica_of(rank), lay.stage_of(rank)
        out[j, i] = max(out[j, i], f)
    return out


def op_noise(sc: Scenario, lay: Layout, rng: np.random.Generator) -> np.ndarray | None:
    """(dp, pp, operations per stage) multipliers: each GPU's per-micro-step draw, the TP (x CP)
    group waiting for its slowest; None without noise."""
    n = sc.noise
    if n.distribution == "none" or (n.distribution != "empirical" and n.sigma == 0.0):
        return None
    ops = ops_per_stage(lay.schedule, lay.m, lay.v)
    # Each GPU from the pooled samples: a trace's per-rank rows (samples_by_rank) are a DDP job's ranks.
    draws = multipliers(rng, n.distribution, n.sigma, (lay.dp, lay.pp, lay.group, ops), n.samples)
    return draws.max(axis=2)


@functools.lru_cache(maxsize=256)
def block_numel_on_gpu(shape: TransformerShape, tp: int) -> float:
    """One block's parameters on a GPU of its TP group: matmul weights split over TP, norms whole
    (cached: the planner asks for thousands of layouts of one model)."""
    matrices, whole = float(unit_matrix_numels(shape)[1]), float(unit_numels(shape)[1])
    return matrices / tp + (whole - matrices)


def resharded_per_block(sc: Scenario, lay: Layout) -> bool:
    """FSDP without a pipeline: torchtitan reshards each block after its forward (its apply_fsdp
    sets reshard_after_forward = False only for PP), so every micro-batch gathers it twice and
    the GPU holds ZeRO-3's shards (step_costs, memory_by_stage)."""
    return sc.training.mode in SHARDED_MODES and lay.pp == 1


def memory_by_stage(sc: Scenario, lay: Layout, costs: StepCosts) -> list[StageMemory]:
    t, shape = sc.training, sc.model.shape
    dt = dtypes_3d(sc)
    local = sc.seq_len // lay.cp  # the tokens of each sequence one GPU holds (context parallelism)
    terms = layer_terms(
        shape, local, t.micro_batch_size, dt, fused_attention=t.fused_attention, dropout=t.dropout > 0,
        kv_len=sc.seq_len,
    )  # fmt: skip
    # One block's gathered K and V, and their gradients in the backward (sim/memory3d.py); ring
    # attention's two chunks of each instead; Ulysses' K and V of its heads over the whole
    # sequence, received by the all-to-all, and their gradients (sim/tp.py).
    kv = cp_kv_bytes(shape, t.micro_batch_size * sc.seq_len, dt, lay.tp)
    if lay.cp == 1:
        transient = 0.0
    elif t.cp_comm == "a2a":
        held = kv_heads_per_rank(shape, lay.tp)
        transient = 2 * kv * ulysses_kv_heads(shape, lay.tp, lay.cp) / held / lay.cp
    else:
        transient = 4 * kv / lay.cp if t.cp_comm == "p2p" else 2 * kv
    out = []
    for i in range(lay.pp):
        layers = sum(costs.layers[g] for g in range(i, lay.pp * lay.v, lay.pp))
        chunks_in_flight = in_flight_closed_form(lay.schedule, lay.pp, lay.m, lay.v, i)
        per_chunk = layers / lay.v
        resharded = None
        if resharded_per_block(sc, lay):
            block = block_numel_on_gpu(shape, lay.tp)
            resharded = (costs.params[i] - layers * block, block, min(1 + t.fsdp_prefetch, layers))
        out.append(
            stage_memory(
                stage=i, params=costs.params[i], dtypes=dt, mode=t.mode, dp=sc.dp_shard_size, layers=layers,
                in_flight_layers=chunks_in_flight * per_chunk, terms=terms, tp=lay.tp,
                sequence_parallel=t.sequence_parallel and lay.tp > 1, recompute=t.recompute, shape=shape,
                seq_len=local, micro_batch=t.micro_batch_size, first=i == 0, last=i == lay.pp - 1,
                cuda_context_gib=CUDA_CONTEXT_GIB, transient_bytes=transient, fused_loss=t.fused_loss,
                resharded=resharded,
            )
        )  # fmt: skip
    return out


def overlapped_dp_end(costs: StepCosts, run: PipelineRun) -> np.ndarray:
    """(pp,) when each stage's overlapped data-parallel reduction ends. Each model chunk's
    buckets (or FSDP units) reduce as its last micro-batch's backward produces them, the
    chunks one after another on the stage's stream in the order they finish: a chunk's
    reduction runs under its last backward and under whatever the stage computes after it.
    Interleaved, chunk v-1 finishes first and chunk 0 last, so the early chunks' reductions
    hide behind the drain (Megatron-LM's overlap_grad_reduce launches each chunk's
    reduction when its gradients are ready, distributed.DistributedDataParallel with
    virtual pipelines; Llama 3's FSDP reduces "asynchronously", arXiv 2407.21783 Sec. 3.3.2).
    With one chunk: max(its end + the last bucket, its last backward's start + all buckets).
    ``run``: one pipeline's replay or a batch's (leading axes); a chunk's reduction waits for
    that chunk in every pipeline."""
    chunks = run.chunk_end_s.shape[-2:]
    chunk_end = run.chunk_end_s.reshape(-1, *chunks).max(axis=0)
    chunk_start = run.chunk_last_start_s.reshape(-1, *chunks).max(axis=0)
    dp_c = costs.dp_chunk_s if costs.dp_chunk_s is not None else costs.dp_s[:, None]
    last_c = costs.dp_chunk_last_s if costs.dp_chunk_last_s is not None else costs.dp_last_bucket_s[:, None]
    done = np.zeros(len(chunk_end))
    for i in range(len(chunk_end)):
        t = 0.0
        for c in np.argsort(chunk_end[i], kind="stable"):
            t = max(t, chunk_start[i, c]) + dp_c[i, c]
            t = max(t, chunk_end[i, c] + last_c[i, c])
        done[i] = t
    return done


def simulate_3d(
    sc: Scenario, rng: np.random.Generator | None, *, factors: np.ndarray | None = None, costs: StepCosts | None = None
) -> Step3D:
    """One step of ``sc`` (module docstring). ``factors`` (dp, pp) overrides the drawn speeds;
    ``rng`` None draws nothing (identical GPUs, no noise: the planner's replay). ``costs``
    replaces step_costs' (calibrate/validate3d.py: per-stage compute from a probe's timings)."""
    lay = layout(sc)
    costs = step_costs(sc, lay) if costs is None else costs
    factors = group_factors(sc, lay, rng) if factors is None else factors
    noise = op_noise(sc, lay, rng) if rng is not None else None
    return step_3d(sc, lay, costs, factors, noise)


def step_3d(
    sc: Scenario,
    lay: Layout,
    costs: StepCosts,
    factors: np.ndarray,
    noise: np.ndarray | None,
    *,
    memory: list[StageMemory] | None = None,
) -> Step3D:
    """One step given its draws: ``factors`` (dp, pp), ``noise`` (dp, pp, ops) or None
    (op_noise); ``memory``: memory_by_stage's, when the caller has it (sim/steps3d.py runs
    many steps of one layout). The dp pipelines replay together (sim/pipeline.py's batch),
    identical ones once."""
    overlap, gathers = sc.training.overlap, sc.training.mode in ("fsdp", "hsdp", "zero1")
    start = costs.gather_wait_s if overlap and costs.gather_wait_s is not None else costs.gather_s
    if noise is None:  # identical pipelines replay identically
        rows, which = np.unique(factors, axis=0, return_inverse=True)
        which = which.reshape(-1)
    else:
        rows, which = factors, np.arange(lay.dp)
    f = rows[:, :, None]
    run = run_pipeline(
        lay.schedule,
        lay.pp,
        lay.m,
        lay.v,
        costs.forward_s * f,
        costs.backward_s * f,
        costs.p2p_s,
        start_s=start if gathers else None,
        op_noise=noise,
        sync_forward_s=costs.sync_forward_s,
        sync_backward_s=costs.sync_backward_s,
    )
    stage_end = run.stage_end_s[which]  # (dp, pp)
    # Each stage's reduction waits for that stage in every pipeline.
    end = stage_end.max(axis=0)
    if overlap:
        done = overlapped_dp_end(costs, run)
    else:
        done = end + costs.dp_s
    done[0] += costs.tie_s
    done[-1] += costs.tie_s
    slow = int(np.argmax(run.makespan_s))
    pipeline_s = float(run.makespan_s[slow])
    finish = float(np.max(done + costs.optimizer_s))
    t = sc.training
    tokens = lay.dp * lay.m * t.micro_batch_size * sc.seq_len
    return Step3D(
        layout=lay,
        step_s=finish,
        pipeline_s=pipeline_s,
        dp_exposed_s=float(np.max(done)) - pipeline_s,
        optimizer_s=float(costs.optimizer_s.max()),
        bubble_fraction=bubble_fraction(lay.schedule, lay.pp, lay.m, lay.v),
        idle_fraction=run.idle_s[slow] / pipeline_s,
        tp_comm_s=float(costs.tp_comm_s.max() * lay.m),
        p2p_s=costs.p2p_s,
        tokens_per_step=tokens,
        model_flops_per_step=flops_per_token(sc.model.shape, sc.seq_len) * tokens,
        peak_tflop_s=sc.compute.peak_for(t.dtypes),
        memory=memory_by_stage(sc, lay, costs) if memory is None else memory,
        slowest_stage=int(np.argmax(np.max(factors, axis=0))),
        stage_factor=factors,
        costs=costs,
        busy_s=run.busy_s[which],
        stage_end_s=stage_end,
        reduced_s=done,
    )


def megatron_flops_per_step(n_layer: int, hidden: int, vocab: int, seq_len: int, global_batch: int) -> float:
    """FLOPs per step as Narayanan et al. 2021 count them (Sec. 5.1, their eq. 3), for a GPT
    model trained with full activation recomputation (one more forward in every backward):
    96 B s l h^2 (1 + s / (6 h) + V / (16 l h)). Their achieved TFLOP/s per GPU is this over
    the step time and the GPU count."""
    b, s, ell, h = global_batch, seq_len, n_layer, hidden
    return 96.0 * b * s * ell * h * h * (1.0 + s / (6.0 * h) + vocab / (16.0 * ell * h))
