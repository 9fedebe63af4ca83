"""Run directories written by hand in realrun's record schema (realrun/SCHEMA.md), with
known parameters, so calibrate's fits can be checked against the truth. Real runs
are checked elsewhere (tests/test_calibrate_realrun.py)."""

import json
from pathlib import Path

import numpy as np

from sim.buckets import MIB
from sim.collectives import bus_factor
from sim.transformer import gradient_ready_order, model_shape, param_count

SIZES = [2**k for k in range(12, 27)]  # 4 KiB .. 64 MiB
KINDS = ("collective", "link", "rtt", "compute", "optimizer", "grad_ready", "bucket_ready", "overlap")


# One NVIDIA H200 as realrun/device.py describes it.
H200 = {"kind": "cuda", "name": "NVIDIA H200", "memory_bytes": 150_754_820_096, "multiprocessors": 132}
H200 |= {"capability": "9.0", "bf16": True}


def _meta(verb: str, rank: int, world: int, config: dict, gpu: dict | None = None, precision: str = "fp32") -> dict:
    return {
        "type": "meta",
        "schema": "ddplab.realrun",
        "schema_version": 1,
        "verb": verb,
        "config": config,
        "rank": rank,
        "world_size": world,
        "backend": "nccl" if gpu else "gloo",
        "device": f"cuda:{rank}" if gpu else "cpu",
        "device_info": gpu,
        "precision": {"name": precision},
        "compile": False,
    }


def _write(path: Path, records: list[dict], complete: bool = True) -> None:
    if complete:
        records = [*records, {"type": "complete", "wall_s": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_lab(run_dir: Path, rate: str) -> None:
    (run_dir / "netlab").mkdir(parents=True, exist_ok=True)
    (run_dir / "netlab" / "commands.json").write_text(json.dumps({"lab": {"spec": {"rate": rate}}, "argv": []}))


def probe_run(
    run_dir: Path,
    *,
    world: int = 2,
    alpha_s: float = 200e-6,
    busbw_gb_s: float = 0.118,
    link_gbit_s: float = 0.96,
    intercept_s: float = 0.01,
    per_token_s: float = 1e-4,
    backward_share: float = 0.65,
    speed: dict[int, float] | None = None,
    sigma: float = 0.03,
    gamma: float = 0.12,
    optimizer_s: float = 0.002,
    model: str = "gpt2-tiny",
    seq_len: int = 64,
    micro_batches=(1, 2, 4, 8),
    iters: int = 30,
    rate: str | None = "1gbit",
    omit: tuple[str, ...] = (),
    incomplete_rank: int | None = None,
    seed: int = 0,
    gpu: dict | None = None,
    precision: str = "fp32",
    memory: tuple[float, float, float] | None = None,
    jitter: str = "lognormal",
    hook_cast_s_per_gb: dict[str, float] | None = None,
) -> Path:
    """A probe run whose records follow known parameters: collective time = alpha +
    size x bus factor / busbw (lognormal 2 % noise); compute = (intercept + per-token x
    tokens) x speed[rank] x lognormal(sigma) (mean 1; ``jitter="normal"``: a normal's |x|).
    ``gpu``: realrun/device.py's facts of the device (a GPU run); ``memory``: (intercept,
    per-token, DDP's extra) bytes of the peak allocated memory; ``hook_cast_s_per_gb``: per comm
    hook, its casts' extra time per GB of the model's fp32 gradients (x the rank's speed; none:
    a probe from before 2026-12-06). One rank measures nothing between ranks, as realrun skips it."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    speed = speed or {}
    config = {"model": model, "seq_len": seq_len, "quick": False, "micro_batches": list(micro_batches)}
    shape = model_shape(model)
    ready = gradient_ready_order(shape, seq_len)
    coll = []
    for size in SIZES:
        t = alpha_s + size * bus_factor("allreduce", world) / (busbw_gb_s * 1e9)
        for i, x in enumerate(t * rng.lognormal(0.0, 0.02, iters)):
            coll.append(
                {"type": "collective", "op": "allreduce", "size_bytes": size, "ranks": world, "iter": i}
                | {"time_s": float(x), "time_max_s": float(x)}
            )
    if world == 1:
        omit = (*omit, "collective", "link", "overlap")
    for rank in range(world):
        recs = [_meta("probe", rank, world, config, gpu, precision)]
        if "collective" not in omit:
            recs += coll
        if rank == 0 and "link" not in omit:
            recs += [
                {"type": "link", "src": s, "dst": d, "rep": k, "bytes": 1 << 25, "seconds": 1.0, "gbit_s": link_gbit_s}
                for s, d in ((0, 1), (1, 0))
                for k in range(3)
            ]
            recs.append({"type": "rtt", "peer": 1, "bytes": 8, "samples_us": [60.0] * 200, "p50_us": 60.0})
        factor = speed.get(rank, 1.0)
        if "compute" not in omit:
            for b in micro_batches:
                mean = (intercept_s + per_token_s * b * seq_len) * factor
                draws = (
                    rng.lognormal(-sigma * sigma / 2, sigma, iters)
                    if jitter == "lognormal"
                    else np.abs(rng.normal(1.0, sigma, iters))  # a noisy box; |x| keeps a time positive
                )
                for i, m in enumerate(draws):
                    t = mean * m
                    recs.append(
                        {"type": "compute", "model": model, "micro_batch": b, "seq_len": seq_len}
                        | {"tokens": b * seq_len, "forward_s": t * (1 - backward_share)}
                        | {"backward_s": t * backward_share, "iter": i}
                    )
        if "optimizer" not in omit:
            recs += [
                {"type": "optimizer", "params": 1, "optimizer_s": optimizer_s * factor, "iter": i} for i in range(5)
            ]
        grad_bytes = 4 * param_count(shape)
        for hook, s_per_gb in (hook_cast_s_per_gb or {}).items():
            extra = s_per_gb * grad_bytes / 1e9 * factor
            recs += [
                {"type": "hook_cast", "hook": hook, "grad_bytes": grad_bytes, "cast_s": extra + 0.001}
                | {"plain_s": 0.001, "extra_s": extra, "iter": i}
                for i in range(iters)
            ]
        if "grad_ready" not in omit:
            recs += [{"type": "grad_ready", "name": n, "ready_s": f, "ready_fraction": f} for n, f in ready]
        if "bucket_ready" not in omit:
            recs.append({"type": "bucket_ready", "step": 2, "bucket": 0, "bytes": MIB, "ready_fraction": 1.0})
        if "overlap" not in omit:
            recs.append({"type": "overlap", "micro_batch": 8, "gamma": gamma, "iters_with_comm": 20})
        if memory:
            base, per_token, ddp_extra = memory
            for b in micro_batches:
                peak = base + per_token * b * seq_len
                recs.append(
                    {"type": "compute_memory", "micro_batch": b, "seq_len": seq_len, "tokens": b * seq_len}
                    | {"peak_allocated_bytes": peak, "peak_reserved_bytes": peak * 1.05}
                )
            top = max(micro_batches)
            peak = base + per_token * top * seq_len + ddp_extra
            recs.append(
                {"type": "ddp_memory", "micro_batch": top, "seq_len": seq_len, "tokens": top * seq_len, "buckets": 73}
                | {"grad_dtype": "float32", "peak_allocated_bytes": peak, "peak_reserved_bytes": peak * 1.05}
            )
        _write(run_dir / f"probe-rank{rank:04d}.jsonl", recs, complete=rank != incomplete_rank)
    if rate:
        write_lab(run_dir, rate)
    return run_dir


def train_run(
    run_dir: Path,
    *,
    config: dict,
    step_s: float,
    wait_s: float = 0.0,
    world: int = 2,
    steps: int = 10,
    rate: str | None = "1gbit",
    step_times: list[float] | None = None,
    compute_s: float = 0.0,
) -> Path:
    """A train run in which every step took ``step_s`` (and waited ``wait_s``) on every rank;
    ``step_times``: step s took step_times[s] instead (``steps`` is then its length); every
    step's forward and backward together took ``compute_s`` (a third and two thirds)."""
    step_times = list(step_times) if step_times is not None else [step_s] * steps
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"model": "gpt2-tiny", "seq_len": 64, "micro_batch": 4, "grad_accum": 1, "bucket_cap_mb": 25.0}
    cfg |= {"comm_hook": "none", "no_overlap": False, "straggler": [], "micro_batch_per_rank": None} | config
    for rank in range(world):
        recs = [_meta("train", rank, world, cfg)]
        for s, wall_s in enumerate(step_times):
            recs.append(
                {"type": "step", "step": s, "micro_batch": cfg["micro_batch"], "tokens": 1, "loss": 1.0}
                | {"step_wall_s": wall_s, "data_s": 0.0, "forward_s": compute_s / 3, "backward_s": compute_s * 2 / 3}
                | {"wait_s": wait_s}
                | {"optimizer_s": 0.0}
            )
        _write(run_dir / f"train-rank{rank:04d}.jsonl", recs)
    if rate:
        write_lab(run_dir, rate)
    return run_dir
