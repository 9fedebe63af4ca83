"""NCCL's own buffers, which no memory estimate here counts (sim/memory_fit.py
NCCL_BYTES_PER_COMMUNICATOR): a fit with less spare than they take is called tight, by simulate
where its memory line is and by plan on each layout, which then names the fastest layout with that
room."""

import json

import pytest

from sim.memory import GIB
from sim.memory_fit import NCCL_BYTES_PER_COMMUNICATOR, Fit, communicators, fit
from sim.scenario_file import load_scenario
from tests.conftest import in_process

LLAMA70 = ["model.preset=llama3-70b", "training.seq_len=0"]
PER = NCCL_BYTES_PER_COMMUNICATOR / GIB  # 1.49 GiB


@pytest.mark.parametrize(
    "preset,ranks,sets,expected",
    [
        ("h100-1024", 64, [], 1),  # DDP: the world's group
        ("h100-1024", 1, [], 0),  # one rank runs no collective
        ("homelab-1gbe", 2, [], 0),  # gloo: no NCCL
        ("h100-1024", 64, ["training.mode=fsdp"], 1),
        ("h100-1024", 64, ["training.mode=hsdp"], 2),  # shard groups of 8 in a node, replicas of 8 across
        ("h100-1024", 8, ["training.mode=hsdp"], 1),  # one node: the shard group is everyone
        ("h100-1024", 1024, [*LLAMA70, "training.tp=4", "training.pp=4", "training.mode=fsdp"], 3),
        ("h100-1024", 1024, [*LLAMA70, "training.tp=8", "training.mode=fsdp"], 2),  # no pipeline group
        # shard groups of 8 / tp = 2 in a node, replicas of 16 across: tp, pp, shard and replica
        ("h100-1024", 1024, [*LLAMA70, "training.tp=4", "training.pp=4", "training.mode=hsdp"], 4),
        ("h100-1024", 1024, [*LLAMA70, "training.tp=8", "training.pp=4", "training.mode=hsdp"], 3),  # shard 1
        ("h100-1024", 32, [*LLAMA70, "training.tp=8", "training.pp=4", "training.mode=fsdp"], 2),  # dp 1
    ],
)
def test_communicators_are_the_groups_of_more_than_one_rank(preset, ranks, sets, expected):
    assert communicators(load_scenario(preset, sets, ranks=ranks)) == expected


def test_tight_is_a_fit_with_less_spare_than_the_communicators_take():
    assert Fit(78.5, 79.65, False, 1).tight and not Fit(77.6, 79.65, False, 1).tight  # 1.15, 2.05 against 1.49
    assert not Fit(79.0, 79.65, False, 0).tight  # gloo or one rank: nothing of NCCL's
    assert Fit(74.5, 79.65, False, 4).tight and not Fit(74.5, 79.65, False, 3).tight  # 5.15 against 5.96, 4.47
    assert not Fit(80.0, 79.65, False, 1).tight  # over is not tight: it does not fit
    assert not Fit(77.6, 0.0, False, 1).tight  # no device to check against


def test_simulate_says_tight_with_the_spare_where_the_memory_line_is(capsys):
    sets = ["--set", "training.mode=fsdp", "--steps", "3"]
    sc = load_scenario("llama3-8b-1024", ["training.mode=fsdp"])
    device = fit(sc).total_gib + 0.5  # half a GiB spare, one communicator
    code, out, err = in_process(capsys, "simulate", "llama3-8b-1024", *sets, "--device-gib", str(device))
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("memory/GPU"))
    assert f"fits {device:g} GiB; tight: 0.50 GiB spare" in line
    assert f"about {PER:.1f} GiB for its 1 communicator " in line
    code, out, _ = in_process(capsys, "simulate", "llama3-8b-1024", *sets, "--device-gib", str(device + 1.0), "--json")
    m = json.loads(out)["memory_gib"]
    assert code == 0 and m["fits"] and not m["tight"] and m["nccl_communicators"] == 1


def test_a_3d_step_says_tight_with_its_peak_stages_spare(capsys):
    keys = [*LLAMA70, "training.tp=4", "training.pp=4", "training.micro_batch_size=1", "training.grad_accum=16",
            "training.mode=fsdp", "training.sequence_parallel=true", "training.pp_schedule=zb-h1"]  # fmt: skip
    argv = ["simulate", "h100-1024", "--ranks", "1024", "--steps", "2", *(x for k in keys for x in ("--set", k))]
    code, out, err = in_process(capsys, *argv, "--json")
    assert code == 0, err
    s = json.loads(out)
    spare = 79.65 - s["peak_memory_gib"]
    assert spare < 3 * PER  # the premise: the 70B's zb-h1 layout leaves less than 4.47 GiB
    assert s["memory_tight"] == {"spare_gib": pytest.approx(spare), "nccl_communicators": 3}
    code, out, _ = in_process(capsys, *argv)
    assert f"tight: {spare:.2f} GiB spare" in out and f"about {3 * PER:.1f} GiB for its 3 communicators" in out


def test_plan_marks_tight_layouts_and_names_the_fastest_with_room(capsys):
    code, out, err = in_process(capsys, "plan", "llama3-70b", "h100-1024", "--json")
    assert code == 0, err
    rows = json.loads(out)["layouts"]
    for r in rows:  # tight means the memory plus NCCL's buffers for its groups exceeds the H100's
        assert r["tight"] == (r["memory_gib"] + r["nccl_communicators"] * PER > 79.65), r
    roomy = next(r for r in rows if not r["tight"])
    assert rows[0]["tight"] and roomy is not rows[0]  # the premise of the line below
    code, out, _ = in_process(capsys, "plan", "llama3-70b", "h100-1024")
    table = out.splitlines()
    assert sum(" GiB! " in x for x in table) == sum(r["tight"] for r in rows)
    best_roomy = next(x for x in table if x.startswith("  best with that room: "))
    assert best_roomy.endswith(" ".join(f"--set {k}" for k in roomy["sets"]))
