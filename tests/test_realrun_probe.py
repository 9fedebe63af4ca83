"""`ddplab probe` end to end on CPU: 2 processes, gloo over loopback.

One full probe (all four parts, small sizes and iterations) feeds most tests; the
quick check and a wrong interface run on their own (a multi-bucket model's profile, one rank,
in tests/test_shared_shapes.py). This
box is shared and noisy (a 1 KiB gloo allreduce ranges 0.1-4 ms here), so
comparisons span orders of magnitude in work: 1 KiB against 64 MiB.
"""

import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from conftest import ROOT, run_here

from realrun.probe_collectives import bus_factor
from realrun.records import read_run
from sim.buckets import build_buckets
from sim.collectives import bus_factor as sim_bus_factor
from sim.config import TrainingConfig
from sim.transformer import model_shape, param_tensors

OPS = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]
PER_RANK = ("allgather", "reduce_scatter", "alltoall")  # a piece of the buffer per rank
SIZES = [1024, 1028, 64 << 10, 1 << 20, 64 << 20]  # 1028 B: 257 floats, not 2 equal chunks
# The bucket profile and the overlap probe use the largest micro-batch: 32 x 64 tokens
# keeps gpt2-tiny's backward (~25 ms) long against this box's 4 ms scheduler tick.
ITERS, MICRO_BATCHES, SEQ_LEN = 5, [1, 32], 64
# nccl-tests' busbw / algbw at 2 ranks: 2(n-1)/n, (n-1)/n, (n-1)/n, 1, (n-1)/n.
FACTOR_2_RANKS = {"allreduce": 1.0, "allgather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0, "alltoall": 0.5}


def sizes_run(op: str) -> list[int]:
    """allgather/reduce_scatter/alltoall need whole float32 chunks per rank: 4 x 2 ranks."""
    return [s for s in SIZES if s % (8 if op in PER_RANK else 4) == 0]


def probe(out, *args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return run_here("probe", "--nproc", "2", "--out", str(out), *args, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("probe")
    p = probe(
        out,
        *("--ops", ",".join(OPS), "--sizes", ",".join(map(str, SIZES)), "--iters", str(ITERS), "--warmup", "2"),
        *("--link-bytes", "4M", "--micro-batches", ",".join(map(str, MICRO_BATCHES)), "--seq-len", str(SEQ_LEN)),
        *("--parts", "collectives,link,compute,overlap,tp"),  # tp: off by default (realrun/cli.py)
    )
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = read_run(out, "probe")
    return p.stdout, ranks


def tables(stdout: str) -> dict[str, dict]:
    """Each op's printed table: header lines, rows (size, count, type, redop, time_us,
    algbw, busbw) and the footer's average bus bandwidth."""
    out, op = {}, None
    for line in stdout.splitlines():
        if m := re.match(r"# ddplab probe (\w+):", line):
            op = m.group(1)
            out[op] = {"head": [], "rows": [], "footer": None}
        elif op and line.startswith("# Avg bus bandwidth"):
            out[op]["footer"] = float(line.split(":")[1])
            op = None
        elif op and line.startswith("#"):
            out[op]["head"].append(line)
        elif op:
            s, c, t, r, us, alg, bus = line.split()
            out[op]["rows"].append((int(s), int(c), t, r, float(us), float(alg), float(bus)))
    return out


def by_type(rank, kind):
    return rank.of_type(kind)


def test_every_rank_completes(full):
    _, ranks = full
    assert len(ranks) == 2
    for r in ranks:
        assert r.complete and r.error is None
        assert r.meta["verb"] == "probe" and r.meta["world_size"] == 2


def test_collective_sweep_runs_real_time_where_permitted(full):
    stdout, ranks = full
    sched = ranks[0].records[-1]["collective_sched"]
    assert sched == "fifo" if os.geteuid() == 0 else sched.startswith("other")
    assert f"# scheduling of the collective sweep: {sched}" in stdout


def test_tables_are_nccl_tests_shaped(full):
    stdout, _ = full
    t = tables(stdout)
    assert list(t) == OPS
    for op, table in t.items():
        assert table["footer"] is not None, f"{op}: no '# Avg bus bandwidth' footer"
        heads = " ".join(table["head"]).split()
        for word in ("size", "count", "type", "redop", "time", "algbw", "busbw", "(B)", "(us)", "(GB/s)"):
            assert word in heads, (op, word)
        assert [row[0] for row in table["rows"]] == sizes_run(op)
        skipped = any("skipped" in h and "1028" in h for h in table["head"])
        assert skipped == (op in PER_RANK)
        for size, count, dtype, redop, *_ in table["rows"]:
            # nccl-tests' count: a rank's piece where the buffer is cut per rank (all_gather_perf,
            # reduce_scatter_perf, alltoall_perf print it so); the records keep the whole buffer's.
            assert count == size // 4 // (2 if op in PER_RANK else 1) and dtype == "float"
            assert redop == ("sum" if op in ("allreduce", "reduce_scatter") else "none")
        avg = statistics.fmean(row[6] for row in table["rows"])
        assert table["footer"] == pytest.approx(avg, abs=2e-3)
        for *_, algbw, busbw in table["rows"]:
            if algbw >= 0.1:  # printed to 3 decimals: the ratio is only checkable when not tiny
                assert busbw / algbw == pytest.approx(FACTOR_2_RANKS[op], rel=0.02)


def test_time_grows_with_size(full):
    stdout, _ = full
    for op, table in tables(stdout).items():
        first, last = table["rows"][0], table["rows"][-1]
        assert (first[0], last[0]) == (1024, 64 << 20)
        assert last[4] > first[4], f"{op}: 64 MiB took {last[4]} us, 1 KiB {first[4]} us"


def test_busbw_follows_the_nccl_tests_convention(full):
    _, ranks = full
    summaries = by_type(ranks[0], "collective_summary")
    assert {s["op"] for s in summaries} == set(OPS)
    for s in summaries:
        assert s["busbw_gb_s"] > 0 and s["algbw_gb_s"] > 0
        assert s["busbw_gb_s"] / s["algbw_gb_s"] == pytest.approx(FACTOR_2_RANKS[s["op"]], rel=1e-12)
        assert s["algbw_gb_s"] == pytest.approx(s["size_bytes"] / (s["time_us_mean"] * 1e-6) / 1e9)
    assert not by_type(ranks[1], "collective_summary")  # rank 0 summarises


@pytest.mark.parametrize("ranks_n", [1, 2, 3, 8, 1024])
def test_bus_factor_agrees_with_sim(ranks_n):
    # realrun may not import sim/, so it keeps its own copy of the table.
    for op in OPS:
        assert bus_factor(op, ranks_n) == sim_bus_factor(op, ranks_n)


def test_every_iteration_is_recorded(full):
    _, ranks = full
    slowest = {}
    for r in ranks:
        per_size = defaultdict(list)
        for rec in by_type(r, "collective"):
            per_size[(rec["op"], rec["size_bytes"])].append(rec)
        assert set(per_size) == {(op, s) for op in OPS for s in sizes_run(op)}
        for key, recs in per_size.items():
            assert [x["iter"] for x in recs] == list(range(ITERS)), key
            for x in recs:
                assert 0 < x["time_s"] <= x["time_max_s"]
                assert x["count"] == x["size_bytes"] // 4 and x["dtype"] == "float32" and x["ranks"] == 2
            times = [x["time_max_s"] for x in recs]
            assert slowest.setdefault(key, times) == times  # every rank saw the same maxima


def test_link_rate_and_round_trip(full):
    stdout, ranks = full
    links = by_type(ranks[0], "link")
    assert sorted((x["src"], x["dst"]) for x in links) == [(0, 1)] * 3 + [(1, 0)] * 3
    for x in links:
        assert x["gbit_s"] > 0 and x["bytes"] == 4 << 20
        assert x["gbit_s"] == pytest.approx(x["bytes"] * 8 / x["seconds"] / 1e9)
    (rtt,) = by_type(ranks[0], "rtt")
    assert rtt["peer"] == 1 and len(rtt["samples_us"]) == 200
    assert rtt["p50_us"] == pytest.approx(statistics.median(rtt["samples_us"])) and rtt["p50_us"] > 0
    assert "collective stack efficiency" in stdout
    done = ranks[0].records[-1]
    assert done["stack_efficiency"] == pytest.approx(
        done["busbw_gb_s_at_max_size"]["allreduce"] * 8 / done["link_gbit_s"]
    )


def test_compute_time_grows_with_micro_batch(full):
    _, ranks = full
    for r in ranks:
        recs = by_type(r, "compute")
        mean = {}
        for b in MICRO_BATCHES:
            mine = [x for x in recs if x["micro_batch"] == b]
            assert len(mine) == ITERS and all(x["tokens"] == b * SEQ_LEN for x in mine)
            assert all(x["forward_s"] > 0 and x["backward_s"] > 0 for x in mine)
            mean[b] = statistics.fmean(x["forward_s"] + x["backward_s"] for x in mine)
        assert mean[32] > mean[1], mean
        # Timed on training's path: every timed step's optimizer (and the rest outside forward
        # and backward), per micro-batch size; AdamW alone is within it.
        opt = by_type(r, "optimizer")
        assert len(opt) == ITERS * len(MICRO_BATCHES) and all(0 < x["adamw_s"] < x["optimizer_s"] for x in opt)
        assert all(x["backward_ready_s"] < x["backward_s"] for x in recs)  # DDP's divide and copy back follow
        assert opt[0]["params"] == sum(t.numel for t in param_tensors(model_shape("gpt2-tiny")))


def sim_buckets(model: str, seq_len: int, bucket_cap_mb: float | None = None):
    """sim/buckets.py's fp32 buckets at the probe's cap (--bucket-cap-mb, 25 MB by default as in
    training), with its first-bucket rule."""
    cfg = TrainingConfig() if bucket_cap_mb is None else TrainingConfig(bucket_cap_mb=bucket_cap_mb)
    return build_buckets(
        model_shape(model),
        seq_len,
        bytes_per_grad=4,
        bucket_cap_mb=cfg.bucket_cap_mb,
        first_bucket_mb=cfg.effective_first_bucket_mb,
    )


def _check_buckets(rank, model: str, seq_len: int, bucket_cap_mb: float | None = None):
    """The bucket-ready records name the buckets sim/buckets.py builds, in ready order. How late in
    the backward the last one is ready is a timing, held in tests/test_bucket_profile_timing.py,
    which runs alone: beside the other tests it fell to 0.69 (CI, 2026-12-06) and 0.52."""
    buckets = sorted(by_type(rank, "bucket_ready"), key=lambda b: b["bucket"])
    shape = model_shape(model)
    predicted = sim_buckets(model, seq_len, bucket_cap_mb)
    assert len(buckets) == len(predicted)
    assert [b["bytes"] for b in buckets] == [p.size_bytes for p in predicted]
    assert [set(b["params"]) for b in buckets] == [set(p.params) for p in predicted]
    fractions = [b["ready_fraction"] for b in buckets]
    assert all(0 <= f <= 1 for f in fractions), fractions
    assert fractions == sorted(fractions), fractions
    for b in buckets:
        assert b["ready_s"] <= b["backward_compute_s"] <= b["backward_s"]
    grads = by_type(rank, "grad_ready")
    assert sorted(g["name"] for g in grads) == sorted(t.name for t in param_tensors(shape))
    assert all(0 <= g["ready_fraction"] <= 1 for g in grads)


def test_bucket_ready_profile_matches_ddp_buckets(full):
    _, ranks = full
    for r in ranks:  # one bucket for gpt2-tiny at the default cap
        _check_buckets(r, "gpt2-tiny", SEQ_LEN)


def test_memory_records_and_precision_default_to_fp32_on_cpu(full):
    stdout, ranks = full
    grad_bytes = 4 * sum(t.numel for t in param_tensors(model_shape("gpt2-tiny")))
    for r in ranks:
        assert r.meta["precision"]["name"] == "fp32" and r.meta["compile"] is False
        assert r.meta["optimizer"] == "adamw-for-loop" and r.meta["device_info"]["kind"] == "cpu"
        mem = by_type(r, "compute_memory")
        assert [(m["micro_batch"], m["tokens"]) for m in mem] == [(b, b * SEQ_LEN) for b in MICRO_BATCHES]
        assert all(m["peak_allocated_bytes"] is None and m["peak_reserved_bytes"] is None for m in mem)
        (ddp,) = by_type(r, "ddp_memory")
        assert ddp["grad_dtype"] == "float32" and ddp["buckets"] == len(by_type(r, "bucket_ready")) == 1
        assert ddp["micro_batch"] == max(MICRO_BATCHES) and ddp["tokens"] == max(MICRO_BATCHES) * SEQ_LEN
        assert [b["bytes"] for b in by_type(r, "bucket_ready")] == [grad_bytes]
        assert r.records[-1]["skipped"] == {}
    assert "precision fp32, eager" in stdout and "AdamW (for-loop)" in stdout
    assert "skipped: world size 1" not in stdout


def test_one_rank_skips_what_needs_a_peer(tmp_path):
    """--nproc 1: compute and the (one-rank) DDP bucket profile run; collectives, link and
    overlap have nothing to measure and say so once each."""
    cmd = [sys.executable, "-m", "ddplab", "probe", "--nproc", "1", "--out", str(tmp_path), "--precision", "bf16-amp"]
    args = ["--iters", "2", "--warmup", "1", "--micro-batches", "1,2", "--seq-len", "16"]
    p = subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    for part in ("collectives", "link", "overlap"):
        lines = [x for x in p.stdout.splitlines() if x.startswith(f"# {part}: skipped: world size 1 (")]
        assert len(lines) == 1 and lines[0].endswith("; run with --nproc 2 or more)"), p.stdout
    assert "# compute: gpt2-tiny, seq_len 16, precision bf16-amp, eager," in p.stdout
    (r,) = read_run(tmp_path, "probe")
    assert r.complete and r.meta["world_size"] == 1 and r.meta["precision"]["autocast_dtype"] == "bfloat16"
    assert r.records[-1]["skipped"] == {
        "collectives": "world size 1",
        "link": "world size 1",
        "overlap": "world size 1",
    }
    for kind in ("collective", "collective_summary", "link", "rtt", "overlap"):
        assert not by_type(r, kind), kind
    mem = by_type(r, "compute_memory")
    assert [(m["micro_batch"], m["seq_len"], m["tokens"]) for m in mem] == [(1, 16, 16), (2, 16, 32)]
    assert all(m["peak_allocated_bytes"] is None and m["peak_reserved_bytes"] is None for m in mem)
    assert len(by_type(r, "compute")) == 2 * 2 and len(by_type(r, "optimizer")) == 2 * 2
    (ddp,) = by_type(r, "ddp_memory")
    grad_bytes = 4 * sum(t.numel for t in param_tensors(model_shape("gpt2-tiny")))
    assert ddp["grad_dtype"] == "float32" and ddp["buckets"] == 1 and ddp["tokens"] == 32
    assert [b["bytes"] for b in by_type(r, "bucket_ready")] == [grad_bytes]  # AMP: float32 gradients


def test_overlap_gamma(full):
    stdout, ranks = full
    for r in ranks:
        (row,) = by_type(r, "overlap")
        assert row["iters_with_comm"] >= 1 and row["comm_ops"] >= 4
        assert math.isfinite(row["gamma"]) and row["gamma"] > -0.5
        assert row["gamma"] == pytest.approx(row["compute_with_comm_s"] / row["compute_alone_s"] - 1)
    assert "gamma" in stdout


def test_quick_prints_one_health_line_per_rank(tmp_path):
    p = probe(tmp_path, "--quick")
    assert p.returncode == 0, p.stderr[-3000:]
    pattern = r"rank (\d): allreduce 64MB took [\d.]+ ms -> effective bandwidth [\d.]+ GB/s \(busbw [\d.]+ GB/s\)"
    lines = p.stdout.splitlines()
    assert len(lines) == 2, p.stdout
    assert sorted(re.fullmatch(pattern, line).group(1) for line in lines) == ["0", "1"]
    for r in read_run(tmp_path, "probe"):
        (rec,) = by_type(r, "collective")
        assert rec["size_bytes"] == 64 << 20 and rec["time_s"] > 0
        assert r.complete and r.records[-1]["busbw_gb_s"] > 0


def test_wrong_interface_is_one_clear_line_per_rank(tmp_path):
    import os

    env = {**os.environ, "GLOO_SOCKET_IFNAME": "nosuch0"}
    p = probe(tmp_path, "--quick", env=env, timeout=240)
    assert p.returncode != 0
    ours = [line for line in p.stderr.splitlines() if line.startswith("realrun probe:")]
    # torchrun stops the other ranks once one fails: on a loaded machine a rank still importing
    # torch then ends before it reaches the process group, and says nothing. So: every rank that
    # says something says it clearly, at least one does, each once, and no traceback reaches the
    # console (torchrun's stays in the log).
    assert 1 <= len(ours) <= 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    for line in ours:
        assert "joining the process group failed" in line and "nosuch0" in line
    assert len({line.split(":")[1] for line in ours}) == len(ours)  # "realrun probe: rank N: ..."
    log = (tmp_path / "probe.log").read_text()
    assert all(line in log for line in ours)


def test_unknown_model_fails_before_launching(ddplab, tmp_path):
    code, _, err = ddplab("probe", "--out", str(tmp_path), "--model", "gpt2-huge")
    assert code == 2 and "unknown preset 'gpt2-huge'" in err
    code, _, err = ddplab("probe", "--out", str(tmp_path), "--seq-len", "65")
    assert code == 2 and "exceeds gpt2-tiny's context 64" in err


def test_the_compute_probe_trains_with_train_defaults():
    """The probe's Trainer (realrun/probe_compute.py training_args) takes `ddplab train`'s own
    defaults for everything it does not set, and every argument the Trainer reads."""
    from realrun.cli import probe_parser, train_parser
    from realrun.probe_compute import training_args

    argv = ["--out", "o", "--model", "gpt2-mini", "--seq-len", "128", "--seed", "3", "--timeout-s", "60"]
    mine = vars(training_args(probe_parser().parse_args(argv), micro_batch=4))
    train = vars(train_parser().parse_args(argv))
    # run() and the recipe read these
    launch_only = {"backend", "device", "precision", "compile", "force", "steps", "profile"}
    assert set(mine) == set(train) - launch_only
    assert all(mine[k] == train[k] for k in mine if k != "out") and str(mine["out"]) == str(train["out"])
    # the default cap is torch's own, which realrun/ddp_wrap.py then leaves to DDP (its 1 MiB first bucket)
    from realrun.ddp_wrap import DEFAULT_BUCKET_CAP_MB

    assert train["bucket_cap_mb"] == DEFAULT_BUCKET_CAP_MB


def test_tp_block_and_in_step_send(full):
    """realrun/probe_tp.py: per rank, each micro-batch size, each iteration, the model bare and
    with its blocks TP-split over the two ranks; rank 0's in-step sends."""
    stdout, ranks = full
    for r in ranks:
        rows = by_type(r, "tp_block")
        assert sorted({x["micro_batch"] for x in rows}) == MICRO_BATCHES
        assert len(rows) == ITERS * len(MICRO_BATCHES)
        for x in rows:
            assert x["tp"] == 2 and x["blocks"] == model_shape("gpt2-tiny").n_layer
            assert x["tokens"] == x["micro_batch"] * SEQ_LEN
            for key in ("model_forward_s", "model_backward_s", "tp_model_forward_s", "tp_model_backward_s"):
                assert x[key] > 0, key
        sends = by_type(r, "p2p")
        assert len(sends) == (ITERS * len(MICRO_BATCHES) if r.meta["rank"] == 0 else 0)
        assert all(s["size_bytes"] == s["micro_batch"] * SEQ_LEN * 64 * 4 and s["time_s"] > 0 for s in sends)
    assert "# tensor-parallel model (realrun/probe_tp.py), tp 2" in stdout


class _FakeDist:
    """torch.distributed as the overlap probe calls it, on one rank: a blocking allreduce takes
    20 ms (so the first try is sized at the minimum, 4), an async one stays in flight for
    ``busy_checks`` is_completed() calls (0: done at once)."""

    class ReduceOp:
        MAX = "max"

    def __init__(self, busy_checks: int):
        self.busy_checks, self.tries = busy_checks, []  # async allreduces issued after each barrier

    def all_reduce(self, tensor, op=None, async_op=False):
        if not async_op:
            time.sleep(0.02)
            return None
        checks = [self.busy_checks]

        class Work:
            def is_completed(self):
                checks[0] -= 1
                return checks[0] < 0

            def wait(self):
                return True

        self.tries[-1] += 1
        return Work()

    def barrier(self):
        self.tries.append(0)


@pytest.mark.parametrize("busy_checks,growth", [(0, 4), (0, 1024), (10, 4)])
def test_overlap_probe_tries_again_with_more_allreduces_when_none_overlapped(monkeypatch, busy_checks, growth):
    """A box whose speed moved after the one allreduce that sized the overlap phase can leave no
    iteration under communication (make test beside a second one, 2026-12-06: iters_with_comm 0
    on one clone). Every rank then tries again with 4 x the allreduces, up to 3 tries; where
    iterations did run under them, one try."""
    import types

    import torch

    from realrun import probe_compute
    from realrun.dist import DistEnv
    from realrun.recipe import Recipe

    fake = _FakeDist(busy_checks)
    monkeypatch.setattr(probe_compute, "dist", fake)
    monkeypatch.setattr(probe_compute, "OVERLAP_GROWTH", growth)  # 1024 x at least 4: the second try hits the cap
    cpu = torch.device("cpu")
    env = DistEnv(0, 1, 0, "gloo", cpu, cpu)
    args = types.SimpleNamespace(
        model="gpt2-tiny", seed=0, seq_len=16, warmup=1, iters=4, precision="fp32", compile=False
    )
    rows = []
    writer = types.SimpleNamespace(write=rows.append)
    row = probe_compute.overlap(env, args, 1, writer, Recipe.for_run(args, cpu))
    assert rows == [row] and row["iters_alone"] == 4
    tries = [n for n in fake.tries if n]
    if busy_checks == 0:  # nothing ever overlaps: 3 tries, each with 4 x the last's allreduces
        # up to the cap (beside a second make test the first try's count was 263: 263, 1052, 4096)
        want = [tries[0]]
        cap = probe_compute.OVERLAP_MAX_OPS
        while len(want) < probe_compute.OVERLAP_TRIES and want[-1] < cap:
            want.append(min(cap, probe_compute.OVERLAP_GROWTH * want[-1]))
        assert tries == want and tries[0] >= 4 and row["comm_ops"] == want[-1]
        assert growth == 4 or (len(tries) == 2 and tries[-1] == cap == 4096)
        assert row["iters_with_comm"] == 0 and row["gamma"] is None
    else:  # iterations ran under the first try's allreduces: no second try
        assert tries == [row["comm_ops"]] and row["iters_with_comm"] >= 1
        assert row["gamma"] == pytest.approx(row["compute_with_comm_s"] / row["compute_alone_s"] - 1)
