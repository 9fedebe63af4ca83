"""The pipeline replay (sim/pipeline.py) held to the closed forms of Narayanan et al. 2021 and
Korthikanti et al. 2022, and a slow stage to what the event model says it costs."""

import numpy as np
import pytest

from sim.pipeline import B, F, bubble_fraction, in_flight_closed_form, run_pipeline, stage_ops

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
