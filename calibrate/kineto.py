"""PyTorch profiler (Kineto) traces, read one event at a time.

A trace is one JSON object per rank (``torch.profiler`` with ``export_chrome_trace`` or
``tensorboard_trace_handler``; ``.json`` or ``.json.gz``; before torch 1.8 a bare array of the
events, and until 1.9 the categories capitalised: ``LEGACY_CATS``): top-level metadata
(``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, whatever
``add_metadata_json`` added) and ``traceEvents``, a list of Chrome trace events
(``ph`` "X" spans with ``ts``/``dur`` in microseconds). A job's trace runs to gigabytes, and
``json.load`` holds the whole text and every event as Python objects (about 10x the file);
Holistic Trace Analysis does the same into pandas (hta/common/trace_parser.py, ``json.load``
then a DataFrame). So this reader is hand-written and incremental: ``json.JSONDecoder.raw_decode``
on one event at a time from a bounded buffer, and only what the fit needs is kept, in compact
arrays (bench/trace_memory.py measures the peak on a 1 GB trace). Names follow Kineto's
(libkineto/src/output_json.cpp) and PyTorch's (record_function annotations):

- ``ProfilerStep#N`` (``user_annotation`` on the training thread): one per ``prof.step()``;
- ``DistributedDataParallel.forward`` (torch/nn/parallel/distributed.py) and ``## forward ##``
  (a common user annotation), ``Optimizer.step#...`` / ``Optimizer.zero_grad#...``
  (torch/optim/optimizer.py), ``autograd::engine::evaluate_function: ...`` (every backward node);
- collectives as issued on the CPU (``c10d::allreduce_`` and siblings; ``record_param_comms``
  with ``Collective name``, ``In msg nelems``, ``dtype``) and as executed: ``gloo:all_reduce``
  on gloo's worker threads (shapes when ``record_shapes``), ``ncclKernel_*`` / ``ncclDevKernel_*``
  GPU kernels (sizes in their args since PyTorch 2.1), and an expert-parallel library's all-to-all
  kernels (DeepEP's dispatch and combine; no sizes);
- GPU work: ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events on a ``stream``, each tied to
  the CPU call that launched it by ``correlation`` (``cuda_runtime`` / ``cuda_driver``);
- ``ddplab.train_step``: in `ddplab train --profile`'s own traces, the training step as its
  records time it (realrun/profiling.py STEP_SPAN): the rest of ProfilerStep#N is the harness's.
"""

import gzip
import io
import json
import re
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CHUNK_CHARS = 1 << 20
STEP_SPAN = "ddplab.train_step"  # realrun/profiling.py's twin (tests/test_twins.py)
MAX_VALUE_CHARS = 64 << 20  # no event or metadata value of a real trace comes near 64 MB

# Kernel kinds exactly as Holistic Trace Analysis sorts them (hta/utils/utils.py get_kernel_type),
# so its figures and ours are the same quantities: communication = NCCL kernels; memory = copies
# and sets; computation = neither (its regex, quirks included); other = the rest.
COMPUTE, COMM, MEMORY, OTHER = 0, 1, 2, 3
# One kind HTA does not have: an expert-parallel library's all-to-all kernels, which move tokens
# between ranks over NVLink and RDMA without NCCL. HTA's rule files them as computation (their
# names do not start with "nccl"), so its totals count them there; the per-step fit counts them as
# communication. DeepEP's (deepseek-ai/DeepEP csrc/kernels: namespaces intranode, internode,
# internode_ll; dispatch, combine, their notify/cached_notify exchanges of token counts, and
# barrier), under its public namespace ``deep_ep`` and the ``dpsk::ep`` of DeepSeek's own
# published training trace (docs/traces.md). Its layout and buffer-cleaning kernels stay local work.
EP_COMM = 4
_EP_KERNEL = re.compile(
    r"\b(?:deep_ep|dpsk::ep)::(?:legacy::)?(?:intranode|internode|internode_ll)::"
    r"(?:dispatch|combine|notify_dispatch|cached_notify\w*|barrier)\b"
)
_NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
_MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

# Bytes per element of the dtype names in traces: NCCL kernels' and record_param_comms' "dtype"
# (c10::ScalarType names) and record_shapes' "Input type" (C++ type names).
DTYPE_BYTES = {
    "float": 4, "double": 8, "half": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2,
    "int": 4, "long": 8, "long int": 8, "int64_t": 8, "short": 2, "byte": 1, "char": 1,
    "unsigned char": 1, "signed char": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}  # fmt: skip

# Kineto's event categories: a trace with none of them was written by another profiler.
KINETO_CATS = {
    "cpu_op", "user_annotation", "kernel", "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset",
    "gpu_user_annotation", "python_function", "ac2g", "fwdbwd", "cpu_instant_event", "Trace",
}  # fmt: skip

# The same categories as Kineto wrote them in 2021 (torch 1.8-1.9): the TensorBoard plugin's own
# samples of that year (pytorch/kineto tb_plugin/samples at be239c04, ResNet-50 on a V100) have
# "Kernel", "Runtime", "Operator", "Memcpy", "Memset", which the reader would otherwise pass over
# as unknown and take a GPU trace for a CPU-only one.
LEGACY_CATS = {
    "Kernel": "kernel", "Runtime": "cuda_runtime", "Operator": "cpu_op", "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}  # fmt: skip

_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_C10D = re.compile(r"c10d::(allreduce|allgather|_allgather_base|reduce_scatter|_reduce_scatter_base|broadcast)")
_GLOO = re.compile(r"gloo:(\w+)")
_NCCL_OP = re.compile(r"nccl(?:Dev)?Kernel_(\w+?)_", re.IGNORECASE)
# Collective names as sim/collectives.py's bus_factor knows them.
_OPS = {
    "allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather", "all_gather": "allgather",
    "_allgather_base": "allgather", "allgather_into_tensor_coalesced": "allgather",
    "all_gather_into_tensor": "allgather", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "broadcast": "broadcast",
}  # fmt: skip


class TraceError(ValueError):
    """One line naming the trace and what is wrong with it."""


def op_name(raw: str | None) -> str | None:
    return _OPS.get((raw or "").lower()) if raw else None


def kernel_kind(name: str) -> int:
    if _NCCL_KERNEL.match(name):
        return COMM
    if _EP_KERNEL.search(name):
        return EP_COMM
    if _MEMORY_KERNEL.match(name):
        return MEMORY
    return OTHER if _NOT_COMPUTE.match(name) else COMPUTE


@dataclass
class Collective:
    """One collective: issued on the CPU (``issue_ts``) and/or executed (``ts``/``dur``: a gloo
    worker's span or an NCCL kernel). Times in microseconds, as in the trace."""

    op: str
    bytes: int | None
    group: int | None
    ts: float
    dur: float
    where: str  # "gpu" (an NCCL or expert-parallel kernel) or "cpu" (a gloo worker thread)
    correlation: int = -1


@dataclass
class RankTrace:
    """What the fit reads from one rank's trace (times in microseconds, as written)."""

    path: str
    meta: dict
    events: int = 0
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (N, ts, dur)
    forward: list[tuple[float, float]] = field(default_factory=list)  # (ts, end)
    optimizer: list[tuple[float, float]] = field(default_factory=list)
    own_steps: list[tuple[float, float]] = field(default_factory=list)  # STEP_SPAN: ddplab's own traces
    backward_ops: array = field(default_factory=lambda: array("d"))  # ts, end, ts, end, ...
    issues: list[Collective] = field(default_factory=list)  # c10d:: calls on the CPU (dur = the call)
    param_comms: list[Collective] = field(default_factory=list)  # record_param_comms (sizes)
    executed: list[Collective] = field(default_factory=list)  # gloo spans, NCCL and EP kernels
    # GPU work: parallel arrays (kernels, copies, sets), and launches by correlation.
    gpu_ts: array = field(default_factory=lambda: array("d"))
    gpu_dur: array = field(default_factory=lambda: array("d"))
    gpu_kind: array = field(default_factory=lambda: array("b"))
    gpu_corr: array = field(default_factory=lambda: array("q"))
    launch_corr: array = field(default_factory=lambda: array("q"))
    launch_ts: array = field(default_factory=lambda: array("d"))
    kineto_events: int = 0  # events in a Kineto category

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu_ts) > 0

    @property
    def rank(self) -> int | None:
        dist = self.meta.get("distributedInfo") or {}
        own = self.meta.get("ddplab") or {}
        r = dist.get("rank", own.get("rank"))
        return r if isinstance(r, int) else None

    @property
    def world_size(self) -> int | None:
        dist = self.meta.get("distributedInfo") or {}
        own = self.meta.get("ddplab") or {}
        w = dist.get("world_size", own.get("world_size"))
        return w if isinstance(w, int) else None

    @property
    def base_us(self) -> float:
        """Kineto writes ``ts`` relative to ``baseTimeNanoseconds`` since 2023; before, absolute."""
        base = self.meta.get("baseTimeNanoseconds")
        return base / 1e3 if isinstance(base, (int, float)) else 0.0

    def launches(self) -> tuple[np.ndarray, np.ndarray]:
        """(correlation ids sorted, their launch ts) for searchsorted lookups."""
        corr = np.frombuffer(self.launch_corr, dtype=np.int64) if len(self.launch_corr) else np.zeros(0, np.int64)
        ts = np.frombuffer(self.launch_ts, dtype=np.float64) if len(self.launch_ts) else np.zeros(0)
        order = np.argsort(corr, kind="stable")
        return corr[order], ts[order]


def _dims_bytes(args: dict) -> int | None:
    """A collective's bytes from record_shapes' first input (gloo spans, c10d calls)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not types or not isinstance(dims[0], list):
        return None
    per = DTYPE_BYTES.get(str(types[0]).lower())
    if per is None:
        return None
    n = 1
    for d in dims[0]:
        n *= int(d)
    return n * per


def _nelems_bytes(args: dict) -> int | None:
    """Bytes from NCCL kernels' and record_param_comms' "In msg nelems" and "dtype"."""
    n, dtype = args.get("In msg nelems"), args.get("dtype")
    per = DTYPE_BYTES.get(str(dtype).lower()) if dtype is not None else None
    return int(n) * per if isinstance(n, (int, float)) and per else None


class _Reader:
    """Characters from a .json or .json.gz file, a buffer at a time, with the byte position of
    the file underneath (for progress)."""

    def __init__(self, path: Path):
        self.path = path
        self.raw = open(path, "rb")
        gz = self.raw.read(2) == b"\x1f\x8b"
        self.raw.seek(0)
        self.text = gzip.open(self.raw, "rt", encoding="utf-8") if gz else io.TextIOWrapper(self.raw, encoding="utf-8")
        self.buf, self.pos, self.eof = "", 0, False

    def close(self):
        self.text.close()
        self.raw.close()

    def more(self) -> bool:
        """Read another chunk, dropping what was consumed; False at the end of the file."""
        if self.eof:
            return False
        try:
            chunk = self.text.read(CHUNK_CHARS)
        except EOFError:
            raise TraceError(f"{self.path}: truncated gzip (the compressed stream ends early)") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise TraceError(f"{self.path}: corrupt gzip ({e})") from None
        except UnicodeDecodeError:
            raise TraceError(f"{self.path}: not UTF-8 text (not a JSON trace)") from None
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def skip_ws(self) -> str:
        """The next non-space character (not consumed); "" at the end of the file."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < n:
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if not c or c not in chars:
            found = f"{c!r}" if c else "the end of the file"
            raise TraceError(
                f"{self.path}: {what}: expected {' or '.join(map(repr, chars))}, found {found} (truncated?)"
            )
        self.pos += 1
        return c

    def value(self, decoder: json.JSONDecoder):
        """The next JSON value, reading more until it is whole."""
        self.skip_ws()
        while True:
            try:
                obj, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                # Incomplete at the buffer's end: read on, up to a bound no trace event comes near
                # (an invalid file must not be read whole into memory looking for an end).
                if len(self.buf) - self.pos < MAX_VALUE_CHARS and self.more():
                    continue
                if self.eof and (e.pos >= len(self.buf.rstrip()) or e.msg.startswith("Unterminated")):
                    raise TraceError(f"{self.path}: the JSON ends mid-value (truncated?)") from None
                raise TraceError(f"{self.path}: not valid JSON ({e.msg})") from None
            # A number that ends exactly at the buffer's end may go on in the next chunk.
            if end == len(self.buf) and not isinstance(obj, (dict, list, str)) and self.more():
                continue
            self.pos = end
            return obj


def read_trace(path: Path, progress=None) -> RankTrace:
    """One rank's trace, streamed. ``progress(bytes_read, total_bytes)`` is called every few MB."""
    path = Path(path)
    try:
        total = path.stat().st_size
        reader = _Reader(path)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    decoder = json.JSONDecoder()
    meta: dict = {}
    trace = RankTrace(path=str(path), meta=meta)
    try:
        first = reader.skip_ws()
        if first not in ("[", "{"):
            raise TraceError(f"{path}: not a JSON object (not a PyTorch profiler trace)")
        seen_events = False
        if first == "[":
            # A bare array of events, Chrome's other trace form, is how Kineto wrote traces before
            # torch 1.8 shipped (the TensorBoard plugin's first samples, pytorch/kineto a0380a32,
            # December 2020): events alone, no metadata; whose they are, the categories say below.
            seen_events = True
            _read_events(reader, decoder, trace, progress, total)
        else:
            reader.pos += 1
        while first == "{":
            c = reader.expect('}"', "the trace's top-level object")
            if c == "}":
                break
            reader.pos -= 1
            key = reader.value(decoder)
            reader.expect(":", f"after key {key!r}")
            if key == "traceEvents":
                seen_events = True
                _read_events(reader, decoder, trace, progress, total)
            else:
                meta[key] = reader.value(decoder)
            if reader.expect(",}", "the trace's top-level object") == "}":
                break
    finally:
        reader.close()
    if not seen_events:
        # Execution traces are the graphs that trace-driven simulators (Chakra, ASTRA-sim) replay:
        # PyTorch's ExecutionTraceObserver writes "schema" and "nodes", Chakra's JSON form a
        # "workload_graph" (mlcommons/chakra tests/data). Neither times kernels or steps.
        graph = (
            "a PyTorch execution trace"
            if "nodes" in meta and "schema" in meta
            else "a Chakra execution trace"
            if "workload_graph" in meta
            else None
        )
        if graph:
            raise TraceError(
                f"{path}: {graph}, a graph of operators, not a timeline of steps (no traceEvents): calibrate"
                " reads the PyTorch profiler (Kineto) trace recorded beside it"
            )
        raise TraceError(f"{path}: no traceEvents (not a PyTorch profiler trace; another profiler's JSON?)")
    if trace.events and not trace.kineto_events:
        raise TraceError(
            f"{path}: none of its {trace.events} events is in a PyTorch profiler (Kineto) category"
            " (cpu_op, kernel, user_annotation, ...): another profiler's trace"
        )
    return trace


def _read_events(reader: _Reader, decoder: json.JSONDecoder, t: RankTrace, progress, total: int) -> None:
    reader.expect("[", "traceEvents")
    if reader.skip_ws() == "]":
        reader.pos += 1
        return
    next_report = 1 << 24
    while True:
        e = reader.value(decoder)
        t.events += 1
        if isinstance(e, dict):
            _take(e, t)
        if progress is not None and t.events % 4096 == 0:
            done = reader.raw.tell()
            if done >= next_report:
                progress(done, total)
                next_report = done + (1 << 24)
        if reader.expect(",]", "traceEvents") == "]":
            return


def _take(e: dict, t: RankTrace) -> None:
    """Keep what the fit uses of one event."""
    cat = e.get("cat")
    cat = LEGACY_CATS.get(cat, cat) if isinstance(cat, str) else cat
    if cat in KINETO_CATS:
        t.kineto_events += 1
    if e.get("ph") != "X":
        return
    name = e.get("name")
    ts, dur = e.get("ts"), e.get("dur")
    if not isinstance(name, str) or not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
        return
    args = e.get("args") or {}
    if cat == "gpu_user_annotation":  # the GPU timeline's copies of CPU annotations: the CPU's count
        return
    # cuda_sync: a stream blocked on an event (Kineto's "Stream Sync" / "Event Sync" on the GPU
    # timeline); HTA counts it as GPU time of the kind "other", and so does this reader.
    if cat in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"):
        if not isinstance(args.get("stream"), int) or args.get("stream") < 0:
            return
        kind = kernel_kind(name)
        t.gpu_ts.append(ts)
        t.gpu_dur.append(dur)
        t.gpu_kind.append(kind)
        corr = args.get("correlation")
        t.gpu_corr.append(corr if isinstance(corr, int) else -1)
        if kind in (COMM, EP_COMM):
            m = _NCCL_OP.match(name)
            op = (
                "alltoall"
                if kind == EP_COMM
                else op_name(args.get("Collective name")) or op_name(m.group(1) if m else None) or "other"
            )
            group = args.get("Group size")
            t.executed.append(
                Collective(op, _nelems_bytes(args), group if isinstance(group, int) else None, ts, dur, "gpu",
                           corr if isinstance(corr, int) else -1)
            )  # fmt: skip
        return
    if cat in ("cuda_runtime", "cuda_driver"):
        corr = args.get("correlation")
        if isinstance(corr, int):
            t.launch_corr.append(corr)
            t.launch_ts.append(ts)
        return
    if name.startswith("autograd::engine::evaluate_function"):
        t.backward_ops.append(ts)
        t.backward_ops.append(ts + dur)
        return
    m = _STEP.fullmatch(name)
    if m:
        t.steps.append((int(m.group(1)), ts, dur))
        return
    if name in ("DistributedDataParallel.forward", "## forward ##"):
        t.forward.append((ts, ts + dur))
    elif name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        t.optimizer.append((ts, ts + dur))
    elif name == STEP_SPAN:
        t.own_steps.append((ts, ts + dur))
    elif name == "record_param_comms":
        op = op_name(args.get("Collective name"))
        if op:
            group = args.get("Group size")
            t.param_comms.append(
                Collective(op, _nelems_bytes(args), group if isinstance(group, int) else None, ts, dur, "cpu")
            )
    elif name.startswith("c10d::"):
        m = _C10D.match(name)
        if m:
            t.issues.append(Collective(_OPS[m.group(1)], _dims_bytes(args), None, ts, dur, "cpu"))
    elif name.startswith("gloo:"):
        m = _GLOO.match(name)
        op = op_name(m.group(1)) if m else None
        if op:
            t.executed.append(Collective(op, _dims_bytes(args), None, ts, dur, "cpu"))
