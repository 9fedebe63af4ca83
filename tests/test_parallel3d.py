"""Tensor and pipeline parallelism (sim/tp.py, sim/parallel3d.py): where they meet today's
model they are today's model; the TP collectives are the ones Megatron issues; a straggler is
charged to its stage; the keys refuse bad values in one line; FP8 and selective recompute."""

import json
from typing import NamedTuple

import numpy as np
import pytest

from sim.collectives import collective_cost
from sim.parallel3d import (
    dp_fabric,
    dtypes_3d,
    hsdp_fabrics,
    layout,
    megatron_flops_per_step,
    overlapped_dp_end,
    simulate_3d,
    step_costs,
)
from sim.roofline import micro_step_time, rates, step_kernels
from sim.scenario_file import load_scenario
from sim.tp import block_time, tp_collective_s
from sim.workload import fabric_for, micro_step_compute_s, recompute_fraction

BASE = ["model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1", "training.precision=bf16"]


def _sc(*sets, ranks=64, preset="h100-1024"):
    return load_scenario(preset, [*BASE, *sets], ranks=ranks)


def test_tp1_pp1_compute_is_todays_micro_step():
    # bf16: Megatron's arrangement (sim/precision.py sharded) is the plain one, so the kernels match.
    for ckpt in ("none", "full", "selective"):
        sc = _sc(f"training.activation_checkpointing={ckpt}")
        costs = step_costs(sc, layout(sc))
        fwd, bwd = micro_step_compute_s(sc)
        assert costs.forward_s.sum() == pytest.approx(fwd, rel=1e-12)
        assert costs.backward_s.sum() == pytest.approx(bwd + fwd * recompute_fraction(sc), rel=0.02)
        if ckpt == "none":
            assert costs.backward_s.sum() == pytest.approx(bwd, rel=1e-12)
            assert costs.p2p_s == 0 and costs.tp_comm_s.sum() == 0


def test_tp1_pp1_step_is_compute_plus_the_ddp_reduction():
    sc = _sc("training.overlap=false", "noise.speed_spread_sd=0", "noise.distribution=none", ranks=16)
    step = simulate_3d(sc, np.random.default_rng(0))
    c = step_costs(sc, layout(sc))
    want = c.forward_s.sum() + c.backward_s.sum() + c.dp_s[0] + c.optimizer_s[0]
    assert step.step_s == pytest.approx(want, rel=1e-12)
    assert step.bubble_fraction == 0.0


def test_megatron_issues_two_collectives_per_block_each_way():
    sc = _sc("training.tp=8")
    dt = dtypes_3d(sc)
    fabric = fabric_for(sc, ranks=8)
    size = 4096 * sc.model.shape.n_embd * dt.compute_bytes
    ar = collective_cost("allreduce", size, fabric).time_s
    r = rates(sc.compute, dt)
    for ckpt, bwd_syncs in (("none", 2), ("selective", 2), ("full", 4)):
        bt = block_time(sc.model.shape, 4096, 1, dt, r, tp=8, sequence_parallel=False, recompute=ckpt, fabric=fabric)
        assert bt.forward_comm_s == pytest.approx(2 * ar)
        assert bt.backward_comm_s == pytest.approx(bwd_syncs * ar)
    sp = block_time(sc.model.shape, 4096, 1, dt, r, tp=8, sequence_parallel=True, recompute="none", fabric=fabric)
    pair = collective_cost("reduce_scatter", size, fabric).time_s + collective_cost("allgather", size, fabric).time_s
    assert sp.forward_comm_s == pytest.approx(2 * pair)
    one = block_time(sc.model.shape, 4096, 1, dt, r, tp=1, sequence_parallel=False, recompute="none", fabric=fabric)
    # Matmuls and attention split 8 ways; norms and residual adds not (without sequence parallelism).
    assert one.forward_compute_s / 8 < bt.forward_compute_s < one.forward_compute_s / 4
    assert sp.forward_compute_s < bt.forward_compute_s


def test_without_a_network_the_blocks_wait_for_no_collective():
    """network.enabled = false takes the TP and CP collectives out of each block's time, as it
    takes out the DP reduction and the sends: a stage loses exactly its blocks' collectives and
    the heads' two t x d synchronisations (the embedding's forward, the output layer's backward)."""
    sets = ["training.tp=8", "training.cp=2", "training.pp=2", "training.sequence_parallel=true"]
    on, off = _sc(*sets), _sc(*sets, "network.enabled=false")
    lay = layout(on)
    c_on, c_off = step_costs(on, lay), step_costs(off, lay)
    assert c_on.tp_comm_s.sum() > 0 and c_off.tp_comm_s.sum() == 0 and c_off.dp_s.sum() == 0
    lost = (c_on.forward_s - c_off.forward_s).sum() + (c_on.backward_s - c_off.backward_s).sum()
    tokens_per_gpu = 4096 / 2  # micro-batch 1 x seq_len 4096, over cp = 2
    size = tokens_per_gpu * on.model.shape.n_embd * dtypes_3d(on).compute_bytes
    head_syncs = 2 * tp_collective_s(size, fabric_for(on, ranks=8), sequence_parallel=True)
    assert lost == pytest.approx(c_on.tp_comm_s.sum() + head_syncs, rel=1e-9)


def test_a_straggler_is_charged_to_its_stage_and_delays_every_pipeline():
    sets = (
        "training.tp=8",
        "training.pp=4",
        "training.grad_accum=16",
        "noise.speed_spread_sd=0",
        "noise.distribution=none",
    )
    calm = simulate_3d(_sc(*sets, ranks=128), np.random.default_rng(0))
    lay = calm.layout
    rank = 2 * lay.tp * lay.dp + 3 * lay.tp + 5  # stage 2, replica 3, TP position 5
    slow = simulate_3d(_sc(*sets, f"stragglers={rank}:1.5", ranks=128), np.random.default_rng(0))
    assert slow.slowest_stage == 2 and slow.stage_factor[3, 2] == 1.5 and slow.stage_factor.sum() == lay.dp * 4 + 0.5
    # The slow stage bounds its pipeline: its m micro-batches at 1.5 x, and the others wait on it.
    f, b = slow.costs.forward_s[2, 0], slow.costs.backward_s[2, 0]
    c = slow.costs
    others = sum(c.forward_s[i, 0] + c.backward_s[i, 0] for i in (0, 1, 3))
    assert lay.m * 1.5 * (f + b) <= slow.pipeline_s <= lay.m * 1.5 * (f + b) + others + 6 * c.p2p_s
    # Every pipeline's reduction waits for the slow one: the step grows by what its pipeline grew.
    assert slow.step_s - calm.step_s == pytest.approx(slow.pipeline_s - calm.pipeline_s, abs=c.dp_s.max())
    assert slow.step_s > calm.step_s
    assert int(np.argmin(slow.idle_fraction)) == 2


@pytest.mark.parametrize(
    "sets,key",
    [
        (["training.tp=3"], "training.tp"),
        (["training.tp=16"], "training.tp"),
        (["training.pp=0"], "training.pp"),
        (["training.pp_schedule=zb"], "training.pp_schedule"),
        (["training.pp_virtual_stages=2"], "training.pp_virtual_stages"),
        (["training.pp=4", "training.pp_schedule=interleaved", "training.grad_accum=6"], "training.grad_accum"),
        (["training.pp=4", "training.pp_schedule=zb-h1", "training.grad_accum=3"], "training.grad_accum"),
        (["training.activation_checkpointing=some"], "training.activation_checkpointing"),
        (["training.tp=2", "training.mode=hsdp", "training.hsdp_shard_size=3"], "training.hsdp_shard_size"),
        (["training.pp=64"], "training.pp"),
        (["training.precision=fp4"], "training.precision"),
        (["training.dropout=1"], "training.dropout"),
        (["training.dropout=-0.1"], "training.dropout"),
    ],
)
def test_bad_values_name_the_key(sets, key):
    with pytest.raises(ValueError) as e:
        _sc(*sets)
    assert str(e.value).startswith(key) and "\n" not in str(e.value)


def test_activation_checkpointing_keeps_booleans():
    assert _sc("training.activation_checkpointing=true").training.activation_checkpointing is True
    assert _sc("training.activation_checkpointing=none").training.activation_checkpointing is False
    assert _sc("training.activation_checkpointing=full").training.recompute == "full"
    # Selective reruns attention's core alone: on the roofline its kernels' share of the
    # forward's time; under a fixed MFU its FLOPs', 4 s d per token per block.
    from sim.roofline import block_kernels, kernel_time_s

    sel = _sc("training.activation_checkpointing=selective")
    shape, dt = sel.model.shape, sel.training.dtypes
    r = rates(sel.compute, dt)
    core = sum(kernel_time_s(k, r) for k in block_kernels(shape, 4096, 4096.0, dt) if k.core and not k.backward)
    want = shape.n_layer * core / micro_step_time(shape, 4096, 1, dt, r).forward_s
    assert recompute_fraction(sel) == pytest.approx(want, rel=1e-12)
    fixed = _sc("training.activation_checkpointing=selective", "compute.mfu=0.4")
    block = 2 * shape.block_matmul_numel + 4 * 4096 * shape.n_embd
    head = 2 * shape.vocab_size * shape.n_embd
    want = shape.n_layer * 4 * 4096 * shape.n_embd / (shape.n_layer * block + head)
    assert recompute_fraction(fixed) == pytest.approx(want)


def test_selective_recompute_reruns_the_unfused_attention_core():
    """With unfused attention the core is its QK^T, softmax, dropout and AV kernels: selective
    recomputation reruns exactly their forward, and unfused costs more than fused."""
    from sim.roofline import block_kernels, kernel_time_s
    from sim.tp import shard_kernel

    sc = _sc("training.fused_attention=false", "training.dropout=0.1", "training.activation_checkpointing=selective")
    shape, dt = sc.model.shape, dtypes_3d(sc)
    r = rates(sc.compute, dt)
    kw = {"tp": 8, "sequence_parallel": False, "fabric": fabric_for(sc, ranks=8)}
    blk = block_time(shape, 4096, 1, dt, r, recompute="selective", fused_attention=False, dropout=True, **kw)
    core = [k for k in block_kernels(shape, 4096, 4096.0, dt, fused_attention=False, dropout=True) if k.core]
    assert {k.name for k in core if not k.backward} == {
        "attention.scores", "attention.softmax", "attention.dropout", "attention.context"
    }  # fmt: skip
    want = sum(kernel_time_s(shard_kernel(k, 8, False), r) for k in core if not k.backward)
    assert blk.recompute_s == pytest.approx(want, rel=1e-12)
    fused = block_time(shape, 4096, 1, dt, r, recompute="selective", **kw)
    assert blk.forward_compute_s > fused.forward_compute_s and blk.recompute_s > fused.recompute_s


def test_fp8_runs_linear_matmuls_at_the_fp8_peak_with_cast_kernels():
    bf = _sc("training.precision=bf16-amp")
    f8 = _sc("training.precision=fp8")
    assert f8.compute.peak_tflop_s * 2 == pytest.approx(f8.compute.peak_fp8_tflop_s, rel=1e-3)  # 1978.9 = 2 x 989.4
    r8 = rates(f8.compute, f8.training.dtypes)
    assert r8.matmul_flop_s == pytest.approx(1978.9e12 * f8.compute.matmul_efficiency)
    shape = f8.model.shape
    k8 = step_kernels(shape, 4096, 1, f8.training.dtypes)
    kb = step_kernels(shape, 4096, 1, bf.training.dtypes)
    casts = [k for k in k8 if ".fp8_cast_" in k.name]
    assert len(casts) == 3 * 4 * shape.n_layer  # input, weight, output gradient of each block linear
    assert len(k8) - len(kb) == len(casts)
    q = next(k for k in casts if k.name.endswith("c_attn.fp8_cast_weight"))
    assert q.bytes == shape.n_embd * shape.qkv_dim * (2 + 2)  # read 16-bit, write FP8 and its transpose
    t8 = micro_step_time(shape, 4096, 1, f8.training.dtypes, r8)
    tb = micro_step_time(shape, 4096, 1, bf.training.dtypes, rates(bf.compute, bf.training.dtypes))
    assert 0.5 * tb.step_s < t8.step_s < tb.step_s


def test_megatron_flop_count():
    # Narayanan et al. 2021, eq. 3 expanded: 96 B s l h^2 + 16 B s^2 l h (attention) + 6 B s V h
    # (the output layer): 72 B s l h^2 (1 + ...) of a step, x 4/3 for the recomputed forward.
    b, s, ell, h, v = 3072, 2048, 128, 25600, 51200
    want = 96 * b * s * ell * h**2 + 16 * b * s**2 * ell * h + 6 * b * s * v * h
    assert megatron_flops_per_step(ell, h, v, s, b) == pytest.approx(want, rel=1e-12)


def test_megatron_table1_from_18b_up_within_20_percent():
    """Issue 28's acceptance bar, on the rows calibrate/public.py holds (docs/parallelism.md)."""
    from calibrate.public import evaluate, table_rows

    rows = [r for r in table_rows() if r.source == "megatron-table1"]
    assert len(rows) == 10
    results = {r.what.split()[2]: evaluate(r) for r in rows}
    for name in ("18B", "39B", "76B", "145B", "310B", "530B", "1T"):
        assert results[name].ok, (name, results[name].error)


def test_simulate_cli_runs_the_3d_model(capsys):
    from ddplab.cli import main

    sets = [*BASE, "training.tp=8", "training.pp=2", "training.grad_accum=8", "stragglers=9:1.3"]
    argv = ["simulate", "h100-1024", "--ranks", "64", "--json"] + [x for s in sets for x in ("--set", s)]
    main(argv)
    s = json.loads(capsys.readouterr().out)
    assert s["layout"] == {
        "tp": 8,
        "cp": 1,
        "pp": 2,
        "dp": 4,
        "virtual_stages": 1,
        "micro_batches": 8,
        "schedule": "1f1b",
    }
    assert s["straggler"]["stages"] == [0] and s["straggler"]["cost_s"] > 0
    assert "assumed" in s


def test_selective_keeps_all_but_the_attention_core_in_ddp_memory():
    from sim.memory import GIB, attention_core_bytes, estimate_memory

    none = estimate_memory(_sc("training.activation_checkpointing=none"))
    sel = estimate_memory(_sc("training.activation_checkpointing=selective"))
    full = estimate_memory(_sc("training.activation_checkpointing=full"))
    sc = _sc()
    core = sc.model.shape.n_layer * attention_core_bytes(sc.model.shape, 4096, 1, sc.training.dtypes, True)
    assert none.activations_gib - sel.activations_gib == pytest.approx(core / GIB, rel=1e-12)
    assert full.activations_gib < sel.activations_gib


def test_pp_layers_place_blocks_by_hand():
    even = _sc("training.pp=4", "training.grad_accum=8")
    hand = _sc("training.pp=4", "training.grad_accum=8", "training.pp_layers=[7,9,9,7]")
    ce, ch = step_costs(even, layout(even)), step_costs(hand, layout(hand))
    assert ce.layers == [8, 8, 8, 8] and ch.layers == [7, 9, 9, 7]
    block = (ce.forward_s[1, 0] - ce.forward_s[1, 0] / 8 * 7) * 1.0
    assert ch.forward_s[1, 0] == pytest.approx(ce.forward_s[1, 0] + block, rel=1e-9)
    # Lighter end stages even out the output layer's weight: the busiest stage is less busy.
    assert (ch.forward_s + ch.backward_s).max() < (ce.forward_s + ce.backward_s).max()
    for bad in ("[8,8,8]", "[8,8,8,9]", "[8,8,-1,17]"):
        with pytest.raises(ValueError, match="^training.pp_layers"):
            _sc("training.pp=4", "training.grad_accum=8", f"training.pp_layers={bad}")


def test_a_16_bit_comm_hook_halves_the_dp_reduction_bytes():
    plain = _sc("training.pp=2", "training.grad_accum=4", "training.precision=bf16-amp")
    hook = _sc("training.pp=2", "training.grad_accum=4", "training.precision=bf16-amp", "training.comm_hook=bf16")
    cp, ch = step_costs(plain, layout(plain)), step_costs(hook, layout(hook))
    assert (ch.dp_s < cp.dp_s).all()
    with pytest.raises(ValueError, match="^training.comm_hook"):
        _sc("training.pp=2", "training.grad_accum=4", "training.comm_hook=powersgd")


def test_per_micro_step_noise_waits_for_each_tp_groups_slowest_gpu():
    sets = ("training.tp=8", "training.pp=4", "training.grad_accum=16", "noise.speed_spread_sd=0")
    quiet = simulate_3d(_sc(*sets, "noise.distribution=none", ranks=128), np.random.default_rng(0))
    noisy = [simulate_3d(_sc(*sets, "noise.sigma=0.05", ranks=128), np.random.default_rng(s)) for s in (0, 0, 1)]
    assert noisy[0].step_s == noisy[1].step_s != noisy[2].step_s  # the seed decides every draw
    # Mean-1 draws, but each operation waits for the slowest of 8: the step is slower.
    assert all(n.step_s > quiet.step_s for n in noisy)


def test_end_chunks_may_hold_no_block():
    # Llama 3 405B's layout: 126 layers in 16 x 8 chunks, the first only the embedding, the last
    # only the output layer and loss (arXiv 2407.21783 Sec. 3.3.2); one chunk more is refused.
    sets = ["training.pp=4", "training.pp_schedule=interleaved", "training.grad_accum=8"]
    sc = _sc(*sets, "training.pp_virtual_stages=8", ranks=4)
    sizes = step_costs(sc, layout(sc)).layers
    assert len(sizes) == 32 and sum(sizes) == 32  # 32 layers, 32 chunks: one each
    sc = _sc("model.n_layer=30", *sets, "training.pp_virtual_stages=8", ranks=4)
    sizes = step_costs(sc, layout(sc)).layers
    assert sizes[0] == sizes[-1] == 0 and all(n == 1 for n in sizes[1:-1])
    with pytest.raises(ValueError, match="^training.pp: .*n_layer \\+ 2 \\(31\\)"):
        _sc("model.n_layer=29", *sets, "training.pp_virtual_stages=8", ranks=4)


class _Run(NamedTuple):
    chunk_end_s: np.ndarray
    chunk_last_start_s: np.ndarray


def test_overlapped_dp_reduction_one_chunk_is_the_closed_form():
    c = step_costs(_sc("training.pp=4", "training.grad_accum=8", ranks=32), layout(_sc("training.pp=4", ranks=32)))
    run = _Run(np.array([[10.0], [11.0], [12.0], [13.0]]), np.array([[9.9], [10.8], [11.9], [12.7]]))
    want = np.maximum(run.chunk_end_s[:, 0] + c.dp_last_bucket_s, run.chunk_last_start_s[:, 0] + c.dp_s)
    assert overlapped_dp_end(c, run) == pytest.approx(want, rel=1e-12)


def test_interleaved_chunks_reduce_as_their_last_backward_ends():
    # One stage, two chunks: chunk 1 ends first (at 6), its reduction (3) runs under chunk 0's
    # backwards; chunk 0's starts at its last backward (9): 9 + 3 = 12, where waiting for the
    # stage's last backward would give 9 + 6 = 15.
    c = step_costs(_sc(), layout(_sc()))._replace(
        dp_s=np.array([6.0]), dp_last_bucket_s=np.array([1.0]),
        dp_chunk_s=np.array([[3.0, 3.0]]), dp_chunk_last_s=np.array([[1.0, 1.0]]),
    )  # fmt: skip
    run = _Run(np.array([[10.0, 6.0]]), np.array([[9.0, 5.0]]))
    assert overlapped_dp_end(c, run) == pytest.approx([12.0])
    # Chunk 1 ending late: the stream is serial, chunk 0's waits for it.
    run = _Run(np.array([[10.0, 9.5]]), np.array([[9.0, 8.0]]))
    assert overlapped_dp_end(c, run) == pytest.approx([14.0])


def test_pipeline_reports_each_chunks_last_backward():
    from sim.pipeline import run_pipeline

    p, m, v = 4, 8, 2
    fwd, bwd = np.full((p, v), 1.0), np.full((p, v), 2.0)
    run = run_pipeline("interleaved", p, m, v, fwd, bwd, 0.0)
    assert run.chunk_end_s.max(axis=1) == pytest.approx(run.stage_end_s)
    assert np.all(run.chunk_end_s[:, 1] < run.chunk_end_s[:, 0])  # the later chunk drains first
    assert np.all(run.chunk_end_s - run.chunk_last_start_s == pytest.approx(2.0))


def test_fsdp_reduces_one_block_at_a_time():
    # FSDP has no bucket cap: a reduce-scatter (and an allgather) per block, and one for the
    # embedding or output layer on the end stages (sim/fsdp.py's units).
    sc = _sc("training.pp=4", "training.mode=fsdp", "training.grad_accum=8", ranks=64)
    lay = layout(sc)
    c = step_costs(sc, lay)
    fabric = dp_fabric(sc, lay)
    dt = dtypes_3d(sc)
    for i, layers in enumerate(c.layers):
        units = layers + (i in (0, lay.pp - 1))
        one = collective_cost("reduce_scatter", c.params[i] * dt.grad_bytes / units, fabric).time_s
        assert c.dp_s[i] == pytest.approx(units * one, rel=1e-12)
        assert c.dp_last_bucket_s[i] == pytest.approx(one, rel=1e-12)


@pytest.mark.parametrize("accum", [1, 4])
def test_fsdp_without_a_pipeline_gathers_every_block_twice_a_micro_batch(accum):
    """No pipeline: each block resharded after its forward (torchtitan's apply_fsdp), so every
    micro-batch gathers it twice and reduce-scatters it; that stream runs under the m micro-
    batches' compute, and what is left when the last backward starts runs from there."""
    sc = _sc("training.tp=8", "training.mode=fsdp", f"training.grad_accum={accum}", ranks=512)
    lay = layout(sc)
    c = step_costs(sc, lay)
    fabric, dt = dp_fabric(sc, lay), dtypes_3d(sc)
    units = c.layers[0] + 1  # the blocks and the root
    rs = units * collective_cost("reduce_scatter", c.params[0] * dt.grad_bytes / units, fabric).time_s
    ag = units * collective_cost("allgather", c.params[0] * dt.compute_bytes / units, fabric).time_s
    assert c.gather_s[0] == pytest.approx(ag, rel=1e-12)
    f, b = c.forward_s[0, 0], c.backward_s[0, 0]
    left = accum * (2 * ag + rs) - (accum * (f + b) - b)
    assert c.dp_s[0] == pytest.approx(max(rs, left), rel=1e-12)
    # 64 nodes of llama3-8b at micro-batch 1: the stream outlasts the compute, so it shows.
    assert left > rs
    # Without prefetch nothing overlaps: the whole stream is exposed after the compute.
    none = _sc("training.tp=8", "training.mode=fsdp", f"training.grad_accum={accum}", "training.fsdp_prefetch=0",
               ranks=512)  # fmt: skip
    c0 = step_costs(none, layout(none))
    assert c0.dp_s[0] == pytest.approx(accum * (2 * ag + rs) + b, rel=1e-12)


def test_zb_h1_shortens_the_pipeline_by_its_bubble_and_keeps_1f1bs_memory():
    # llama3-8b on 4 stages of 8 x H100, 8 micro-batches, no noise: ZB-H1 (Qi et al. 2023) takes up
    # to 2 (p - 1) T_W of the drain's wait off 1F1B's pipeline (all of it for equal stages:
    # tests/test_pipeline.py; here the first and last stages also hold the embedding and the output
    # layer), and at least (p - 1) of the smallest T_W; the same activations in flight, so the same
    # memory per stage.
    quiet = ("training.pp=4", "training.grad_accum=8", "noise.distribution=none", "noise.speed_spread_sd=0")
    one, zb = (simulate_3d(_sc(*quiet, f"training.pp_schedule={s}", ranks=32), None) for s in ("1f1b", "zb-h1"))
    costs = step_costs(_sc(*quiet, ranks=32), layout(_sc(*quiet, ranks=32)))
    t_w = costs.backward_s[:, 0] * 0.5  # sim/pipeline.py W_SHARE
    assert 3 * t_w.min() < one.pipeline_s - zb.pipeline_s <= 2 * 3 * t_w.max() + 1e-12
    assert [m.activations_gib for m in zb.memory] == [m.activations_gib for m in one.memory]
    assert zb.bubble_fraction == pytest.approx(3 / (3 * 8 + 3))


def test_zb_h1_output_names_its_w_share(capsys):
    from tests.conftest import in_process

    sets = ("model.preset=llama3-8b", "training.pp=4", "training.grad_accum=8", "training.micro_batch_size=1")
    args = ("simulate", "h100-1024", "--ranks", "32", "--steps", "2", *(x for k in sets for x in ("--set", k)))
    code, out, _ = in_process(capsys, *args, "--set", "training.pp_schedule=zb-h1")
    assert code == 0 and "ZB-H1: each backward split into B and W, W taken as 50% of it" in out
    code, out, _ = in_process(capsys, *args)
    assert code == 0 and "ZB-H1" not in out


HSDP = ("training.tp=2", "training.pp=2", "training.grad_accum=8", "training.mode=hsdp")


def test_hsdp_beside_tp_and_pp_shards_in_the_node_and_allreduces_each_shard_across():
    # llama3-8b on 64 H100s, tp 2 x pp 2 x dp 16: a stage's data-parallel group is 16 GPUs, 2
    # apart, 4 per node; by default its shard groups are those 4 (one node, NVLink only) and
    # each unit's 1/4 gradient shard is allreduced over the 4 groups, one GPU per node, each
    # on 1/8 of the node's NICs (all 8 GPUs of a node reduce at once, each in its own group).
    sc = _sc(*HSDP)
    lay = layout(sc)
    assert sc.dp_shard_size == 4
    shard, replica = hsdp_fabrics(sc, lay)
    assert (shard.ranks, shard.nodes) == (4, 1)
    full = fabric_for(sc, ranks=4)
    assert (replica.ranks, replica.gpus_per_node) == (4, 1)
    assert replica.inter_busbw_gb_s == pytest.approx(full.inter_busbw_gb_s / 8, rel=1e-12)
    c, dt = step_costs(sc, lay), dtypes_3d(sc)
    for i, layers in enumerate(c.layers):
        units = layers + (i in (0, lay.pp - 1))
        grads = c.params[i] * dt.grad_bytes / units
        rs = collective_cost("reduce_scatter", grads, shard).time_s
        ar = collective_cost("allreduce", grads / 4, replica).time_s
        ag = collective_cost("allgather", c.params[i] * dt.compute_bytes / units, shard).time_s
        assert c.dp_s[i] == pytest.approx(units * (rs + ar), rel=1e-12)
        assert c.dp_last_bucket_s[i] == pytest.approx(rs + ar, rel=1e-12)
        assert c.gather_s[i] == pytest.approx(units * ag, rel=1e-12)
    # The master weights and AdamW's moments over the 4 (fsdp: over all 16), the 16-bit weights
    # and the gradients whole: compute + gradient + (master + moments) / S bytes per parameter.
    fsdp = simulate_3d(_sc(*HSDP[:-1], "training.mode=fsdp"), None, factors=np.ones((16, 2)))
    step = simulate_3d(sc, None, factors=np.ones((16, 2)))
    for m, f in zip(step.memory, fsdp.memory, strict=True):
        per_param = dt.compute_bytes + dt.grad_bytes + (dt.param_bytes + dt.optimizer_state_bytes) / 4
        assert m.model_states_gib * 2**30 == pytest.approx(m.parameters * per_param, rel=1e-12)
        assert m.model_states_gib > f.model_states_gib and m.activations_gib == f.activations_gib
    # Gathering inside a node costs less than fsdp's across 4 nodes.
    assert c.gather_s.max() < step_costs(_sc(*HSDP[:-1], "training.mode=fsdp"), lay).gather_s.max()


def test_hsdp_over_the_whole_data_parallel_group_is_fsdp():
    quiet = np.ones((16, 2))
    fsdp = simulate_3d(_sc(*HSDP[:-1], "training.mode=fsdp"), None, factors=quiet)
    whole = simulate_3d(_sc(*HSDP, "training.hsdp_shard_size=16"), None, factors=quiet)
    assert whole.step_s == fsdp.step_s and whole.peak_memory_gib == fsdp.peak_memory_gib
    assert np.array_equal(whole.costs.dp_s, fsdp.costs.dp_s)


def test_hsdp_3d_output_names_its_groups(capsys):
    from tests.conftest import in_process

    sets = ("model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1", *HSDP)
    args = ("simulate", "h100-1024", "--ranks", "64", "--steps", "2", *(x for k in sets for x in ("--set", k)))
    code, out, _ = in_process(capsys, *args)
    assert code == 0 and "(hsdp, shard groups of 4 x 4 replicas)" in out
    assert "FSDP without a pipeline" not in out  # pp 2: gathered once a step


def test_fsdp_3d_output_says_it_regathers_without_a_pipeline(capsys):
    from tests.conftest import in_process

    sets = ("model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1", "training.tp=8",
            "training.mode=fsdp")  # fmt: skip
    args = ("simulate", "h100-1024", "--ranks", "64", "--steps", "2", *(x for k in sets for x in ("--set", k)))
    code, out, _ = in_process(capsys, *args)
    assert code == 0 and "FSDP without a pipeline: each block gathered for its forward and again" in out


@pytest.mark.parametrize("preset", ["h100-1024", "mi300x-1024"])
def test_each_fp8_device_runs_at_its_own_fp8_peak(preset):
    """The datasheets' dense FP8 peak is twice the bf16 one on both (H100 SXM 1,978.9 / 989.4;
    MI300X 2,614.9 / 1,307.4); until 2026-12-06 the MI300X took the H100's 1,978.9."""
    sc = load_scenario(preset, ["training.precision=fp8"])
    assert sc.compute.peak_fp8_tflop_s == pytest.approx(2 * sc.compute.peak_tflop_s, rel=1e-3)
    assert rates(sc.compute, sc.training.dtypes).matmul_flop_s == pytest.approx(
        sc.compute.peak_fp8_tflop_s * 1e12 * sc.compute.matmul_efficiency
    )


@pytest.mark.parametrize("preset", ["a100-8", "homelab-1gbe", "homelab-10gbe"])
def test_fp8_is_refused_where_the_device_has_none(preset):
    with pytest.raises(ValueError, match=r"^training.precision: needs FP8 matmuls .* got 'fp8'$"):
        load_scenario(preset, ["training.precision=fp8"])
    assert load_scenario(preset).compute.peak_fp8_tflop_s == 0
