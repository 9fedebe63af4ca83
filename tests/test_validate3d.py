"""calibrate/validate3d.py's costs of a CPU TP/PP run from a probe (issue 28, "a 2-rank TP and a
2-stage PP run on CPU are predicted within 10 %"): the probe's fixed per-operator cost is paid
whole by every TP rank and split over stages by their operators; the per-token cost is split by
the roofline; the TP block probe (realrun/probe_tp.py) replaces the roofline's block and the
tight-loop collectives; the optimizer goes by parameter tensors; a gloo send costs gloo's hop.
Exact, on a hand-made calibration: no process starts (tests/test_train3d.py runs the real ones)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from calibrate.calibration import Calibration, PpSchedule, TpBlock
from calibrate.compute_fit import pipeline_action_s, pp_schedules_fit
from calibrate.validate3d import calibrated_costs, predict_3d, stage_tensors
from sim.parallel3d import fabric_for, layout, simulate_3d, step_costs
from sim.pipeline import run_pipeline
from sim.scenario_file import scenario_from_dict
from sim.transformer import model_shape, param_tensors

CALIB = Path(__file__).parent / "calib-2026-11-29.json"
TOKENS = 2 * 32


def _calib(intercept_f=0.004, per_token_f=1e-5, intercept_b=0.005, per_token_b=2e-5, tp_block=None, pp_schedules=None):
    c = Calibration.read(CALIB)
    comp = c.compute
    comp = dataclasses.replace(
        comp,
        forward_s=comp.forward_s._replace(intercept_s=intercept_f, per_token_s=per_token_f),
        backward_s=comp.backward_s._replace(intercept_s=intercept_b, per_token_s=per_token_b),
        tp_block=tp_block,
        pp_schedules=pp_schedules,
    )
    return dataclasses.replace(c, compute=comp)


def _sc(tp=1, pp=1, schedule="1f1b", **net):
    return scenario_from_dict(
        {
            "ranks": tp * pp, "model": {"preset": "llama-tiny"},
            "training": {"micro_batch_size": 2, "seq_len": 32, "grad_accum": 4, "precision": "fp32", "tp": tp,
                         "pp": pp, "pp_schedule": schedule, "overlap": False},
            "network": {"backend": "gloo", "gpus_per_node": tp * pp, "intra_link": "pci", "intra_gb_s": 1.0,
                        "gloo_hop_latency_us": 150.0, **net},
            "compute": {"optimizer_s": 0.002},
        }
    )  # fmt: skip


def test_a_tp_rank_pays_the_whole_fixed_cost():
    # Only a fixed cost: every TP rank runs every operator, so its compute is the one rank's.
    calib = _calib(per_token_f=0.0, per_token_b=0.0)
    one, two = calibrated_costs(_sc(), calib), calibrated_costs(_sc(tp=2), calib)
    comm = step_costs(_sc(tp=2), layout(_sc(tp=2))).tp_comm_s[0]
    assert one.forward_s.sum() == pytest.approx(0.004, rel=1e-12)
    assert one.backward_s.sum() == pytest.approx(0.005, rel=1e-12)
    assert two.forward_s.sum() + two.backward_s.sum() == pytest.approx(0.009 + comm, rel=1e-12)
    # Only a per-token cost: the TP rank does less of it (its matmuls' shards).
    calib = _calib(intercept_f=0.0, intercept_b=0.0)
    one, two = calibrated_costs(_sc(), calib), calibrated_costs(_sc(tp=2), calib)
    assert one.forward_s.sum() == pytest.approx(1e-5 * TOKENS, rel=1e-12)
    assert two.forward_s.sum() - comm / 2 < one.forward_s.sum()


def test_stages_split_the_fixed_cost_and_sum_to_the_probe():
    calib = _calib()
    c = calibrated_costs(_sc(pp=2), calib)
    assert c.forward_s.sum() == pytest.approx(0.004 + 1e-5 * TOKENS, rel=1e-12)
    assert c.backward_s.sum() == pytest.approx(0.005 + 2e-5 * TOKENS, rel=1e-12)
    assert c.forward_s[1, 0] > c.forward_s[0, 0]  # the last stage holds the output layer and the loss


def _probed(extra_f, extra_b, send, model_f=(0.002, 2e-5), model_b=(0.003, 3e-5), tp=2):
    """A TpBlock whose bare model is exactly affine: model_f = (intercept, per token)."""
    pts = [[t, extra_f, extra_b, send, model_f[0] + model_f[1] * t, model_b[0] + model_b[1] * t] for t in (32.0, 128.0)]
    return TpBlock(tp=tp, points=pts, samples=8, source="test")


def test_the_tp_block_probe_replaces_the_roofline_block():
    extra_f, extra_b, send = 0.003, 0.004, 0.0008
    probed = _probed(extra_f, extra_b, send)
    n = model_shape("llama-tiny").n_layer
    one = calibrated_costs(_sc(), _calib(tp_block=probed))
    two = calibrated_costs(_sc(tp=2), _calib(tp_block=probed))
    # The compute is the probe's bare model (no DDP), not the DDP training path's fit.
    assert one.forward_s.sum() == pytest.approx(0.002 + 2e-5 * TOKENS, rel=1e-12)
    assert one.backward_s.sum() == pytest.approx(0.003 + 3e-5 * TOKENS, rel=1e-12)
    # The block unsharded plus what the split added, measured; nothing of the roofline's split.
    # The addition is sync time: neither a rank's speed nor its noise scales it (it was timed on
    # both ranks through their collectives, the wait for the slower one in it).
    assert two.forward_s.sum() == pytest.approx(one.forward_s.sum(), rel=1e-12)
    assert two.backward_s.sum() == pytest.approx(one.backward_s.sum(), rel=1e-12)
    assert two.sync_forward_s.sum() == pytest.approx(n * extra_f, rel=1e-12)
    assert two.sync_backward_s.sum() == pytest.approx(n * extra_b, rel=1e-12)
    assert one.sync_forward_s is None
    sc = _sc(tp=2)
    sc = dataclasses.replace(sc, noise=dataclasses.replace(sc.noise, distribution="none"))
    fast, slow = (simulate_3d(sc, None, factors=np.full((1, 1), f), costs=two).pipeline_s for f in (1.0, 2.0))
    m = sc.training.grad_accum
    assert fast == pytest.approx(m * (two.forward_s.sum() + two.backward_s.sum() + n * (extra_f + extra_b)))
    assert slow - fast == pytest.approx(m * (two.forward_s.sum() + two.backward_s.sum()))
    pp = calibrated_costs(_sc(pp=2), _calib(tp_block=probed))
    assert pp.p2p_s == pytest.approx(send)
    assert calibrated_costs(_sc(pp=2), _calib()).p2p_s == step_costs(_sc(pp=2), layout(_sc(pp=2))).p2p_s
    # Another TP degree than the probe's: the roofline's split of the bare model, no 2-way extra.
    other = calibrated_costs(_sc(tp=2), _calib(tp_block=_probed(extra_f, extra_b, send, tp=4)))
    assert other.sync_forward_s is None
    assert other.forward_s.sum() < one.forward_s.sum() + n * extra_f


def test_tp_block_fits_a_line_through_the_probed_sizes():
    pts = [[128.0, 0.004, 0.006, -1.0, 0.01, 0.02], [32.0, 0.002, 0.002, -1.0, 0.006, 0.008]]
    probed = TpBlock(tp=2, points=pts, samples=4, source="t")
    f, b, send = probed.at(64.0)
    assert (f, b, send) == (pytest.approx(0.002 + 0.002 / 3), pytest.approx(0.002 + 0.004 / 3), None)
    assert probed.at(1000.0)[:2] == pytest.approx((0.004, 0.006))  # no extrapolation of a latency
    assert probed.at(1.0)[:2] == pytest.approx((0.002, 0.002))
    assert probed.model_fit(4) == pytest.approx((0.006 - 32 * 0.004 / 96, 0.004 / 96))
    falling = TpBlock(tp=2, points=[[32.0, 0, 0, -1.0, 0.01, 0.01], [64.0, 0, 0, -1.0, 0.008, 0.01]], samples=4,
                      source="t")  # fmt: skip
    assert falling.model_fit(4) == pytest.approx((0.009, 0.0))  # noise, not a negative cost per token


def test_the_optimizer_goes_by_parameter_tensors():
    calib = _calib()
    opt = calib.compute.optimizer_s.value
    assert calibrated_costs(_sc(tp=2), calib).optimizer_s == pytest.approx([opt])  # every tensor, sharded
    pp = calibrated_costs(_sc(pp=2), calib).optimizer_s
    assert pp.sum() == pytest.approx(opt)
    shape = model_shape("llama-tiny")
    tensors = stage_tensors(shape, [1, 1])
    assert tensors.sum() == len(param_tensors(shape))
    assert list(pp / opt) == pytest.approx(list(tensors / tensors.sum()))


def test_a_gloo_send_costs_gloos_hop():
    # One of gloo's ring steps (a TCP message), not the preset PCIe hop of a few microseconds.
    sc = _sc(pp=2)
    size = 2 * 32 * 64 * 4
    bw = fabric_for(sc).intra_busbw_gb_s * 1e9
    assert step_costs(sc, layout(sc)).p2p_s == pytest.approx(150e-6 + size / bw, rel=1e-12)
    slower = _sc(pp=2, gloo_hop_latency_us=400.0)
    assert step_costs(slower, layout(slower)).p2p_s == pytest.approx(400e-6 + size / bw, rel=1e-12)


# --- the pipeline probe (realrun/probe_pp.py): torch.distributed.pipelining's cost per action ---


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("a_true", [0.0007, 0.002])
def test_the_action_cost_is_what_the_replay_needs(schedule, a_true):
    # Unequal stages, 8 micro-batches: the step a known per-action cost gives comes back as that cost.
    f, b = np.array([0.001, 0.0015]), np.array([0.002, 0.0018])
    step = run_pipeline(schedule, 2, 8, 1, (f + a_true)[:, None], (b + a_true)[:, None], 0.0).makespan_s
    assert pipeline_action_s(schedule, f, b, 8, step) == pytest.approx(a_true, rel=1e-9)
    bare = run_pipeline(schedule, 2, 8, 1, f[:, None], b[:, None], 0.0).makespan_s
    assert pipeline_action_s(schedule, f, b, 8, bare * 0.9) == 0.0  # nothing beyond compute and the bubble


@pytest.mark.parametrize("a_true", [0.0007, 0.002])
def test_the_interleaved_action_cost_is_what_the_replay_of_its_chunks_needs(a_true):
    # 2 stages x 2 chunks, unequal (the end chunks hold the embedding and the output layer), 8
    # micro-batches, from records as realrun/probe_pp.py writes them: per stage the chunk times.
    f = np.array([[0.0004, 0.0011], [0.0010, 0.0006]])
    b = np.array([[0.0007, 0.0020], [0.0019, 0.0012]])
    step = run_pipeline("interleaved", 2, 8, 2, f + a_true, b + a_true, 0.0).makespan_s
    assert pipeline_action_s("interleaved", f, b, 8, step) == pytest.approx(a_true, rel=1e-9)
    rows = [
        {"schedule": "interleaved", "pp": 2, "stage": st, "virtual": 2, "micro_batches": 8, "micro_batch": 2,
         "seq_len": 32, "tokens": 64, "pipeline_s": step, "forward_s": f[st].sum() * 8, "backward_s": b[st].sum() * 8,
         "chunk_forward_s": list(f[st] * 8), "chunk_backward_s": list(b[st] * 8), "iter": it}
        for it in range(3) for st in (0, 1)
    ]  # fmt: skip
    fit = pp_schedules_fit([_Probe({0: {"pp_schedule": rows}})])["interleaved"]
    assert (fit.pp, fit.virtual, fit.micro_batches) == (2, 2, 8)
    assert fit.action_at(64) == pytest.approx(a_true, rel=1e-6)
    del rows[0]["chunk_forward_s"]
    with pytest.raises(ValueError, match="pp_schedule.chunk_forward_s: expected 2 chunk times"):
        pp_schedules_fit([_Probe({0: {"pp_schedule": rows}})])


class _Probe:
    """What pp_schedules_fit reads of a run: its records by type, every rank's."""

    def __init__(self, records):
        self.records = records

    def of(self, kind):
        return [r for rank in sorted(self.records) for r in self.records[rank].get(kind, [])]


def _pp_records(a_by_tokens: dict[int, float], schedule="1f1b", m=8, iters=5):
    """Records of a 2-rank pipeline probe whose steps last what the replay gives with a known action cost."""
    records = {0: {"pp_schedule": []}, 1: {"pp_schedule": []}}
    for tokens, a in a_by_tokens.items():
        f, b = np.array([1e-5, 1.2e-5]) * tokens, np.array([2e-5, 2.1e-5]) * tokens
        step = run_pipeline(schedule, 2, m, 1, (f + a)[:, None], (b + a)[:, None], 0.0).makespan_s
        for it in range(iters):
            for st in (0, 1):
                jitter = 1.0 + 0.2 * (it == 0) * (st == 1)  # one slow iteration on one stage: the median ignores it
                records[st]["pp_schedule"].append(
                    {"schedule": schedule, "pp": 2, "stage": st, "micro_batches": m, "micro_batch": tokens // 32,
                     "seq_len": 32, "tokens": tokens, "pipeline_s": step * jitter, "forward_s": f[st] * m,
                     "backward_s": b[st] * m, "iter": it}
                )  # fmt: skip
    return [_Probe(records)]


def test_the_fit_recovers_each_sizes_action_cost_and_draws_a_line_through_them():
    fit = pp_schedules_fit(_pp_records({32: 0.0006, 64: 0.0008, 128: 0.0012}))
    (probed,) = fit.values()
    assert fit.keys() == {"1f1b"} and probed.pp == 2 and probed.micro_batches == 8
    assert [p[1] for p in probed.points] == pytest.approx([0.0006, 0.0008, 0.0012], rel=1e-6)
    assert probed.action_at(96.0) == pytest.approx(0.001, rel=1e-6)  # on the line 0.4 ms + 6.25 us x tokens
    assert probed.action_at(4096.0) == pytest.approx(0.0012, rel=1e-6)  # held at the largest probed size
    with pytest.raises(ValueError, match="pp_schedule.schedule: 'zb'"):
        pp_schedules_fit(_pp_records({32: 0.001}, schedule="zb"))


def test_the_probed_action_cost_is_sync_time_and_replaces_the_sends():
    probed = PpSchedule(pp=2, micro_batches=8, points=[[64.0, 0.001, 0.05]], samples=10, source="t")
    for schedule in ("gpipe", "1f1b"):
        bare, calib = _calib(), _calib(pp_schedules={schedule: probed})
        sc = _sc(pp=2, schedule=schedule)
        without, with_ = calibrated_costs(sc, bare), calibrated_costs(sc, calib)
        assert with_.p2p_s == 0.0 and without.p2p_s > 0
        assert with_.sync_forward_s == pytest.approx(np.full((2, 1), 0.001))
        assert with_.sync_backward_s == pytest.approx(np.full((2, 1), 0.001))
        assert with_.forward_s == pytest.approx(without.forward_s)
        # The records count the stage's own compute only: the framework's work is in the wait.
        p0, p1 = predict_3d(_data(sc), bare, steps=3), predict_3d(_data(sc), calib, steps=3)
        assert p1["compute_s"] == pytest.approx(p0["compute_s"], rel=1e-12)
        assert p1["mean_s"] > p0["mean_s"]
    # Another schedule's or another depth's probe is not this run's.
    assert calibrated_costs(_sc(pp=2, schedule="gpipe"), _calib(pp_schedules={"1f1b": probed})).p2p_s > 0


def test_the_interleaved_probe_applies_to_its_own_chunks_only():
    # 2 stages x 2 chunks, 4 micro-batches: the action cost on every chunk's forward and backward
    # as sync time, out of the compute the records count (2 m v actions a stage), and a probe at
    # another number of chunks not this run's.
    probed = PpSchedule(pp=2, virtual=2, micro_batches=8, points=[[64.0, 0.001, 0.05]], samples=10, source="t")
    data = _data(_sc(pp=2, schedule="interleaved"))
    data["training"] |= {"pp_schedule": "interleaved", "pp_virtual_stages": 2}
    sc = scenario_from_dict(data)
    bare, calib = _calib(), _calib(pp_schedules={"interleaved": probed})
    with_ = calibrated_costs(sc, calib)
    assert with_.sync_forward_s == pytest.approx(np.full((2, 2), 0.001)) and with_.p2p_s == 0.0
    p0, p1 = predict_3d(data, bare, steps=3), predict_3d(data, calib, steps=3)
    assert p1["compute_s"] == pytest.approx(p0["compute_s"], rel=1e-12) and p1["mean_s"] > p0["mean_s"]
    other = _calib(pp_schedules={"interleaved": dataclasses.replace(probed, virtual=3)})
    assert calibrated_costs(sc, other).sync_forward_s is None


def _data(sc) -> dict:
    return {
        "ranks": 2, "steps": 1, "seed": 0, "model": {"preset": "llama-tiny"},
        "training": {"micro_batch_size": 2, "seq_len": 32, "grad_accum": 4, "precision": "fp32", "tp": 1, "pp": 2,
                     "pp_schedule": sc.training.pp_schedule, "overlap": False},
        "network": {"backend": "gloo", "gpus_per_node": 2, "intra_link": "pci", "intra_gb_s": 1.0,
                    "gloo_hop_latency_us": 150.0},
        "compute": {"optimizer_s": 0.002}, "noise": {"distribution": "none"},
    }  # fmt: skip
