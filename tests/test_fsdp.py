"""FSDP / ZeRO-3 steps (sim/fsdp.py) and the per-GPU memory estimate (sim/memory.py) against
closed forms: exact where one exists."""

import dataclasses

import numpy as np
import pytest
from conftest import assert_breakdown_sums, tiny

from sim.collectives import bus_factor
from sim.config import ComputeConfig, NetworkConfig, NoiseConfig, TrainingConfig
from sim.engine import simulate
from sim.fsdp import build_fsdp_workload, simulate_fsdp, unit_numels
from sim.optimizer import optimizer_step_s
from sim.roofline import block_kernels
from sim.scenario_file import load_scenario
from sim.transformer import backward_ops, compute_shares, model_shape, param_count
from sim.workload import build_workload, forward_shares

REL = 1e-9
SLOW_NET = NetworkConfig(backend="gloo", algorithm="ring", gpus_per_node=1, nics_per_node=1, nic_gbit_s=0.01)


def fsdp(prefetch=1, k=1, checkpointing=False) -> TrainingConfig:
    return TrainingConfig(
        micro_batch_size=2,
        seq_len=64,
        grad_accum=k,
        mode="fsdp",
        fsdp_prefetch=prefetch,
        activation_checkpointing=checkpointing,
    )


def block_fwd_s(wl, shape, seq=64):
    return wl.forward_s[0] * compute_shares(shape, seq).block


def test_units_and_compute_shares_match_gpt2():
    shape = model_shape("gpt2-760m")
    numels = unit_numels(shape)
    assert len(numels) == shape.n_layer + 1 and numels.sum() == param_count(shape) == 760_300_032
    d = shape.n_embd
    assert numels[0] == shape.vocab_size * d + shape.block_size * d + 2 * d  # wte, wpe, ln_f
    assert (numels[1:] == 12 * d * d + 13 * d).all()
    sh = compute_shares(shape, 2048)
    assert sh.embedding + shape.n_layer * sh.block + sh.head == pytest.approx(1.0, rel=1e-12)
    # The same FLOPs as the DDP side's backward_ops, which sets its bucket-ready times.
    ops = backward_ops(shape, 2048)
    total = sum(op.flops_per_token for op in ops)
    assert sh.head == pytest.approx(ops[0].flops_per_token / total, rel=1e-12)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_free_network_is_compute_plus_shard_optimizer(checkpointing):
    ranks, k = 4, 2
    sc = tiny(
        ranks=ranks,
        training=fsdp(k=k, checkpointing=checkpointing),
        compute=ComputeConfig(step_compute_s=0.3, optimizer_s=0.02, dataloader_batch_s=0.01),
        network=NetworkConfig(enabled=False, gpus_per_node=1),
    )
    r = simulate_fsdp(sc, records=True)
    wl = r.workload
    recompute = 0.0
    if checkpointing:  # one more forward of every block per micro-step
        shape = model_shape("gpt2-tiny")
        recompute = k * shape.n_layer * block_fwd_s(wl, shape)
    # A blocking loader (no workers): one 0.01 s batch per micro-step.
    np.testing.assert_allclose(r.step_time_s, k * 0.01 + k * 0.3 + recompute + 0.02 / ranks, rtol=REL)
    assert_breakdown_sums(r)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize(
    "net", [SLOW_NET, NetworkConfig(backend="gloo", gpus_per_node=1, nics_per_node=1, nic_gbit_s=100.0)]
)
def test_prefetch_0_is_the_sum_of_parts(k, net):
    # No prefetch: each allgather is issued when its unit starts and every reduce-scatter sits
    # in front of the next allgather, so nothing overlaps, whatever the speeds.
    ranks = 4
    sc = tiny(
        ranks=ranks,
        training=fsdp(prefetch=0, k=k),
        compute=ComputeConfig(step_compute_s=0.2, optimizer_s=0.02, dataloader_batch_s=0.005),
        network=net,
    )
    r = simulate_fsdp(sc, records=True)
    wl = r.workload
    shape = model_shape("gpt2-tiny")
    n_layer = shape.n_layer
    # Per micro-step: root + blocks gathered in forward, blocks again in backward, all reduce-scattered.
    assert wl.ops.count("allgather") == k * (2 * n_layer + 1)
    assert wl.ops.count("reduce_scatter") == k * (n_layer + 1)
    # gloo ring closed form, (N-1) alpha + (N-1)/N S / B, S = the unsharded unit's bytes.
    alpha, beta = 50e-6, net.nic_gbit_s * 1e9 / 8 * net.nic_efficiency
    numels = unit_numels(shape)
    # bf16-amp under FSDP's mixed precision: parameters gathered in bf16, gradients reduced in fp32.
    sizes = np.array([numels[u] * (2.0 if op == "allgather" else 4.0) for op, u in zip(wl.ops, wl.units, strict=True)])
    np.testing.assert_allclose(wl.wire_bytes, sizes, rtol=0)
    np.testing.assert_allclose(wl.collective_s, (ranks - 1) * alpha + (ranks - 1) / ranks * sizes / beta, rtol=1e-12)
    expected = k * 0.005 + k * 0.2 + wl.collective_s.sum() + 0.02 / ranks  # a blocking loader per micro-step
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)
    np.testing.assert_allclose(r.comm_busy_s, wl.collective_s.sum(), rtol=REL)
    np.testing.assert_allclose(r.exposed_comm_s, wl.collective_s.sum(), rtol=REL)
    assert_breakdown_sums(r)


def test_h100_prefetch_0_closed_form():
    sc = load_scenario(
        "h100-1024",
        ["training.mode=fsdp", "training.fsdp_prefetch=0", "noise.distribution=none", "noise.speed_spread_sd=0"],
        ranks=64,
        steps=3,
    )
    r = simulate_fsdp(sc, records=True)
    wl = r.workload
    # Nothing overlaps without prefetch but the embedding's backward (the root is still
    # gathered), which runs beside the first block's reduce-scatter, the program's last but one.
    embedding_bwd = wl.backward_s[0] * forward_shares(sc)[0].embedding
    assert embedding_bwd > 0
    overlap = min(embedding_bwd, wl.collective_s[-2])
    expected = wl.forward_s[0] + wl.backward_s[0] + wl.collective_s.sum() + optimizer_step_s(sc) / 64 - overlap
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)


@pytest.mark.parametrize("prefetch", [1, 2, 30])
@pytest.mark.parametrize("k", [1, 2])
def test_prefetch_hides_compute_when_communication_bound(prefetch, k):
    # Communication far slower than compute: with prefetch the stream never idles but where no
    # collective is in flight yet: the last block's and the head's forward (prefetch does not
    # cross from forward into backward), once per micro-step.
    ranks = 4
    sc = tiny(
        ranks=ranks,
        training=fsdp(prefetch=prefetch, k=k),
        compute=ComputeConfig(step_compute_s=1e-3, optimizer_s=0.02, dataloader_batch_s=0.005),
        network=SLOW_NET,
    )
    r = simulate_fsdp(sc, records=True)
    wl = r.workload
    shape = model_shape("gpt2-tiny")
    sh = compute_shares(shape, 64)
    assert wl.collective_s.min() > 10 * (wl.forward_s[0] + wl.backward_s[0])  # communication-bound
    idle = k * wl.forward_s[0] * (sh.block + sh.head)
    expected = k * 0.005 + wl.collective_s.sum() + idle + 0.02 / ranks  # a blocking loader per micro-step
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)
    no_prefetch = simulate_fsdp(dataclasses.replace(sc, training=fsdp(prefetch=0, k=k)), records=True)
    assert r.step_time_s.mean() < no_prefetch.step_time_s.mean()
    assert_breakdown_sums(r)


def test_prefetch_hides_communication_when_compute_bound():
    # Fast network, prefetch 1: all that shows is what no compute can hide, the first two
    # allgathers (the root's, then block 0's, which only the embedding's short forward hides)
    # and the last two reduce-scatters (block 0's, beside the embedding's backward, then the
    # root's, after the last backward).
    sc = load_scenario(
        "h100-1024",
        ["training.mode=fsdp", "noise.distribution=none", "noise.speed_spread_sd=0"],
        ranks=64,
        steps=3,
    )
    r = simulate_fsdp(sc, records=True)
    wl = r.workload
    c = wl.collective_s
    assert wl.units[:2] == (0, 1) and wl.units[-2:] == (1, 0)
    embedding = forward_shares(sc)[0].embedding
    hidden = min(c[1], wl.forward_s[0] * embedding) + min(c[-2], wl.backward_s[0] * embedding)
    assert hidden > 0
    shown = c[0] + c[1] + c[-2] + c[-1] - hidden
    np.testing.assert_allclose(r.exposed_comm_s, shown, rtol=REL)
    expected = wl.forward_s[0] + wl.backward_s[0] + shown + optimizer_step_s(sc) / 64
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)
    assert r.summary().scaling_efficiency > 0.95


def test_fsdp_moves_about_1_5x_ddp_traffic():
    # ZeRO (Rajbhandari et al. 2020, Sec. 7.2.2): ZeRO-3 moves 3 Psi (N-1)/N against DDP's 2 Psi.
    # torch keeps the root unit gathered from forward to backward, so its parameters travel once.
    # Pure bf16: parameters and gradients both 2 bytes, ZeRO's accounting.
    ranks, bf16 = 64, "training.precision=bf16"
    sc = load_scenario("h100-1024", ["training.mode=fsdp", bf16], ranks=ranks, steps=1)
    wl = simulate_fsdp(sc, records=True).workload
    ddp = simulate(load_scenario("h100-1024", [bf16], ranks=ranks, steps=1), records=True).workload
    shape = model_shape("gpt2-760m")
    numels = unit_numels(shape)
    p, root = float(numels.sum()), float(numels[0])
    f = (ranks - 1) / ranks
    assert wl.traffic_bytes_per_step == pytest.approx((3 * p - root) * 2 * f, rel=1e-12)
    assert ddp.traffic_bytes_per_step == pytest.approx(2 * p * 2 * f, rel=1e-12)
    ratio = wl.traffic_bytes_per_step / ddp.traffic_bytes_per_step
    assert ratio == pytest.approx(1.5 - root / (2 * p), rel=1e-12)
    assert 1.44 < ratio < 1.5
    # Every block: two allgathers and one reduce-scatter of its bytes, ZeRO's 3x exactly.
    for u in range(1, shape.n_layer + 1):
        moved = sum(
            bus_factor(op, ranks) * b for op, b, x in zip(wl.ops, wl.wire_bytes, wl.units, strict=True) if x == u
        )
        assert moved == pytest.approx(3 * f * numels[u] * 2, rel=1e-12)
    # Unlike DDP's no_sync, every FSDP micro-step reduce-scatters: K x the traffic.
    wl4 = simulate_fsdp(
        load_scenario("h100-1024", ["training.mode=fsdp", bf16, "training.grad_accum=4"], ranks=ranks, steps=1),
        records=True,
    )
    assert wl4.workload.traffic_bytes_per_step == pytest.approx(4 * wl.traffic_bytes_per_step, rel=1e-12)


@pytest.mark.parametrize("ranks", [2, 64, 1024])
def test_persistent_straggler_is_s_times_compute(ranks):
    s, base = 1.4, 0.25
    compute = ComputeConfig(step_compute_s=base, optimizer_s=0.0)
    common = dict(ranks=ranks, stragglers=f"{ranks - 1}:{s}", compute=compute)
    r = simulate_fsdp(
        tiny(**common, training=fsdp(), network=NetworkConfig(enabled=False, gpus_per_node=1)), records=True
    )
    np.testing.assert_allclose(r.step_time_s, s * base, rtol=REL)
    r = simulate_fsdp(tiny(**common, training=fsdp(prefetch=0)), records=True)
    np.testing.assert_allclose(r.step_time_s - r.workload.collective_s.sum(), s * base, rtol=REL)
    r = simulate_fsdp(tiny(**common, training=fsdp(prefetch=2)), records=True)
    assert (r.step_time_s >= s * base * (1 - REL)).all()
    waits = r.collective_wait_s.mean(axis=0)  # everybody waits for the straggler, it for nobody
    assert waits.argmin() == ranks - 1 and waits[ranks - 1] == pytest.approx(0.0, abs=1e-12)
    assert_breakdown_sums(r)


def test_interference_cannot_slow_what_never_overlaps():
    # Prefetch 0 runs no collective during compute: gamma changes nothing. With prefetch it does.
    def run(prefetch, gamma):
        compute = ComputeConfig(step_compute_s=0.05, interference_gamma=gamma, optimizer_s=0.0)
        return simulate_fsdp(tiny(training=fsdp(prefetch=prefetch), compute=compute, network=SLOW_NET), records=True)

    np.testing.assert_allclose(run(0, 0.5).step_time_s, run(0, 0.0).step_time_s, rtol=REL)
    slowed, plain = run(1, 0.5), run(1, 0.0)
    assert (slowed.compute_s > plain.compute_s).all()
    assert_breakdown_sums(slowed)


def test_everything_on_breakdown_and_seed():
    sc = tiny(
        ranks=8,
        steps=20,
        stragglers="3:1.3",
        training=fsdp(prefetch=1, k=2, checkpointing=True),
        compute=ComputeConfig(step_compute_s=0.1, optimizer_s=0.01, dataloader_batch_s=0.003, interference_gamma=0.3),
        network=NetworkConfig(backend="gloo", gpus_per_node=1, nic_gbit_s=0.2, jitter_sigma=0.1),
        noise=NoiseConfig(distribution="gamma", sigma=0.1, speed_spread_sd=0.02),
    )
    r = simulate_fsdp(sc, records=True)
    assert_breakdown_sums(r)
    assert np.all(r.step_time_s[:, None] >= r.compute_s)
    np.testing.assert_array_equal(simulate_fsdp(sc, records=True).step_time_s, r.step_time_s)
    # The same persistent draws as the DDP engine for the same seed.
    ddp = simulate(
        dataclasses.replace(sc, training=TrainingConfig(micro_batch_size=2, seq_len=64, grad_accum=2)), records=True
    )
    np.testing.assert_array_equal(ddp.workload.speed_factor, r.workload.speed_factor)
    s = r.summary()
    assert 0 < s.scaling_efficiency <= 1 and s.buckets == 3  # root + 2 blocks


def test_pauses_and_episodes_apply_as_in_ddp():
    # sim/episodes.py's effects: a pause is compute before the first forward, as the DDP recorder counts it.
    sets = ["training.mode=fsdp", "pauses.every_steps=2", "episodes.compute_per_h=1e5", "episodes.comm_per_h=1e5"]
    sc = load_scenario("h100-1024", sets, ranks=16, steps=20)
    r = simulate_fsdp(sc, records=True)
    assert_breakdown_sums(r)
    plain = simulate_fsdp(load_scenario("h100-1024", ["training.mode=fsdp"], ranks=16, steps=20), records=True)
    assert r.step_time_s.mean() > plain.step_time_s.mean()


def test_1024_ranks_100_steps_fast():
    sc = load_scenario("h100-1024", ["training.mode=fsdp"], ranks=1024, steps=100)
    r = simulate_fsdp(sc, records=True)
    assert r.wall_s < 5.0, r.wall_s  # ~0.15 s on one core


@pytest.mark.parametrize(
    "override,key",
    [
        ("training.mode=zero3", "training.mode"),
        ("training.fsdp_prefetch=-1", "training.fsdp_prefetch"),
        ("training.precision=fp4", "training.precision"),
        ("training.param_bytes_per_param=2", "training.param_bytes_per_param: replaced by training.precision"),
    ],
)
def test_bad_keys_name_themselves(override, key):
    with pytest.raises(ValueError, match=key):
        load_scenario("h100-1024", [override])


def test_fsdp_refuses_ddp_comm_hooks():
    with pytest.raises(ValueError, match="training.comm_hook"):
        load_scenario("h100-1024", ["training.mode=fsdp", "training.comm_hook=powersgd"])


def test_ddp_activation_checkpointing_recomputes_the_blocks_forward():
    """DDP with activation checkpointing: every micro-step's backward also reruns each block's
    forward: the blocks' forward kernels' time on the roofline (sim/roofline.py), by FLOPs under
    a fixed MFU; FSDP's per-block recompute is counted once."""
    from sim.roofline import block_kernels, kernel_time_s, micro_step_time, rates

    plain = load_scenario("h100-1024", ranks=8, steps=3)
    ckpt = load_scenario("h100-1024", ["training.activation_checkpointing=true"], ranks=8, steps=3)
    a, b = (build_workload(sc, np.random.default_rng(0)) for sc in (plain, ckpt))
    shape, dt = model_shape("gpt2-760m"), ckpt.training.dtypes
    r = rates(ckpt.compute, dt)
    blocks = shape.n_layer * sum(
        kernel_time_s(k, r) for k in block_kernels(shape, 2048, 8 * 2048.0, dt) if not k.backward
    )
    share = blocks / micro_step_time(shape, 2048, 8, dt, r).forward_s
    assert b.backward_s == pytest.approx(a.backward_s + a.forward_s * share, rel=1e-12)
    # The blocks weigh less of the forward's time than of its FLOPs: the loss over GPT-2's
    # vocabulary is memory-bound (0.805 against 0.915 here).
    assert share < shape.n_layer * compute_shares(shape, 2048).block - 0.05
    fixed = [
        load_scenario("h100-1024", ["compute.mfu=0.4", *x], ranks=8, steps=3)
        for x in ([], ["training.activation_checkpointing=true"])
    ]
    a, b = (build_workload(sc, np.random.default_rng(0)) for sc in fixed)
    share = shape.n_layer * compute_shares(shape, 2048).block
    assert b.backward_s == pytest.approx(a.backward_s + a.forward_s * share, rel=1e-12)
    assert np.array_equal(a.forward_s, b.forward_s)
    f = load_scenario("h100-1024", ["training.mode=fsdp", "training.activation_checkpointing=true"], ranks=8, steps=3)
    g = load_scenario("h100-1024", ["training.mode=fsdp"], ranks=8, steps=3)
    assert np.array_equal(
        build_fsdp_workload(f, np.random.default_rng(0)).backward_s,
        build_fsdp_workload(g, np.random.default_rng(0)).backward_s,
    )


@pytest.mark.parametrize("attention", ["true", "false"])
def test_fsdp_selective_recompute_reruns_each_blocks_attention_core(attention):
    """FSDP under selective recomputation: each block's backward reruns its attention core's
    share of the forward (sim/workload.py forward_shares), not the whole block; with unfused
    attention that core is its s x s passes, a larger share than fused attention's."""
    sets = ["training.mode=fsdp", f"training.fused_attention={attention}", "training.micro_batch_size=1"]
    programs = {}
    for ckpt in ("none", "selective", "full"):
        sc = load_scenario("h100-1024", [*sets, f"training.activation_checkpointing={ckpt}"], ranks=8, steps=2)
        programs[ckpt] = build_fsdp_workload(sc, np.random.default_rng(0)).program
        sh, core = forward_shares(sc)
    reruns = {k: [op.fwd_share for op in p if op.bwd_share == sh.block] for k, p in programs.items()}
    assert len(reruns["selective"]) == model_shape("gpt2-760m").n_layer
    assert reruns["none"] == [0.0] * len(reruns["none"])
    assert reruns["selective"] == [core] * len(reruns["selective"])
    assert reruns["full"] == [sh.block] * len(reruns["full"])
    assert 0 < core < sh.block
    if attention == "false":
        assert core > 0.3 * sh.block  # the unfused core's s x s passes weigh on the block


def test_fsdp_trace_spans_and_timeline(tmp_path):
    """FSDP runs keep their first steps as spans: per traced rank the compute lane never
    overlaps itself, every collective of the program appears on the comm lane, and the
    Chrome trace and the timeline picture are built from them."""
    from output.plot import plot_timeline
    from sim.trace import chrome_trace

    sc = load_scenario("h100-1024", ["training.mode=fsdp", "stragglers=3:1.4"], ranks=16, steps=4)
    res = simulate(sc, trace_steps=2, records=True)
    events = [e for e in chrome_trace(res)["traceEvents"] if e["ph"] == "X"]
    ranks = sorted({e["pid"] for e in events})
    assert 3 in ranks and len(ranks) == 8
    for r in ranks:
        compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["pid"] == r and e["tid"] == 0)
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(compute, compute[1:], strict=False))
        comm = [e for e in events if e["pid"] == r and e["tid"] == 1]
        assert len(comm) == 2 * len(build_fsdp_workload(sc, np.random.default_rng(0)).ops)
    assert plot_timeline(res, tmp_path / "t.png", "fsdp").read_bytes()[:4] == b"\x89PNG"


def test_fsdp_mixed_precision_holds_bf16_parameters_in_the_module():
    """Under FSDP's mixed precision (param_dtype bf16, reduce_dtype fp32) the module computes
    with bf16 parameters: no op casts a weight, the residual stream is bf16, and the weight
    gradients are still cast to fp32 for the reduce-scatter. DDP under autocast keeps both."""
    ddp = load_scenario("h100-1024", ["training.precision=bf16-amp"]).training.dtypes
    fsdp = load_scenario("h100-1024", ["training.precision=bf16-amp", "training.mode=fsdp"]).training.dtypes
    hsdp = load_scenario("h100-1024", ["training.precision=bf16-amp", "training.mode=hsdp"]).training.dtypes
    assert (ddp.residual_bytes, ddp.weight_casts) == (4, True)
    assert (fsdp.residual_bytes, fsdp.weight_casts) == (2, False) == (hsdp.residual_bytes, hsdp.weight_casts)
    # What does not change: fp32 master weights and AdamW state, fp32 reduce, the fp32 loss.
    for field in ("param_bytes", "compute_bytes", "grad_bytes", "optimizer_state_bytes", "loss_bytes"):
        assert getattr(fsdp, field) == getattr(ddp, field), field
    shape = load_scenario("h100-1024").model.shape
    names = {p: {k.name for k in block_kernels(shape, 2048, 2048.0, p)} for p in (ddp, fsdp)}
    assert "attn.c_attn.weight_cast" in names[ddp] and "attn.c_attn.weight_cast" not in names[fsdp]
    assert "attn.c_attn.wgrad_cast" in names[fsdp]
    residual = {
        p: next(k for k in block_kernels(shape, 2048, 2048.0, p) if k.name == "residual_add") for p in (ddp, fsdp)
    }
    # t d (2 r + c): two residual-dtype reads/writes and one compute-dtype operand
    assert residual[ddp].bytes == 2048 * 1536 * (2 * 4 + 2) and residual[fsdp].bytes == 2048 * 1536 * (2 * 2 + 2)
    # Pure bf16 is already what FSDP's mixed precision makes of it.
    bf16 = load_scenario("h100-1024", ["training.precision=bf16", "training.mode=fsdp"]).training.dtypes
    assert bf16 == load_scenario("h100-1024", ["training.precision=bf16"]).training.dtypes


def test_a_host_delay_under_fsdp_is_its_own_part():
    """FSDP's step splits as DDP's, a rank's host delay (host_delays_s) a part of its own: rank 2
    late by 30 ms lengthens the noiseless step by at least that and no more."""
    from dataclasses import replace

    base = tiny(ranks=4, training=fsdp())
    on_time, late = simulate(base, records=True), simulate(replace(base, host_delays_s="2:0.03"), records=True)
    assert_breakdown_sums(late)
    np.testing.assert_allclose(late.step_time_s, on_time.step_time_s + 0.03, rtol=1e-9)
    np.testing.assert_allclose(late.compute_s, on_time.compute_s, rtol=1e-9)
