"""training.mode = "zero1", Megatron's distributed optimizer (sim/parallel3d.py, sim/memory3d.py):
the memory Megatron-Core's docs state, DDP's buckets reduce-scattered instead of allreduced, the
updated weights allgathered behind the next forward, the optimizer on a 1/dp shard; and only the
3D model simulates it."""

import numpy as np
import pytest

from sim.collectives import collective_cost
from sim.engine import simulate
from sim.memory import GIB
from sim.parallel3d import (
    dp_fabric,
    dtypes_3d,
    gather_start_s,
    layout,
    memory_by_stage,
    simulate_3d,
    step_costs,
)
from sim.scenario_file import load_scenario
from sim.steps3d import simulate_3d_steps

BASE = ["model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1", "training.precision=bf16"]


def _sc(*sets, ranks=64):
    return load_scenario("h100-1024", [*BASE, *sets], ranks=ranks)


def test_model_states_are_megatrons_6_plus_12_over_dp_bytes_per_parameter():
    # Megatron-Core's distributed optimizer docs: bf16 parameters with fp32 gradients take 18
    # bytes per parameter without it and 6 + 12 / d with it.
    for tp, pp, ranks in ((1, 1, 64), (8, 4, 256), (2, 2, 16)):
        sets = (f"training.tp={tp}", f"training.pp={pp}", "training.grad_accum=8", "training.precision=bf16-amp")
        ddp, zero = _sc(*sets, ranks=ranks), _sc(*sets, "training.mode=zero1", ranks=ranks)
        dp = zero.dp
        for sc, per_param in ((ddp, 18.0), (zero, 6.0 + 12.0 / dp)):
            lay = layout(sc)
            costs = step_costs(sc, lay)
            mem = memory_by_stage(sc, lay, costs)
            assert [m.model_states_gib for m in mem] == pytest.approx(list(costs.params * per_param / GIB), rel=1e-12)


def test_buckets_are_reduce_scattered_and_the_weights_allgathered_in_them():
    sc = _sc("training.mode=zero1", "training.pp=2", "training.grad_accum=8", ranks=64)
    lay = layout(sc)
    c = step_costs(sc, lay)
    fabric, dt = dp_fabric(sc, lay), dtypes_3d(sc)
    cap = sc.training.bucket_cap_mb * (1 << 20)
    for i in range(lay.pp):
        grads = c.params[i] * dt.grad_bytes
        n = int(np.ceil(grads / cap))
        one = collective_cost("reduce_scatter", grads / n, fabric).time_s
        assert c.dp_s[i] == pytest.approx(n * one, rel=1e-12)
        assert c.dp_last_bucket_s[i] == pytest.approx(one, rel=1e-12)
        weights = c.params[i] * dt.compute_bytes
        k = int(np.ceil(weights / cap))
        gather = collective_cost("allgather", weights / k, fabric).time_s
        assert c.gather_s[i] == pytest.approx(k * gather, rel=1e-12)
    # Half a ring allreduce's bytes on the wire each way: the reduce-scatter costs less than DDP's allreduce.
    ddp = step_costs(_sc("training.pp=2", "training.grad_accum=8", ranks=64), lay)
    assert (c.dp_s < 0.6 * ddp.dp_s).all()


def test_the_optimizer_steps_one_shard():
    ddp = _sc("training.grad_accum=8", ranks=64)
    zero = _sc("training.grad_accum=8", "training.mode=zero1", ranks=64)
    c_ddp, c_zero = step_costs(ddp, layout(ddp)), step_costs(zero, layout(zero))
    assert c_zero.optimizer_s[0] == pytest.approx(c_ddp.optimizer_s[0] / 64, rel=0.05)


def test_overlapped_gather_waits_for_its_first_bucket_and_what_the_forward_cannot_hide():
    # Closed form: a 10-unit gather whose first bucket is 1, behind a forward of 4: 1 + (10 - 1 - 4).
    got = gather_start_s(np.array([10.0, 3.0]), np.array([1.0, 1.0]), np.array([4.0, 4.0]))
    assert got == pytest.approx([6.0, 1.0])
    sets = ("training.mode=zero1", "training.grad_accum=8", "noise.distribution=none", "noise.speed_spread_sd=0")
    sc = _sc(*sets, ranks=64)
    over = simulate_3d(sc, None)
    serial = simulate_3d(_sc(*sets, "training.overlap=false", ranks=64), None)
    c = over.costs
    buckets = np.ceil(c.params * dtypes_3d(sc).compute_bytes / (sc.training.bucket_cap_mb * (1 << 20)))
    assert c.gather_wait_s == pytest.approx(gather_start_s(c.gather_s, c.gather_s / buckets, c.forward_s.sum(axis=1)))
    # Without overlap the whole gather and the whole reduction are on the step; with it, less.
    fwd, bwd = c.forward_s.sum(), c.backward_s.sum()
    want = c.gather_s[0] + 8 * (fwd + bwd) + c.dp_s[0] + c.optimizer_s[0]
    assert serial.step_s == pytest.approx(want, rel=1e-9)
    assert over.step_s < serial.step_s


def test_only_the_3d_model_simulates_it():
    sc = _sc("training.mode=zero1", ranks=16)
    assert sc.parallel3d and not _sc(ranks=16).parallel3d
    with pytest.raises(ValueError, match="mode=zero1: a 3D-parallel job is simulated by sim/steps3d.py"):
        simulate(sc)
    # A TP job too: sim/engine.py, called directly, ran it as DDP with tp ignored.
    with pytest.raises(ValueError, match="a 3D-parallel job"):
        simulate(_sc("training.tp=8", "training.sequence_parallel=true", ranks=16))
    with pytest.raises(ValueError, match="^training.comm_hook"):
        _sc("training.mode=zero1", "training.comm_hook=bf16")


def test_the_gather_the_first_forward_waits_for_is_exposed_communication_not_bubble():
    # One stage, no overlap: every GPU waits for the whole gather, then computes, then the whole
    # reduce-scatter; no bubble at all.
    sets = ("training.mode=zero1", "training.grad_accum=4", "training.overlap=false", "noise.distribution=none",
            "noise.speed_spread_sd=0")  # fmt: skip
    sc = load_scenario("h100-1024", [*BASE, *sets], ranks=64, steps=2)
    run = simulate_3d_steps(sc)
    c = run.first.costs
    parts = run.group_mean
    assert parts["exposed_comm_s"] == pytest.approx(np.full((64, 1), c.gather_s[0] + c.dp_s[0]), rel=1e-9)
    assert parts["bubble_s"] == pytest.approx(np.zeros((64, 1)), abs=1e-12)
