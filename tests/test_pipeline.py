"""The pipeline replay (sim/pipeline.py) held to the closed forms of Narayanan et al. 2021,
Korthikanti et al. 2022 and Qi et al. 2023 (ZB-H1), and a slow stage to what the event model says
it costs."""

import numpy as np
import pytest

from sim.pipeline import (
    W_SHARE,
    B,
    F,
    W,
    bubble_fraction,
    in_flight_closed_form,
    ops_per_stage,
    run_pipeline,
    stage_ops,
)

CASES = [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 8, 3, 1), ("1f1b", 1, 5, 1),
         ("interleaved", 4, 8, 2), ("interleaved", 4, 12, 3), ("interleaved", 2, 4, 4)]  # fmt: skip


def _equal(schedule, p, m, v, f=1.0, b=2.0):
    chunks = v if schedule == "interleaved" else 1
    return np.full((p, chunks), f / chunks), np.full((p, chunks), b / chunks)


@pytest.mark.parametrize("schedule,p,m,v", CASES)
def test_bubble_of_equal_stages_is_the_closed_form(schedule, p, m, v):
    fwd, bwd = _equal(schedule, p, m, v)
    run = run_pipeline(schedule, p, m, v, fwd, bwd, 0.0)
    chunks = v if schedule == "interleaved" else 1
    # makespan = m (f + b) + (p - 1)(f + b) / v: the bubble (p - 1) / (v m + p - 1) of the step.
    assert run.makespan_s == pytest.approx(m * 3.0 + (p - 1) * 3.0 / chunks, rel=1e-12)
    assert run.idle_s / run.makespan_s == pytest.approx(np.full(p, bubble_fraction(schedule, p, m, v)), rel=1e-9)
    assert bubble_fraction("1f1b", p, m) == (p - 1) / (m + p - 1)


@pytest.mark.parametrize("schedule,p,m,v", CASES)
def test_activations_in_flight_are_the_closed_form(schedule, p, m, v):
    fwd, bwd = _equal(schedule, p, m, v)
    run = run_pipeline(schedule, p, m, v, fwd, bwd, 0.0)
    assert list(run.peak_in_flight) == [in_flight_closed_form(schedule, p, m, v, i) for i in range(p)]
    if schedule == "interleaved" and m >= p:
        # Korthikanti et al. 2022, Sec. 4.2.3: the first stage holds (1 + (p - 1)/(p v)) x L / p
        # layers' worth for each of p micro-batches: chunks of L / (p v) layers.
        assert run.peak_in_flight[0] / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


@pytest.mark.parametrize("schedule,p,m,v", CASES)
def test_every_stage_runs_each_micro_batch_once_each_way(schedule, p, m, v):
    chunks = v if schedule == "interleaved" else 1
    for i in range(p):
        ops = stage_ops(schedule, p, m, v, i)
        assert sorted((o.micro_batch, o.chunk) for o in ops if o.kind == F) == [
            (j, c) for j in range(m) for c in range(chunks)
        ]
        assert len([o for o in ops if o.kind == B]) == m * chunks


def test_sends_between_stages_add_to_the_critical_path():
    fwd, bwd = _equal("1f1b", 4, 8, 1)
    base = run_pipeline("1f1b", 4, 8, 1, fwd, bwd, 0.0).makespan_s
    # The fill and the drain cross p - 1 links each way: 2 (p - 1) sends at least.
    assert run_pipeline("1f1b", 4, 8, 1, fwd, bwd, 0.1).makespan_s >= base + 2 * 3 * 0.1 - 1e-12


def test_a_slow_stage_costs_what_the_event_model_says_and_idles_least():
    p, m, k = 4, 8, 2.0
    fwd, bwd = _equal("gpipe", p, m, 1)
    slow_f, slow_b = fwd.copy(), bwd.copy()
    slow_f[1] *= k
    slow_b[1] *= k
    gpipe = run_pipeline("gpipe", p, m, 1, slow_f, slow_b, 0.0)
    # GPipe: the slow stage is the bottleneck both ways: m k (f + b) + the others' (f + b) once.
    assert gpipe.makespan_s == pytest.approx(m * k * 3.0 + (p - 1) * 3.0)
    one = run_pipeline("1f1b", p, m, 1, slow_f, slow_b, 0.0)
    # 1F1B, by hand: stage 1 starts after stage 0's forward (1), runs F0..F2 (6), waits for
    # B0 to come back from stages 3 and 2 (2), then is busy to the end (m k (f + b) - 6), and
    # stage 0's last backward (2) follows: 1 + 48 + 2 + 2 = 53.
    assert one.makespan_s == pytest.approx(53.0)
    assert int(np.argmin(one.idle_s)) == 1


# --- ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241) ---

ZB_CASES = [(2, 4), (4, 4), (4, 8), (3, 5), (8, 16), (8, 9)]


@pytest.mark.parametrize("p,m", ZB_CASES)
def test_zb_h1_bubble_is_the_papers_closed_form(p, m):
    # T_F = 1 and a backward of 2 split into T_B = T_W = 1: the step m (T_F + T_B + T_W) plus the
    # bubble (p - 1)(T_F + T_B - T_W) = p - 1, where 1F1B's is (p - 1)(T_F + T_B + T_W) = 3 (p - 1).
    assert W_SHARE == 0.5
    fwd, bwd = _equal("1f1b", p, m, 1)
    zb = run_pipeline("zb-h1", p, m, 1, fwd, bwd, 0.0)
    assert zb.makespan_s == pytest.approx(3.0 * m + (p - 1), rel=1e-12)
    assert run_pipeline("1f1b", p, m, 1, fwd, bwd, 0.0).makespan_s == pytest.approx(3.0 * m + 3.0 * (p - 1))
    assert zb.idle_s / zb.makespan_s == pytest.approx(np.full(p, bubble_fraction("zb-h1", p, m)), rel=1e-9)
    assert zb.busy_s == pytest.approx(np.full(p, 3.0 * m))  # the split costs no time of its own


@pytest.mark.parametrize("p,m", ZB_CASES)
def test_zb_h1_holds_1f1bs_activations_and_runs_each_part_once(p, m):
    fwd, bwd = _equal("1f1b", p, m, 1)
    zb = run_pipeline("zb-h1", p, m, 1, fwd, bwd, 0.0)
    assert list(zb.peak_in_flight) == [in_flight_closed_form("1f1b", p, m, 1, i) for i in range(p)]
    for i in range(p):
        ops = stage_ops("zb-h1", p, m, 1, i)
        assert len(ops) == ops_per_stage("zb-h1", m) == 3 * m
        for kind in (F, B, W):
            assert [o.micro_batch for o in ops if o.kind == kind] == list(range(m))
        # A micro-batch's W after its own B (nothing else waits for W).
        assert all(ops.index(o) > ops.index(o._replace(kind=B)) for o in ops if o.kind == W)


def test_zb_h1_lemon_stage_is_still_the_bottleneck():
    # A stage at 2x: ZB-H1 cannot hide a slow stage's work, only the drain's waits; it is never
    # slower than 1F1B and the slow stage idles least.
    p, m, k = 4, 8, 2.0
    fwd, bwd = _equal("1f1b", p, m, 1)
    fwd[1] *= k
    bwd[1] *= k
    zb, one = (run_pipeline(s, p, m, 1, fwd, bwd, 0.0) for s in ("zb-h1", "1f1b"))
    assert m * k * 3.0 < zb.makespan_s <= one.makespan_s
    assert int(np.argmin(zb.idle_s)) == 1
