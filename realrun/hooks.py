"""DDP communication hooks: the compression hook the user chose, optional CPU staging,
optional deferral (``--no-overlap``), and a timing wrapper that records every bucket.

DDP calls a comm hook once per bucket, in bucket order, as soon as backward has
produced all of the bucket's gradients, and waits on the returned futures only
at the end of backward (``register_comm_hook``; reducer.cpp ``finalize_backward``).
So the hook call time is the bucket's ready time, the collective's launch is
ours to choose, and ``fut.then`` fires when the reduced bucket is back.
"""

import threading
import time
from collections import deque

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

# PowerSGD runs plain allreduce for its first start_powerSGD_iter iterations; the default
# 1000 would make every short run plain allreduce. 2 is the smallest PowerSGDState
# accepts with error feedback / warm start (DDP rebuilds its buckets after iteration 1).
POWERSGD_START_ITER = 2
POWERSGD_RANK = 1


def inner_hook(kind: str, staging: str, group=None):
    """(hook, state) for ``--comm-hook`` and ``--grad-staging``, in DDP's comm hook signature."""
    if staging == "cpu":
        if kind == "powersgd":
            raise ValueError("--grad-staging cpu: works with --comm-hook none|fp16|bf16, not powersgd")
        dtype = {"none": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[kind]
        # A gloo group for the CPU copies, also when the default group is NCCL.
        if dist.get_backend() != "gloo":
            group = dist.new_group(backend="gloo")
        return staged_allreduce, (group, dtype)
    if kind == "none":
        return _allreduce_mean, group
    if kind == "fp16":
        return default_hooks.fp16_compress_hook, group
    if kind == "bf16":
        return default_hooks.bf16_compress_hook, group
    if kind == "powersgd":
        state = psgd.PowerSGDState(
            process_group=group,
            matrix_approximation_rank=POWERSGD_RANK,
            start_powerSGD_iter=POWERSGD_START_ITER,
        )
        return psgd.powerSGD_hook, state
    raise ValueError(f"--comm-hook: unknown {kind!r}")


def _allreduce_mean(group, bucket):
    """default_hooks.allreduce_hook with one Python callback fewer per bucket: divide first, as
    DDP's reducer does before its allreduce (reducer.cpp), then sum, and leave unwrapping the
    future's [tensor] to BucketHook's completion callback. Each Python callback runs on a gloo
    thread under the GIL and costs step time (bench/train_overhead.py). The process group's own
    allreduce skips dist.all_reduce's Python checks: ~10 us of 40 per bucket here."""
    pg = group or dist.group.WORLD
    buf = bucket.buffer().div_(pg.size())
    return pg.allreduce([buf]).get_future()


def staged_allreduce(state, bucket):
    """Average the bucket through a CPU copy on gloo, for a device gloo cannot reduce
    (the seed's Mac: MPS tensors). On a CPU rank the copy is real too, so the cost shows."""
    group, dtype = state
    buf = bucket.buffer()
    world = dist.get_world_size(group)
    # Divide before the sum, as torch's fp16 hook does, so half precision does not overflow.
    host = buf.to("cpu", dtype=dtype, copy=True).div_(world)
    fut = dist.all_reduce(host, group=group, async_op=True).get_future()

    def back(f):
        buf.copy_(f.value()[0])
        return buf

    return fut.then(back)


def comm_bytes(kind: str, state, bucket) -> int:
    """Bytes this bucket puts on the wire per rank before the ring's 2(N-1)/N factor."""
    buf = bucket.buffer()
    if kind in ("fp16", "bf16"):
        return buf.numel() * 2
    if kind != "powersgd" or state.iter < state.start_powerSGD_iter:
        return buf.numel() * buf.element_size()
    # PowerSGD (Vogels et al. 2019) as torch's powerSGD_hook: vectors go uncompressed; an
    # n x m matrix sends P (n x r) and Q (m x r) when that is min_compression_rate x smaller.
    numel = 0
    for g in bucket.gradients():
        if g.dim() <= 1:
            numel += g.numel()
            continue
        n, m = g.shape[0], g.numel() // g.shape[0]
        r = min(n, m, state.matrix_approximation_rank)
        small = (n + m) * r
        numel += small if small * state.min_compression_rate < n * m else n * m
    return numel * buf.element_size()


class Clock:
    """Times inside one step, relative to its start: perf_counter on CPU; on a GPU CUDA
    events, so marking a bucket never stalls the stream (resolved after the step's sync)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.t0 = 0.0
        self._e0 = None

    def start(self, t0: float) -> None:
        self.t0 = t0  # taken right after a synchronize, so the stream is idle
        if self.cuda:
            self._e0 = self.mark()

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, mark) -> float:
        return self._e0.elapsed_time(mark) / 1e3 if self.cuda else mark - self.t0


class BucketHook:
    """The comm hook DDP calls: optional deferral, optional timing, then the inner hook.

    ``clock`` None: no marks, no records (``--no-instrument`` with a hook, deferral or
    staging; plain ``--no-instrument`` registers no hook at all, DDP's own allreduce).
    """

    def __init__(self, kind: str, inner, inner_state, *, defer: bool, serial: bool, clock: Clock | None):
        self.kind, self.inner, self.inner_state = kind, inner, inner_state
        self.defer, self.serial, self.clock = defer, serial, clock
        self.records: list[dict] = []
        self._held: list[tuple] = []
        # serial: one bucket's collectives at a time, in bucket order (a FIFO comm stream).
        self._queue: deque[tuple] = deque()
        self._busy = False
        self._lock = threading.Lock()  # DDP's thread submits, gloo's callback threads drain

    def begin_step(self) -> None:
        self.records = []

    def comm_hook(self, _state, bucket) -> torch.futures.Future[torch.Tensor]:
        rec = {"index": bucket.index()}
        if self.clock is not None:  # ~0.1 ms of Python per bucket on a slow CPU: keep it lean
            rec["ready"] = self.clock.mark()
            buf = bucket.buffer()
            rec["bytes"] = buf.numel() * buf.element_size()
            rec["comm_bytes"] = rec["bytes"] if self.kind == "none" else comm_bytes(self.kind, self.inner_state, bucket)
            self.records.append(rec)
        if not (self.defer or self.serial):
            return self._launch(bucket, rec)
        dev = bucket.buffer().device
        out = torch.futures.Future(devices=[dev] if dev.type == "cuda" else None)
        if not self.defer:
            self._submit(bucket, rec, out)
            return out
        # --no-overlap: hold every bucket until the last is ready (backward compute is
        # over), then launch them in order. DDP only waits at the end of backward.
        self._held.append((bucket, rec, out))
        if bucket.is_last():
            held, self._held = self._held, []
            for item in held:
                self._submit(*item)
        return out

    def _submit(self, bucket, rec: dict, out: torch.futures.Future) -> None:
        if not self.serial:
            self._launch(bucket, rec).then(lambda f: _pass_on(f, out))
            return
        with self._lock:
            self._queue.append((bucket, rec, out))
            if self._busy:
                return
            self._busy = True
        self._launch_next()

    def _launch_next(self) -> None:
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            bucket, rec, out = self._queue.popleft()

        def finished(f):
            _pass_on(f, out)
            self._launch_next()

        self._launch(bucket, rec).then(finished)

    def _launch(self, bucket, rec: dict) -> torch.futures.Future:
        clock = self.clock
        if clock is not None:
            rec["launch"] = clock.mark()
        fut = self.inner(self.inner_state, bucket)

        def done(f):
            value = f.value()  # raises if the collective failed; "done" stays unset
            if clock is not None:
                rec["done"] = clock.mark()
            # DDP wants the bucket tensor; a raw collective's future holds [tensor].
            return value[0] if isinstance(value, list) else value

        return fut.then(done)

    def step_buckets(self) -> list[dict]:
        """This step's bucket records in seconds from the step's start (after the sync)."""
        s = self.clock.seconds
        return [
            {
                "index": r["index"],
                "bytes": r["bytes"],
                "comm_bytes": r["comm_bytes"],
                "ready_s": s(r["ready"]),
                "launch_s": s(r["launch"]),
                "done_s": s(r["done"]),
            }
            for r in self.records
        ]

    def in_flight(self) -> str | None:
        """The first collective launched and not finished (what a failure interrupted)."""
        for r in self.records:
            if "launch" in r and "done" not in r:
                return f"allreduce of bucket {r['index']}"
        return None


def _pass_on(src: torch.futures.Future, dst: torch.futures.Future) -> None:
    try:
        dst.set_result(src.value())
    except Exception as e:  # the collective failed: DDP's wait on dst raises it
        dst.set_exception(e)
