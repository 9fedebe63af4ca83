"""The loop on real records: `ddplab probe` and `ddplab train` (2 gloo processes on
loopback), then `ddplab calibrate` and `ddplab validate` reading what they wrote: the
quick demo's run (tests/conftest.py demo_run), which runs those very commands, shared
with tests/test_demo.py. This pins the schema both sides agree on (realrun/SCHEMA.md);
the accuracy evidence is docs/validation.md, measured on the emulated home lab."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from calibrate.calibration import Calibration
from sim.units import parse_size
from workflow.plan import MODEL, PROBE, SEQ_LEN, TRAIN_STEPS


def _probe_arg(flag: str) -> str:
    args = PROBE[True]
    return args[args.index(flag) + 1]


@pytest.fixture(scope="module")
def loop(demo_run):
    d, _ = demo_run
    p = subprocess.run(
        [sys.executable, "-m", "ddplab", "validate", "--calib", str(d / "calib.json"), str(d / "train"), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return d, json.loads(p.stdout)


def test_calibration_of_a_real_probe(loop):
    d, _ = loop
    c = Calibration.read(d / "calib.json")
    assert c.world_size == 2 and c.backend == "gloo"
    ((label, net),) = c.networks.items()
    assert label == "probe"  # no lab: the run directory names the network
    sched = net.collectives_sched  # root: the sweep ran real-time (realrun/sched.py)
    assert sched == "fifo" if os.geteuid() == 0 else sched.startswith("other (")
    lo, hi = (parse_size(x) for x in _probe_arg("--sizes").split(":"))
    assert net.allreduce.sizes == (hi // lo).bit_length()  # lo, 2 lo, 4 lo, ... hi
    assert net.link_gbit_s.value > 0 and net.allreduce.busbw_gb_s > 0
    k = c.compute
    assert k.model == MODEL and k.seq_len == SEQ_LEN
    # Every micro-batch size, every timed iteration, both ranks.
    assert k.samples == 2 * len(_probe_arg("--micro-batches").split(",")) * int(_probe_arg("--iters"))
    assert k.step_s.per_token_s > 0
    # The measured profile covers every parameter tensor DDP reduces.
    from sim.transformer import model_shape, param_tensors

    assert set(k.ready_fractions.value) == {t.name for t in param_tensors(model_shape(MODEL))}
    # The probe ran at the default cap (no --bucket-cap-mb): its buckets are the report's.
    from sim.buckets import build_buckets
    from sim.config import TrainingConfig

    t = TrainingConfig()
    default = build_buckets(
        model_shape(MODEL), SEQ_LEN, bytes_per_grad=4, bucket_cap_mb=t.bucket_cap_mb,
        first_bucket_mb=t.effective_first_bucket_mb,
    )  # fmt: skip
    assert [b.bytes for b in k.buckets_default_cap] == [b.size_bytes for b in default]
    assert set(c.ranks) == {0, 1} and min(v.speed_factor for v in c.ranks.values()) == 1.0
    # The comm hooks' casts, timed over a buffer of every gradient: both hooks, every timed pass
    # of both ranks; a cast, a divide and a copy cost more than the plain hook's one divide, and
    # below 10 s/GB (0.1 GB/s: no memory this slow), and the buffer is the model's gradients.
    assert set(k.hook_cast_s_per_gb) == {"fp16", "bf16"}
    for cast in k.hook_cast_s_per_gb.values():
        assert 0 < cast.value < 10 and cast.samples == 2 * int(_probe_arg("--iters"))
    from sim.transformer import param_count

    rows = [json.loads(x) for x in (d / "probe" / "probe-rank0000.jsonl").read_text().splitlines()]
    casts = [r for r in rows if r.get("type") == "hook_cast"]
    assert {r["grad_bytes"] for r in casts} == {4 * param_count(model_shape(MODEL))}
    assert all(r["extra_s"] == pytest.approx(r["cast_s"] - r["plain_s"]) for r in casts)


def test_validation_of_a_real_train_run(loop):
    d, v = loop
    (row,) = v["rows"]
    assert row["run"] == str(d / "train") and row["steps"] == TRAIN_STEPS[True] - 2  # the first two: warm-up
    # The run's own step times are what validate measured.
    steps = [json.loads(line) for line in (d / "train" / "train-rank0000.jsonl").read_text().splitlines()]
    totals = sorted(r["step_wall_s"] for r in steps if r["type"] == "step" and r["step"] >= 2)
    assert totals[0] <= row["measured_p50_s"] <= totals[-1]
    # Loopback on a shared 2-core box: the prediction lands in the right
    # range (the tight evidence is docs/validation.md, over the emulated link).
    assert abs(row["error_p50"]) < 0.5, row
    assert v["mape"] == pytest.approx(abs(row["error_p50"]))
