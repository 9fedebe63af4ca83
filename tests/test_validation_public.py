"""The presets against the public record (calibrate/public.py, docs/validation-public.md):
every row recomputed and held to its stated tolerance; the issue's own acceptance bands;
and no row bends a constant."""

import json

import pytest

from calibrate.public import _rows, evaluate, public_table
from sim.collectives import algbw_busbw_gb_s, collective_cost
from sim.scenario_file import load_scenario
from sim.workload import fabric_for

ROWS = _rows()
GOAL_COLLECTIVE_SMALL, GOAL_COLLECTIVE, GOAL_STEP = 0.25, 0.15, 0.15


@pytest.mark.parametrize("row", ROWS, ids=[r.what for r in ROWS])
def test_row_within_its_stated_bound(row):
    r = evaluate(row)
    assert r.ok, f"{row.what}: predicted {r.predicted:.4g} {row.unit}, error {r.error:+.1%}, bound {row.bound:.0%}"


def test_a_bound_wider_than_the_goal_says_why():
    for row in ROWS:
        if row.bound == 0:
            continue
        small = row.unit == "us" or "KiB" in row.what or " B " in row.what
        goal = GOAL_STEP if row.unit == "s" else (GOAL_COLLECTIVE_SMALL if small else GOAL_COLLECTIVE)
        assert row.bound == goal or row.note, row.what
        assert row.bound <= 0.65, row.what  # none may drift further than this


def busbw(preset, ranks, size):
    c = collective_cost("allreduce", size, fabric_for(load_scenario(preset, ranks=ranks)))
    return algbw_busbw_gb_s("allreduce", size, c.time_s, ranks)[1]


def test_two_h100_nodes_1_mib_inside_the_published_range():
    assert 10.0 <= busbw("h100-1024", 16, 1 << 20) <= 22.0


@pytest.mark.parametrize("ranks", [32, 64, 128, 256, 512, 1024])
@pytest.mark.parametrize("size", [1 << 30, 4 << 30, 16 << 30])
def test_large_allreduce_across_h100_nodes_inside_340_377(ranks, size):
    assert 340.0 <= busbw("h100-1024", ranks, size) <= 377.0


def test_no_row_bends_a_constant():
    """A row may pick the preset, the rank count, the size, force an algorithm (as the run it
    compares with did), or describe the measured job (llm.c's model, batch, precision and its
    ZeRO-1 optimizer); nothing else of the platform."""
    allowed = ("network.algorithm=", "model.preset=", "training.", "compute.stack=", "compute.optimizer_s=")
    for row in ROWS:
        words = row.command.split()
        sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
        assert all(s.startswith(allowed) for s in sets), (row.what, sets)


def test_cli_prints_the_same_table(ddplab):
    code, out, err = ddplab("validate", "--public", "--json")
    assert code == 0, err
    rows = json.loads(out)
    lib = public_table()
    assert [r["what"] for r in rows] == [r.row.what for r in lib]
    assert [r["predicted"] for r in rows] == pytest.approx([r.predicted for r in lib], rel=1e-12)
    assert all(r["within"] for r in rows)
    code, _, err = ddplab("validate", "--public", "--calib", "x.json")
    assert code == 2 and "--public: takes no RUN_DIR or --calib" in err
