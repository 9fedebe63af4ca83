"""Per-GPU memory (sim/memory.py): held to PyTorch's own count of a real training step, to
the peak measured on an H200, and to the arithmetic of model states."""

import dataclasses

import pytest

from sim.memory import GIB, activation_bytes, estimate_memory, fits, logits_bytes
from sim.precision import precision_dtypes
from sim.scenario_file import load_scenario
from sim.transformer import model_shape

# docs/gpu.md: GPT-2 760M, seq 2048, micro-batch 8, bf16 autocast, fused AdamW, DDP over
# one rank (bucket_cap_mb 25): torch.cuda.max_memory_allocated 45.3 GiB on an NVIDIA H200.
H200_PEAK_GIB = 45.3


def tiny_step(precision: str, grad_accum: int = 1, micro_batch: int = 8, seq: int = 64):
    return load_scenario(
        "h100-1024",
        [
            "model.preset=gpt2-tiny",
            f"training.seq_len={seq}",
            f"training.micro_batch_size={micro_batch}",
            f"training.precision={precision}",
            f"training.grad_accum={grad_accum}",
        ],
        ranks=1,
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16-amp", "bf16"])
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_peak_equals_torch_memtracker_on_cpu(precision, grad_accum):
    """A real training step of realrun's GPT-2 (forward under the precision, backward, AdamW,
    zero_grad(set_to_none)) tracked by torch's MemTracker, which follows every live tensor:
    its peak is the estimate's, less DDP's buckets (allocated inside DDP's C++ reducer, which
    MemTracker cannot see), to 0.5 %. CPU autocast keeps the residual stream, layer norms and
    the loss in fp32 as CUDA autocast does, so the dtypes are the GPU's."""
    torch = pytest.importorskip("torch", reason="needs torch")
    from torch.distributed._tools.mem_tracker import MemTracker

    from realrun.model import build

    torch.manual_seed(0)
    model = build("gpt2-tiny")
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, model.cfg.vocab_size, (8, 64), generator=torch.Generator().manual_seed(0))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-amp")
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for step in range(2):  # the second step has AdamW's state: the training peak
            for micro in range(grad_accum):
                with autocast:
                    _logits, loss = model(x, x)  # held across backward, as realrun's loops do
                loss.mean().backward()
                if micro < grad_accum - 1:
                    tracker.reset_mod_stats()  # MemTracker's per-module stats allow one call per step
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step == 0:
                tracker.reset_mod_stats()
    measured = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    e = estimate_memory(tiny_step(precision, grad_accum))
    assert e.peak_phase == "backward"
    assert (e.peak_allocated_gib - e.ddp_buckets_gib) * GIB == pytest.approx(measured, rel=0.005)


def test_760m_bf16_amp_within_5_percent_of_the_h200_measurement():
    e = estimate_memory(load_scenario("h100-1024", ranks=1))
    assert e.precision == "bf16-amp" and e.peak_phase == "backward"
    assert e.peak_allocated_gib == pytest.approx(H200_PEAK_GIB, rel=0.05)
    # The terms the README explains: 16 B of model states and buckets per parameter at the
    # start of backward (fp32 weights, two fp32 moments, fp32 buckets; no gradients yet).
    n = 760_300_032
    assert (e.parameters_gib + e.optimizer_state_gib + e.ddp_buckets_gib) * GIB == n * 16
    assert e.gradients_gib == 0
    assert e.logits_gib * GIB == 2048 * 8 * 50257 * (2 + 3 * 4)


def test_precision_sets_the_bytes_of_each_state():
    # GPT-2 124M (124,439,808 parameters, tied lm_head) at the optimizer step, where every
    # gradient exists: micro-batch 1 of 16 tokens has almost no activations.
    n = 124_439_808
    for precision, (w, g, o) in {"bf16-amp": (4, 4, 8), "fp32": (4, 4, 8), "bf16": (2, 2, 4)}.items():
        sc = load_scenario(
            "h100-1024",
            [
                "model.preset=gpt2-124m",
                "training.seq_len=16",
                "training.micro_batch_size=1",
                f"training.precision={precision}",
            ],
            ranks=1,
        )
        e = estimate_memory(sc)
        assert e.peak_phase == "optimizer"
        assert (e.parameters_gib * GIB, e.gradients_gib * GIB, e.optimizer_state_gib * GIB) == (n * w, n * g, n * o)
        assert e.ddp_buckets_gib * GIB == n * g
        assert e.weight_copies_gib == e.activations_gib == e.logits_gib == 0
        fsdp = estimate_memory(dataclasses.replace(sc, ranks=4, training=dataclasses.replace(sc.training, mode="fsdp")))
        assert fsdp.parameters_gib * GIB == n * w / 4 and fsdp.optimizer_state_gib * GIB == n * o / 4
        assert fsdp.ddp_buckets_gib == 0
        # gathered in the compute dtype: the root (and its gradient), two blocks (prefetch 1), one block's gradient
        c = precision_dtypes(precision).compute_bytes
        root, block = 50257 * 768 + 1024 * 768 + 2 * 768, 12 * 768 * 768 + 13 * 768
        assert fsdp.fsdp_unsharded_gib * GIB == root * (c + g) + 2 * block * c + block * g


def test_activations_closed_form():
    """Per block 2r + 14c bytes per token and model dimension, plus fp32 norm statistics and the
    log-sum-exp per head; checkpointing keeps the block inputs and one block's activations."""
    shape = model_shape("gpt2-760m")
    s, b, h, a, n_layer = 1024, 4, 1536, 16, 24
    for precision, (r, c) in {"bf16-amp": (4, 2), "fp32": (4, 4), "bf16": (2, 2)}.items():
        dt = precision_dtypes(precision)
        block = s * b * (h * (2 * r + 14 * c) + 16 + 4 * a)
        head = s * b * (h * (r + c) + 8 + 16)
        full = activation_bytes(shape, s, b, dt, checkpointing=False, fused_attention=True)
        assert full == n_layer * block + head
        ckpt = activation_bytes(shape, s, b, dt, checkpointing=True, fused_attention=True)
        assert ckpt == n_layer * s * b * h * r + block + head
        unfused = activation_bytes(shape, s, b, dt, checkpointing=False, fused_attention=False)
        assert unfused - full == n_layer * s * b * (a * s * c + h * c - 4 * a)
        assert logits_bytes(shape, s, b, dt) == s * b * 50257 * (c + 3 * (4 if dt.autocast else c))


def test_760m_on_a_12_gb_rtx_4070():
    """The seed's question: pure bf16 (the home-lab presets) with DDP does not fit a 12 GB card,
    activation checkpointing makes it fit; FSDP over the two machines halves the model states."""

    def homelab(mode, ranks, ckpt=False):
        sets = [f"training.mode={mode}", f"training.activation_checkpointing={str(ckpt).lower()}", "stragglers=''"]
        return estimate_memory(load_scenario("homelab-10gbe", sets, ranks=ranks))

    ddp = homelab("ddp", 2)
    assert ddp.precision == "bf16" and not fits(ddp, 12.0)
    assert fits(homelab("ddp", 2, ckpt=True), 12.0)
    fsdp = homelab("fsdp", 2)
    assert (fsdp.parameters_gib + fsdp.optimizer_state_gib) == pytest.approx(
        (ddp.parameters_gib + ddp.optimizer_state_gib) / 2, rel=1e-12
    )
    assert fsdp.total_gib < ddp.total_gib


def test_fits_compares_the_device_total():
    e = estimate_memory(load_scenario("h100-1024", ranks=1))
    assert e.total_gib == pytest.approx(e.peak_allocated_gib + e.cuda_context_gib, rel=1e-12)
    assert fits(e, 80.0) and not fits(e, 40.0)
