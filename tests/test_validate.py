"""`ddplab validate`: the prediction for a train run equals the closed form of the
calibrated machines, the error is measured against the run, and runs the calibration
saw (or that do not match it) are refused in one line."""

import json

import numpy as np
import pytest
from fake_runs import probe_run, train_run

from calibrate.calib import calibrate
from calibrate.records import read_run
from calibrate.validate import scenario_for
from sim.scenario_file import scenario_from_dict
from sim.workload import build_workload


@pytest.fixture(scope="module")
def calib_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("val")
    probe = probe_run(d / "1gbit" / "probe", sigma=0.01, gamma=0.0)
    calib = calibrate([probe], seed=0)
    path = d / "calib.json"
    path.write_text(json.dumps(calib.to_json()))
    return path, calib, probe


def _closed_form_no_overlap(calib, cfg_mb=4, seq=64) -> float:
    """Step = forward + backward + every bucket's allreduce after backward (no overlap)
    + the optimizer: alpha + bytes / busbw per bucket (2 ranks: bus factor 1)."""
    k = calib.compute
    compute = k.step_s.intercept_s + k.step_s.per_token_s * cfg_mb * seq
    ar = calib.networks["1gbit"].allreduce
    sc = scenario_from_dict(
        {"ranks": 2, "model": {"preset": "gpt2-tiny"}, "training": {"seq_len": seq, "precision": "fp32"}}
    )
    buckets = build_workload(sc, np.random.default_rng(0)).buckets
    comm = sum(ar.alpha_s + b.size_bytes / (ar.busbw_gb_s * 1e9) for b in buckets)
    return compute + comm + k.optimizer_s.value


def test_prediction_is_the_closed_form_and_error_is_measured(calib_file, tmp_path, ddplab):
    path, calib, _ = calib_file
    expect = _closed_form_no_overlap(calib)
    run = train_run(tmp_path / "1gbit" / "train-a", config={"no_overlap": True}, step_s=expect * 1.1, wait_s=0.01)
    code, out, err = ddplab("validate", "--calib", str(path), str(run), "--json")
    assert code == 0, err
    v = json.loads(out)
    row = v["rows"][0]
    # Jitter sigma 0.01 on 2 ranks: the step waits for the larger draw, +0.56 sigma x compute.
    assert row["predicted_p50_s"] == pytest.approx(expect, rel=0.01)
    assert row["measured_p50_s"] == pytest.approx(expect * 1.1)
    assert v["mape"] == pytest.approx(abs(row["predicted_p50_s"] / (expect * 1.1) - 1))
    assert v["mape"] == pytest.approx(1 - 1 / 1.1, abs=0.01)
    assert row["measured_wait_s"] == pytest.approx(0.01) and row["measured_straggler_wait_s"] == pytest.approx(0.0)
    assert v["plot"] == str(path.with_name("validation.png"))
    assert path.with_name("validation.png").read_bytes()[:4] == b"\x89PNG"


def test_run_configuration_reaches_the_simulator(calib_file, tmp_path):
    path, calib, _ = calib_file
    cfg = {"bucket_cap_mb": 0.1, "grad_accum": 3, "comm_hook": "fp16", "straggler": [[1, 2.0]], "micro_batch": 2}
    data, label = scenario_for(read_run(train_run(tmp_path / "r", config=cfg, step_s=1.0)), calib, str(path), seed=0)
    sc = scenario_from_dict(data)
    assert label == "1gbit"
    t = sc.training
    assert (t.bucket_cap_mb, t.grad_accum, t.comm_hook, t.micro_batch_size, t.overlap) == (0.1, 3, "fp16", 2, True)
    fit = calib.compute.step_s
    assert sc.compute.step_compute_s == pytest.approx(fit.intercept_s + fit.per_token_s * 2 * 64)
    assert sc.straggler_map[1] == pytest.approx(2.0 * calib.ranks[1].speed_factor, rel=1e-5)
    # Uneven micro-batches: the smaller rank's work is its share of the affine fit.
    data, _ = scenario_for(
        read_run(train_run(tmp_path / "u", config={"micro_batch_per_rank": [4, 1]}, step_s=1.0)), calib, "c", seed=0
    )
    share = (fit.intercept_s + fit.per_token_s * 64) / (fit.intercept_s + fit.per_token_s * 256)
    assert scenario_from_dict(data).straggler_map[1] == pytest.approx(share * calib.ranks[1].speed_factor, rel=1e-5)


def _refused(ddplab, *args) -> str:
    code, out, err = ddplab("validate", *map(str, args))
    assert code == 2, (out, err)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err
    return errors[0]


def test_refusals(calib_file, tmp_path, ddplab):
    path, calib, probe = calib_file
    assert "used to make the calibration" in _refused(ddplab, "--calib", path, probe)
    other_probe = probe_run(tmp_path / "p")
    assert "a probe run; validate compares against train runs" in _refused(ddplab, "--calib", path, other_probe)
    wide = train_run(tmp_path / "w", config={}, step_s=1.0, world=3)
    assert "3 ranks on gloo; the calibration is 2 ranks on gloo" in _refused(ddplab, "--calib", path, wide)
    short = train_run(tmp_path / "s", config={}, step_s=1.0, steps=4)
    assert "2 complete steps after 2 warm-up steps" in _refused(ddplab, "--calib", path, short)
    assert "not JSON" in _refused(ddplab, "--calib", probe / "probe-rank0000.jsonl", short)
    two = tmp_path / "two.json"
    both = calibrate([probe_run(tmp_path / "a"), probe_run(tmp_path / "b", rate="10gbit")])
    two.write_text(json.dumps(both.to_json()))
    elsewhere = train_run(tmp_path / "e", config={}, step_s=1.0, rate="200mbit")
    assert "ran on network '200mbit'; the calibration measured 10gbit, 1gbit" in _refused(
        ddplab, "--calib", two, elsewhere
    )
