"""The loop on real records: `ddplab probe` and `ddplab train` (2 gloo processes on
loopback), then `ddplab calibrate` and `ddplab validate` reading what they wrote.
This pins the schema both sides agree on (realrun/SCHEMA.md); the accuracy evidence
is docs/validation.md, measured on the emulated home lab."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from calibrate.calibration import Calibration

MODEL = ("--model", "gpt2-tiny", "--seq-len", "64")


def _run(*args, timeout=300):
    p = subprocess.run(
        [sys.executable, "-m", "ddplab", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    d = tmp_path_factory.mktemp("loop")
    _run(
        "probe", "--nproc", "2", "--out", str(d / "probe"), *MODEL, "--ops", "allreduce",
        "--sizes", "4K:4M", "--iters", "8", "--warmup", "2", "--link-bytes", "4M", "--micro-batches", "8,16,32",
    )  # fmt: skip
    _run("train", "--nproc", "2", "--out", str(d / "train"), *MODEL, "--micro-batch", "16", "--steps", "12")
    _run("calibrate", str(d / "probe"), "-o", str(d / "calib.json"))
    return d, json.loads(_run("validate", "--calib", str(d / "calib.json"), str(d / "train"), "--json"))


def test_calibration_of_a_real_probe(loop):
    d, _ = loop
    c = Calibration.read(d / "calib.json")
    assert c.world_size == 2 and c.backend == "gloo"
    ((label, net),) = c.networks.items()
    assert label == "probe"  # no lab: the run directory names the network
    sched = net.collectives_sched  # root: the sweep ran real-time (realrun/sched.py)
    assert sched == "fifo" if os.geteuid() == 0 else sched.startswith("other (")
    assert net.allreduce.sizes == 11
    assert net.link_gbit_s.value > 0 and net.allreduce.busbw_gb_s > 0
    k = c.compute
    assert k.model == "gpt2-tiny" and k.seq_len == 64
    # Three micro-batch sizes, 8 iterations each, both ranks.
    assert k.samples == 2 * 3 * 8
    assert k.step_s.per_token_s > 0
    # The measured profile covers every parameter tensor DDP reduces.
    from sim.transformer import model_shape, param_tensors

    assert set(k.ready_fractions.value) == {t.name for t in param_tensors(model_shape("gpt2-tiny"))}
    assert set(c.ranks) == {0, 1} and min(v.speed_factor for v in c.ranks.values()) == 1.0


def test_validation_of_a_real_train_run(loop):
    d, v = loop
    (row,) = v["rows"]
    assert row["run"] == str(d / "train") and row["steps"] == 10
    # The run's own step times are what validate measured.
    steps = [json.loads(line) for line in (d / "train" / "train-rank0000.jsonl").read_text().splitlines()]
    totals = sorted(r["step_wall_s"] for r in steps if r["type"] == "step" and r["step"] >= 2)
    assert totals[0] <= row["measured_p50_s"] <= totals[-1]
    # Loopback on a shared 2-core box, 30 ms steps: the prediction lands in the right
    # range (the tight evidence is docs/validation.md, over the emulated link).
    assert abs(row["error_p50"]) < 0.5, row
    assert v["mape"] == pytest.approx(abs(row["error_p50"]))
