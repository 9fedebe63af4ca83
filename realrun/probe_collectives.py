"""Collective sweep in nccl-tests' conventions (NVIDIA/nccl-tests doc/PERFORMANCE.md).

Size S is the bytes of the full buffer: allreduce and broadcast in place on S
bytes; allgather's output and reduce-scatter's input are S bytes, so each rank
contributes or keeps S/N. float32 throughout, count = S/4. algbw = S/t and
busbw = algbw x the bus factor, the bytes each rank's link carries per byte of S
in a ring, so busbw is comparable across rank counts and with the link rate.
"""

import statistics
from typing import NamedTuple

import torch
import torch.distributed as dist

from realrun.dist import DistEnv, now

DTYPE, DTYPE_NAME, WORD_BYTES = torch.float32, "float", 4
REDOP = {"allreduce": "sum", "reduce_scatter": "sum", "allgather": "none", "broadcast": "none", "alltoall": "none"}
# The ops whose buffer is cut into one piece per rank: a size must hold whole pieces.
PER_RANK = ("allgather", "reduce_scatter", "alltoall")


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests: 2(n-1)/n for allreduce (reduce-scatter then allgather), (n-1)/n for
    allgather, reduce-scatter and alltoall, 1 for broadcast. realrun may not import sim/, whose
    collectives.py has the same table; a test holds the two equal."""
    if op == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if op in PER_RANK:
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"--ops: unknown collective {op!r}")


class SizeResult(NamedTuple):
    op: str
    size_bytes: int
    count: int
    time_us_mean: float  # mean over iterations of the slowest rank's time
    time_us_p50: float
    algbw_gb_s: float
    busbw_gb_s: float


# torch 2.13 renamed the tensor forms (all_gather_into_tensor -> all_gather_single);
# take the new name where it exists so older torch still works.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _collective(op: str, size_bytes: int, env: DistEnv):
    """A closure running one collective of ``size_bytes`` on preallocated buffers.
    Zeros: the values do not change the time and repeated in-place sums never overflow."""
    count, n = size_bytes // WORD_BYTES, env.world_size
    full = torch.zeros(count, dtype=DTYPE, device=env.comm_device)  # the CPU for MPS over gloo
    if op == "allreduce":
        return lambda: dist.all_reduce(full)
    if op == "broadcast":
        return lambda: dist.broadcast(full, src=0)
    if op == "alltoall":  # S / n of the buffer to each rank (nccl-tests' alltoall_perf)
        out = torch.zeros(count, dtype=DTYPE, device=env.comm_device)
        return lambda: dist.all_to_all_single(out, full)
    chunk = torch.zeros(count // n, dtype=DTYPE, device=env.comm_device)
    if op == "allgather":
        return lambda: _all_gather(full, chunk)
    return lambda: _reduce_scatter(chunk, full)


def runnable(op: str, size_bytes: int, ranks: int) -> bool:
    """Whole float32 elements, and for allgather/reduce-scatter/alltoall a whole chunk per rank."""
    unit = WORD_BYTES * (ranks if op in PER_RANK else 1)
    return size_bytes % unit == 0


def _time_iters(run, env: DistEnv, iters: int, warmup: int) -> tuple[list[float], list[float]]:
    """Warm up, then time every iteration between device synchronisations. Returns each
    iteration's time on this rank and on the slowest rank (what nccl-tests reports)."""
    dist.barrier()  # start together, so no rank's time includes waiting for a late peer
    for _ in range(warmup):
        run()
    own = torch.empty(iters, dtype=torch.float64)
    for i in range(iters):
        t0 = now(env.device)
        run()
        own[i] = now(env.device) - t0
    slowest = own.to(env.comm_device, copy=True)  # on CPU .to() would alias `own`
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return own.tolist(), slowest.cpu().tolist()


def _record(writer, op: str, size_bytes: int, env: DistEnv, own: list[float], slowest: list[float]) -> None:
    for i, (t, t_max) in enumerate(zip(own, slowest, strict=True)):
        writer.write(
            {
                "type": "collective",
                "op": op,
                "size_bytes": size_bytes,
                "count": size_bytes // WORD_BYTES,
                "dtype": "float32",
                "ranks": env.world_size,
                "iter": i,
                "time_s": t,
                "time_max_s": t_max,
            }
        )


def time_size(op: str, size_bytes: int, env: DistEnv, *, iters: int, warmup: int, writer) -> SizeResult:
    own, slowest = _time_iters(_collective(op, size_bytes, env), env, iters, warmup)
    _record(writer, op, size_bytes, env, own, slowest)
    mean_s = statistics.fmean(slowest)
    algbw = size_bytes / mean_s / 1e9  # nccl-tests: algbw from the average time
    return SizeResult(
        op,
        size_bytes,
        size_bytes // WORD_BYTES,
        mean_s * 1e6,
        statistics.median(slowest) * 1e6,
        algbw,
        algbw * bus_factor(op, env.world_size),
    )


def sweep(op: str, sizes: list[int], env: DistEnv, *, iters: int, warmup: int, writer) -> list[SizeResult]:
    rows, skipped = [], [s for s in sizes if not runnable(op, s, env.world_size)]
    if env.rank == 0:
        _print_header(op, sizes, env, iters, warmup, skipped)
    for size in sizes:
        if size in skipped:
            continue
        row = time_size(op, size, env, iters=iters, warmup=warmup, writer=writer)
        rows.append(row)
        if env.rank == 0:
            writer.write({"type": "collective_summary", **row._asdict(), "ranks": env.world_size})
            # nccl-tests' count column: a rank's piece for the ops that cut the buffer per rank.
            count = row.count // (env.world_size if op in PER_RANK else 1)
            print(
                f"  {row.size_bytes:>12} {count:>12} {DTYPE_NAME:>6} {REDOP[op]:>6}"
                f" {row.time_us_mean:>10.1f} {row.algbw_gb_s:>8.3f} {row.busbw_gb_s:>8.3f}",
                flush=True,
            )
    if env.rank == 0:
        avg = statistics.fmean(r.busbw_gb_s for r in rows) if rows else float("nan")
        print(f"# Avg bus bandwidth    : {avg:.4f}\n#", flush=True)
    return rows


def _print_header(op, sizes, env, iters, warmup, skipped) -> None:
    print(
        f"# ddplab probe {op}: nranks {env.world_size}, {env.backend} on {env.device.type},"
        f" minBytes {min(sizes)} maxBytes {max(sizes)}, warmup iters: {warmup} iters: {iters}"
    )
    print("# time = mean over iterations of the slowest rank's time (every iteration is in the records)")
    if skipped:
        unit = WORD_BYTES * (env.world_size if op in PER_RANK else 1)
        print(f"# skipped sizes {skipped}: not a multiple of {unit} B (float32 x chunk per rank)")
    print("#")
    head = ("size", "count", "type", "redop", "time", "algbw", "busbw")
    units = ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)")
    widths = (12, 12, 6, 6, 10, 8, 8)
    print("# " + " ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    print("# " + " ".join(f"{u:>{w}}" for u, w in zip(units, widths, strict=True)), flush=True)


QUICK_BYTES = 64 * 1024 * 1024  # the seed's torch.randn(64 * 1024 * 1024 // 4): 64 MiB of float32


def quick(env: DistEnv, writer) -> dict:
    """The seed's health check: one 64 MB allreduce, timed by each rank for itself.
    Unlike the seed, one untimed warm-up first (connection set-up is not bandwidth) and
    GB/s = 1e9 B/s (the seed divides by 1024, i.e. GiB/s)."""
    own, slowest = _time_iters(_collective("allreduce", QUICK_BYTES, env), env, iters=1, warmup=1)
    _record(writer, "allreduce", QUICK_BYTES, env, own, slowest)
    time_s = own[0]
    algbw = QUICK_BYTES / time_s / 1e9
    busbw = algbw * bus_factor("allreduce", env.world_size)
    return {"allreduce_64mb_s": time_s, "algbw_gb_s": algbw, "busbw_gb_s": busbw}
