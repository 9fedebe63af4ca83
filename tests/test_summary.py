"""The typed summary record (sim/summary.py): what one simulated scale reports, read by the
JSON, the CSV, the tables and the plots. Its parts add up to the step (sim/results.py), its
JSON holds every field under the same name in the field order, and a number that is not finite
never gets into one."""

import json
import math
from dataclasses import fields, replace

import pytest

from output.export import SUMMARY_COLUMNS
from sim.engine import simulate
from sim.scenario_file import load_scenario
from sim.summary import StepTimeS, Summary


@pytest.fixture(scope="module")
def summary() -> Summary:
    return simulate(load_scenario("straggler-lemon", ranks=32, steps=30)).summary()


def test_the_step_splits_into_its_parts(summary):
    # sim/results.py: step = dataloader + compute + optimizer + exposed comm + straggler wait, per
    # rank and step, so their means add up to the mean step; efficiency is the busy share of it.
    s = summary
    parts = s.compute_s + s.dataloader_s + s.optimizer_s + s.exposed_comm_s + s.straggler_wait_s
    assert parts == pytest.approx(s.step_time_s.mean, rel=1e-9)
    busy = s.compute_s + s.dataloader_s + s.optimizer_s
    assert s.scaling_efficiency == pytest.approx(busy / s.step_time_s.mean, rel=1e-12)
    assert s.comm_compute_ratio == pytest.approx(s.comm_s / s.compute_s, rel=1e-12)
    t = s.step_time_s
    assert t.p5 <= t.p50 <= t.p95 <= t.p99 and t.p5 <= t.mean <= t.p99
    assert s.slowest_rank_compute_s >= s.compute_s  # the slowest rank is at least the mean


def test_json_is_every_field_in_order_and_leaves_out_what_simulate_did_not_add(summary):
    d = summary.to_json_dict()
    extras = ("memory_gib", "episodes", "calibration", "parameters", "to_train", "record")
    assert list(d) == [f.name for f in fields(Summary) if f.name not in extras]
    assert d["step_time_s"] == {"mean": summary.step_time_s.mean, "p5": summary.step_time_s.p5,
                                "p50": summary.step_time_s.p50, "p95": summary.step_time_s.p95,
                                "p99": summary.step_time_s.p99}  # fmt: skip
    json.dumps(d, allow_nan=False)  # standard JSON as it stands
    with_memory = replace(summary, memory_gib={"total_gib": 1.5}, to_train={"days": 2.0})
    assert list(with_memory.to_json_dict())[-2:] == ["memory_gib", "to_train"]


def test_the_csv_columns_read_the_record(summary):
    row = {h: f(summary) for h, f in SUMMARY_COLUMNS}
    assert row["step_time_p95_s"] == summary.step_time_s.p95 and row["ranks"] == 32
    assert row["memory_total_gib"] == ""  # the engine's own summary has no memory estimate
    assert {h: f(replace(summary, memory_gib={"total_gib": 3.25})) for h, f in SUMMARY_COLUMNS}[
        "memory_total_gib"
    ] == 3.25


@pytest.mark.parametrize("field, value", [("tokens_per_s", math.inf), ("comm_s", math.nan)])
def test_a_number_that_is_not_finite_is_refused_naming_the_field(summary, field, value):
    with pytest.raises(ValueError, match=f"summary {field}: {value} is not a finite number"):
        replace(summary, **{field: value})


def test_a_step_time_that_is_not_finite_is_refused(summary):
    bad = StepTimeS(mean=1.0, p5=1.0, p50=1.0, p95=math.nan, p99=1.0)
    with pytest.raises(ValueError, match="summary step_time_s"):
        replace(summary, step_time_s=bad)
