"""Per-GPU memory of a tensor- and pipeline-parallel layout, per pipeline stage.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", Sec. 4): a GPT block with 16-bit activations, dropout and unfused
attention saves s b h (34 + 5 a s / h) bytes. Of the 34, ten are not split by tensor
parallelism (the two norms' inputs and outputs, 8, and the two dropout masks, 2) and 24 are
(Q, K, V, the attention output, the MLP's hidden activations); the 5 a s^2 b of attention's
scores (softmax output, its dropout mask and output) split too: s b h (10 + 24 / t + 5 a s /
(h t)). Sequence parallelism splits the ten along the sequence: s b h (34 + 5 a s / h) / t.
Selective recomputation drops the attention core's saved tensors: 34 s b h / t with sequence
parallelism. Full recomputation keeps each block's input (sharded with sequence parallelism)
and one block's activations while it reruns.

The per-term inventory below is sim/memory.py's (dtype by dtype, the Llama layout's SwiGLU and
grouped-query attention, FlashAttention's log-sum-exp where attention is fused, the norms' fp32
statistics) with Megatron's split applied; with dropout, unfused attention, the GPT layout,
16-bit dtypes and no statistics it is exactly the closed forms above (tests/test_memory3d.py),
and at tp = 1 with fused attention it is sim/memory.py's block count. Unfused attention here
keeps the softmax output (Megatron folds the 1/sqrt(d) scale into its matmul, so no scaled
queries are saved as eager PyTorch's math path does, sim/memory.py).

A stage holds its layers' activations for as many micro-batches as its schedule keeps in flight
(sim/pipeline.py): the first stage's p for 1F1B, every micro-batch for GPipe.

Context parallelism (sim/tp.py): a GPU holds s / cp of each sequence, so every term above is
counted at s / cp tokens (unfused attention's scores as s / cp queries by s keys), and one
block's K and V gathered over the CP group, with their gradients in the backward, are held while
that block's attention runs: 2 x 2 s b kv_dim / t 16-bit values, not kept between blocks.

Model states, in the Megatron mixed-precision arrangement (sim/precision.py ``sharded``: the
module holds 16-bit weights, the optimizer the fp32 master copy and AdamW's moments, the
gradients accumulate in the precision's gradient dtype): per parameter on the GPU, compute +
parameter + gradient + optimizer-state bytes (2 + 4 + 4 + 8 = 18 under bf16-amp). ddp: all of
the stage's 1/tp share. fsdp over the data-parallel ranks, as torchtitan runs it beside a
pipeline (its parameters stay gathered from forward to backward, the gradients reduce-scattered
once per step): the 16-bit weights and the gradients whole, master weights and moments / dp.
Without a pipeline (pp = 1, TP or CP beside FSDP) torchtitan reshards each block after its
forward (FSDP2's default; torchtitan's apply_fsdp sets reshard_after_forward only for PP to
False), so the GPU holds ZeRO-3's shards, (w + g + o) / dp a parameter, and sim/memory.py's
working set: the root unit gathered with its unsharded gradient, the block computing and the
``fsdp_prefetch`` ones ahead in the compute dtype, and one block's unsharded gradient.
hsdp the same over its shard group, / S.
zero1 (Megatron's distributed optimizer) holds the same: Megatron-Core's docs
(distrib_optimizer) give 6 + 12 / dp bytes per parameter for bf16 weights and fp32 gradients.
"""

from typing import NamedTuple

from sim.memory import (
    FP32,
    GIB,
    INDEX_BYTES,
    fsdp_working_set_bytes,
    loss_bytes_per_logit,
    op_saved_bytes,
    score_bytes,
)
from sim.precision import DROPOUT_MASK_BYTES, Precision
from sim.transformer import TransformerShape


class LayerTerms(NamedTuple):
    """One block's saved activations, bytes, for one micro-batch on one GPU."""

    replicated: float  # not split by tp (split by sequence parallelism)
    sharded: float  # split by tp
    attention_core: float  # of sharded: what selective recomputation does not keep
    statistics: float  # the norms' fp32 statistics (replicated; not in Korthikanti's count)
    rope: float  # RoPE's cos and sin cast to 16 bits once per block (llama under autocast)


def layer_terms(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    dtypes: Precision,
    *,
    fused_attention: bool,
    dropout: bool,
    kv_len: int | None = None,
) -> LayerTerms:
    """``seq_len``: the tokens of a sequence this GPU holds; ``kv_len``: the keys each of them
    scores (the whole sequence under context parallelism; ``seq_len`` by default)."""
    s, b, h, a = seq_len, micro_batch, shape.n_embd, shape.n_head
    keys = s if kv_len is None else kv_len
    r, c = dtypes.residual_bytes, dtypes.compute_bytes
    sb = s * b
    masks = 2 * h * DROPOUT_MASK_BYTES if dropout else 0  # after attention and after the MLP
    replicated = sb * (2 * h * r + 2 * h * c + masks)
    mlp = (4 if shape.swiglu else 2) * shape.ffn_hidden
    if fused_attention:
        core = sb * a * FP32  # FlashAttention's log-sum-exp; it regenerates its dropout mask
    else:
        core = sb * a * keys * score_bytes(dtypes, dropout)
    sharded = sb * (shape.qkv_dim + h + mlp) * c + core
    stats = sb * 2 * shape.norm_stats * FP32
    rope = 2 * s * shape.head_dim * c if not shape.learned_positions and dtypes.autocast else 0
    return LayerTerms(replicated, sharded, core, stats, rope)


def layer_activation_bytes(terms: LayerTerms, *, tp: int, sequence_parallel: bool, recompute: str) -> float:
    """One block's saved activations on one GPU of the TP group (module docstring)."""
    split = tp if sequence_parallel else 1
    sharded = terms.sharded - (terms.attention_core if recompute == "selective" else 0.0)
    return (terms.replicated + terms.statistics) / split + sharded / tp + terms.rope


class StageMemory(NamedTuple):
    """One GPU of one pipeline stage at its peak, GiB."""

    stage: int
    parameters: float  # numel on this GPU
    model_states_gib: float
    activations_gib: float
    logits_gib: float
    total_gib: float  # + the CUDA context


def stage_memory(
    *,
    stage: int,
    params: float,
    dtypes: Precision,
    mode: str,
    dp: int,
    layers: int,
    in_flight_layers: float,
    terms: LayerTerms,
    tp: int,
    sequence_parallel: bool,
    recompute: str,
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    first: bool,
    last: bool,
    cuda_context_gib: float,
    transient_bytes: float = 0.0,
    fused_loss: bool = False,
    resharded: tuple[float, float, int] | None = None,
) -> StageMemory:
    """``in_flight_layers``: layers' worth of activations the stage holds at its peak (its
    layers per chunk x chunk-micro-batches in flight, sim/pipeline.py); ``seq_len``: the tokens
    of a sequence one GPU holds; ``transient_bytes``: what one block holds only while it runs
    (context parallelism's gathered K and V, module docstring); ``resharded``: fsdp/hsdp without
    a pipeline, (the root unit's numel on this GPU, one block's, blocks gathered at once)."""
    c, w, g, o = dtypes.compute_bytes, dtypes.param_bytes, dtypes.grad_bytes, dtypes.optimizer_state_bytes
    if resharded is not None:  # ZeRO-3's shards and sim/memory.py's working set (module docstring)
        root, block, gathered = resharded
        states = params * (w + g + o) / dp + fsdp_working_set_bytes(root, block, block * c, gathered, dtypes)
    elif mode in ("fsdp", "hsdp", "zero1"):  # dp: the ranks it shards over (hsdp: a shard group)
        states = params * (c + g + (w + o) / dp)
    else:
        states = params * (c + w + g + o)
    per_layer = layer_activation_bytes(terms, tp=tp, sequence_parallel=sequence_parallel, recompute=recompute)
    sb, h = seq_len * micro_batch, shape.n_embd
    if recompute == "full":
        split = tp if sequence_parallel else 1
        held = in_flight_layers * sb * h * dtypes.residual_bytes / split + per_layer
    elif recompute == "op":  # as full, plus what torchtitan's policy keeps (no TP: sim/config.py)
        saved = sb * h * dtypes.residual_bytes + op_saved_bytes(shape, seq_len, micro_batch, dtypes)
        held = in_flight_layers * saved + per_layer
    else:
        held = in_flight_layers * per_layer
    held += transient_bytes
    micro_batches = in_flight_layers / max(layers, 1)
    if first:  # the token ids the embedding keeps, per micro-batch in flight
        held += micro_batches * sb * INDEX_BYTES
    logits = 0.0
    if last:  # ln_f's input and output, the targets; the loss's T x vocab / tp tensors, one micro-batch
        held += sb * (h * (dtypes.residual_bytes + dtypes.compute_bytes) + INDEX_BYTES)
        logits = sb * shape.vocab_size / tp * loss_bytes_per_logit(dtypes, fused_loss)
    total = (states + held + logits) / GIB + cuda_context_gib
    return StageMemory(stage, params, states / GIB, held / GIB, logits / GIB, total)
