"""Tensor parallelism, Megatron-style: one block's compute and communication on each of the
``training.tp`` GPUs of a tensor-parallel group (inside one node).

Shoeybi et al. 2019 ("Megatron-LM", Sec. 3) split a block's matmuls so that a block needs two
collectives in its forward and two in its backward: the QKV and first MLP matmuls are split by
columns (each GPU computes its heads and its slice of the MLP's hidden units), the attention
output and second MLP matmuls by rows, whose partial sums are allreduced (forward: after
attention and after the MLP, operator g; backward: the input gradients before the QKV and first
MLP matmuls, operator f). Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) replaces
each allreduce with a reduce-scatter and an allgather of the same bytes, and splits the norms,
the residual adds and dropout along the sequence, so those run on 1/tp of the tokens too.

What runs where, per block and micro-batch, under the roofline (sim/roofline.py):

- matmuls, attention, RoPE, the activation function and their weight-gradient work: 1/tp of the
  work (heads and hidden units split); their bytes are scaled by 1/tp as well, which undercounts
  the replicated input read of a column-split matmul (at these sizes the matmuls are
  compute-bound, so the time does not move).
- layer norms and residual adds: the whole t x d on every GPU, or 1/tp with sequence parallelism.
- the output layer and the loss: vocabulary-parallel (Megatron's VocabParallelEmbedding and
  parallel cross-entropy), 1/tp of the T x vocab work; the final norm as the block norms.

The collectives are exposed: Megatron-LM (2021) issues them on the compute stream, between the
matmuls that need their result, so nothing hides them (Narayanan et al. 2021, Sec. 3.2).
Recomputation reruns the forward, collectives included, in the backward (full); selective
recomputation reruns only attention's core, which has none.

TP communication overlap (``tp_comm_overlap``). "wgrad": Transformer Engine's linear layers (and
Megatron-Core's ColumnParallelLinear) reduce-scatter a column-split layer's input gradient
(all-reduce it without sequence parallelism) asynchronously while that layer's weight-gradient
matmul runs (transformer_engine/pytorch/module/linear.py, "Overlap dgrad-RS/AR with wgrad"), so
each of those two backward collectives costs max(0, C - G_wgrad); the rest stays exposed.
"full" (sequence parallelism only): Transformer Engine's userbuffers (NeMo's
``ub_tp_comm_overlap``) and PyTorch's micro-pipelined TP (torchtitan's AsyncTP) split each
all-gather and reduce-scatter of a block into chunks and run them beside the matmul that
consumes or produces the activation, chunk by chunk. Each collective has one partner matmul:
forward, the all-gathers feed the QKV and first MLP matmuls and the reduce-scatters follow the
attention output and second MLP matmuls; backward, the gradient's all-gathers feed those two
row-split layers' input-gradient matmuls and the reduce-scatters follow the two column-split
layers' (TE overlaps the latter with the weight-gradient matmul, the same size). With k = tp
chunks, the first chunk of an all-gather is the rank's own (nothing to wait for) and each later
step's transfer runs under the previous chunk's matmul; a reduce-scatter mirrors it. So a
collective of C seconds beside a matmul of G costs max(0, C - G (k - 1) / k) on top of the
matmul. Assumed: the transfers do not slow the matmul (TE's ring exchange and AsyncTP move the
chunks with copy engines; TE's pipelined reduce-scatter takes 16-24 of an H100's 132 SMs,
NeMo-Framework-Launcher's tp_overlap configs, which is not charged), and the output
layer's and embedding's collectives (``head_time``) stay exposed.

Context parallelism (``cp`` > 1), as Llama 3 runs it (Grattafiori et al. 2024, Sec. 3.3.2):
each sequence is cut into 2 cp chunks and a CP rank holds chunks i and 2 cp - 1 - i, so that
under the causal mask every rank scores the same number of query-key pairs. Every kernel then
does 1/cp of its work on each CP rank: the per-token ones on s / cp tokens, attention on s / cp
queries against keys up to the whole sequence, which is 1/cp of the causal total by that
placement. Before attention each block all-gathers K and V over the CP group (each rank's
s / cp tokens of its KV heads, GQA-narrow); only the rank's own chunk is kept for the backward
(sim/memory3d.py counts the gathered copy as transient), so the backward gathers them again and
reduce-scatters their gradients. Llama 3 chose the all-gather over ring attention knowing its
latency is exposed (small against attention's O(s^2) work because GQA keeps K and V narrow), so
all of it is exposed here; full recomputation reruns the forward's TP collectives, and its
gather serves the backward. Attention's bytes (it reads the whole K and V) are taken as 1/cp
too: at these lengths attention is compute-bound.

Ring attention (``cp_comm = "p2p"``, Megatron-Core's cp_comm_type "p2p", TransformerEngine's
ring exchange; Liu et al. 2023, "Ring Attention with Blockwise Transformers"): instead of one
gather, each rank's K and V chunk travels around the CP ring in cp - 1 steps while the rank
scores its queries against the chunk it holds, so each step's transfer runs under that step's
attention and only what it exceeds is exposed: (cp - 1) max(0, step - A / cp) per block, A the
attention core's time on the rank (the placement above makes every step's share equal, taken as
A / cp). A step moves one chunk between neighbours at once on every rank, one step of the ring
all-gather of the same K and V, so it is timed as that all-gather / (cp - 1). The backward passes
K and V and their gradients, two chunks a step, under the backward's attention (and its
recomputed core); full recomputation reruns the forward's ring first. A rank holds two chunks of
K and V (the one in use, the one arriving) and two of their gradients, not the gathered whole
(sim/parallel3d.py's memory).

Ulysses (``cp_comm = "a2a"``; Jacobs et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509, Sec.
3.1): each CP rank holds s / cp tokens of every head it has; before attention an all-to-all
trades tokens for heads, so a rank holds the whole sequence of 1/cp of its heads and runs
attention on them as it would without CP (balanced whatever the mask: every head is the whole
causal square), and after it a second all-to-all trades them back. DeepSpeed's
DistributedAttention exchanges Q, K and V one all-to-all each and the context one: four a
block forward, four backward (their gradients), on the compute stream, so exposed; full
recomputation reruns the forward's four. Each moves the rank's s / cp tokens of those heads,
(cp - 1) / cp of it off the rank (sim/collectives.py alltoall_s). The heads must split: a TP
rank's query heads n_head / tp over cp, and its KV heads too, or, with fewer KV heads than cp
(grouped-query attention), each repeated to cp so every rank gets the one its queries use
(sim/transformer.py ``ulysses_kv_heads``), which then moves more bytes than the heads it holds.
"""

from typing import NamedTuple

from sim.collectives import Fabric, collective_cost
from sim.precision import Precision
from sim.roofline import (
    EMBEDDING_KERNELS,
    Kernel,
    Rates,
    block_kernels,
    head_kernels,
    kernel_time_s,
    op_kept_share,
    rerun,
)
from sim.transformer import TransformerShape, kv_heads_per_rank, ulysses_kv_heads

# Kernels that run on the whole sequence on every TP rank unless sequence parallelism splits it.
_REPLICATED = ("ln_", "residual")


def shard_kernel(k: Kernel, tp: int, sequence_parallel: bool, cp: int = 1) -> Kernel:
    """One kernel as each of ``tp`` x ``cp`` GPUs runs it (module docstring)."""
    split = cp if tp == 1 or (k.name.startswith(_REPLICATED) and not sequence_parallel) else tp * cp
    return k if split == 1 else k._replace(flops=k.flops / split, bytes=k.bytes / split)


class BlockTime(NamedTuple):
    """One block, one micro-batch, on one GPU of the TP group, seconds."""

    forward_compute_s: float
    backward_compute_s: float  # without recomputation
    recompute_s: float  # what backward adds for training.activation_checkpointing
    forward_comm_s: float  # two allreduces (or allgathers + reduce-scatters); CP: the K/V allgather
    backward_comm_s: float  # the same two, full recompute's two more; CP: K/V gathered again, grads scattered
    attention_backward_s: float = 0.0  # of backward_compute_s, the attention core's (ring attention hides under it)

    @property
    def forward_s(self) -> float:
        return self.forward_compute_s + self.forward_comm_s

    @property
    def backward_s(self) -> float:
        return self.backward_compute_s + self.recompute_s + self.backward_comm_s


def tp_collective_s(size_bytes: float, fabric: Fabric | None, sequence_parallel: bool) -> float:
    """One of the block's four synchronisations: an allreduce of the t x d activation, or with
    sequence parallelism the reduce-scatter and the allgather that replace it. ``fabric`` None:
    no network (`network.enabled = false`), nothing to wait for."""
    if fabric is None or fabric.ranks == 1:
        return 0.0
    if sequence_parallel:
        return (
            collective_cost("reduce_scatter", size_bytes, fabric).time_s
            + collective_cost("allgather", size_bytes, fabric).time_s
        )
    return collective_cost("allreduce", size_bytes, fabric).time_s


def block_time(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    p: Precision,
    r: Rates,
    *,
    tp: int,
    sequence_parallel: bool,
    recompute: str,
    fabric: Fabric,
    cp: int = 1,
    cp_fabric: Fabric | None = None,
    cp_comm: str = "all_gather",
    fused_attention: bool = True,
    dropout: bool = False,
    comm_overlap: str = "none",
) -> BlockTime:
    """``seq_len``: the whole sequence; with ``cp`` > 1 each GPU holds 1/cp of it and
    ``cp_fabric`` is its CP group's, ``cp_comm`` how it exchanges K and V (module docstring);
    ``fused_attention``, ``dropout``: sim/roofline.py block_kernels'; ``comm_overlap``: the TP
    collectives under their matmuls (module docstring; needs ``sequence_parallel``)."""
    if comm_overlap == "full" and not sequence_parallel:
        raise ValueError("training.tp_comm_overlap: full needs training.sequence_parallel, got 'full'")
    tokens = float(micro_batch * seq_len)
    fwd = bwd = core = core_bwd = op_rerun = 0.0
    matmul_s: dict[str, float] = {}
    for k in block_kernels(shape, seq_len, tokens, p, fused_attention=fused_attention, dropout=dropout):
        t = kernel_time_s(shard_kernel(k, tp, sequence_parallel, cp), r)
        if k.name in _OVERLAP_PARTNERS:
            matmul_s[k.name] = t
        if k.backward:
            bwd += t
            core_bwd += t if k.core else 0.0
        else:
            fwd += t
            core += t if k.core else 0.0
            op_rerun += t * (1.0 - op_kept_share(k.name, shape))  # torchtitan's per-op AC (recompute op)
    # Each synchronisation moves the t x d activation in the compute dtype. With sequence
    # parallelism the pair of collectives also replaces the allreduce (operator g) and the
    # identity (operator f), so the count is the same: two in forward, two in backward.
    size = tokens / cp * shape.n_embd * p.compute_bytes
    if comm_overlap == "full" and fabric is not None and fabric.ranks > 1:
        tp_fwd, tp_bwd = overlapped_tp_s(size, fabric, matmul_s, tp)
    else:
        tp_fwd = tp_bwd = 2 * tp_collective_s(size, fabric, sequence_parallel)
        if comm_overlap == "wgrad" and fabric is not None and fabric.ranks > 1:
            tp_bwd = wgrad_overlapped_s(size, fabric, matmul_s, sequence_parallel)
    # op: what its policy does not keep (sim/roofline.py op_kept_share); sim/config.py allows it
    # here without TP or CP only, so no TP or CP collective is rerun with it.
    recompute_s = op_rerun if recompute == "op" else rerun(recompute, fwd, core)
    if cp > 1 and cp_comm == "a2a":
        cp_fwd = ulysses_a2a_s(shape, tokens, p, tp, cp, cp_fabric)
        cp_bwd = cp_fwd * (2 if recompute == "full" else 1)  # the gradients' four; full reruns the forward's
    elif cp > 1 and cp_comm == "p2p":
        step, step2 = cp_ring_steps_s(shape, tokens, p, tp, cp, cp_fabric)
        cp_fwd = (cp - 1) * max(0.0, step - core / cp)
        # The backward's ring runs under its attention, and under the core it reruns (selective);
        # full recomputation reruns the whole forward, its ring included, before it.
        under = core_bwd + (core if recompute == "selective" else 0.0)
        cp_bwd = (cp - 1) * max(0.0, step2 - under / cp) + (cp_fwd if recompute == "full" else 0.0)
    else:
        gather, scatter = cp_collectives_s(shape, tokens, p, tp, cp, cp_fabric)
        cp_fwd, cp_bwd = gather, gather + scatter
    fwd_comm = tp_fwd + cp_fwd
    bwd_comm = tp_bwd + cp_bwd + (tp_fwd if recompute == "full" else 0.0)
    return BlockTime(fwd, bwd, recompute_s, fwd_comm, bwd_comm, core_bwd)


# Each TP collective's partner matmul under overlap (module docstring): (op, kernel) pairs for the
# forward's four and the backward's four.
_OVERLAP_FORWARD = (
    ("allgather", "attn.c_attn"),
    ("reduce_scatter", "attn.c_proj"),
    ("allgather", "mlp.c_fc"),
    ("reduce_scatter", "mlp.c_proj"),
)
_OVERLAP_BACKWARD = (
    ("allgather", "attn.c_proj.dgrad"),
    ("reduce_scatter", "attn.c_attn.dgrad"),
    ("allgather", "mlp.c_proj.dgrad"),
    ("reduce_scatter", "mlp.c_fc.dgrad"),
)
# "wgrad": the two column-split layers' weight-gradient matmuls, under which their input
# gradients are reduced.
_WGRAD_PARTNERS = ("attn.c_attn.wgrad", "mlp.c_fc.wgrad")
_OVERLAP_PARTNERS = frozenset(name for _, name in _OVERLAP_FORWARD + _OVERLAP_BACKWARD) | set(_WGRAD_PARTNERS)


def overlapped_tp_s(size_bytes: float, fabric: Fabric, matmul_s: dict[str, float], tp: int) -> tuple[float, float]:
    """(forward, backward) exposed TP communication of one block and micro-batch with the
    collectives chunked under their partner matmuls, seconds: each max(0, C - G (tp - 1) / tp)
    (module docstring). ``matmul_s``: the partner kernels' times on this GPU."""
    cost = {op: collective_cost(op, size_bytes, fabric).time_s for op in ("allgather", "reduce_scatter")}
    hidden = (tp - 1) / tp

    def exposed(pairs) -> float:
        return sum(max(0.0, cost[op] - matmul_s[name] * hidden) for op, name in pairs)

    return exposed(_OVERLAP_FORWARD), exposed(_OVERLAP_BACKWARD)


def wgrad_overlapped_s(size_bytes: float, fabric: Fabric, matmul_s: dict[str, float], sequence_parallel: bool) -> float:
    """The backward's exposed TP communication of one block and micro-batch under "wgrad"
    (module docstring), seconds: the column-split layers' reduce-scatters (all-reduces without
    sequence parallelism) each max(0, C - G_wgrad), the row-split layers' gradient all-gathers
    (sequence parallelism) whole."""
    if sequence_parallel:
        c = collective_cost("reduce_scatter", size_bytes, fabric).time_s
        exposed = 2 * collective_cost("allgather", size_bytes, fabric).time_s
    else:
        c, exposed = collective_cost("allreduce", size_bytes, fabric).time_s, 0.0
    return exposed + sum(max(0.0, c - matmul_s[name]) for name in _WGRAD_PARTNERS)


def cp_kv_bytes(shape: TransformerShape, tokens: float, p: Precision, tp: int) -> float:
    """K and V of ``tokens`` (a whole micro-batch of sequences) for one GPU's KV heads: the
    all-gather's output on each CP rank (nccl-tests' size convention). A TP rank holds
    n_kv_head / tp of them, at least one (Megatron replicates KV heads when tp exceeds them)."""
    return tokens * 2 * kv_heads_per_rank(shape, tp) * shape.head_dim * p.compute_bytes


def cp_collectives_s(
    shape: TransformerShape, tokens: float, p: Precision, tp: int, cp: int, fabric: Fabric | None
) -> tuple[float, float]:
    """(the forward's K/V all-gather, the backward's reduce-scatter of their gradients), one
    block and micro-batch, seconds; zero without context parallelism."""
    if cp == 1:
        return 0.0, 0.0
    if fabric is None or fabric.ranks != cp:
        raise ValueError(f"training.cp {cp}: the block needs its CP group's fabric ({cp} ranks)")
    size = cp_kv_bytes(shape, tokens, p, tp)
    return (
        collective_cost("allgather", size, fabric).time_s,
        collective_cost("reduce_scatter", size, fabric).time_s,
    )


def cp_ring_steps_s(
    shape: TransformerShape, tokens: float, p: Precision, tp: int, cp: int, fabric: Fabric | None
) -> tuple[float, float]:
    """Ring attention's step (one chunk of K and V to the next rank, forward) and the backward's
    (K and V and their gradients, two chunks), one block and micro-batch, seconds: a step of the
    ring all-gather of that much (module docstring)."""
    if fabric is None or fabric.ranks != cp:
        raise ValueError(f"training.cp {cp}: the block needs its CP group's fabric ({cp} ranks)")
    size = cp_kv_bytes(shape, tokens, p, tp)
    return (
        collective_cost("allgather", size, fabric).time_s / (cp - 1),
        collective_cost("allgather", 2 * size, fabric).time_s / (cp - 1),
    )


def ulysses_a2a_s(
    shape: TransformerShape, tokens: float, p: Precision, tp: int, cp: int, fabric: Fabric | None
) -> float:
    """One block's forward all-to-alls under Ulysses, one micro-batch, seconds: Q, K, V in and the
    context out, each the rank's s / cp tokens of its heads (the backward's four are the same
    sizes: their gradients)."""
    if fabric is None or fabric.ranks != cp:
        raise ValueError(f"training.cp {cp}: the block needs its CP group's fabric ({cp} ranks)")
    head = tokens / cp * shape.head_dim * p.compute_bytes  # one head's slice of the rank's tokens
    q = collective_cost("alltoall", shape.n_head // tp * head, fabric).time_s
    kv = collective_cost("alltoall", ulysses_kv_heads(shape, tp, cp) * head, fabric).time_s
    return 2 * q + 2 * kv


class HeadTime(NamedTuple):
    """The embedding (first stage) and the final norm, output layer and loss (last stage), one
    micro-batch on one GPU of the TP group, seconds, communication included: the embedding's
    allreduce of its partial lookups (forward) and the output layer's input-gradient allreduce
    (backward), t x d each (vocabulary-parallel layers, Megatron)."""

    embedding_forward_s: float
    embedding_backward_s: float
    output_forward_s: float
    output_backward_s: float


def head_time(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    p: Precision,
    r: Rates,
    *,
    tp: int,
    sequence_parallel: bool,
    fabric: Fabric,
    cp: int = 1,
    fused_loss: bool = False,
) -> HeadTime:
    """``seq_len``: the whole sequence; each of ``cp`` GPUs embeds and scores its 1/cp."""
    tokens = float(micro_batch * seq_len) / cp
    times = {"ef": 0.0, "eb": 0.0, "of": 0.0, "ob": 0.0}
    for k in head_kernels(shape, tokens, p, fused_loss=fused_loss):
        # The vocabulary-parallel output layer and loss split T x vocab; ln_f is a block norm.
        sharded = shard_kernel(k, tp, sequence_parallel) if k.name.startswith("ln_f") else _vocab_shard(k, tp)
        key = ("e" if k.name.startswith(EMBEDDING_KERNELS) else "o") + ("b" if k.backward else "f")
        times[key] += kernel_time_s(sharded, r)
    sync = tp_collective_s(tokens * shape.n_embd * p.compute_bytes, fabric, sequence_parallel)
    return HeadTime(times["ef"] + sync, times["eb"], times["of"], times["ob"] + sync)


def _vocab_shard(k: Kernel, tp: int) -> Kernel:
    return k._replace(flops=k.flops / tp, bytes=k.bytes / tp) if tp > 1 else k
