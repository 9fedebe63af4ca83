"""`ddplab simulate` and `ddplab collective` end to end, through the real entry point."""

import json

import numpy as np
import pytest

KEYS = {
    "ranks",
    "steps",
    "step_time_s",
    "compute_s",
    "exposed_comm_s",
    "straggler_wait_s",
    "comm_compute_ratio",
    "scaling_efficiency",
    "tokens_per_s",
    "wall_s",
}


def test_simulate_json_single(ddplab):
    overrides = [
        "noise.distribution=normal",
        "noise.sigma=0.03",
        "stragglers=3:1.5",
        "compute.step_compute_s=0.2",
        "compute.optimizer_s=0.01",
        "training.grad_accum=2",
        "training.bucket_cap_mb=50",
        "training.overlap=true",
        "noise.speed_spread_sd=0.01",
        "network.enabled=true",
    ]
    sets = [arg for o in overrides for arg in ("--set", o)]
    code, out, err = ddplab("simulate", "h100-1024", "--ranks", "64", "--steps", "30", "--seed", "5", "--json", *sets)
    assert code == 0, err
    s = json.loads(out)
    assert KEYS <= set(s)
    assert set(s["step_time_s"]) >= {"mean", "p50", "p95", "p99"}
    assert (s["ranks"], s["steps"], s["seed"]) == (64, 30, 5)
    # K=2 micro-steps of 0.2 s on nominal ranks; a 1.5x straggler sets the pace.
    assert s["step_time_s"]["p50"] > 1.5 * 2 * 0.2
    assert s["compute_s"] == pytest.approx(2 * 0.2, rel=0.02)


def test_simulate_sweep_json_and_out(ddplab, tmp_path):
    out_dir = tmp_path / "run"
    code, out, err = ddplab(
        "simulate", "mi300x-1024", "--sweep-ranks", "2,8,64", "--steps", "20", "--json", "--records", "--out",
        str(out_dir),
    )  # fmt: skip
    assert code == 0, err
    rows = json.loads(out)
    assert [r["ranks"] for r in rows] == [2, 8, 64]
    assert json.loads((out_dir / "summary.json").read_text()) == rows
    png = (out_dir / "scaling.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    for n in (2, 8, 64):
        d = out_dir / f"ranks-{n:04d}"
        rec = np.load(d / "records.npz")
        assert rec["compute_s"].shape == (20, n)
        assert str(rec["schema"]) == "ddplab.sim/1"
        trace = json.loads((d / "trace.json").read_text())
        assert any(e.get("name", "").startswith("allreduce") for e in trace["traceEvents"])
        assert len((d / "steps.csv").read_text().splitlines()) == 21


def test_simulate_readable_summary(ddplab):
    code, out, err = ddplab("simulate", "homelab-1gbe", "--steps", "10")
    assert code == 0, err
    for text in ("step time", "exposed comm", "straggler wait", "T_comm/T_compute", "communication-bound"):
        assert text in out


def test_network_disabled_removes_comm(ddplab):
    code, out, _ = ddplab("simulate", "homelab-1gbe", "--steps", "5", "--json", "--set", "network.enabled=false")
    s = json.loads(out)
    assert code == 0 and s["exposed_comm_s"] == 0 and s["comm_s"] == 0


def test_collective_json_and_table(ddplab):
    code, out, err = ddplab("collective", "h100-1024", "--ranks", "8", "--sizes", "1M,16M,1G", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["size_bytes"] for r in rows] == [2**20, 16 * 2**20, 2**30]
    for r in rows:
        assert r["busbw_gb_s"] == pytest.approx(r["algbw_gb_s"] * 2 * 7 / 8)
        assert r["time_us"] == pytest.approx(r["size_bytes"] / r["algbw_gb_s"] / 1e3)
    code, out, _ = ddplab("collective", "h100-1024", "--op", "allgather", "--ranks", "1024", "--sizes", "8:64")
    assert code == 0
    assert "time" in out and "busbw" in out and "# Avg bus bandwidth" in out
    assert len([ln for ln in out.splitlines() if not ln.startswith("#")]) == 4  # 8, 16, 32, 64 bytes


def test_collective_alltoall_counts_elements_per_peer_as_nccl_tests(ddplab):
    # nccl-tests' alltoall_perf prints 524288000 B on 4 ranks as count 32768000 (nccl #2169): the
    # elements each rank sends one peer; allgather's count is a rank's send, allreduce's the whole.
    for op, ranks, count in (("alltoall", 4, 32768000), ("allgather", 4, 32768000), ("allreduce", 4, 131072000)):
        code, out, err = ddplab(
            "collective", "h100-1024", "--op", op, "--ranks", str(ranks), "--sizes", "524288000", "--json"
        )
        assert code == 0, err
        (row,) = json.loads(out)
        assert row["count"] == count and row["ranks"] == ranks
    assert row["op"] == "allreduce"
    code, out, err = ddplab(
        "collective", "h100-1024", "--op", "alltoall", "--ranks", "4", "--sizes", "524288000", "--json"
    )
    (row,) = json.loads(out)
    assert row["algorithm"] == "p2p" and "why" not in row  # no tuner pick: point-to-point sends
    assert row["busbw_gb_s"] == pytest.approx(row["algbw_gb_s"] * 3 / 4)
