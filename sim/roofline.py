"""Compute time of one micro-step from the work of each kernel: a roofline of the GPT-2 step.

One fixed MFU cannot hold at micro-batch 1 and 8: a small batch runs the same number of
kernels on less data, so memory traffic and launches weigh more. Here every kernel an eager
PyTorch GPT-2 step launches (realrun/model.py under the chosen precision) gets its FLOPs and
the bytes it moves, and takes

    t = max(FLOPs / (peak x efficiency), bytes / (HBM x memory efficiency), launch floor)

(Williams, Waterman and Patterson 2009, "Roofline"; the floor is the host's cost of issuing
one eager op, which bounds a GPU that finishes kernels faster than Python issues them).
Matmuls run at the precision's tensor peak x ``matmul_efficiency``; fused attention at
``attention_efficiency`` of it (FlashAttention-2 reaches about 35 % of an H100's peak: Shah et
al. 2024, "FlashAttention-3", Sec. 1); everything else is memory-bound. Unfused attention
(``training.fused_attention = false``, Megatron-LM 2021) is its batched matmuls over the whole
s x s square and the softmax and dropout between them, which move that square through HBM
(unfused_attention below). The constants are per
platform, in the preset, with their sources; `ddplab calibrate` on a GPU replaces all of this
with the measured fit.

Two stacks run these kernels (``compute.stack``). ``compiled``: the step a fused stack
(torch.compile, llm.c) reaches; the unfused kernel list below at STREAM-class bandwidth
(memory_efficiency) stands in for its fewer, fused kernels, and lands within 4 % of a compiled
H200 step (docs/gpu.md). ``eager``: plain PyTorch, every kernel below launched on its own, the
memory-bound ones (norms, casts, residual adds, GELU/SwiGLU, RoPE, the loss, DDP's bucket
copies) at ``eager_memory_efficiency`` of the HBM: fitted on the one measured eager H200 step
(GPT-2 760M, micro-batch 8: 0.238 s), held out against torchtitan's eager/compiled pair for
Llama 3 8B (docs/gpu.md). Matmuls and attention are the same cuBLAS/FlashAttention kernels in
both, and both pay the launch floor per kernel.

The kernels, per block, forward: layer norm, its cast to the compute dtype (autocast), the
QKV matmul (bias fused in cuBLAS's epilogue), causal attention (half the FLOPs of the full
QK^T and AV: 2 T s d), the projection, the residual add, the second layer norm and cast, the
MLP's two matmuls around GELU, the residual add, and autocast's casts of the block's four
weights and four biases. Backward: each matmul twice (input and weight gradients), the bias
gradient reductions, GELU's and the layer norms' backward (the norms' weight gradients in a
second pass), the attention backward (FlashAttention's recomputation: 2.5 x the forward's
FLOPs, Dao 2023, "FlashAttention-2", Sec. 3.1), the casts back to the residual dtype, the
residual gradient sums, the weight-gradient casts to fp32, and DDP's copy of every gradient
into its bucket (one copy per parameter; reducer.cpp ``copy_grad_to_bucket``). Outside the
blocks: the embedding lookups and their backward, the final norm, the tied output matmul, and
the loss: autocast's fp32 copy of the logits, log_softmax, and their backward over the whole
T x vocab matrix, which at GPT-2's vocabulary is the largest memory traffic of the step.

A Llama block (sim/transformer.py's llama layout) runs the same kernels, adapted: RMSNorm in place of
LayerNorm (taken as one fused kernel moving the same bytes: torch 2.13's ``_fused_rms_norm_cuda``;
a weight, no bias), no biases (no bias kernels), Q, K and V of d + 2 kv_dim outputs, RoPE on Q
and K (one read and one write of each, forward and backward; eager PyTorch launches several
elementwise kernels for it, which the launch floor undercounts) and a copy of V (so c_attn's
output is freed, realrun/model.py), attention reading the narrower K
and V (grouped-query attention), and SwiGLU: silu(gate) and its product with up (read gate, write
silu; read both, write the product: 5 ffn_hidden elements per token) where GPT-2 has GELU;
backward 8 ffn_hidden. Outside the blocks: no position table, and an untied output layer has
its own gradient and bucket copy where a tied one adds its gradient into wte's.
"""

from typing import NamedTuple

from sim.config import ComputeConfig
from sim.precision import DROPOUT_MASK_BYTES, Precision
from sim.transformer import TransformerShape

MATMUL, ATTENTION, MEMORY = "matmul", "attention", "memory"
# head_kernels' embedding kernels (the first pipeline stage, FSDP's root unit); the rest of them
# are the final norm, the output layer and the loss.
EMBEDDING_KERNELS = ("wte.lookup", "wpe.", "wte.embedding_bwd", "wte.bucket_copy")


class Kernel(NamedTuple):
    name: str
    backward: bool
    kind: str  # matmul | attention | memory
    flops: float
    bytes: float
    core: bool = False  # attention's core (what selective recomputation reruns, ring attention hides under)


def rerun(recompute: str, block: float, core: float) -> float:
    """What activation checkpointing (training.recompute) runs again in backward, in the units of
    ``block`` (a block's forward) and ``core`` (its attention core's, the kernels marked
    ``core``): nothing, the core alone (Megatron's selective; Korthikanti et al. 2022, Sec. 5),
    or the whole block."""
    return {"none": 0.0, "selective": core, "full": block}[recompute]


def op_kept_share(name: str, shape: TransformerShape) -> float:
    """The share of a block's forward kernel whose output torchtitan's per-op selective AC keeps
    (training.activation_checkpointing = "op"), so that backward does not run it again. Its policy
    (torchtitan/models/llama3/infra/parallelize.py, ``_apply_ac_to_transformer_block``, option
    "op") keeps the outputs of SDPA and of every other ``aten.mm`` in forward order, the first,
    third, ...: of a Llama block's wq, wk, wv, wo, w1, w3 and w2, those of wq, wv, w1 and w2.
    c_attn fuses wq, wk and wv here (its kept share: Q and V's columns of its output) and c_fc
    fuses w1 and w3 (half); everything else, the norms, RoPE, SiLU, the products, the residual
    adds and the casts, is rerun."""
    if name == "attention":
        return 1.0
    if name == "attn.c_attn":
        return (shape.n_embd + shape.kv_dim) / shape.qkv_dim
    return {"mlp.c_fc": 0.5, "mlp.c_proj": 1.0}.get(name, 0.0)


class Rates(NamedTuple):
    """What a platform achieves, from its scenario's [compute] constants (``rates``)."""

    matmul_flop_s: float
    attention_flop_s: float
    memory_bytes_s: float
    launch_s: float


def rates(compute: ComputeConfig, p: Precision) -> Rates:
    """Matmuls at the precision's peak x matmul_efficiency. Fused attention uses tensor cores only
    for 16-bit inputs (FlashAttention-2 supports fp16/bf16 alone; PyTorch's SDPA falls back to its
    memory-efficient kernel for fp32), so it runs at the bf16 peak, or the fp32 one. Memory-bound
    kernels at memory_efficiency of the HBM (stack compiled) or eager_memory_efficiency (eager)."""
    attention_peak = compute.peak_tflop_s if p.compute_bytes == 2 else compute.peak_fp32_tflop_s
    memory = compute.memory_efficiency if compute.stack == "compiled" else compute.eager_memory_efficiency
    return Rates(
        matmul_flop_s=compute.peak_for(p) * 1e12 * compute.matmul_efficiency,
        attention_flop_s=attention_peak * 1e12 * compute.attention_efficiency,
        memory_bytes_s=compute.hbm_tb_s * 1e12 * memory,
        launch_s=compute.kernel_launch_us * 1e-6,
    )


class ComputeTime(NamedTuple):
    forward_s: float
    backward_s: float
    kernels: int
    matmul_s: float  # time in matmul and attention kernels
    memory_s: float  # time in memory-bound kernels
    launch_bound: int  # kernels held at the launch floor

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_s


def _matmul(name: str, backward: bool, m: float, k: float, n: float, c: int) -> Kernel:
    """(m x k) @ (k x n) in the compute dtype: 2mkn FLOPs, both operands read, the output written."""
    return Kernel(name, backward, MATMUL, 2.0 * m * k * n, c * (m * k + k * n + m * n))


def _mem(name: str, backward: bool, nbytes: float) -> Kernel:
    return Kernel(name, backward, MEMORY, 0.0, nbytes)


def _linear(
    name: str, t: float, d_in: int, d_out: int, p: Precision, bias: bool = True
) -> tuple[list[Kernel], list[Kernel]]:
    """An nn.Linear on t tokens, biased or not: (forward kernels, backward kernels)."""
    c, w = p.compute_bytes, p.param_bytes
    fwd = [_matmul(name, False, t, d_in, d_out, c)]
    bwd = [
        _matmul(name + ".dgrad", True, t, d_out, d_in, c),
        _matmul(name + ".wgrad", True, d_out, t, d_in, c),
    ]
    if bias:
        bwd.append(_mem(name + ".bias_grad", True, t * d_out * c))
    if p.weight_casts:  # weight (and bias) cast to 16 bits for the forward
        fwd.append(_mem(name + ".weight_cast", False, d_in * d_out * (w + c)))
        if bias:
            fwd.append(_mem(name + ".bias_cast", False, 0.0))
    if p.autocast:  # the 16-bit weight gradient back to the parameters' (FSDP: the reduce) dtype
        bwd.append(_mem(name + ".wgrad_cast", True, d_in * d_out * (c + w)))
        if bias:
            bwd.append(_mem(name + ".bgrad_cast", True, 0.0))
    if p.peak == "fp8":
        f8, b8 = fp8_casts(name, t, d_in, d_out, c)
        fwd += f8
        bwd += b8
    # DDP copies each gradient into its flat bucket (gradient_as_bucket_view=False).
    bwd.append(_mem(name + ".bucket_copy", True, 2.0 * d_in * d_out * w))
    if bias:
        bwd.append(_mem(name + ".bias_bucket_copy", True, 0.0))
    return fwd, bwd


FP8_BYTES = 1


def fp8_casts(name: str, t: float, d_in: int, d_out: int, c: int) -> tuple[list[Kernel], list[Kernel]]:
    """What FP8 adds to one linear layer, as NVIDIA Transformer Engine's FP8 recipe runs it
    (its "Using FP8 with Transformer Engine" primer: per-tensor scaling factors from a history
    of absolute maxima, "delayed scaling"): before each FP8 GEMM its 16-bit operands are cast
    to FP8 together with the transpose the backward GEMMs need (a fused cast-transpose that
    also records the amax). Forward: the input (t x d_in) and the weight; backward: the output
    gradient (t x d_out). Each reads c bytes an element and writes the FP8 copy and its
    transpose. The GEMMs' outputs and everything outside the linear layers stay 16-bit, and
    so does communication."""
    out = 2 * FP8_BYTES
    fwd = [
        _mem(name + ".fp8_cast_input", False, t * d_in * (c + out)),
        _mem(name + ".fp8_cast_weight", False, d_in * d_out * (c + out)),
    ]
    return fwd, [_mem(name + ".fp8_cast_grad", True, t * d_out * (c + out))]


def _norm(name: str, t: float, d: int, p: Precision, bias: bool = True) -> tuple[list[Kernel], list[Kernel]]:
    """LayerNorm (or RMSNorm: no bias) in the residual dtype, then (autocast) the cast of its
    output to the compute dtype."""
    r, c = p.residual_bytes, p.compute_bytes
    fwd = [_mem(name, False, 2.0 * t * d * r)]
    bwd = [_mem(name + ".bwd", True, 3.0 * t * d * r), _mem(name + ".weight_grad", True, 2.0 * t * d * r)]
    if p.autocast:
        fwd.append(_mem(name + ".cast", False, t * d * (r + c)))
        bwd.append(_mem(name + ".cast_bwd", True, t * d * (c + r)))
    # Weight and bias, one kernel each.
    bwd += [_mem(name + ".bucket_copy", True, (4.0 if bias else 2.0) * d * p.param_bytes)]
    return fwd, bwd


def unfused_attention(t: float, s: int, d: int, kv: int, heads: int, c: int, dropout: bool):
    """Attention without a fused kernel, as Megatron-LM (2021) and eager PyTorch's math path run
    it: (forward kernels, backward kernels) for ``t`` tokens of sequences of ``s``.

    The scores are a full s x s matrix per head and sequence, t s heads elements in the compute
    dtype, written and read by every step (Korthikanti et al. 2022, Sec. 4.1, count the same
    tensors as saved activations: the softmax output, the dropout mask and its output).
    Forward: Q K^T (a batched matmul over the whole square, 2 t s d FLOPs: the causal mask is
    applied after it), the scale, mask and softmax in one kernel (Megatron's
    FusedScaleMaskSoftmax: read the scores, write the probabilities), dropout on them (read,
    write, and a 1-byte mask), and the probabilities times V (2 t s d). Backward: the two
    matmuls' input and weight gradients (each reads or writes the square), dropout's backward
    (read the gradient and the mask, write) and the softmax's (read its output and the
    gradient, write). Each pass is counted over the whole square, though the causal kernels
    skip reading the masked half. The head transposes (t d copies, 1/(s/head_dim) of this
    traffic) are not counted. K and V are read ``kv`` wide, as stored."""
    e = t * s * heads  # score elements
    drop = e * (2 * c + DROPOUT_MASK_BYTES)
    fwd = [
        Kernel("attention.scores", False, MATMUL, 2.0 * t * s * d, t * (d + kv) * c + e * c, True),
        _mem("attention.softmax", False, 2.0 * e * c)._replace(core=True),
    ]
    if dropout:
        fwd.append(_mem("attention.dropout", False, drop)._replace(core=True))
    fwd.append(Kernel("attention.context", False, MATMUL, 2.0 * t * s * d, e * c + t * (kv + d) * c, True))
    bwd = [
        Kernel("attention.context.dgrad", True, MATMUL, 2.0 * t * s * d, t * (d + kv) * c + e * c, True),
        Kernel("attention.context.wgrad", True, MATMUL, 2.0 * t * s * d, e * c + t * (d + kv) * c, True),
    ]
    if dropout:
        bwd.append(_mem("attention.dropout.bwd", True, drop)._replace(core=True))
    bwd += [
        _mem("attention.softmax.bwd", True, 3.0 * e * c)._replace(core=True),
        Kernel("attention.scores.dgrad", True, MATMUL, 2.0 * t * s * d, e * c + t * (kv + d) * c, True),
        Kernel("attention.scores.wgrad", True, MATMUL, 2.0 * t * s * d, e * c + t * (d + kv) * c, True),
    ]
    return fwd, bwd


def block_kernels(
    shape: TransformerShape,
    seq_len: int,
    tokens: float,
    p: Precision,
    *,
    fused_attention: bool = True,
    dropout: bool = False,
) -> list[Kernel]:
    """One transformer block's kernels for a micro-step of ``tokens`` (= micro-batch x seq_len);
    ``fused_attention`` False: attention's core as unfused kernels (unfused_attention),
    ``dropout``: training.dropout > 0."""
    d, s, t = shape.n_embd, seq_len, tokens
    kv, f, bias = shape.kv_dim, shape.ffn_hidden, shape.biases
    r, c = p.residual_bytes, p.compute_bytes
    fwd: list[Kernel] = []
    bwd: list[Kernel] = []

    def add(pair):
        f, b = pair
        fwd.extend(f)
        bwd[:0] = b  # backward runs in reverse order

    add(_norm("ln_1", t, d, p, bias))
    add(_linear("attn.c_attn", t, d, shape.qkv_dim, p, shape.qkv_bias))
    if not shape.learned_positions:  # RoPE rotates Q and K: read and write each; V's copy
        rope = 2.0 * t * (d + kv) * c
        add(([_mem("rope", False, rope), _mem("v_copy", False, 2.0 * t * kv * c)], [_mem("rope.bwd", True, rope)]))
    if fused_attention:
        # Reads Q, K, V, writes the output; backward reads Q, K, V, the output and its gradient,
        # writes dQ, dK, dV. K and V are kv_dim wide (= d without grouped-query attention).
        add(
            (
                [Kernel("attention", False, ATTENTION, 2.0 * t * s * d, t * (2 * d + 2 * kv) * c, True)],
                [
                    _mem("attention.bwd_preprocess", True, 2.0 * t * d * c),
                    Kernel("attention.bwd", True, ATTENTION, 5.0 * t * s * d, t * (4 * d + 4 * kv) * c, True),
                ],
            )
        )
    else:
        add(unfused_attention(t, s, d, kv, shape.n_head, c, dropout))
    add(_linear("attn.c_proj", t, d, d, p, bias))
    # Dropout on a residual branch (dropout > 0) runs fused into the add, as Megatron-LM's
    # bias-dropout-add does: it writes a 1-byte mask, and its backward reads it.
    mask = t * d * DROPOUT_MASK_BYTES if dropout else 0.0
    residual_add = _mem("residual_add", False, t * d * (2 * r + c) + mask)
    # Backward of a residual add: the branch's gradient cast to its dtype, and the sum of the two
    # gradients that reach the residual stream.
    residual_bwd = [_mem("residual_grad_sum", True, 3.0 * t * d * r + mask)]
    if p.autocast:
        residual_bwd.append(_mem("residual_grad_cast", True, t * d * (r + c)))
    add(([residual_add], residual_bwd))
    add(_norm("ln_2", t, d, p, bias))
    add(_linear("mlp.c_fc", t, d, shape.fc_dim, p, bias))
    if shape.swiglu:
        # silu(gate): read, write; x up: read both, write. Backward: the product's (read its
        # gradient, silu and up, write two) and silu's (read the gradient and gate, write).
        add(
            (
                [_mem("silu", False, 2.0 * t * f * c), _mem("swiglu_mul", False, 3.0 * t * f * c)],
                [_mem("swiglu_mul.bwd", True, 5.0 * t * f * c), _mem("silu.bwd", True, 3.0 * t * f * c)],
            )
        )
    else:
        add(([_mem("gelu", False, 2.0 * t * f * c)], [_mem("gelu.bwd", True, 3.0 * t * f * c)]))
    add(_linear("mlp.c_proj", t, f, d, p, bias))
    add(([residual_add], residual_bwd))
    return fwd + bwd


def head_kernels(shape: TransformerShape, tokens: float, p: Precision, *, fused_loss: bool = False) -> list[Kernel]:
    """The embeddings, the final norm, the output layer (tied or not) and the loss; ``fused_loss``:
    the loss as one fused cross-entropy kernel (loss_kernels)."""
    d, v, t = shape.n_embd, shape.vocab_size, tokens
    r, c, w = p.residual_bytes, p.compute_bytes, p.param_bytes
    fwd = [_mem("wte.lookup", False, t * d * (w + r))]
    if shape.learned_positions:
        fwd.append(_mem("wpe.add", False, t * d * 2 * r))
    ln_f, ln_f_bwd = _norm("ln_f", t, d, p, shape.biases)
    fwd += ln_f
    fwd.append(_matmul("lm_head", False, t, d, v, c))
    if p.weight_casts:
        fwd.append(_mem("lm_head.weight_cast", False, v * d * (w + c)))
    loss_fwd, bwd = loss_kernels(t * v, p, fused_loss)
    fwd += loss_fwd
    bwd += [
        _matmul("lm_head.dgrad", True, t, v, d, c),
        _matmul("lm_head.wgrad", True, v, t, d, c),
    ]
    if p.autocast:
        bwd.append(_mem("lm_head.wgrad_cast", True, v * d * (c + w)))
    bwd += ln_f_bwd
    bwd.append(_mem("wte.embedding_bwd", True, v * d * w + 2.0 * t * d * w))  # zero the table, add the rows
    if shape.tied_embeddings:
        bwd.append(_mem("wte.tied_grad_sum", True, 3.0 * v * d * w))
    if shape.learned_positions:
        bwd.append(_mem("wpe.bwd", True, t * d * r))
    bwd.append(_mem("wte.bucket_copy", True, 2.0 * v * d * w))
    if shape.learned_positions:
        bwd.append(_mem("wpe.bucket_copy", True, 2.0 * shape.block_size * d * w))
    if not shape.tied_embeddings:
        bwd.append(_mem("lm_head.bucket_copy", True, 2.0 * v * d * w))
    return fwd + bwd


def loss_kernels(logits: float, p: Precision, fused: bool) -> tuple[list[Kernel], list[Kernel]]:
    """The cross-entropy over ``logits`` (T x vocab) elements: (forward, backward) kernels.

    Eager (realrun's model, F.cross_entropy under autocast): the logits cast to fp32, log_softmax
    (read, and write its output; the max and sum passes read again) and the NLL's gather;
    backward a zero-filled gradient, log_softmax's backward and the cast back. Fused
    (``training.fused_loss``: flash-attn's CrossEntropyLoss, which llm-foundry's MPT uses by
    default, and kernels like it): one kernel reads the 16-bit logits once and keeps one
    log-sum-exp per row; its backward reads them again and writes their gradient."""
    c, loss = p.compute_bytes, p.loss_bytes
    if fused:
        return [_mem("cross_entropy.fused", False, logits * c)], [
            _mem("cross_entropy.fused_bwd", True, 2.0 * logits * c)
        ]
    fwd = [_mem("logits.cast_fp32", False, logits * (c + loss))] if p.autocast else []
    fwd += [_mem("log_softmax", False, 3.0 * logits * loss), _mem("nll_loss", False, 0.0)]
    bwd = [
        _mem("nll_loss.bwd", True, logits * loss),  # a zero-filled T x vocab gradient
        _mem("log_softmax.bwd", True, 4.0 * logits * loss),
    ]
    if p.autocast:
        bwd.append(_mem("logits.cast_bwd", True, logits * (loss + c)))
    return fwd, bwd


def step_kernels(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    p: Precision,
    *,
    fused_attention: bool = True,
    dropout: bool = False,
    fused_loss: bool = False,
) -> list[Kernel]:
    """Every kernel of one micro-step's forward and backward, in no particular order."""
    tokens = float(micro_batch * seq_len)
    block = block_kernels(shape, seq_len, tokens, p, fused_attention=fused_attention, dropout=dropout)
    return shape.n_layer * block + head_kernels(shape, tokens, p, fused_loss=fused_loss)


def kernel_time_s(k: Kernel, r: Rates) -> float:
    flop_s = {MATMUL: r.matmul_flop_s, ATTENTION: r.attention_flop_s}.get(k.kind)
    compute_s = k.flops / flop_s if flop_s else 0.0
    return max(compute_s, k.bytes / r.memory_bytes_s, r.launch_s)


def micro_step_time(
    shape: TransformerShape,
    seq_len: int,
    micro_batch: int,
    p: Precision,
    r: Rates,
    *,
    fused_attention: bool = True,
    dropout: bool = False,
    fused_loss: bool = False,
) -> ComputeTime:
    fwd = bwd = mm = mem = 0.0
    floor = 0
    kernels = step_kernels(
        shape, seq_len, micro_batch, p, fused_attention=fused_attention, dropout=dropout, fused_loss=fused_loss
    )
    for k in kernels:
        t = kernel_time_s(k, r)
        if k.backward:
            bwd += t
        else:
            fwd += t
        if k.kind == MEMORY:
            mem += t
        else:
            mm += t
        floor += t == r.launch_s
    return ComputeTime(fwd, bwd, len(kernels), mm, mem, floor)
