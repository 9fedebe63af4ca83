"""The Llama layout (scenarios/models.toml layout = "llama"): parameter counts held to the
published ones, FLOPs with grouped-query attention, DDP's buckets of an untied model, the
memory of a SwiGLU block held to torch's own count, Llama 3 8B on 1024 H100s (DDP does not
fit, FSDP does), and a real 2-rank DDP run of the tiny preset."""

import dataclasses
import json

import pytest
from conftest import ROOT, run_here

from realrun.footprint import params_at_least
from scenarios import load_models
from sim.buckets import MIB, build_buckets
from sim.memory import GIB, activation_bytes, estimate_memory, fits, weight_copy_bytes
from sim.precision import precision_dtypes
from sim.scenario_file import load_scenario
from sim.transformer import backward_ops, flops_per_token, gradient_ready_order, model_shape, param_count, param_tensors

# The released checkpoints' counts (8.03B and 70.6B on their model pages; docs/references.md
# "Models"): Llama 3 8B 8,030,261,248; Llama 3 70B 70,553,706,496.
PUBLISHED = {"llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496}


def test_llama3_405b_is_the_papers_405b():
    """Table 3's shape with the smaller two's vocabulary and untied embeddings: 405.85B, the
    paper's "405B", counted by hand as below (and the shape its Table 4 rows run)."""
    s = model_shape("llama3-405b")
    assert (s.n_layer, s.n_embd, s.ffn_hidden, s.n_head, s.n_kv_head) == (126, 16384, 53248, 128, 8)
    assert param_count(s) == 405_853_388_800


@pytest.mark.parametrize("preset", PUBLISHED)
def test_llama3_parameter_counts_are_the_published_ones(preset):
    assert param_count(model_shape(preset)) == PUBLISHED[preset]


@pytest.mark.parametrize("preset", [*PUBLISHED, "llama3-405b"])
def test_llama3_count_from_the_shape_by_hand(preset):
    """Embedding and untied output layer, per layer Q and O (d x d), K and V (d x kv), the
    SwiGLU's three d x ffn matrices and two RMSNorm weights, and the final norm."""
    s = model_shape(preset)
    d, kv, f, v = s.n_embd, s.n_kv_head * s.n_embd // s.n_head, s.ffn_hidden, s.vocab_size
    layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    assert param_count(s) == 2 * v * d + s.n_layer * layer + d
    assert not any(t.name.endswith(".bias") or "wpe" in t.name for t in param_tensors(s))


def test_gpt3_presets_round_to_their_names():
    # Brown et al. 2020, Table 2.1: "GPT-3 XL" 1.3B and "GPT-3 2.7B" (tied, GPT-2 vocabulary).
    assert round(param_count(model_shape("gpt3-1.3b")) / 1e9, 1) == 1.3
    assert round(param_count(model_shape("gpt3-2.7b")) / 1e9, 1) == 2.7


def test_flops_per_token_with_grouped_query_attention():
    """6N + 12 L d T with N less the untied input embedding (a lookup). The attention term
    sees every query head (n_head x head_dim = d) whatever n_kv_head is; fewer K/V heads
    only shrink N."""
    s = model_shape("llama3-8b")
    n = 8_030_261_248 - 128_256 * 4096
    assert flops_per_token(s, 8192) == 6 * n + 12 * 32 * 4096 * 8192
    assert flops_per_token(s, 8192) == pytest.approx(57.91e9, rel=1e-4)
    mha = dataclasses.replace(s, n_kv_head=32)
    extra = param_count(mha) - param_count(s)
    assert extra == 32 * 2 * 4096 * (4096 - 1024)
    assert flops_per_token(mha, 8192) - flops_per_token(s, 8192) == 6 * extra


def test_roofline_work_adds_up_to_the_llama_flop_count():
    """sim/roofline.py's kernels for a Llama block: matmuls 2 x weight elements per token
    forward (four per block, Q K V fused, gate and up fused, and the untied output layer),
    backward twice that; attention over all 32 query heads whatever K/V sharing."""
    from sim.roofline import ATTENTION, MATMUL, step_kernels

    s, seq, mb = model_shape("llama3-8b"), 8192, 1
    kernels = step_kernels(s, seq, mb, precision_dtypes("bf16-amp"))
    mm = sum(k.flops for k in kernels if k.kind == MATMUL)
    att = sum(k.flops for k in kernels if k.kind == ATTENTION)
    matrices = 8_030_261_248 - 128_256 * 4096 - (2 * 32 + 1) * 4096  # less wte and the norms
    assert mm == 3 * 2 * seq * matrices
    assert att == (2 + 5) * seq * seq * 4096 * 32
    names = {k.name for k in kernels}
    assert {"rope", "silu", "swiglu_mul"} <= names and not names & {"gelu", "wpe.add", "wte.tied_grad_sum"}
    assert not any(n.endswith("bias_grad") for n in names)


def test_untied_output_layer_is_ready_first_and_wte_last():
    s = model_shape("llama3-8b")
    order = gradient_ready_order(s, 8192)
    assert sorted(n for n, _ in order) == sorted(t.name for t in param_tensors(s))
    ops = backward_ops(s, 8192)
    total = sum(op.flops_per_token for op in ops)
    assert order[0] == ("lm_head.weight", pytest.approx(2 * 128_256 * 4096 / total, rel=1e-12))
    assert order[-1] == ("transformer.wte.weight", 1.0)
    fracs = [f for _, f in order]
    assert fracs == sorted(fracs)


@pytest.mark.parametrize("bytes_per_grad", [2, 4])
def test_llama3_8b_buckets_follow_ddp_rules(bytes_per_grad):
    s = model_shape("llama3-8b")
    buckets = build_buckets(s, 8192, bytes_per_grad=bytes_per_grad, bucket_cap_mb=25, first_bucket_mb=1)
    sizes = {t.name: t.numel for t in param_tensors(s)}
    assert sum(b.numel for b in buckets) == 8_030_261_248
    for b in buckets[:-1]:
        limit = (1 if b.index == 0 else 25) * MIB
        assert b.size_bytes >= limit > b.size_bytes - sizes[b.params[-1]] * bytes_per_grad
    # The output layer's 1 GiB of fp32 gradient is the first bucket, alone.
    assert buckets[0].params == ("lm_head.weight",)
    assert buckets[-1].params[-1] == "transformer.wte.weight" and buckets[-1].ready_fraction == 1.0


def test_params_floor_of_realrun_is_a_floor_for_every_preset():
    # realrun/footprint.py refuses runs that cannot fit from a torch-free floor of the count.
    for name, shape in load_models().items():
        assert 0.9 * param_count(model_shape(name)) < params_at_least(shape) <= param_count(model_shape(name)), name


def test_swiglu_block_activations_closed_form():
    """Per token: RMSNorm inputs 2r, their outputs 2c, Q c, K and V 2 kv/d c, the attention
    output c, SwiGLU's gate, silu(gate), up and product 4 ffn/d c (Korthikanti et al. 2022's
    count, adapted: module docstring of sim/memory.py); one fp32 statistic per norm, the
    log-sum-exp per head; under autocast RoPE's cos and sin in bf16, s x head_dim each."""
    shape = model_shape("llama3-8b")
    s, b, h, a, kv, f, L = 8192, 1, 4096, 32, 1024, 14336, 32
    for precision, (r, c) in {"bf16-amp": (4, 2), "fp32": (4, 4), "bf16": (2, 2)}.items():
        dt = precision_dtypes(precision)
        rope = 2 * s * 128 * 2 if precision == "bf16-amp" else 0
        block = s * b * (2 * h * r + (2 * h + h + 2 * kv + h + 4 * f) * c + 2 * 4 + 4 * a) + rope
        head = s * b * (h * (r + c) + 4 + 16)
        assert activation_bytes(shape, s, b, dt, checkpointing=False, fused_attention=True) == L * block + head
    assert weight_copy_bytes(shape, precision_dtypes("bf16-amp")) == 2 * (8_030_261_248 - 128_256 * 4096 - 65 * h)


def llama3_8b(*sets):
    return load_scenario("llama3-8b-1024", list(sets))


def test_llama3_8b_on_1024_h100s_ddp_does_not_fit_fsdp_does():
    """DDP: fp32 weights, AdamW's two moments and DDP's fp32 buckets are 16 bytes a parameter,
    119.7 GiB before any activation; FSDP shards them 1/1024 and fits in an H100's 80 GB."""
    ddp = estimate_memory(llama3_8b())
    assert (ddp.parameters_gib + ddp.optimizer_state_gib + ddp.ddp_buckets_gib) * GIB == 16 * 8_030_261_248
    assert ddp.total_gib > 80 and not fits(ddp, 80)
    fsdp = estimate_memory(llama3_8b("training.mode=fsdp"))
    assert fsdp.total_gib < 80 and fits(fsdp, 80)
    # Sharded states are 16 bytes / 1024 a parameter; the rest is one micro-batch's activations,
    # the logits and the gathered units (the root holds the embedding and the output layer).
    assert (fsdp.parameters_gib + fsdp.optimizer_state_gib) * GIB == pytest.approx(12 * 8_030_261_248 / 1024)
    assert fsdp.activations_gib > 40 and fsdp.logits_gib * GIB == 8192 * 128_256 * (2 + 3 * 4)


def test_simulate_llama3_8b_scenario_from_the_cli(ddplab):
    # DDP does not fit: not simulated, exit 3 (tests/test_answers_memory.py holds the rest of it).
    for extra, verdict, want in (((), "does NOT fit 80 GiB", 3), (("--set", "training.mode=fsdp"), "fits 80 GiB", 0)):
        code, out, err = ddplab("simulate", "llama3-8b-1024", "--steps", "5", "--device-gib", "80", *extra)
        assert code == want, err
        memory = next(line for line in out.splitlines() if line.strip().startswith("memory/GPU"))
        assert verdict in memory, memory
    # The compute time, not the memory, is the question here: DDP's, simulated anyway.
    code, out, err = ddplab("simulate", "llama3-8b-1024", "--steps", "5", "--json", "--ignore-memory")
    assert code == 0, err
    # 8,192 tokens a rank: compute of 57.9 GFLOP a token at the roofline, well under a second.
    assert 0.5 < json.loads(out)["compute_s"] < 1.2


@pytest.mark.parametrize("precision", ["fp32", "bf16-amp", "bf16"])
def test_memory_of_a_real_llama_step_equals_torch_memtracker_on_cpu(precision):
    """realrun's llama-tiny, training steps tracked by MemTracker (as tests/test_memory.py does
    for GPT-2): the peak is the estimate's, less DDP's buckets, plus what CPU's composite
    RMSNorm saves beyond CUDA's fused kernel (its input and statistic), per norm (two a block,
    and ln_f): the normalised input in fp32, and a bf16 input's fp32 upcast in its place."""
    torch = pytest.importorskip("torch", reason="needs torch")
    from torch.distributed._tools.mem_tracker import MemTracker

    from realrun.model import build

    torch.manual_seed(0)
    model = build("llama-tiny")
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, 256, (8, 64), generator=torch.Generator().manual_seed(0))
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for step in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-amp"):
                _logits, loss = model(x, x)
            loss.mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step == 0:
                tracker.reset_mod_stats()
    measured = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    sc = load_scenario(
        "h100-1024",
        [
            "model.preset=llama-tiny",
            "training.seq_len=64",
            "training.micro_batch_size=8",
            f"training.precision={precision}",
        ],
        ranks=1,
    )
    e = estimate_memory(sc)
    assert e.peak_phase == "backward"
    composite_rms_norm = (2 * 2 + 1) * 8 * 64 * 64 * (4 + 4 - sc.training.dtypes.residual_bytes)
    assert (e.peak_allocated_gib - e.ddp_buckets_gib) * GIB + composite_rms_norm == pytest.approx(measured, rel=0.005)


def test_ddplab_train_llama_tiny_on_two_ranks(tmp_path):
    """`ddplab train --model llama-tiny`: two processes, gloo, real DDP over the Llama block."""
    from realrun.records import read_run

    p = run_here(
        *("train", "--nproc", "2", "--out", str(tmp_path)),
        *("--model", "llama-tiny", "--steps", "2", "--micro-batch", "4", "--data", str(ROOT / "README.md")),
        *("--bucket-cap-mb", "0.05"),  # 50 KiB: llama-tiny's 483 KiB of gradients in several buckets
    )
    assert p.returncode == 0, p.stderr[-3000:]
    expected = [
        b.size_bytes
        for b in build_buckets(
            model_shape("llama-tiny"), 64, bytes_per_grad=4, bucket_cap_mb=0.05, first_bucket_mb=0.05
        )
    ]
    assert len(expected) > 3 and sum(expected) == 4 * param_count(model_shape("llama-tiny"))
    for rank in read_run(tmp_path, "train"):
        steps = rank.of_type("step")
        assert rank.complete and [s["step"] for s in steps] == [0, 1]
        assert steps[0]["loss"] == pytest.approx(5.5, abs=0.5)  # ln 256: uniform over bytes
        assert [b["bytes"] for b in steps[1]["buckets"]] == expected
