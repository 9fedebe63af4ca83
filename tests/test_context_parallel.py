"""Context parallelism (training.cp; sim/tp.py, sim/parallel3d.py, sim/memory3d.py): each GPU
does 1/cp of every kernel, the K/V all-gather and the reduce-scatter of their gradients are
the bytes Llama 3's all-gather CP moves, gradients reduce over dp x cp, and the memory is the
s / cp model's plus one block's gathered K and V. Ring attention (training.cp_comm = "p2p")
hides each ring step under that step's attention and holds two chunks, not the whole. Ulysses
(training.cp_comm = "a2a") is four all-to-alls a block each way, of the heads' bytes."""

import numpy as np
import pytest

from sim.collectives import collective_cost
from sim.parallel3d import (
    block_numel_on_gpu,
    cp_fabric,
    dp_fabric,
    dtypes_3d,
    layout,
    memory_by_stage,
    simulate_3d,
    step_costs,
)
from sim.roofline import rates
from sim.scenario_file import load_scenario
from sim.tp import block_time, cp_kv_bytes, cp_ring_steps_s, head_time, ulysses_a2a_s
from sim.workload import fabric_for

BASE = [
    "model.preset=llama3-8b",
    "training.seq_len=8192",
    "training.micro_batch_size=1",
    "training.precision=bf16",
    "training.mode=fsdp",
    "noise.distribution=none",
    "noise.speed_spread_sd=0",
]


def _sc(*sets, ranks=64):
    return load_scenario("h100-1024", [*BASE, *sets], ranks=ranks)


def _costs(sc):
    return step_costs(sc, layout(sc))


def test_cp1_is_the_model_without_it():
    a, b = _sc("training.tp=8"), _sc("training.tp=8", "training.cp=1")
    assert simulate_3d(a, None).step_s == simulate_3d(b, None).step_s


def test_each_gpu_computes_one_cp_th_of_every_kernel():
    # cp = 4 at seq s is exactly the cp = 1 job's compute / 4 (balanced causal chunks: attention's
    # s^2 / 2 pairs split evenly too), once no kernel sits at the launch floor (every GPU still
    # launches every kernel: sim/roofline.py). The embedding's and output layer's backward write
    # their whole table's gradient whatever the tokens, so the head shrinks by less.
    sc = _sc("training.tp=2", "compute.kernel_launch_us=0")
    dt, shape = dtypes_3d(sc), sc.model.shape
    r, tp_net = rates(sc.compute, dt), fabric_for(sc, ranks=2)
    kw = {"tp": 2, "sequence_parallel": False, "fabric": tp_net}
    one = block_time(shape, 8192, 1, dt, r, recompute="selective", **kw)
    four = block_time(shape, 8192, 1, dt, r, recompute="selective", cp=4, cp_fabric=fabric_for(sc, ranks=4), **kw)
    for part in ("forward_compute_s", "backward_compute_s", "recompute_s"):
        assert getattr(four, part) == pytest.approx(getattr(one, part) / 4, rel=1e-12), part
    h1, h4 = head_time(shape, 8192, 1, dt, r, **kw), head_time(shape, 8192, 1, dt, r, cp=4, **kw)
    assert h4.output_forward_s == pytest.approx(h1.output_forward_s / 4, rel=1e-12)
    assert h4.output_backward_s < h1.output_backward_s / 3  # per token, but a whole-table gradient copy
    assert h4.embedding_backward_s > h1.embedding_backward_s / 2
    # With the preset's launch floor the small kernels stay at it: more than a quarter.
    r5 = rates(_sc("training.tp=2").compute, dt)
    floored = block_time(shape, 8192, 1, dt, r5, recompute="none", cp=4, cp_fabric=fabric_for(sc, ranks=4), **kw)
    assert floored.forward_compute_s > block_time(shape, 8192, 1, dt, r5, recompute="none", **kw).forward_compute_s / 4


def test_the_kv_all_gather_and_gradient_reduce_scatter_are_llama3s_bytes():
    sc = _sc("training.tp=8", "training.cp=4", ranks=64)  # 8 nodes: CP groups of 4 GPUs, one per node
    lay, shape, dt = layout(sc), sc.model.shape, dtypes_3d(sc)
    # llama3-8b: 8 KV heads of 128, one per TP rank; K and V of the whole 8192-token sequence, bf16.
    assert cp_kv_bytes(shape, 8192, dt, 8) == 8192 * 2 * 1 * 128 * 2
    fabric = cp_fabric(sc, lay)
    assert fabric.ranks == 4 and fabric.gpus_per_node == 1  # tp fills the node: CP crosses nodes
    gather = collective_cost("allgather", 8192 * 2 * 128 * 2, fabric).time_s
    scatter = collective_cost("reduce_scatter", 8192 * 2 * 128 * 2, fabric).time_s
    with_cp = step_costs(sc, lay)
    # TP's collectives move the GPU's 8192 / 4 tokens; CP adds a gather in forward and a gather
    # and a reduce-scatter in backward, per block.
    tp_only = _costs(_sc("training.tp=8", "training.seq_len=2048", ranks=16))
    blocks = shape.n_layer
    assert with_cp.tp_comm_s.sum() == pytest.approx(tp_only.tp_comm_s.sum() + blocks * (2 * gather + scatter))


def test_gradients_reduce_over_dp_times_cp_and_fsdp_shards_over_them():
    sc = _sc("training.tp=8", "training.cp=4", ranks=256)  # dp 8
    lay = layout(sc)
    assert (lay.tp, lay.cp, lay.dp) == (8, 4, 8) and sc.dp == 8
    assert dp_fabric(sc, lay).ranks == 32
    step = simulate_3d(sc, None)
    assert step.gpus == 256
    # fsdp shards over the 32, and without a pipeline each block is resharded after its forward
    # (sim/memory3d.py): ZeRO-3's shards, the root and its gradient, two blocks gathered (prefetch 1)
    # and one block's gradient.
    mem = step.memory[0]
    dt = dtypes_3d(sc)
    c, g = dt.compute_bytes, dt.grad_bytes
    block = block_numel_on_gpu(sc.model.shape, 8)
    root = mem.parameters - sc.model.shape.n_layer * block
    want = mem.parameters * (dt.param_bytes + g + dt.optimizer_state_bytes) / 32 + root * (c + g) + 2 * block * c
    assert mem.model_states_gib == pytest.approx((want + block * g) / 2**30, rel=1e-12)


def test_tokens_and_mfu_count_whole_sequences():
    sc = _sc("training.tp=8", "training.cp=4", "training.grad_accum=2", ranks=256)
    step = simulate_3d(sc, None)
    assert step.tokens_per_step == 8 * 2 * 8192  # dp x micro-batches x the whole sequence
    assert step.mfu == pytest.approx(step.model_flops_per_step / step.step_s / 256 / (step.peak_tflop_s * 1e12))


def test_memory_is_the_s_over_cp_model_plus_one_blocks_gathered_kv():
    # Fused attention: every saved term is per token, so cp = 4 at seq s holds what cp = 1 holds
    # at s / 4, plus the gathered K and V and their gradients of one block.
    four = _sc("training.tp=8", "training.cp=4", ranks=32)
    quarter = _sc("training.tp=8", "training.seq_len=2048", ranks=8)
    m4 = memory_by_stage(four, layout(four), _costs(four))[0]
    m1 = memory_by_stage(quarter, layout(quarter), _costs(quarter))[0]
    transient = 2 * 8192 * 2 * 128 * 2  # K, V (1 head of 128 per TP rank) and their gradients, bf16
    assert (m4.activations_gib - m1.activations_gib) * 2**30 == pytest.approx(transient, rel=1e-9)
    assert m4.logits_gib == pytest.approx(m1.logits_gib, rel=1e-12)


def test_a_slow_gpu_slows_its_cp_group():
    sc = _sc("training.tp=8", "training.cp=2", "stragglers=9:1.5", ranks=32)  # rank 9: CP rank 1, replica 0
    lay = layout(sc)
    assert (lay.stage_of(9), lay.replica_of(9)) == (0, 0)
    step = simulate_3d(sc, np.random.default_rng(0))
    assert step.stage_factor[0, 0] == pytest.approx(1.5) and step.stage_factor[1, 0] == pytest.approx(1.0)


def _ring_block(sc, seq: int, recompute: str, comm: str):
    """One block of llama3-8b at ``seq`` tokens, tp 8 x cp 4 (the CP group one GPU per node)."""
    dt, shape = dtypes_3d(sc), sc.model.shape
    kw = {"tp": 8, "sequence_parallel": True, "fabric": fabric_for(sc, ranks=8), "cp": 4}
    fabric = cp_fabric(sc, layout(sc))
    return block_time(shape, seq, 1, dt, rates(sc.compute, dt), recompute=recompute, cp_fabric=fabric,
                      cp_comm=comm, **kw), fabric  # fmt: skip


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_ring_attention_exposes_only_what_each_step_exceeds_its_attention(recompute):
    # Per block: the all_gather run exposes its gather (and in backward a gather and a scatter);
    # the ring exposes (cp - 1) max(0, step - A / cp), a step being one of the ring all-gather's
    # cp - 1 (two chunks in backward, K and V with their gradients). Short sequences leave the
    # steps exposed; at 128k tokens attention's s^2 work hides them whole.
    sc = _sc("training.tp=8", "training.cp=4", ranks=32)
    dt, shape = dtypes_3d(sc), sc.model.shape
    for seq, hidden in ((8192, False), (131072, True)):
        ag, fabric = _ring_block(sc, seq, recompute, "all_gather")
        ring, _ = _ring_block(sc, seq, recompute, "p2p")
        sel, _ = _ring_block(sc, seq, "selective", "all_gather")  # its recompute_s: the attention core's forward
        core = sel.recompute_s
        step, step2 = cp_ring_steps_s(shape, seq, dt, 8, 4, fabric)
        size = cp_kv_bytes(shape, seq, dt, 8)
        assert step == pytest.approx(collective_cost("allgather", size, fabric).time_s / 3, rel=1e-12)
        assert step2 == pytest.approx(collective_cost("allgather", 2 * size, fabric).time_s / 3, rel=1e-12)
        gather = collective_cost("allgather", size, fabric).time_s
        scatter = collective_cost("reduce_scatter", size, fabric).time_s
        tp_fwd = ag.forward_comm_s - gather
        want_fwd = 3 * max(0.0, step - core / 4)
        under = ring.attention_backward_s + (core if recompute == "selective" else 0.0)
        want_bwd = 3 * max(0.0, step2 - under / 4) + (want_fwd if recompute == "full" else 0.0)
        assert ring.forward_comm_s == pytest.approx(tp_fwd + want_fwd, rel=1e-12)
        assert ring.backward_comm_s == pytest.approx(ag.backward_comm_s - gather - scatter + want_bwd, rel=1e-12)
        assert ring.forward_comm_s <= ag.forward_comm_s  # a step is a third of the gather, less what hides
        assert (want_fwd == 0.0) == hidden and (want_bwd == 0.0) == hidden
        assert ring.forward_compute_s == ag.forward_compute_s and ring.backward_compute_s == ag.backward_compute_s


def test_ring_attention_holds_two_chunks_where_all_gather_holds_the_whole():
    ring = _sc("training.tp=8", "training.cp=4", "training.cp_comm=p2p", ranks=32)
    gather = _sc("training.tp=8", "training.cp=4", ranks=32)
    m_ring = memory_by_stage(ring, layout(ring), _costs(ring))[0]
    m_gather = memory_by_stage(gather, layout(gather), _costs(gather))[0]
    kv = 8192 * 2 * 128 * 2  # the gathered K and V of one block (1 KV head of 128 per TP rank), bf16
    # all_gather: the whole K, V and their gradients (2 kv); the ring: 2 chunks of each (4 kv / cp).
    assert (m_gather.activations_gib - m_ring.activations_gib) * 2**30 == pytest.approx(2 * kv - 4 * kv / 4, rel=1e-9)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_ulysses_is_four_all_to_alls_of_the_heads_each_way(recompute):
    # llama3-8b at tp 8: 4 query heads and 1 KV head a TP rank; over cp 4 each rank gets one query
    # head, and the KV head repeated to 4 so each gets the one its query reads. Per block and
    # micro-batch: Q, K, V in and the context out, each the rank's s/4 tokens x heads x 128 x 2 B.
    sc = _sc("training.tp=8", "training.cp=4", "training.cp_comm=a2a", ranks=32)
    dt, shape = dtypes_3d(sc), sc.model.shape
    ag, fabric = _ring_block(sc, 8192, recompute, "all_gather")
    a2a, _ = _ring_block(sc, 8192, recompute, "a2a")
    head = 8192 / 4 * 128 * 2
    one = (
        2 * collective_cost("alltoall", 4 * head, fabric).time_s
        + 2 * collective_cost("alltoall", 4 * head, fabric).time_s
    )
    assert ulysses_a2a_s(shape, 8192, dt, 8, 4, fabric) == pytest.approx(one, rel=1e-12)
    gather = collective_cost("allgather", cp_kv_bytes(shape, 8192, dt, 8), fabric).time_s
    scatter = collective_cost("reduce_scatter", cp_kv_bytes(shape, 8192, dt, 8), fabric).time_s
    tp_fwd, tp_bwd = ag.forward_comm_s - gather, ag.backward_comm_s - gather - scatter
    assert a2a.forward_comm_s == pytest.approx(tp_fwd + one, rel=1e-12)
    assert a2a.backward_comm_s == pytest.approx(tp_bwd + one * (2 if recompute == "full" else 1), rel=1e-12)
    assert a2a.forward_compute_s == ag.forward_compute_s and a2a.backward_compute_s == ag.backward_compute_s


def test_ulysses_holds_its_heads_kv_over_the_whole_sequence():
    # All-gather CP holds one block's whole K and V of the TP rank's KV heads and their gradients
    # (2 kv); Ulysses the K and V of its share of them over the whole sequence, and their
    # gradients. tp 2: 4 KV heads a TP rank, one each over cp 4: 2 kv / 4. tp 8: 1 KV head,
    # repeated to the 4 CP ranks: each holds the whole of it, as the all-gather does.
    for tp, share in ((2, 1 / 4), (8, 1.0)):
        ulysses = _sc(f"training.tp={tp}", "training.cp=4", "training.cp_comm=a2a", ranks=8 * tp)
        gather = _sc(f"training.tp={tp}", "training.cp=4", ranks=8 * tp)
        m_u = memory_by_stage(ulysses, layout(ulysses), _costs(ulysses))[0]
        m_g = memory_by_stage(gather, layout(gather), _costs(gather))[0]
        kv = 8192 * 2 * (8 // tp) * 128 * 2  # K and V of the TP rank's KV heads, bf16
        assert (m_g.activations_gib - m_u.activations_gib) * 2**30 == pytest.approx(2 * kv * (1 - share), abs=1e-3)


@pytest.mark.parametrize(
    "sets, ranks, message",
    [
        (["training.cp=3"], 48, "training.cp: must split training.seq_len (8192) into 2 x cp equal chunks, got 3"),
        (
            ["training.tp=8", "training.cp=8", "training.cp_comm=a2a"],
            64,
            "training.cp: must divide model.n_head / training.tp (4 query heads a TP rank) for cp_comm a2a, got 8",
        ),
        (
            ["training.tp=2", "training.cp=3", "training.cp_comm=a2a", "training.seq_len=8190"],
            48,
            "training.cp: must divide model.n_head / training.tp (16 query heads a TP rank) for cp_comm a2a, got 3",
        ),
        (["training.cp=4", "training.tp=8"], 16, "ranks: must be a multiple of tp x cp x pp (32), got 16"),
        (["training.cp=0"], 8, "training.cp: must be >= 1, got 0"),
        (["training.cp=2", "training.cp_comm=ring"], 16, "training.cp_comm: must be one of all_gather, p2p"),
        (
            ["training.cp=2", "training.mode=hsdp", "training.hsdp_shard_size=3"],
            16,
            "training.hsdp_shard_size: must divide the data-parallel group's dp x cp ranks (16), got 3",
        ),
    ],
)
def test_impossible_cp_is_one_named_line(sets, ranks, message):
    with pytest.raises(ValueError) as e:
        _sc(*sets, ranks=ranks)
    assert str(e.value).startswith(message), str(e.value)


def test_simulate_says_how_cp_exchanges_k_and_v(capsys):
    from tests.conftest import in_process

    sets = (*BASE, "training.tp=8", "training.cp=2")
    args = ("simulate", "h100-1024", "--ranks", "16", "--steps", "2", *(x for k in sets for x in ("--set", k)))
    code, out, _ = in_process(capsys, *args, "--set", "training.cp_comm=p2p")
    assert code == 0 and "CP: ring attention, each K/V step under that step's attention" in out
    code, out, _ = in_process(capsys, *args)
    assert code == 0 and "CP: K and V all-gathered per block, exposed" in out
    code, out, _ = in_process(capsys, *args, "--set", "training.cp_comm=a2a")
    assert code == 0 and "CP: Ulysses, four all-to-alls a block each way" in out
