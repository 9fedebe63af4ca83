"""Per-GPU memory of TP/PP layouts held to Korthikanti et al. 2022's closed forms, and to
sim/memory.py where the layouts meet (tp = 1)."""

import numpy as np
import pytest

from sim.memory import GIB, block_activation_bytes
from sim.memory3d import layer_activation_bytes, layer_terms
from sim.parallel3d import layout, memory_by_stage, step_costs
from sim.precision import precision_dtypes, sharded
from sim.scenario_file import load_scenario
from sim.transformer import model_shape

SIXTEEN = precision_dtypes("bf16")  # 16-bit residual and activations: Korthikanti's setting


def _gpt(n_layer=4, h=1024, a=16):
    from sim.transformer import TransformerShape

    return TransformerShape(name="t", n_layer=n_layer, n_embd=h, n_head=a, block_size=2048, vocab_size=51200)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("sp,recompute", [(False, "none"), (True, "none"), (True, "selective")])
def test_korthikanti_closed_forms(t, sp, recompute):
    shape, s, b = _gpt(), 2048, 2
    h, a = shape.n_embd, shape.n_head
    terms = layer_terms(shape, s, b, SIXTEEN, fused_attention=False, dropout=True)._replace(statistics=0.0)
    got = layer_activation_bytes(terms, tp=t, sequence_parallel=sp, recompute=recompute)
    sbh = s * b * h
    if not sp:
        want = sbh * (10 + 24 / t + 5 * a * s / (h * t))  # Sec. 4.2.1
    elif recompute == "none":
        want = sbh * (34 + 5 * a * s / h) / t  # Sec. 4.2.2
    else:
        want = 34 * sbh / t  # Sec. 5, selective recomputation with sequence parallelism
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("preset", ["gpt2-760m", "llama3-8b"])
@pytest.mark.parametrize("precision", ["bf16-amp", "bf16"])
@pytest.mark.parametrize("dropout", [False, True])
def test_tp1_is_sim_memory_block_count(preset, precision, dropout):
    shape, dt = model_shape(preset), precision_dtypes(precision)
    terms = layer_terms(shape, 2048, 4, dt, fused_attention=True, dropout=dropout)
    got = layer_activation_bytes(terms, tp=1, sequence_parallel=False, recompute="none")
    want = block_activation_bytes(shape, 2048, 4, dt, fused_attention=True, dropout=dropout)
    assert got == pytest.approx(want, rel=1e-12)


def test_unfused_dropout_adds_korthikantis_mask_and_output_per_score():
    """Unfused attention with dropout keeps the softmax output, the dropout mask and its output:
    5 a s^2 b bytes at 16 bits (Korthikanti et al. 2022, Sec. 4.1), where without dropout 2 a s^2 b;
    the two residual branches' masks add 2 s b h. sim/memory.py and sim/memory3d.py agree on it."""
    shape, dt = model_shape("gpt2-760m"), precision_dtypes("bf16")
    s, b, a, h = 2048, 4, shape.n_head, shape.n_embd
    plain = block_activation_bytes(shape, s, b, dt, fused_attention=False)
    drop = block_activation_bytes(shape, s, b, dt, fused_attention=False, dropout=True)
    assert drop - plain == pytest.approx(3 * a * s * s * b + 2 * s * b * h, rel=1e-12)
    t0, t1 = (layer_terms(shape, s, b, dt, fused_attention=False, dropout=d) for d in (False, True))
    assert t1.attention_core == pytest.approx(5 * a * s * s * b, rel=1e-12)
    assert t0.attention_core == pytest.approx(2 * a * s * s * b, rel=1e-12)
    held = [layer_activation_bytes(x, tp=1, sequence_parallel=False, recompute="none") for x in (t0, t1)]
    assert held[1] - held[0] == pytest.approx(drop - plain, rel=1e-12)


def _sc(*sets, ranks=64):
    base = ["model.preset=llama3-8b", "training.seq_len=4096", "training.micro_batch_size=1"]
    return load_scenario("h100-1024", [*base, *sets], ranks=ranks)


def test_first_stage_of_1f1b_holds_every_layer_once_whatever_p():
    # 1F1B keeps p micro-batches on the first stage, each L / p layers: L layers' worth (Sec. 4.2.3).
    for pp in (2, 4, 8):
        sc = _sc("training.tp=8", f"training.pp={pp}", "training.grad_accum=16", "training.sequence_parallel=true")
        lay = layout(sc)
        mem = memory_by_stage(sc, lay, step_costs(sc, lay))
        shape = sc.model.shape
        terms = layer_terms(shape, 4096, 1, sharded(sc.training.dtypes), fused_attention=True, dropout=False)
        per_layer = layer_activation_bytes(terms, tp=8, sequence_parallel=True, recompute="none")
        ids = pp * 4096 * 8  # the token ids of p micro-batches in flight
        assert mem[0].activations_gib == pytest.approx((shape.n_layer * per_layer + ids) / GIB, rel=1e-12)


def test_model_states_per_gpu_closed_form():
    sc = _sc("training.tp=8", "training.pp=4", "training.grad_accum=8")
    lay = layout(sc)
    costs = step_costs(sc, lay)
    mem = memory_by_stage(sc, lay, costs)
    # 16-bit module weights, fp32 master, fp32 gradients, AdamW's two fp32 moments: 18 B/param.
    assert [m.model_states_gib for m in mem] == pytest.approx(list(costs.params * 18 / GIB))
    # Every parameter is on exactly one GPU of each TP x PP group, norms on all tp of them.
    shape = sc.model.shape
    norms = (2 * shape.n_layer + 1) * shape.n_embd
    from sim.transformer import param_count

    assert costs.params.sum() * 8 - 7 * norms == pytest.approx(param_count(shape))
    fsdp = _sc("training.tp=8", "training.pp=4", "training.grad_accum=8", "training.mode=fsdp")
    m2 = memory_by_stage(fsdp, layout(fsdp), step_costs(fsdp, layout(fsdp)))
    assert [m.model_states_gib for m in m2] == pytest.approx(list(costs.params * (2 + 4 + 12 / 2) / GIB))


@pytest.mark.parametrize(("sets", "tp", "shards"), [(("training.tp=8",), 8, 8), (("training.cp=2",), 1, 64)])
def test_fsdp_without_a_pipeline_holds_zero3_shards_and_the_working_set(sets, tp, shards):
    """Without PP torchtitan reshards each block after its forward (its apply_fsdp), so FSDP beside
    TP or CP holds (w + g + o) / dp a parameter, the root gathered with its gradient, two blocks
    in flight (fsdp_prefetch 1) and one block's gradient, as sim/memory.py's fsdp does. Until
    2026-12-06 it held the 16-bit weights and gradients whole: 127 GiB for torchtitan's Table 2
    row at 262,144 tokens that measured 84.5 GiB."""
    sc = _sc(*sets, "training.mode=fsdp")
    lay = layout(sc)
    (m,) = memory_by_stage(sc, lay, step_costs(sc, lay))
    shape = sc.model.shape
    assert sc.dp_shard_size == shards
    block = (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) / tp + 2 * 4096  # norms on every TP rank
    params = m.parameters
    root = params - shape.n_layer * block
    if tp == 1:  # embedding, final norm and output layer
        assert root == 2 * 128256 * 4096 + 4096
    want = params * (4 + 4 + 8) / shards + root * (2 + 4) + 2 * block * 2 + block * 4
    assert m.model_states_gib * GIB == pytest.approx(want, rel=1e-12)
    # With a pipeline the parameters stay gathered from forward to backward: unchanged.
    piped = _sc(*sets, "training.pp=2", "training.grad_accum=4", "training.mode=fsdp")
    lay2 = layout(piped)
    costs = step_costs(piped, lay2)
    per_gpu = [mm.model_states_gib * GIB for mm in memory_by_stage(piped, lay2, costs)]
    assert per_gpu == pytest.approx(list(costs.params * (2 + 4 + 12 / piped.dp_shard_size)))


def test_memory_falls_with_tp_and_recompute():
    peak = {}
    for tp, ckpt in ((1, "none"), (8, "none"), (8, "selective"), (8, "full")):
        sc = _sc(
            f"training.tp={tp}", "training.pp=2", "training.grad_accum=8", f"training.activation_checkpointing={ckpt}"
        )
        lay = layout(sc)
        peak[tp, ckpt] = max(m.total_gib for m in memory_by_stage(sc, lay, step_costs(sc, lay)))
    assert peak[1, "none"] > peak[8, "none"] > peak[8, "selective"] > peak[8, "full"]
    assert np.isfinite(list(peak.values())).all()
