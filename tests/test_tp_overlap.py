"""TP communication overlap (training.tp_comm_overlap, sim/tp.py). full: each sequence-parallel
all-gather and reduce-scatter of a block runs in tp chunks under its partner matmul, so what it
costs is the closed form max(0, C - G (tp - 1) / tp); wgrad: the column-split layers' input
gradients are reduced under their weight-gradient matmuls, max(0, C - G_wgrad), the rest exposed.
Both computed here from the collective model and the kernel times independently of sim/tp.py's
bookkeeping; neither costs more than no overlap; the keys refuse what they cannot apply to."""

import numpy as np
import pytest

from sim.collectives import collective_cost
from sim.parallel3d import dtypes_3d, layout, simulate_3d, step_costs
from sim.roofline import block_kernels, kernel_time_s, rates
from sim.scenario_file import load_scenario
from sim.tp import block_time, shard_kernel
from sim.workload import fabric_for

BASE = ["model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1", "training.precision=bf16"]
TP8 = ["training.tp=8", "training.sequence_parallel=true"]
FORWARD = (("allgather", "attn.c_attn"), ("reduce_scatter", "attn.c_proj"),
           ("allgather", "mlp.c_fc"), ("reduce_scatter", "mlp.c_proj"))  # fmt: skip
BACKWARD = (("allgather", "attn.c_proj.dgrad"), ("reduce_scatter", "attn.c_attn.dgrad"),
            ("allgather", "mlp.c_proj.dgrad"), ("reduce_scatter", "mlp.c_fc.dgrad"))  # fmt: skip


def _block(sc, *, overlap, recompute="none", fabric=None, sequence_parallel=True):
    dt = dtypes_3d(sc)
    fabric = fabric or fabric_for(sc, ranks=8)
    kw = {"tp": 8, "sequence_parallel": sequence_parallel, "fabric": fabric, "recompute": recompute}
    return block_time(sc.model.shape, 4096, 1, dt, rates(sc.compute, dt), comm_overlap=overlap, **kw)


def _closed_form(sc, fabric, pairs, hidden=7 / 8, sequence_parallel=True):
    dt = dtypes_3d(sc)
    r = rates(sc.compute, dt)
    size = 4096 * sc.model.shape.n_embd * dt.compute_bytes
    kernels = {k.name: k for k in block_kernels(sc.model.shape, 4096, 4096.0, dt)}
    total = 0.0
    for op, name in pairs:
        c = collective_cost(op, size, fabric).time_s
        g = kernel_time_s(shard_kernel(kernels[name], 8, sequence_parallel), r)
        total += max(0.0, c - g * hidden)
    return total


@pytest.mark.parametrize("intra_gb_s", [450.0, 50.0, 5.0])
def test_each_collective_costs_what_outlasts_its_matmul(intra_gb_s):
    """At the preset's NVLink the matmuls hide nearly everything; on slower links more shows, and
    on a slow enough one every collective outlasts its matmul, so the block pays all four less
    7/8 of the four matmuls (the closed form's two regimes)."""
    sc = load_scenario("h100-1024", [*BASE, *TP8, f"network.intra_gb_s={intra_gb_s}"], ranks=64)
    fabric = fabric_for(sc, ranks=8)
    plain, over = _block(sc, overlap="none", fabric=fabric), _block(sc, overlap="full", fabric=fabric)
    assert over.forward_comm_s == pytest.approx(_closed_form(sc, fabric, FORWARD), rel=1e-12)
    assert over.backward_comm_s == pytest.approx(_closed_form(sc, fabric, BACKWARD), rel=1e-12)
    assert over.forward_comm_s <= plain.forward_comm_s and over.backward_comm_s <= plain.backward_comm_s
    # Compute is the same kernels: only the wait for the collectives moves.
    assert over.forward_compute_s == plain.forward_compute_s and over.backward_compute_s == plain.backward_compute_s
    if intra_gb_s == 5.0:  # every collective longer than its matmul: linear in both
        dt = dtypes_3d(sc)
        kernels = {k.name: k for k in block_kernels(sc.model.shape, 4096, 4096.0, dt)}
        hidden = sum(kernel_time_s(shard_kernel(kernels[n], 8, True), rates(sc.compute, dt)) for _, n in FORWARD)
        assert over.forward_comm_s == pytest.approx(plain.forward_comm_s - hidden * 7 / 8, rel=1e-12)


def test_full_recompute_reruns_the_forwards_exposed_part():
    sc = load_scenario("h100-1024", [*BASE, *TP8, "network.intra_gb_s=20"], ranks=64)
    none, full = _block(sc, overlap="full"), _block(sc, overlap="full", recompute="full")
    assert none.forward_comm_s > 0
    assert full.backward_comm_s == pytest.approx(none.backward_comm_s + none.forward_comm_s, rel=1e-12)


def test_a_step_is_never_slower_with_it():
    for mode, extra in (("zero1", []), ("zero1", ["training.precision=fp8", "training.grad_accum=8"]),
                        ("fsdp", []), ("fsdp", ["training.pp=2", "training.grad_accum=4"])):  # fmt: skip
        sets = [*BASE, *TP8, f"training.mode={mode}", *extra]
        plain = load_scenario("h100-1024", sets, ranks=64)
        over = load_scenario("h100-1024", [*sets, "training.tp_comm_overlap=full"], ranks=64)
        a, b = step_costs(plain, layout(plain)), step_costs(over, layout(over))
        assert b.tp_comm_s.max() < a.tp_comm_s.max()
        assert (b.forward_s <= a.forward_s).all() and (b.backward_s <= a.backward_s).all()
        ones = np.ones((layout(plain).dp, layout(plain).pp))  # identical GPUs, no noise
        faster, slower = simulate_3d(over, None, factors=ones).step_s, simulate_3d(plain, None, factors=ones).step_s
        # At one micro-batch the data-parallel stream after the last backward binds the step (no
        # faster, no slower); with several, the blocks' compute does.
        assert faster < slower if "grad_accum" in " ".join(extra) else faster <= slower
        if mode == "zero1":  # its reduction does not depend on the compute: it does not move
            assert (b.dp_s == a.dp_s).all() and (b.gather_s == a.gather_s).all()


@pytest.mark.parametrize("intra_gb_s", [450.0, 5.0])
@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_wgrad_hides_the_column_layers_input_gradient_reduction(intra_gb_s, sequence_parallel):
    """Transformer Engine's default: the forward as without overlap; in the backward the two
    column-split layers' reduce-scatters (all-reduces without sequence parallelism) each cost
    max(0, C - G_wgrad), the gradient all-gathers (sequence parallelism) stay whole."""
    sc = load_scenario("h100-1024", [*BASE, *TP8, f"network.intra_gb_s={intra_gb_s}"], ranks=64)
    fabric = fabric_for(sc, ranks=8)
    kw = {"fabric": fabric, "sequence_parallel": sequence_parallel}
    plain, wgrad = _block(sc, overlap="none", **kw), _block(sc, overlap="wgrad", **kw)
    assert wgrad.forward_comm_s == plain.forward_comm_s
    op = "reduce_scatter" if sequence_parallel else "allreduce"
    pairs = ((op, "attn.c_attn.wgrad"), (op, "mlp.c_fc.wgrad"))
    size = 4096 * sc.model.shape.n_embd * dtypes_3d(sc).compute_bytes
    gathers = 2 * collective_cost("allgather", size, fabric).time_s if sequence_parallel else 0.0
    want = gathers + _closed_form(sc, fabric, pairs, hidden=1.0, sequence_parallel=sequence_parallel)
    assert wgrad.backward_comm_s == pytest.approx(want, rel=1e-12)
    assert wgrad.backward_comm_s < plain.backward_comm_s
    # full hides more than wgrad wherever it applies
    if sequence_parallel:
        assert _block(sc, overlap="full", fabric=fabric).backward_comm_s <= wgrad.backward_comm_s


def test_true_is_full_and_false_is_none():
    for given, level in ((True, "full"), (False, "none"), ("wgrad", "wgrad")):
        sc = load_scenario("h100-1024", [*BASE, *TP8, f"training.tp_comm_overlap={str(given).lower()}"], ranks=64)
        assert sc.training.tp_comm_overlap == level


@pytest.mark.parametrize(
    "sets, value, why",
    [
        ([], "true", "needs training.tp > 1"),
        ([], "wgrad", "needs training.tp > 1"),
        (["training.tp=8"], "full", "full needs training.sequence_parallel"),
        (["training.tp=8"], "sometimes", "must be one of none, wgrad, full, true, false"),
    ],
)
def test_refused_where_it_does_not_apply(ddplab, sets, value, why):
    extra = [w for s in ["model.preset=llama3-8b", *sets, f"training.tp_comm_overlap={value}"] for w in ("--set", s)]
    code, out, err = ddplab("simulate", "h100-1024", "--ranks", "64", *extra)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    got = "True" if value == "true" else repr(value)
    assert "training.tp_comm_overlap: " + why in line and line.endswith(f"got {got}")


def test_simulate_says_what_it_assumed(ddplab):
    for level, said in (("full", "assumed: the transfers take no SMs from the matmul"),
                        ("wgrad", "under its weight-gradient matmul (Transformer Engine's default)")):  # fmt: skip
        extra = [w for s in ["model.preset=llama3-8b", *TP8, f"training.tp_comm_overlap={level}"] for w in ("--set", s)]
        code, out, err = ddplab("simulate", "h100-1024", "--ranks", "64", "--steps", "3", *extra)
        assert code == 0, err
        assert said in out


def test_plan_overlaps_tp_where_a_layout_has_it():
    """`plan --set training.tp_comm_overlap=true`: every layout with TP carries it, those without
    do not (the key needs tp > 1), and each printed command is one simulate accepts."""
    from workflow.layouts import plan_layouts, scenario_sets

    sets = ["training.tp_comm_overlap=true"]
    found = plan_layouts("llama3-8b", "h100-1024", gpus=64, sets=sets, top=40, finalists=2)
    assert found["sets"] == []
    rows = found["layouts"]
    assert {r["tp"] > 1 for r in rows} == {True, False}
    for r in rows:
        assert ("training.tp_comm_overlap=full" in r["sets"]) == (r["tp"] > 1) == (r["tp_overlap"] == "full")
        sc = load_scenario("h100-1024", [*scenario_sets("llama3-8b", found["sets"]), *r["sets"]], ranks=64)
        assert sc.training.tp_comm_overlap == ("full" if r["tp"] > 1 else "none")
    plain = plan_layouts("llama3-8b", "h100-1024", gpus=64, top=40, finalists=2)["layouts"]
    assert all(r["tp_overlap"] == "none" for r in plain)


def test_a_bad_value_is_one_line_in_both_commands(ddplab):
    sets = ["--set", "model.preset=llama3-8b", "--set", "training.tp=8", "--set", "training.sequence_parallel=true"]
    for argv in (("simulate", "h100-1024", "--ranks", "64", *sets), ("plan", "llama3-8b", "h100-1024", "--gpus", "64")):
        code, out, err = ddplab(*argv, "--set", "training.tp_comm_overlap=maybe")
        assert code == 2 and out == ""
        (line,) = err.strip().splitlines()
        assert line.endswith("training.tp_comm_overlap: must be one of none, wgrad, full, true, false, got 'maybe'")
