"""The roofline of a GPT-2 step (sim/roofline.py): its work adds up to the model's FLOP count,
its limits are the closed forms, and it is held to the steps measured on an H200."""

import dataclasses

import pytest

from sim.config import ComputeConfig
from sim.precision import PRECISIONS, precision_dtypes
from sim.roofline import ATTENTION, MATMUL, micro_step_time, rates, step_kernels
from sim.scenario_file import load_scenario
from sim.transformer import model_shape
from sim.workload import micro_step_compute_s

SHAPE = model_shape("gpt2-760m")
SEQ = 2048
# docs/gpu.md, measured on one H200 (GPT-2 760M, seq 2048, micro-batch 8): forward and
# backward per micro-step, eager; torch.compile'd; fp32 with TF32 off and on.
# The H100's compute, the H200's HBM3e; the fused roofline (the eager stack: test_answers_stack.py).
H200 = dataclasses.replace(ComputeConfig(), hbm_tb_s=4.8, stack="compiled")
H200_BF16_AMP_EAGER_S, H200_COMPILED_S = 0.084 + 0.154, 0.167
H200_FP32_S, H200_TF32_S = 1.79, 0.62


@pytest.mark.parametrize("precision", PRECISIONS)
def test_matmul_and_attention_flops_add_up(precision):
    """Forward matmuls are 2 x weight elements per token (12 d^2 per block and the tied vocab
    projection), backward twice that; causal attention does half of QK^T and AV's 4 s d per
    token forward, FlashAttention's backward 2.5 x that."""
    d, v, L, mb = SHAPE.n_embd, SHAPE.vocab_size, SHAPE.n_layer, 4
    t = mb * SEQ
    kernels = step_kernels(SHAPE, SEQ, mb, precision_dtypes(precision))
    mm = sum(k.flops for k in kernels if k.kind == MATMUL)
    att = sum(k.flops for k in kernels if k.kind == ATTENTION)
    assert mm == pytest.approx(3 * 2 * t * (12 * L * d * d + v * d), rel=1e-12)
    assert att == pytest.approx((2 + 5) * t * SEQ * d * L, rel=1e-12)


@pytest.mark.parametrize("dropout", [False, True])
def test_unfused_attention_runs_the_whole_square_and_moves_it_through_hbm(dropout):
    """Unfused attention (Megatron-LM 2021, eager math): QK^T and AV over the whole s x s square,
    4 s d FLOPs per token forward and 8 backward, as matmuls; the square's elements (t s a) pass
    through HBM, at 16 bits: forward the scores written, the softmax's read and write and AV's
    read (4), backward the four matmul gradients' (4) and the softmax's backward (3); dropout
    adds a read, a write and a 1-byte mask each way. Everything else equals the fused block."""
    from sim.roofline import block_kernels

    p = precision_dtypes("bf16")
    d, kv, a, s, t = SHAPE.n_embd, SHAPE.kv_dim, SHAPE.n_head, SEQ, 4.0 * SEQ
    fused = block_kernels(SHAPE, s, t, p)
    unfused = block_kernels(SHAPE, s, t, p, fused_attention=False, dropout=dropout)
    core = [k for k in unfused if k.core]
    assert {k.name for k in unfused if not k.core} - {"residual_add", "residual_grad_sum"} == {
        k.name for k in fused if not k.core and k.name != "attention.bwd_preprocess"
    } - {"residual_add", "residual_grad_sum"}
    assert all(k.kind in (MATMUL, "memory") for k in core)
    assert sum(k.flops for k in core if not k.backward) == pytest.approx(4 * t * s * d, rel=1e-12)
    assert sum(k.flops for k in core if k.backward) == pytest.approx(8 * t * s * d, rel=1e-12)
    e, c = t * s * a, p.compute_bytes
    per_token = 2 * (d + kv) * c  # Q, K (or V) and an output or gradient, t d wide, per matmul
    square = {False: 4 * e * c, True: 7 * e * c}
    if dropout:
        square = {b: v + e * (2 * c + 1) for b, v in square.items()}
    for backward in (False, True):
        got = sum(k.bytes for k in core if k.backward == backward)
        matmuls = sum(k.kind == MATMUL for k in core if k.backward == backward)
        assert got == pytest.approx(square[backward] + matmuls * t * per_token / 2, rel=1e-12)
    # Selective recomputation reruns the core: its forward kernels only.
    assert [k.name for k in core if not k.backward][0] == "attention.scores"


@pytest.mark.parametrize("precision", ["bf16-amp", "bf16"])
def test_a_fused_loss_reads_the_16_bit_logits_once_each_way(precision):
    """training.fused_loss: one kernel reads the T x vocab logits forward, and backward reads
    them and writes their gradient (2 + 4 bytes an element at 16 bits), in place of eager's fp32
    copy, log_softmax, NLL and their backward; every other kernel is the same, and memory holds
    the logits and their gradient alone."""
    from sim.memory import loss_bytes_per_logit

    p = precision_dtypes(precision)
    eager, fused = (step_kernels(SHAPE, SEQ, 4, p, fused_loss=f) for f in (False, True))
    loss = {"cross_entropy.fused", "cross_entropy.fused_bwd"}
    assert {k.name for k in fused} - {k.name for k in eager} == loss
    assert [k for k in fused if k.name not in loss] == [
        k for k in eager if k.name not in ("logits.cast_fp32", "log_softmax", "nll_loss", "nll_loss.bwd",
                                           "log_softmax.bwd", "logits.cast_bwd")
    ]  # fmt: skip
    tv, c = 4 * SEQ * SHAPE.vocab_size, p.compute_bytes
    by_name = {k.name: k.bytes for k in fused}
    assert (by_name["cross_entropy.fused"], by_name["cross_entropy.fused_bwd"]) == (tv * c, 2 * tv * c)
    eager_loss = sum(k.bytes for k in eager if k.name not in {j.name for j in fused})
    assert eager_loss > 3 * tv * c  # eager moves several times the fused kernel's bytes
    assert loss_bytes_per_logit(p, True) == 2 * c
    assert loss_bytes_per_logit(p, False) == c + 3 * p.loss_bytes


def test_without_memory_and_launch_limits_time_is_flops_over_rate():
    c = dataclasses.replace(ComputeConfig(), hbm_tb_s=1e9, kernel_launch_us=0.0)
    p = precision_dtypes("bf16-amp")
    r = micro_step_time(SHAPE, SEQ, 8, p, rates(c, p))
    kernels = step_kernels(SHAPE, SEQ, 8, p)
    mm = sum(k.flops for k in kernels if k.kind == MATMUL) / (c.peak_tflop_s * 1e12 * c.matmul_efficiency)
    att = sum(k.flops for k in kernels if k.kind == ATTENTION) / (c.peak_tflop_s * 1e12 * c.attention_efficiency)
    assert r.step_s == pytest.approx(mm + att, rel=1e-6)


@pytest.mark.parametrize("stack", ["eager", "compiled"])
def test_small_micro_batches_lose_efficiency_to_memory_and_launches(stack):
    p = precision_dtypes("bf16-amp")
    c = ComputeConfig(stack=stack)
    times = {mb: micro_step_time(SHAPE, SEQ, mb, p, rates(c, p)) for mb in (1, 2, 4, 8, 16)}
    per_token = [times[mb].step_s / mb for mb in sorted(times)]
    assert all(a > b for a, b in zip(per_token, per_token[1:], strict=False))  # MFU rises with the batch
    # Fused kernels at micro-batch 1 reach the launch floor; eager's slower ones stay above it.
    assert times[1].launch_bound >= times[16].launch_bound
    assert (times[1].launch_bound > times[16].launch_bound) == (stack == "compiled")
    assert per_token[0] / per_token[-1] > 1.1  # not one fixed MFU


def test_fp32_and_tf32_steps_on_the_h200():
    """Matmul-bound precisions: fp32 without TF32 (1.79 s measured) and with it (0.62 s, where
    attention stays on fp32 cores) land within 5 % of the measurement."""
    for precision, measured in (("fp32", H200_FP32_S), ("tf32", H200_TF32_S)):
        p = precision_dtypes(precision)
        r = micro_step_time(SHAPE, SEQ, 8, p, rates(H200, p))
        assert r.step_s == pytest.approx(measured, rel=0.05), precision


def test_bf16_amp_on_the_h200_the_compiled_step_and_the_eager_gap():
    """Under bf16 autocast the kernels' fused roofline (0.161 s) is what a fused step reaches:
    the torch.compile'd step measured 0.167 s, within 10 %; eager PyTorch measured 0.238 s,
    about 1.5 x it: its memory-bound kernels run far below STREAM bandwidth (compute.stack
    eager, fitted on this one point: tests/test_answers_stack.py; docs/gpu.md)."""
    p = precision_dtypes("bf16-amp")
    r = micro_step_time(SHAPE, SEQ, 8, p, rates(H200, p))
    assert r.step_s == pytest.approx(H200_COMPILED_S, rel=0.10)
    assert 1.3 < H200_BF16_AMP_EAGER_S / r.step_s < 1.6


def test_scenarios_take_the_roofline_unless_an_mfu_or_a_time_is_given():
    sc = load_scenario("h100-1024", ranks=8)
    fwd, bwd = micro_step_compute_s(sc)
    p = sc.training.dtypes
    r = micro_step_time(SHAPE, SEQ, 8, p, rates(sc.compute, p))
    assert (fwd, bwd) == (r.forward_s, r.backward_s)
    assert 0.6 < bwd / (fwd + bwd) < 0.75
    fixed = load_scenario("h100-1024", ["compute.mfu=0.5"], ranks=8)
    total = sum(micro_step_compute_s(fixed))
    flops = (6 * 760_300_032 + 12 * 24 * 1536 * SEQ) * 8 * SEQ
    assert total == pytest.approx(flops / (989.4e12 * 0.5), rel=1e-12)
    fp32 = load_scenario("h100-1024", ["compute.mfu=0.5", "training.precision=fp32"], ranks=8)
    assert sum(micro_step_compute_s(fp32)) == pytest.approx(total * 989.4 / 66.9, rel=1e-12)
