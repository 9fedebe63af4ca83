"""training.activation_checkpointing = "op": torchtitan's per-op selective activation
checkpointing. Its memory held to torch's own selective checkpoint of a torchtitan-layout Llama
block under torchtitan's policy, its rerun to closed forms, and its place between selective and
full; the answer that motivated it: torchtitan's Llama 3 8B at local batch 2 fits an 80 GB H100."""

from collections import defaultdict
from functools import partial

import pytest

from sim.memory import GIB, estimate_memory, op_saved_bytes
from sim.precision import precision_dtypes
from sim.scenario_file import load_scenario
from sim.transformer import TransformerShape
from sim.workload import block_rerun_share, forward_shares, recompute_fraction
from tests.conftest import in_process

# A Llama block at CPU size: grouped-query attention (2 KV heads for 4) and SwiGLU.
D, HEADS, KV_HEADS, FFN, SEQ, BATCH, LAYERS = 64, 4, 2, 176, 32, 2, 3
TINY = TransformerShape(
    name="op-tiny", layout="llama", n_layer=LAYERS, n_embd=D, n_head=HEADS, n_kv_head=KV_HEADS, ffn_hidden=FFN,
    block_size=SEQ, vocab_size=256,
)  # fmt: skip


def _torchtitan_blocks(torch, n: int):
    """torchtitan's Llama block as its model writes it: wq, wk, wv, wo, w1, w3, w2 as separate
    bias-free linears (torchtitan/models/llama3/model/model.py), RMSNorm, causal SDPA."""
    nn, F = torch.nn, torch.nn.functional
    hd = D // HEADS

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(D), nn.RMSNorm(D)
            self.wq, self.wo = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
            self.wk, self.wv = nn.Linear(D, KV_HEADS * hd, bias=False), nn.Linear(D, KV_HEADS * hd, bias=False)
            self.w1, self.w3 = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False)
            self.w2 = nn.Linear(FFN, D, bias=False)

        def forward(self, x):
            h = self.attention_norm(x)
            q = self.wq(h).view(BATCH, SEQ, HEADS, hd).transpose(1, 2)
            k = self.wk(h).view(BATCH, SEQ, KV_HEADS, hd).transpose(1, 2)
            v = self.wv(h).view(BATCH, SEQ, KV_HEADS, hd).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.wo(y.transpose(1, 2).reshape(BATCH, SEQ, D))
            h = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    return nn.ModuleList(Block() for _ in range(n))


def _op_policy(torch):
    """torchtitan's "op" policy (torchtitan/models/llama3/infra/parallelize.py): keep SDPA's
    outputs and every other aten.mm's (the 1st, 3rd, ... of a block), rerun the rest. On CPU SDPA
    is aten._scaled_dot_product_flash_attention_for_cpu, which stands for the CUDA kernels in
    torchtitan's save list."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default, aten._scaled_dot_product_flash_attention_for_cpu.default}

    def policy(meta, ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return lambda: create_selective_checkpoint_contexts(partial(policy, defaultdict(int)))


@pytest.mark.parametrize("precision", ["fp32", "bf16-amp"])
def test_what_op_keeps_is_what_torchs_selective_checkpoint_holds(precision):
    """After the forward of LAYERS blocks under torch.utils.checkpoint with torchtitan's policy,
    torch's MemTracker sees each block's input and what the policy kept: the estimate's
    LAYERS x (input + op_saved_bytes), to the byte. Under bf16 autocast the matmuls' and SDPA's
    outputs are 16-bit, the residual stream fp32, the log-sum-exp fp32 (sim/precision.py)."""
    torch = pytest.importorskip("torch", reason="needs torch")
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    blocks = _torchtitan_blocks(torch, LAYERS)
    context = _op_policy(torch)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-amp")
    cpu = torch.device("cpu")
    tracker = MemTracker()
    tracker.track_external(blocks)
    with tracker, autocast:
        x = torch.randn(BATCH, SEQ, D, requires_grad=True)
        before = tracker.get_tracker_snapshot("current")[cpu]["Total"]
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False, context_fn=context)
        held = tracker.get_tracker_snapshot("current")[cpu]["Total"] - before
    dt = precision_dtypes(precision)
    block_input = SEQ * BATCH * D * dt.residual_bytes  # each block's output is the next one's input
    # Autocast's cache of 16-bit weight copies lives as long as its region: sim/memory.py counts
    # it apart (weight_copy_bytes, DDP under AMP); FSDP's mixed precision, torchtitan's, has none.
    copies = LAYERS * TINY.block_matmul_numel * dt.compute_bytes if dt.weight_casts else 0
    assert held == LAYERS * (block_input + op_saved_bytes(TINY, SEQ, BATCH, dt)) + copies


def _sc(*sets, model="llama3-8b", ranks=8):
    return load_scenario("h100-1024", [f"model.preset={model}", "training.seq_len=0", *sets], ranks=ranks)


def test_op_reruns_wk_wo_w3_by_flops_under_a_fixed_mfu():
    """With a fixed MFU the forward splits by FLOPs: op reruns the matmuls it does not keep, wk,
    wo and w3, 2 d (kv + d + f) FLOPs a token of the block's 2 x (its weights) + 4 s d."""
    sc = _sc("training.activation_checkpointing=op", "compute.mfu=0.4")
    shape, shares = sc.model.shape, forward_shares(sc)[0]
    d, kv, f = shape.n_embd, shape.kv_dim, shape.ffn_hidden
    block = 2 * shape.block_matmul_numel + 4 * sc.seq_len * d
    assert block_rerun_share(sc) == pytest.approx(shares.block * 2 * d * (kv + d + f) / block, rel=1e-12)
    assert recompute_fraction(sc) == pytest.approx(shape.n_layer * block_rerun_share(sc), rel=1e-12)
    # Llama 3 8B: wk 1,024 + wo 4,096 + w3 14,336 columns of 4,096 inputs, 36.6 % of the block's
    # matmul FLOPs (218M weights); with attention's 4 s d at seq 8192, 27.9 % of its forward.
    assert block_rerun_share(sc) / shares.block == pytest.approx(0.2794, abs=1e-4)


def test_op_sits_between_selective_and_full_in_time_and_none_and_full_in_memory():
    """On the roofline (eager) at torchtitan's 8B: op reruns more than selective (the core alone)
    and less than full (the whole forward), and holds less than none and more than full."""
    rows = {}
    for r in ("none", "selective", "op", "full"):
        sc = _sc(f"training.activation_checkpointing={r}", "training.mode=fsdp", "training.micro_batch_size=2")
        rows[r] = (recompute_fraction(sc), estimate_memory(sc).activations_gib)
    assert rows["none"][0] == 0 and rows["selective"][0] < rows["op"][0] < rows["full"][0]
    assert rows["full"][1] < rows["op"][1] < rows["selective"][1] <= rows["none"][1]


def test_torchtitans_8b_at_local_batch_2_fits_an_h100_with_op_alone(capsys):
    """torchtitan's published Llama 3 8B runs (FSDP, local batch 2, seq 8192, selective op AC)
    ran on H100s. Megatron's selective leaves it at 118 GiB, over 80 GB; op fits, and simulate
    names op first among what would fit."""
    sc = _sc("training.activation_checkpointing=op", "training.mode=fsdp", "training.micro_batch_size=2", ranks=128)
    assert estimate_memory(sc).total_gib * GIB < 79.65 * GIB
    argv = ("simulate", "llama3-8b-1024", "--ranks", "128", "--steps", "2", "--set", "training.mode=fsdp",
            "--set", "training.micro_batch_size=2")  # fmt: skip
    code, out, _ = in_process(capsys, *argv)
    assert code == 3
    fits = [x.split()[0] for x in out.splitlines() if x.startswith("    training.")]
    assert fits[0] == "training.activation_checkpointing=op"
    code, out, _ = in_process(capsys, *argv, "--set", "training.activation_checkpointing=op")
    assert code == 0 and "fits 79.65 GiB" in out


@pytest.mark.parametrize(
    "sets,says",
    [
        (("model.preset=gpt2-760m",), "torchtitan's per-op AC is modelled on its bias-free Llama block, and gpt2-760m"),
        (("model.preset=llama3-8b", "training.tp=2"), "is modelled without tp or cp (there: selective or full)"),
        (("model.preset=llama3-8b", "training.fused_attention=false"), "keeps fused attention's (SDPA's) output"),
    ],
)
def test_op_where_it_is_not_modelled_is_one_line(sets, says, capsys):
    argv = ["simulate", "h100-1024", "--ranks", "8", "--steps", "2", "--set", "training.seq_len=0"]
    argv += [x for s in sets for x in ("--set", s)] + ["--set", "training.activation_checkpointing=op"]
    code, out, err = in_process(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ddplab simulate: error: training.activation_checkpointing: ")
    assert says in err


def test_the_3d_model_reruns_and_holds_what_ddp_and_fsdp_do():
    """Without TP or CP, a pipeline or zero1 job takes op too: sim/tp.py reruns the same share
    of a block's forward as sim/workload.py, and sim/memory3d.py holds, beside full's block
    inputs, op_saved_bytes for every layer in flight."""
    from sim.parallel3d import dtypes_3d, layout, memory_by_stage, step_costs
    from sim.roofline import rates
    from sim.tp import block_time

    sets = ("training.pp=2", "training.grad_accum=4", "training.mode=zero1", "training.micro_batch_size=1")
    by = {r: _sc(*sets, f"training.activation_checkpointing={r}", ranks=16) for r in ("full", "op")}
    sc = by["op"]
    shares, _ = forward_shares(sc)
    lay = layout(sc)
    costs = step_costs(sc, lay)
    blk = block_time(
        sc.model.shape, sc.seq_len, 1, dtypes_3d(sc), rates(sc.compute, dtypes_3d(sc)), tp=1,
        sequence_parallel=False, recompute="op", fabric=None,
    )  # fmt: skip
    assert blk.recompute_s / blk.forward_s == pytest.approx(block_rerun_share(sc) / shares.block, rel=1e-9)
    op_mem = memory_by_stage(sc, lay, costs)
    full_mem = memory_by_stage(by["full"], layout(by["full"]), step_costs(by["full"], layout(by["full"])))
    per_layer = op_saved_bytes(sc.model.shape, sc.seq_len, 1, sc.training.dtypes)
    for stage, (o, f) in enumerate(zip(op_mem, full_mem, strict=True)):
        layers = sum(costs.layers[g] for g in range(stage, lay.pp * lay.v, lay.pp))
        in_flight = min(lay.pp - stage, lay.m) * layers  # 1F1B: pp - stage micro-batches
        assert (o.activations_gib - f.activations_gib) * GIB == pytest.approx(in_flight * per_layer, rel=1e-9)


def test_plan_searches_op_where_it_is_modelled():
    from sim.planner import grid

    llama = _sc()
    cands = grid(llama, 16, 32)
    assert {c.recompute for c in cands} == {"none", "selective", "full", "op"}
    assert all(c.tp == 1 and c.cp == 1 for c in cands if c.recompute == "op")
    assert any(c.tp > 1 for c in cands)
    gpt2 = load_scenario("h100-1024", ["training.seq_len=0"], ranks=8)
    assert "op" not in {c.recompute for c in grid(gpt2, 16, 32)}
