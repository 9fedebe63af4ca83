"""Per-GPU memory of one training rank, estimated from the scenario: does it fit?

The estimate counts what PyTorch really holds at the step's peak, tensor by tensor, in the
dtypes of ``training.precision`` (sim/precision.py). It is the figure
``torch.cuda.max_memory_allocated`` reports, plus the CUDA context, which lives outside
PyTorch's allocator. tests/test_memory.py holds it to torch's own MemTracker on CPU, tensor
for tensor, and to 45.3 GiB measured on an H200 (docs/gpu.md).

Model states:
  parameters, in the parameter dtype (fp32 under AMP: autocast keeps no separate master copy,
  the parameters are it); AdamW's two moments in the same dtype; gradients in it too, but
  with ``zero_grad(set_to_none=True)`` they do not exist when backward starts, so the peak
  holds them only under gradient accumulation (no_sync keeps them between micro-steps).
  ddp: every rank holds all of them, plus DDP's flat buckets: with the default
       ``gradient_as_bucket_view=False`` the reducer copies gradients into buckets allocated at
       construction, one more gradient's worth (DistributedDataParallel docs).
  fsdp: each rank holds 1/N of each (ZeRO-3), plus the unsharded working set: the root unit
       gathered from forward to backward with its unsharded gradient, the block computing and
       the ``fsdp_prefetch`` blocks gathered ahead of it (in the compute dtype: FSDP's mixed
       precision; their linear weights in FP8 with ``training.fp8_all_gather``), and the
       computing block's unsharded gradient before its reduce-scatter.
  hsdp: as fsdp with 1/S for 1/N, S the shard group's size (sim/hsdp.py): the allreduce across
       the groups runs on the rank's gradient shard and keeps nothing more.

Autocast's weight copies (ddp under AMP): each matmul weight cast to 16 bits once per forward
and saved by the matmul for backward: every block's four weights and the tied output layer.

Activations saved for backward, per block, in bytes per token per model dimension (s b h):
  two residual-stream inputs of the layer norms (r each: fp32 under AMP, as autocast runs
  layer norms in fp32), the two norms' outputs as the QKV and MLP matmuls' inputs (c each),
  Q, K and V (3c, views of the QKV output), the attention output, which is also the output
  projection's input (c), GELU's input and output (4c each): 2r + 14c; plus per token the
  norms' means and inverse deviations (fp32) and attention's log-sum-exp (fp32, one per head).
  This is Korthikanti et al. 2022 ("Reducing Activation Recomputation", Sec. 4.1) for a
  model without dropout and with fused attention, which stores no s x s scores; without it
  (``fused_attention = false``) the softmax probabilities a s^2 b and the scaled queries add.
  With dropout (``training.dropout`` > 0) its 1-byte masks add: two per token on the residual
  branches and, unfused, one per score with dropout's output (Korthikanti's 2 + 3 a s / h).
  A Llama block (sim/transformer.py's llama layout) adapts the same count: the two RMSNorm inputs (r
  each) and outputs (c each), Q (c) and the narrower K and V (kv_dim / d each, grouped-query
  attention: SDPA's enable_gqa keeps them unrepeated, as torch 2.13 does on CPU; a kernel that
  repeated them would save n_head / n_kv_head times more), Q and K rotated (RoPE's backward
  needs only its cos and sin) and V copied out of c_attn's output, which is then freed
  (realrun/model.py), the attention output (c), and SwiGLU's gate, silu(gate),
  up and their product, the down projection's input (4 ffn_hidden / d, where GELU's input and
  output are 2 x 4), with one fp32 statistic per norm (the inverse root mean square), the
  log-sum-exp per head, and, under autocast, RoPE's cos and sin cast to the compute dtype once
  per block (s x head_dim each). torch 2.13 runs RMSNorm on CUDA as one fused kernel
  (``_fused_rms_norm_cuda``), which saves its input and statistic only; on CPU the composite
  also saves the normalised fp32 input, which tests/test_memory.py adds when it holds the
  estimate to MemTracker.
  Full activation checkpointing keeps each block's input and one block's activations while it
  is recomputed. torchtitan's per-op selective AC (``op``) keeps as much, and beside each block's
  input the outputs its policy saves (op_saved_bytes): wq's (d), wv's (kv_dim), w1's (ffn) and
  w2's (d) in the compute dtype, and SDPA's output (d) and log-sum-exp (fp32 per head).
Outside the blocks: ln_f's input and the output layer's input (and ln_f's statistics), the
token ids, and the loss. At the start of
backward the caller still holds the logits (T x vocab, compute dtype), log_softmax's output
is saved and the loss's backward makes two more T x vocab gradients (fp32 under autocast,
which runs log_softmax and the losses in fp32): at GPT-2's vocabulary and seq 2048 that is a
quarter of the whole peak. That moment, the start of backward, is the peak; the optimizer
step (all gradients, no activations) is the other candidate, taken when larger.

Not counted: allocator fragmentation (reserved minus allocated), cuBLAS workspaces (tens of
MiB), temporaries inside kernels, FSDP's padding of flat parameters to a multiple of N.
"""

from typing import NamedTuple

from sim.config import SHARDED_MODES, Scenario
from sim.fsdp import ROOT, unit_gather_bytes, unit_numels
from sim.precision import DROPOUT_MASK_BYTES, Precision
from sim.transformer import TransformerShape

GIB = float(1 << 30)
# Assumed: the CUDA context and PyTorch's lazily loaded kernels take a few hundred MiB outside the
# caching allocator (torch.cuda.max_memory_allocated does not see them); measure it as
# torch.cuda.mem_get_info() before and after a first matmul.
CUDA_CONTEXT_GIB = 0.5
FP32 = 4
INDEX_BYTES = 8  # int64 token ids: the embedding keeps the inputs, the loss the targets


class MemoryEstimate(NamedTuple):
    """One rank's memory at its peak, GiB (2^30 bytes)."""

    mode: str  # "ddp" | "fsdp" | "hsdp"
    ranks: int
    precision: str
    peak_phase: str  # "backward" (its start) or "optimizer"
    parameters_gib: float  # ddp: all; fsdp: the rank's shard
    gradients_gib: float  # held at the peak
    optimizer_state_gib: float  # ddp: all; fsdp: the shard
    weight_copies_gib: float  # autocast's 16-bit weights, saved for backward (ddp)
    activations_gib: float  # one micro-batch's, saved for backward: blocks and head inputs
    logits_gib: float  # the loss's T x vocab tensors at the start of backward
    ddp_buckets_gib: float  # DDP's flat gradient buckets (0 for fsdp)
    fsdp_unsharded_gib: float  # FSDP's gathered units and their unsharded gradients (0 for ddp)
    peak_allocated_gib: float  # what torch.cuda.max_memory_allocated reports
    cuda_context_gib: float  # assumed, outside the allocator
    total_gib: float  # what the device must hold

    @property
    def model_states_gib(self) -> float:
        return self.parameters_gib + self.gradients_gib + self.optimizer_state_gib


def block_activation_bytes(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    dtypes: Precision,
    *,
    fused_attention: bool,
    dropout: bool = False,
) -> float:
    """One transformer block's tensors saved for backward, bytes (see the module docstring)."""
    s, b, h = seq_len, micro_batch, shape.n_embd
    r, c = dtypes.residual_bytes, dtypes.compute_bytes
    stats = 2 * shape.norm_stats * FP32  # two norms' statistics per token
    # Per token, compute-dtype elements: the norms' outputs, Q K V, the attention output, and the
    # MLP's: GELU's input and output (2 ffn), or SwiGLU's gate, silu(gate), up, product (4 ffn).
    mlp = (4 if shape.swiglu else 2) * shape.ffn_hidden
    saved = 2 * h + shape.qkv_dim + h + mlp  # 14 h for GPT-2
    masks = 2 * h * DROPOUT_MASK_BYTES if dropout else 0  # after attention and after the MLP
    attention = _core_per_token(shape, s, dtypes, fused_attention, dropout)
    rope = 2 * s * shape.head_dim * c if not shape.learned_positions and dtypes.autocast else 0
    return s * b * (h * 2 * r + saved * c + masks + stats + attention) + rope


def attention_core_bytes(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    dtypes: Precision,
    fused_attention: bool,
    dropout: bool = False,
) -> float:
    """What selective recomputation does not keep per block: the attention core's own saved
    tensors (block_activation_bytes' attention term): the log-sum-exp per head and token when
    fused, else each score's bytes (score_bytes) and the scaled queries."""
    return seq_len * micro_batch * _core_per_token(shape, seq_len, dtypes, fused_attention, dropout)


def _core_per_token(shape: TransformerShape, keys: int, dtypes: Precision, fused: bool, dropout: bool) -> float:
    """attention_core_bytes for one token that scores ``keys`` keys."""
    if fused:
        return shape.n_head * FP32
    return shape.n_head * keys * score_bytes(dtypes, dropout) + shape.n_embd * dtypes.compute_bytes


def score_bytes(dtypes: Precision, dropout: bool) -> float:
    """What unfused attention keeps per score for backward: the softmax output and, with
    dropout, its 1-byte mask and its output (Korthikanti et al. 2022, Sec. 4.1: 2 + 1 + 2 bytes at
    16 bits). sim/memory3d.py counts the same."""
    c = dtypes.compute_bytes
    return c + ((DROPOUT_MASK_BYTES + c) if dropout else 0)


def op_saved_bytes(shape: TransformerShape, seq_len: int, micro_batch: int, dtypes: Precision) -> float:
    """What torchtitan's per-op selective AC keeps of one block beyond its input, bytes: the
    outputs of wq, wv, w1 and w2 (every other matmul, sim/roofline.py op_kept_share) and of SDPA
    (its output and log-sum-exp)."""
    d, c = shape.n_embd, dtypes.compute_bytes
    matmuls = d + shape.kv_dim + shape.ffn_hidden + d
    return seq_len * micro_batch * ((matmuls + d) * c + shape.n_head * FP32)


def activation_bytes(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    dtypes: Precision,
    *,
    checkpointing: bool,
    fused_attention: bool,
    dropout: bool = False,
) -> float:
    """One micro-batch's activations saved for backward outside the loss, bytes."""
    s, b, h = seq_len, micro_batch, shape.n_embd
    block = block_activation_bytes(shape, s, b, dtypes, fused_attention=fused_attention, dropout=dropout)
    blocks = shape.n_layer * (s * b * h * dtypes.residual_bytes) + block if checkpointing else shape.n_layer * block
    head = s * b * (h * (dtypes.residual_bytes + dtypes.compute_bytes) + shape.norm_stats * FP32 + 2 * INDEX_BYTES)
    return blocks + head


def loss_bytes_per_logit(dtypes: Precision, fused_loss: bool = False) -> float:
    """Bytes per T x vocab element alive at the start of backward. Eager: the logits the caller
    holds, the saved log_softmax output and the two gradients of the loss's backward. A fused
    cross-entropy (``training.fused_loss``) keeps only the 16-bit logits and writes their
    gradient (sim/roofline.py loss_kernels)."""
    if fused_loss:
        return 2.0 * dtypes.compute_bytes
    return dtypes.compute_bytes + 3.0 * dtypes.loss_bytes


def logits_bytes(
    shape: TransformerShape, seq_len: int, micro_batch: int, dtypes: Precision, fused_loss: bool = False
) -> float:
    """The T x vocab tensors alive at the start of backward (loss_bytes_per_logit)."""
    return seq_len * micro_batch * shape.vocab_size * loss_bytes_per_logit(dtypes, fused_loss)


def weight_copy_bytes(shape: TransformerShape, dtypes: Precision) -> float:
    """Autocast's 16-bit copies of the matmul weights (four per block, and the output layer)."""
    if not dtypes.weight_casts:
        return 0.0
    return (shape.n_layer * shape.block_matmul_numel + shape.embedding_numel) * dtypes.compute_bytes


def fsdp_working_set_bytes(
    root: float, block: float, block_gathered_bytes: float, in_flight: int, dtypes: Precision
) -> float:
    """FSDP's unsharded working set on a rank (module docstring): the root unit (``root``
    elements) gathered with its unsharded gradient, ``in_flight`` blocks gathered
    (``block_gathered_bytes`` each: the compute dtype, or FP8 linear weights) and the computing
    block's (``block`` elements) unsharded gradient. sim/memory3d.py takes it too."""
    c, g = dtypes.compute_bytes, dtypes.grad_bytes
    return root * (c + g) + in_flight * block_gathered_bytes + block * g


def estimate_memory(sc: Scenario, *, cuda_context_gib: float = CUDA_CONTEXT_GIB) -> MemoryEstimate:
    """Peak memory of one rank of ``sc`` (``training.mode``; ``sc.shard_size`` ranks share the model states)."""
    t = sc.training
    dt = t.dtypes
    shape, seq = sc.model.shape, sc.seq_len
    numels = unit_numels(shape)
    params = float(numels.sum())
    drop = t.dropout > 0
    act = activation_bytes(
        shape, seq, t.micro_batch_size, dt, checkpointing=t.recompute in ("full", "op"),
        fused_attention=t.fused_attention, dropout=drop,
    )  # fmt: skip
    if t.recompute == "selective":  # attention's core recomputed: its saved tensors are not kept
        act -= shape.n_layer * attention_core_bytes(shape, seq, t.micro_batch_size, dt, t.fused_attention, drop)
    if t.recompute == "op":  # as full, plus what the policy keeps of every block
        act += shape.n_layer * op_saved_bytes(shape, seq, t.micro_batch_size, dt)
    logits = logits_bytes(shape, seq, t.micro_batch_size, dt, t.fused_loss)
    buckets = unsharded = copies = 0.0
    if t.mode in SHARDED_MODES:
        shard = 1.0 / sc.shard_size
        block = float(numels[1:].max())
        # A gathered block in the gather's dtype (FP8 linear weights with training.fp8_all_gather).
        block_gathered = float(unit_gather_bytes(shape, dt, t.fp8_all_gather)[1:].max())
        in_flight = min(1 + t.fsdp_prefetch, shape.n_layer)
        unsharded = fsdp_working_set_bytes(float(numels[ROOT]), block, block_gathered, in_flight, dt)
    else:
        shard = 1.0
        buckets = params * dt.grad_bytes  # the buckets (sim/buckets.py) hold every gradient once
        copies = weight_copy_bytes(shape, dt)
    weights = params * dt.param_bytes * shard
    grads = params * dt.grad_bytes * shard
    optimizer = params * dt.optimizer_state_bytes * shard
    persistent = weights + optimizer + buckets + unsharded
    held_grads = grads if t.grad_accum > 1 else 0.0
    backward_peak = persistent + held_grads + copies + act + logits
    optimizer_peak = persistent + grads
    if backward_peak >= optimizer_peak:
        phase, parts = "backward", (held_grads, copies, act, logits)
    else:
        phase, parts = "optimizer", (grads, 0.0, 0.0, 0.0)
    peak = max(backward_peak, optimizer_peak)
    return MemoryEstimate(
        t.mode,
        sc.ranks,
        t.precision,
        phase,
        weights / GIB,
        parts[0] / GIB,
        optimizer / GIB,
        parts[1] / GIB,
        parts[2] / GIB,
        parts[3] / GIB,
        buckets / GIB,
        unsharded / GIB,
        peak / GIB,
        cuda_context_gib,
        peak / GIB + cuda_context_gib,
    )


def fits(estimate: MemoryEstimate, device_gib: float) -> bool:
    """Whether the estimate's total fits in a device of ``device_gib`` GiB."""
    return estimate.total_gib <= device_gib
