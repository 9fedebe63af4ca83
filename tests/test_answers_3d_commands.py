"""Tensor-, context- and pipeline-parallel and zero1 jobs beyond `simulate` and `plan`: their
memory is the 3D model's wherever a command checks it (sim/memory_fit.py), `whatif` simulates
them as `simulate` does, and `compare` and `sweep`, which run the DDP/FSDP engine only, refuse
them in one line instead of simulating them as if they had no TP, PP or distributed optimizer.
(Before: `whatif` put an 8B FSDP job at TP 8 at 119 GiB per GPU and, with --ignore-memory,
simulated it without its TP: 0.331 s a step against simulate's 0.179 s.)"""

import json

import pytest

from sim.memory import estimate_memory
from sim.memory_fit import fit
from sim.parallel3d import layout, memory_by_stage, step_costs
from sim.scenario_file import load_scenario
from sim.steps3d import simulate_3d_steps
from tests.conftest import in_process

TP8 = ["model.preset=llama3-8b", "training.tp=8", "training.sequence_parallel=true", "training.micro_batch_size=1"]


def _sets(*sets):
    return [w for s in sets for w in ("--set", s)]


@pytest.mark.parametrize(
    "sets",
    [
        [*TP8, "training.mode=fsdp"],
        [*TP8, "training.mode=zero1", "training.grad_accum=4"],
        ["model.preset=llama3-8b", "training.mode=zero1", "training.micro_batch_size=1"],
        ["model.preset=llama3-70b", "training.mode=fsdp", "training.tp=8", "training.pp=4", "training.grad_accum=8",
         "training.sequence_parallel=true", "training.micro_batch_size=1"],
    ],
)  # fmt: skip
def test_a_3d_jobs_memory_is_the_3d_models_everywhere(sets):
    sc = load_scenario("h100-1024", sets, ranks=256 if "model.preset=llama3-70b" in sets else 64)
    lay = layout(sc)
    stages = memory_by_stage(sc, lay, step_costs(sc, lay))
    assert fit(sc).total_gib == pytest.approx(max(m.total_gib for m in stages), rel=1e-12)
    # sim/memory.py knows none of TP, PP or the distributed optimizer: it holds more on every GPU.
    assert estimate_memory(sc).total_gib > fit(sc).total_gib


def test_whatif_runs_a_tp_job_as_simulate_does(ddplab):
    sets = [*TP8, "training.mode=zero1", "training.grad_accum=4"]
    code, out, err = ddplab("whatif", "h100-1024", "--ranks", "64", "--steps", "5", "--json", *_sets(*sets))
    assert code == 0, err
    rows = json.loads(out)
    sc = load_scenario("h100-1024", [*sets, "steps=5"], ranks=64)
    run = simulate_3d_steps(sc)
    nothing = rows[0]
    assert nothing["mitigation"] == "nothing" and nothing["step_time_s"] == pytest.approx(run.mean_step_s, rel=1e-12)
    # The default tries for a sequence-parallel TP job on the distributed optimizer: its own knobs.
    assert [r["mitigation"] for r in rows[1:]] == ["bucket_cap_mb=100", "training.tp_comm_overlap=full"]
    full = load_scenario("h100-1024", [*sets, "steps=5", "training.tp_comm_overlap=full"], ranks=64)
    assert rows[2]["step_time_s"] == pytest.approx(simulate_3d_steps(full).mean_step_s, rel=1e-12)
    assert rows[2]["step_time_s"] < nothing["step_time_s"]
    # Its parts add up to the step (the TP collectives counted as exposed communication).
    parts = ("compute_s", "optimizer_s", "dataloader_s", "exposed_comm_s", "straggler_wait_s", "bubble_s")
    assert sum(nothing[k] for k in parts) == pytest.approx(nothing["step_time_s"], rel=0.02)


@pytest.mark.parametrize(
    "extra, tries, words",
    [
        # The scenario refuses it (a 3D job sizes no rank's work), named by its row.
        ([], ["rebalance"], "--try 'rebalance': rebalance: is not modelled for a tensor-"),
        ([], ["exclude-slowest"], "exclude-slowest is not modelled for a tensor-"),
        (["episodes.comm_per_h=0.5"], ["bucket_cap_mb=100"], "episodes: not simulated for a tensor-"),
        # GC pauses were dropped without a word until 2026-12-07: every row's step came out pause-free.
        (["pauses.every_steps=50"], ["bucket_cap_mb=100"], "pauses: not simulated for a tensor-"),
    ],
)
def test_whatif_refuses_what_the_3d_model_does_not_have(ddplab, extra, tries, words):
    argv = ["whatif", "h100-1024", "--ranks", "64", "--steps", "3", *_sets(*TP8, *extra)]
    argv += [w for t in tries for w in ("--try", t)]
    code, out, err = ddplab(*argv)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert words in line


def test_whatif_takes_a_named_fix_on_a_row_that_leaves_tp(ddplab):
    """The refusal is the row's own: a TP job's row at tp 1 runs DDP/FSDP's engine, as `simulate`
    runs it, so rebalance applies there (it was refused because the base had TP)."""
    from workflow.simulation import run_scale

    base = [*TP8, "training.mode=fsdp", "training.grad_accum=8", "stragglers=3:1.4"]
    off = "training.tp=1,training.sequence_parallel=false"
    argv = ["whatif", "h100-1024", "--ranks", "64", "--steps", "5", "--json", *_sets(*base)]
    code, out, err = ddplab(*argv, "--try", off, "--try", off + ",rebalance")
    assert code == 0, err
    nothing, plain, rebalanced = json.loads(out)
    sc = load_scenario("h100-1024", [*base, "steps=5", "training.tp=1", "training.sequence_parallel=false"], ranks=64)
    assert plain["step_time_s"] == pytest.approx(run_scale(sc)[1].step_time_s.mean, rel=1e-9)
    # Rank 3 at 1.4x holds every step back; work sized to speed in whole samples (8 a step: 6 for
    # rank 3, 9 for two others) takes most of that away.
    assert rebalanced["step_time_s"] < 0.9 * plain["step_time_s"]
    assert rebalanced["note"].startswith("work sized to speed: rank 3 takes 6, ranks ")


def test_whatif_defaults_for_a_slow_gpu_in_a_tp_job_are_knobs_not_named_fixes():
    from sim.whatif_defaults import default_tries

    tries, why = default_tries(load_scenario("straggler-lemon", ["training.tp=8", "training.sequence_parallel=true"]))
    assert tries == ["bucket_cap_mb=100", "training.tp_comm_overlap=full"]
    assert "slow GPUs (rank 17 x1.4) modelled, no named fix modelled" in why


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "--steps", "3", "h100-1024:" + ",".join([*TP8, "training.mode=fsdp"])],
        ["sweep", "h100-1024", "--steps", "3", "--vary", "training.bucket_cap_mb", "25", "50",
         *_sets(*TP8, "training.mode=fsdp")],
    ],
)  # fmt: skip
def test_compare_and_sweep_refuse_a_3d_job_in_one_line(ddplab, argv):
    code, out, err = ddplab(*argv)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "a tensor-, context- or pipeline-parallel or zero1 job runs in `ddplab simulate`" in line
    assert line.endswith("got tp 8, cp 1, pp 1, mode fsdp")


def test_simulate_3d_turns_tokens_into_days_as_ddp_does(capsys):
    """`--tokens` and `--usd-per-gpu-hour` were taken and ignored by a tensor- or pipeline-parallel
    simulate (no line, no JSON field). Its days are now the same closed form as a DDP job's:
    tokens / tokens/s / goodput, GPU-hours = days x 24 x GPUs, dollars = GPU-hours x price."""
    from sim.train_cost import train_cost

    argv = ["simulate", "h100-1024", "--ranks", "64", "--steps", "5", *_sets(*TP8, "training.mode=fsdp")]
    argv += ["--tokens", "1T", "--usd-per-gpu-hour", "2"]
    code, out, err = in_process(capsys, *argv, "--json")
    assert code == 0, err
    s = json.loads(out)
    c = s["to_train"]
    want = train_cost(tokens=1e12, tokens_per_s=s["tokens_per_s"], gpus=64, usd_per_gpu_hour=2.0)
    assert c["days"] == pytest.approx(1e12 / s["tokens_per_s"] / 86400 / c["goodput"], rel=1e-12)
    assert (c["days"], c["gpu_hours"], c["usd"]) == pytest.approx((want.days, want.days * 24 * 64, want.gpu_hours * 2))
    code, out, err = in_process(capsys, *argv)
    assert code == 0, err
    assert f"  to train 1T      {c['days']:,.2f} days wall clock including failures" in out
