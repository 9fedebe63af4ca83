"""The fast engine (sim/engine.py, a vectorised recurrence) and the SimPy reference
(sim/reference.py, a process per rank and per bucket collective) give the same numbers, to
1e-12 of the step time, on every preset at up to 64 ranks, with and without interference.
tests/test_engine_golden.py pins the fast engine to frozen arrays, so a change to either
engine alone fails here or there."""

import numpy as np
import pytest

from sim.engine import simulate
from sim.online import RANK_FIELDS
from sim.reference import simulate_reference
from sim.scenario_file import load_scenario, scenario_data

PRESETS = [
    "a100-8", "h100-1024", "h100-16k", "h100-64k", "homelab-10gbe", "homelab-1gbe", "llama3-8b-1024",
    "mi300x-1024", "straggler-dataloader", "straggler-failslow", "straggler-gc", "straggler-jitter",
    "straggler-lemon", "straggler-throttle",
]  # fmt: skip
INTERFERENCE = {
    "h100-1024 gamma=0.1 straggler": ("h100-1024", ["compute.interference_gamma=0.1", "stragglers=17:1.4"]),
    "a100-8 gamma=0.5": ("a100-8", ["compute.interference_gamma=0.5"]),
    "homelab-1gbe accum=3 gamma=0.6": ("homelab-1gbe", ["training.grad_accum=3", "compute.interference_gamma=0.6"]),
    "straggler-gc gamma=0.1": ("straggler-gc", ["compute.interference_gamma=0.1"]),
    "mi300x-1024 no overlap gamma=0.3": ("mi300x-1024", ["training.overlap=false", "compute.interference_gamma=0.3"]),
    # A rank late before its forward (a trace calibration's host_delays_s) with interference bending it.
    "homelab-1gbe host delay gamma=0.2": ("homelab-1gbe", ["host_delays_s=1:0.004", "compute.interference_gamma=0.2"]),
    # Measured jitter drawn by each bucket's size (sim/noise.py SizePools), as a calibration sets it.
    "homelab-1gbe sized jitter gamma=0.2": (
        "homelab-1gbe",
        [
            "network.jitter_samples=[0.7, 1.4, 0.9, 1.2, 0.98, 1.02, 1.0, 1.05]",
            "network.jitter_samples_bytes=[4194304, 4194304, 4194304, 4194304, 67108864, 67108864, 67108864, 67108864]",
            "compute.interference_gamma=0.2",
        ],
    ),
}
REL = 1e-12


def _scenario(preset: str, sets: list[str], steps: int):
    ranks = min(64, scenario_data(preset).get("ranks", 1))
    return load_scenario(preset, sets, ranks=ranks, steps=steps)


def assert_same(sc) -> None:
    fast, ref = simulate(sc, records=True), simulate_reference(sc, records=True)
    tol = REL * float(fast.step_time_s.max())
    for k in ("step_time_s", "step_end_s", "comm_busy_s"):
        np.testing.assert_allclose(getattr(ref, k), getattr(fast, k), rtol=REL, atol=0, err_msg=k)
    for k in RANK_FIELDS:
        np.testing.assert_allclose(ref.record(k), fast.record(k), rtol=REL, atol=tol, err_msg=k)


@pytest.mark.parametrize("preset", PRESETS)
def test_reference_and_fast_engine_agree_on_every_preset(preset):
    assert_same(_scenario(preset, [], steps=6))


@pytest.mark.parametrize("case", INTERFERENCE)
def test_reference_and_fast_engine_agree_with_interference(case):
    """Each rank's compute slows while a collective runs: the reference's ranks wait for their
    work or a change of the stream; the fast engine bends the lines (sim/ready.py ReadyBent)."""
    preset, sets = INTERFERENCE[case]
    assert_same(_scenario(preset, sets, steps=4))


def test_the_reference_refuses_large_or_sharded_jobs_in_one_line():
    with pytest.raises(ValueError, match=r"^--engine simpy: 1024 ranks is over its limit of 256 \(sim/limits.py"):
        simulate_reference(load_scenario("h100-1024", steps=1))
    with pytest.raises(ValueError, match="training.mode=fsdp runs on --engine fast"):
        simulate_reference(load_scenario("h100-1024", ["training.mode=fsdp"], ranks=8, steps=1))


def test_simulate_engine_simpy_prints_the_fast_engines_numbers(capsys):
    from conftest import in_process

    argv = ("simulate", "straggler-lemon", "--ranks", "32", "--steps", "4", "--json")
    code, fast, _ = in_process(capsys, *argv)
    code_ref, ref, _ = in_process(capsys, *argv, "--engine", "simpy")
    assert code == code_ref == 0
    import json

    a, b = json.loads(fast), json.loads(ref)
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=REL)
    code, _, err = in_process(capsys, "simulate", "h100-1024", "--engine", "simpy", "--steps", "2")
    assert code == 2 and err.splitlines() == [
        "ddplab simulate: error: --engine simpy: 1024 ranks is over its limit of 256 (sim/limits.py"
        " REFERENCE_MAX_RANKS: a process per rank and per bucket); use --engine fast"
    ]
    argv = ("simulate", "h100-1024", "--ranks", "64", "--steps", "2", "--set", "training.tp=8")
    code, _, err = in_process(capsys, *argv, "--engine", "simpy")
    assert code == 2 and err.splitlines() == [
        "ddplab simulate: error: --engine simpy: the reference models DDP; tp, pp and zero1 run sim/parallel3d.py"
    ]


def test_the_fast_path_has_no_simpy():
    """The fast engines are plain recurrences: no module on their path imports SimPy (no event
    that nothing waits on); the reference and the campaigns do."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "sim"
    for name in ("engine", "ready", "busy", "fsdp", "hsdp", "online", "results", "episodes", "workload", "loader"):
        tree = ast.parse((root / f"{name}.py").read_text())
        imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "simpy" not in imported, name
