"""What a job's PyTorch profiler traces say about it, per rank and step (docs/traces.md).

calibrate/kineto.py reads the events; this module turns one trace per rank into per-step
times, collectives and the bucket-ready profile, each value with its provenance ("measured in
<trace>, rank r, steps a-b"), and calibrate/trace_calib.py turns those into the calibration
`ddplab calibrate` writes from probes.

Per step (``ProfilerStep#N``'s window on the training thread):

- CPU-only traces (gloo): the work is the CPU ops themselves. Compute runs from the first
  forward annotation (``DistributedDataParallel.forward``) to the last gradient all-reduce
  issued in backward (DDP issues a bucket the moment it is ready, so the last issue is the end
  of backward compute: realrun/train.py records it the same way from its comm hook); forward
  is the forward annotations' time, backward the rest. Communication is gloo's worker-thread
  spans (``gloo:all_reduce``), overlap their part inside the compute window.
- GPU traces: each kernel belongs to the step whose window holds the CPU call that launched it
  (``correlation``), as Holistic Trace Analysis assigns iterations (hta/common/trace.py
  add_iteration). Compute, communication and their overlap are unions of kernel intervals,
  sorted by HTA's rule (calibrate/kineto.py ``kernel_kind``), except that an expert-parallel
  library's all-to-all kernels (DeepEP's), which HTA files as computation, are communication
  here; forward, backward and optimizer are the compute kernels launched inside the forward
  annotation, the autograd engine's span and the optimizer annotations. The last profiled step
  is left out, as HTA leaves it out (hta/common/trace.py ``_filter_irrelevant_gpu_kernels``):
  its kernels may outlive the trace.

The HTA figures (``HtaTotals``) repeat HTA's whole-trace definitions (temporal breakdown,
communication/computation overlap), the EP kernels in its computation, so
tests/test_traces_public.py can hold them within 1 %.
"""

import bisect
from dataclasses import dataclass, field

import numpy as np

from calibrate.kineto import COMM, COMPUTE, EP_COMM, RankTrace, TraceError
from sim.collectives import bus_factor

US = 1e-6


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals covering the given ones (HTA's merge_kernel_intervals)."""
    if len(starts) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, float)[order], np.asarray(ends, float)[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    groups = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s))
    np.maximum.at(out_e, groups, e)
    return out_s, out_e


def length(iv: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.sum(iv[1] - iv[0]))


def overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Total length of the intersection of two disjoint interval sets."""
    total, i, j = 0.0, 0, 0
    (as_, ae), (bs, be) = a, b
    while i < len(as_) and j < len(bs):
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            total += hi - lo
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return total


@dataclass
class CollectiveCall:
    op: str
    bytes: int | None
    ranks: int
    seconds: float


@dataclass
class Bucket:
    bytes: int | None
    ready_fraction: float  # of backward done when DDP issued its all-reduce


@dataclass
class StepFit:
    step: int
    step_s: float  # ProfilerStep#N on the training thread
    compute_s: float
    forward_s: float | None  # None: no forward annotation in this trace
    backward_s: float | None
    optimizer_s: float | None
    comm_s: float
    overlap_s: float  # communication while compute runs
    buckets: list[Bucket]
    collectives: list[CollectiveCall]
    # From the end of backward compute (the last gradient all-reduce issued) to the end of the
    # last one: realrun's ``wait_s`` (realrun/train.py), what validate compares.
    wait_s: float = 0.0
    # ProfilerStep#N beyond the job's own step where the job annotated it (`ddplab train
    # --profile`'s kineto.STEP_SPAN: the records it writes, the profiler's step); 0 otherwise.
    harness_s: float = 0.0
    forwards: int = 0  # forward passes (outermost forward annotations): micro-steps where annotated
    gpu: bool = False  # compute_s is then every compute kernel of the step, the optimizer's included
    # When this rank joins the gradient sync (the end of its backward compute, what the other
    # ranks' last all-reduce waits for), from a moment common to every rank: on a CPU trace the
    # step's start (gloo's all-reduces block the host), on a GPU trace the previous step's last
    # gradient all-reduce's end. None where the trace does not show it (no backward span or
    # gradient all-reduce; a GPU trace's first profiled step).
    ready_s: float | None = None

    @property
    def exposed_comm_s(self) -> float:
        return self.comm_s - self.overlap_s

    @property
    def fwd_bwd_s(self) -> float:
        """Forward and backward compute: the annotated spans' where both are, else the step's
        compute (on a GPU less the optimizer's kernels, which the step's compute holds)."""
        if self.forward_s is not None and self.backward_s is not None:
            return self.forward_s + self.backward_s
        return max(self.compute_s - (self.optimizer_s or 0.0), 0.0) if self.gpu else self.compute_s

    @property
    def lead_s(self) -> float | None:
        """The time before the gradient sync that is not forward or backward compute: data loading,
        host work, launch gaps (and on a GPU the previous step's optimizer). A rank long in it
        makes every other rank wait, its compute as fast as theirs."""
        return None if self.ready_s is None else max(self.ready_s - self.fwd_bwd_s, 0.0)

    @property
    def outside_s(self) -> float:
        """The step's time outside what the simulator models apart (forward and backward compute,
        the wait for the gradient all-reduces, the optimizer): data loading, host work and
        launch gaps, a GPU's idle time, communication other than the gradients'. 0 at least."""
        return max(self.step_s - self.harness_s - self.fwd_bwd_s - self.wait_s - (self.optimizer_s or 0.0), 0.0)


@dataclass
class HtaTotals:
    """Whole-trace figures by HTA's definitions (microseconds, as HTA prints them)."""

    kernel_time_us: float  # first kept kernel's start to last one's end
    idle_time_us: float
    compute_time_us: float  # union of computation kernels
    comm_time_us: float  # union of communication kernels
    overlap_ratio: float  # computation during communication / communication (get_comm_comp_overlap)


@dataclass
class RankFit:
    path: str
    rank: int
    world_size: int | None
    gpu: bool
    steps: list[StepFit]
    hta: HtaTotals | None = None
    notes: list[str] = field(default_factory=list)  # what this trace lacks, or reads unlike HTA
    ep_kernels: int = 0  # expert-parallel all-to-all kernels (DeepEP's): communication here
    ep_kernel_s: float = 0.0  # their summed durations

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def ep_note(self) -> str:
        """What the trace's expert-parallel kernels are here and in HTA's figures ("" without any)."""
        if not self.ep_kernels:
            return ""
        return (
            f"{self.ep_kernels} expert-parallel all-to-all kernels (DeepEP), {self.ep_kernel_s * 1e3:.3f} ms:"
            " communication here, computation in HTA's figures; their sizes are not in the trace"
        )

    @property
    def provenance(self) -> str:
        a, b = self.steps[0].step, self.steps[-1].step
        return (
            f"measured in {self.name}, rank {self.rank}, steps {a}-{b}"
            if a != b
            else (f"measured in {self.name}, rank {self.rank}, step {a}")
        )


def fit_rank(t: RankTrace, rank: int) -> RankFit:
    """Per-step times of one rank's trace."""
    if not t.steps:
        raise TraceError(
            f"{t.path}: no ProfilerStep#N events: profile with a schedule and call prof.step() after each"
            " training step (docs/traces.md)"
        )
    steps = sorted(t.steps)
    used = steps[:-1] if t.has_gpu and len(steps) >= 2 else steps
    world = t.world_size or 1
    fit = RankFit(path=t.path, rank=rank, world_size=t.world_size, gpu=t.has_gpu, steps=[])
    if t.has_gpu:
        _fit_gpu(t, used, steps, world, fit)
    else:
        _fit_cpu(t, used, world, fit)
    if not t.forward:
        fit.notes.append("no forward annotation (DistributedDataParallel.forward): forward and backward not split")
    if not t.optimizer:
        fit.notes.append("no Optimizer.step annotation: optimizer time absent")
    return fit


def _fit_cpu(t: RankTrace, used, world: int, fit: RankFit) -> None:
    bwd = _sorted_pairs(t.backward_ops)
    fwd_all, opt_all, own_all = sorted(t.forward), sorted(t.optimizer), sorted(t.own_steps)
    issues = sorted(t.issues, key=lambda c: c.ts)
    executed_all = sorted(t.executed, key=lambda c: c.ts)
    issue_ts, executed_ts = [c.ts for c in issues], [c.ts for c in executed_all]
    for n, ts, dur in used:
        hi = ts + dur
        fwd, opt = _outermost(_in(fwd_all, ts, hi)), _in(opt_all, ts, hi)
        ops = bwd[np.searchsorted(bwd[:, 0], ts) : np.searchsorted(bwd[:, 0], hi)]
        start = fwd[0][0] if fwd else (float(ops[:, 0].min()) if len(ops) else ts)
        fwd_end = fwd[-1][1] if fwd else start
        grads = [
            c
            for c in issues[bisect.bisect_left(issue_ts, fwd_end) : bisect.bisect_left(issue_ts, hi)]
            if c.op == "allreduce"
        ]
        if opt:  # gradient all-reduces are issued before the optimizer runs
            grads = [c for c in grads if c.ts < opt[0][0]]
        if grads:
            end = grads[-1].ts
        elif len(ops):
            end = float(ops[:, 1].max())
        else:
            end = opt[0][0] if opt else hi
        forward = sum(e - s for s, e in fwd) * US if fwd else None
        compute = (end - start) * US
        # gloo's worker threads take collectives from one queue in the order issued, so the k-th
        # to start is the k-th issued (the c10d call's own shapes are a TensorList, dtype unnamed).
        executed = executed_all[bisect.bisect_left(executed_ts, ts) : bisect.bisect_left(executed_ts, hi)]
        # A gloo worker's span can close after the work is done: DDP's backward returns only once
        # every gradient all-reduce has completed, and the optimizer follows, yet when the
        # profiler stops a starved worker thread has closed the last step's last span 0.5 s after
        # a 19 ms step ended (2 ranks, 2 cores). So a span ends by the optimizer's start if it
        # began before it, and by its step's end.
        cap = opt[0][0] if opt else hi  # the optimizer starts inside the step: cap <= hi
        ends = [min(c.ts + c.dur, cap if c.ts < cap else hi) for c in executed]
        comm = union(np.array([c.ts for c in executed]), np.array(ends))
        grad_ends = [e for c, e in zip(executed, ends, strict=True) if c.op == "allreduce"]
        window = (np.array([start]), np.array([end]))
        sizes = [c.bytes for c in executed if c.op == "allreduce"]
        buckets = [
            Bucket(
                bytes=c.bytes if c.bytes is not None else (sizes[i] if i < len(sizes) else None),
                ready_fraction=min(max((c.ts - fwd_end) / (end - fwd_end), 0.0), 1.0) if end > fwd_end else 1.0,
            )
            for i, c in enumerate(grads)
        ]
        fit.steps.append(
            StepFit(
                step=n,
                step_s=dur * US,
                compute_s=compute,
                forward_s=forward,
                backward_s=compute - forward if forward is not None else None,
                optimizer_s=sum(e - s for s, e in opt) * US if opt else None,
                comm_s=length(comm) * US,
                overlap_s=overlap(comm, window) * US,
                buckets=buckets,
                collectives=[
                    CollectiveCall(c.op, c.bytes, c.group or world, (e - c.ts) * US)
                    for c, e in zip(executed, ends, strict=True)
                ],
                # Backward returns after the last all-reduce and DDP's own finalisation (on a loaded
                # box, ms more: 14 ms of rank 0's step 2 in tests/test_traces_realrun.py's run); the
                # optimizer starts right after, so its start ends the wait when annotated.
                wait_s=max((opt[0][0] if opt else max(grad_ends + [end])) - end, 0.0) * US,
                harness_s=_harness(own_all, ts, dur) * US,
                forwards=len(fwd),
                ready_s=(end - ts) * US if grads else None,
            )
        )


def _harness(own_all: list[tuple[float, float]], ts: float, dur: float) -> float:
    """ProfilerStep#N's time outside the job's own annotated step (kineto.STEP_SPAN), 0 without one."""
    own = _in(own_all, ts, ts + dur)
    return max(dur - sum(e - s for s, e in own), 0.0) if own else 0.0


def _fit_gpu(t: RankTrace, used, steps, world: int, fit: RankFit) -> None:
    gts = np.frombuffer(t.gpu_ts, dtype=np.float64)
    gend = gts + np.frombuffer(t.gpu_dur, dtype=np.float64)
    kind = np.frombuffer(t.gpu_kind, dtype=np.int8)
    corr = np.frombuffer(t.gpu_corr, dtype=np.int64)
    lc, lts = t.launches()
    if len(lc):
        idx = np.minimum(np.searchsorted(lc, corr), len(lc) - 1)
        found = lc[idx] == corr
        launch = np.where(found, lts[idx], np.inf)
    else:
        found, launch = np.zeros(len(corr), bool), np.full(len(corr), np.inf)
        fit.notes.append("no kernel launches (correlation) in the trace: kernels not tied to steps")
    # HTA's totals: kernels launched before the last profiled step began (all, with one step).
    keep = found & (launch < steps[-1][1]) if len(steps) >= 2 else np.ones(len(gts), bool)
    fit.hta = _hta_totals(gts[keep], gend[keep], kind[keep])
    # Kernels by launch time, so each step (and each span in it) is a slice: a 1 GB trace has
    # millions of kernels and thousands of steps.
    order = np.argsort(launch, kind="stable")
    launch, gts, gend, kind, corr = launch[order], gts[order], gend[order], kind[order], corr[order]
    bwd = _sorted_pairs(t.backward_ops)
    fwd_all, opt_all, own_all = sorted(t.forward), sorted(t.optimizer), sorted(t.own_steps)
    comm_by_corr = {c.correlation: c for c in t.executed if c.where == "gpu"}

    def part(lo: float, hi: float, which=(COMPUTE,)):
        a, b = np.searchsorted(launch, [lo, hi])
        m = np.isin(kind[a:b], which)
        return union(gts[a:b][m], gend[a:b][m])

    ep = kind == EP_COMM
    fit.ep_kernels, fit.ep_kernel_s = int(ep.sum()), float(np.sum(gend[ep] - gts[ep])) * US
    if fit.ep_kernels:
        fit.notes.append(fit.ep_note)
    # When the previous step's gradient all-reduces ended (GPU time; its step number): the moment
    # the ranks were last together, which every rank's clock marks alike. The CPU's step start is
    # no such mark on a GPU: a rank that syncs its host each step (loss.item()) starts its steps
    # later against its own kernels than one whose host runs ahead.
    last_sync: tuple[int, float] | None = None
    for n, ts, dur in used:
        hi = ts + dur
        comp_iv, comm_iv = part(ts, hi), part(ts, hi, (COMM, EP_COMM))
        fwd, opt = _outermost(_in(fwd_all, ts, hi)), _in(opt_all, ts, hi)
        ops = bwd[np.searchsorted(bwd[:, 0], ts) : np.searchsorted(bwd[:, 0], hi)]

        def within(spans):
            ivs = [part(s, e) for s, e in spans]
            return length(union(np.concatenate([x[0] for x in ivs]), np.concatenate([x[1] for x in ivs]))) * US

        bwd_span = [(float(ops[:, 0].min()), float(ops[:, 1].max()))] if len(ops) else []
        grads, wait, ready = [], 0.0, None
        if bwd_span:
            b0, b1 = bwd_span[0]
            a, b = np.searchsorted(launch, [b0, b1], side="left")[0], np.searchsorted(launch, b1, side="right")
            grad_end = -np.inf
            for k in range(a, b):
                c = comm_by_corr.get(int(corr[k])) if kind[k] == COMM else None
                if c is not None and c.op == "allreduce":
                    grads.append(Bucket(c.bytes, min(max((launch[k] - b0) / (b1 - b0), 0.0), 1.0)))
                    grad_end = max(grad_end, gend[k])
            # On the GPU the step waits from backward's last compute kernel to its last gradient
            # all-reduce kernel (the optimizer's kernels queue behind it).
            m = kind[a:b] == COMPUTE
            if grads and m.any():
                bwd_end = float(gend[a:b][m].max())
                wait = max(grad_end - bwd_end, 0.0) * US
                if last_sync is not None and last_sync[0] == n - 1:
                    ready = (bwd_end - last_sync[1]) * US
            last_sync = (n, float(grad_end)) if grads else None
        a, b = np.searchsorted(launch, [ts, hi])
        calls = [
            CollectiveCall(c.op, c.bytes, c.group or world, c.dur * US)
            for x, k in zip(corr[a:b], kind[a:b], strict=True)
            if k in (COMM, EP_COMM) and (c := comm_by_corr.get(int(x))) is not None
        ]
        fit.steps.append(
            StepFit(
                step=n,
                step_s=dur * US,
                compute_s=length(comp_iv) * US,
                forward_s=within(fwd) if fwd else None,
                backward_s=within(bwd_span) if bwd_span else None,
                optimizer_s=within(opt) if opt else None,
                comm_s=length(comm_iv) * US,
                overlap_s=overlap(comm_iv, comp_iv) * US,
                buckets=grads,
                collectives=calls,
                wait_s=wait,
                harness_s=_harness(own_all, ts, dur) * US,
                forwards=len(fwd),
                gpu=True,
                ready_s=ready,
            )
        )


def _sorted_pairs(buf) -> np.ndarray:
    """(start, end) rows sorted by start, from a flat array of start, end, start, end, ..."""
    x = np.frombuffer(buf, dtype=np.float64).reshape(-1, 2) if len(buf) else np.zeros((0, 2))
    return x[np.argsort(x[:, 0], kind="stable")]


def _outermost(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted spans with those inside another dropped (a user's ``## forward ##`` around DDP's
    forward is one forward, not two), overlapping ones merged."""
    out: list[tuple[float, float]] = []
    for s, e in spans:
        if out and s < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _in(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The spans of a sorted list that start in [lo, hi)."""
    return spans[bisect.bisect_left(spans, (lo, -np.inf)) : bisect.bisect_left(spans, (hi, -np.inf))]


def _hta_totals(ts: np.ndarray, end: np.ndarray, kind: np.ndarray) -> HtaTotals | None:
    if len(ts) == 0:
        return None
    every = union(ts, end)
    hta_compute = (kind == COMPUTE) | (kind == EP_COMM)  # HTA's rule: not NCCL, not a copy
    comp = union(ts[hta_compute], end[hta_compute])
    comm = union(ts[kind == COMM], end[kind == COMM])
    span = float(every[1][-1] - every[0][0])
    comm_len = length(comm)
    return HtaTotals(
        kernel_time_us=span,
        idle_time_us=span - length(every),
        compute_time_us=length(comp),
        comm_time_us=comm_len,
        overlap_ratio=float(overlap(comm, comp) / comm_len) if comm_len else 0.0,
    )


# --- across ranks -------------------------------------------------------------------------


def check_same_run(traces: list[RankTrace]) -> dict[int, RankTrace]:
    """{rank: trace}, or one line saying why these cannot be the ranks of one profiled run."""
    by_rank: dict[int, RankTrace] = {}
    for i, t in enumerate(traces):
        r = t.rank if t.rank is not None else (i if len(traces) > 1 else 0)
        if r in by_rank:
            raise TraceError(f"{t.path}: rank {r} again (also {by_rank[r].path}): one trace per rank")
        by_rank[r] = t
    first = traces[0]
    for t in traces[1:]:
        for what, a, b in (
            ("world size", first.world_size, t.world_size),
            ("run id", (first.meta.get("ddplab") or {}).get("run_id"), (t.meta.get("ddplab") or {}).get("run_id")),
            ("profiled steps", [n for n, _, _ in sorted(first.steps)], [n for n, _, _ in sorted(t.steps)]),
        ):
            if a is not None and b is not None and a != b:
                raise TraceError(f"{t.path}: {what} {b} differs from {first.path}'s {a}: ranks from different runs")
    if len(traces) > 1 and all(t.steps for t in traces):
        spans = [
            (t.base_us + min(s[1] for s in t.steps), t.base_us + max(s[1] + s[2] for s in t.steps)) for t in traces
        ]
        if max(s for s, _ in spans) >= min(e for _, e in spans):
            late = traces[int(np.argmax([s for s, _ in spans]))]
            raise TraceError(
                f"{late.path}: its profiled steps do not overlap the other ranks' in time: ranks from different runs"
            )
    return dict(sorted(by_rank.items()))


@dataclass
class SizeBandwidth:
    op: str
    bytes: int
    ranks: int
    calls: int
    median_s: float
    busbw_gb_s: float  # bytes x bus factor / median time (nccl-tests' busbw)


@dataclass
class TraceFit:
    ranks: dict[int, RankFit]
    traces: dict[int, RankTrace]

    @property
    def world_size(self) -> int:
        sizes = {f.world_size for f in self.ranks.values() if f.world_size}
        return max(sizes) if sizes else len(self.ranks)

    def compute_by_rank(self) -> dict[int, np.ndarray]:
        return {r: np.array([s.compute_s for s in f.steps]) for r, f in self.ranks.items()}

    def size_bandwidth(self) -> list[SizeBandwidth]:
        """Per op and size: every rank's calls pooled, the median time, the busbw at it."""
        calls: dict[tuple[str, int, int], list[float]] = {}
        for f in self.ranks.values():
            for s in f.steps:
                for c in s.collectives:
                    if c.bytes and c.op != "other" and c.ranks > 1:
                        calls.setdefault((c.op, c.bytes, c.ranks), []).append(c.seconds)
        out = []
        for (op, size, n), ts in sorted(calls.items()):
            med = float(np.median(ts))
            out.append(SizeBandwidth(op, size, n, len(ts), med, size * bus_factor(op, n) / med / 1e9))
        return out

    def least_waiting(self) -> int:
        """The rank with the least mean wait after backward (realrun's ``wait_s``): the last to
        join the gradient sync, which waits for no other rank, so its communication spans are
        transfers; another rank's also hold its wait for that one."""
        wait = {r: float(np.mean([s.wait_s for s in f.steps])) for r, f in self.ranks.items()}
        return min(wait, key=wait.get)

    def slowest_rank(self) -> tuple[int, float]:
        """(rank, its median compute / the median rank's)."""
        med = {r: float(np.median(x)) for r, x in self.compute_by_rank().items()}
        typical = float(np.median(list(med.values())))
        r = max(med, key=med.get)
        return r, med[r] / typical

    def _synced(self) -> tuple[list[int], list[list[StepFit]]] | None:
        """(ranks, each rank's steps) over the steps where every rank shows when it joined the
        gradient sync, else None."""
        ranks = sorted(self.ranks)
        n = min(len(self.ranks[r].steps) for r in ranks)
        keep = [i for i in range(n) if all(self.ranks[r].steps[i].ready_s is not None for r in ranks)]
        if not keep:
            return None
        return ranks, [[self.ranks[r].steps[i] for i in keep] for r in ranks]

    def _sync_means(self) -> tuple[list[int], np.ndarray, np.ndarray, int] | None:
        """(ranks, each one's mean ready_s, its mean lead_s, the steps averaged) over _synced's
        steps; None where fewer than two ranks show when they joined."""
        synced = self._synced()
        if synced is None or len(synced[0]) < 2:
            return None
        ranks, rows = synced
        ready = np.array([[s.ready_s for s in st] for st in rows]).mean(axis=1)
        lead = np.array([[s.lead_s for s in st] for st in rows]).mean(axis=1)
        return ranks, ready, lead, len(rows[0])

    def last_to_sync(self) -> tuple[int, float, float] | None:
        """(rank, how much later than the other ranks' median it joins the gradient sync, how much
        of that is its time before the sync outside compute): the rank the others wait for, mean
        over steps. A slow data loader shows here and not in compute. None where the trace does
        not show it."""
        means = self._sync_means()
        if means is None:
            return None
        ranks, ready, lead, _ = means
        i = int(np.argmax(ready))
        others = np.arange(len(ranks)) != i
        return ranks[i], float(ready[i] - np.median(ready[others])), float(lead[i] - np.median(lead[others]))

    def host_delays(self) -> tuple[dict[int, float], int, int] | None:
        """(per rank its mean time before the gradient sync outside forward and backward compute,
        less the least such rank's; that rank; the steps averaged): how late a rank joins the sync
        with compute as fast as the others' (a slow data loader, host work), which the simulator
        puts before that rank's forward (Scenario.host_delays_s). The least rank's own is every
        rank's and stays in the rest of the step. None where the trace does not show when each
        rank joins."""
        means = self._sync_means()
        if means is None:
            return None
        ranks, _, lead, steps = means
        least = int(np.argmin(lead))
        return {r: float(v - lead[least]) for r, v in zip(ranks, lead, strict=True)}, ranks[least], steps

    def straggler_cost(self) -> dict:
        """The same job with every rank at the median speed (ByteDance's what-if: stragglers
        removed). Per step, the ranks meet at the gradient all-reduce, so the step lasts until the
        last rank joins it plus what the trace shows after (communication left exposed, the
        optimizer). At the median speed each rank's forward and backward compute is scaled by the
        median rank's median over its own, and its time before the sync outside compute (data
        loading, host work: ``StepFit.lead_s``) moved by the median rank's median less its own,
        its step-to-step jitter kept in both. Where the trace does not show when a rank joins the
        sync, compute alone: the slowest rank's compute paces the step. The fraction is the time
        the stragglers cost: 1 - (time at the median speed / measured time)."""
        synced = self._synced()
        if synced is not None:
            _, rows = synced
            c = np.array([[s.fwd_bwd_s for s in st] for st in rows])  # (ranks, steps)
            lead = np.array([[s.lead_s for s in st] for st in rows])
            ready = np.array([[s.ready_s for s in st] for st in rows])
        else:
            n = min(len(f.steps) for f in self.ranks.values())
            rows = [self.ranks[r].steps[:n] for r in sorted(self.ranks)]
            c = np.array([[s.compute_s for s in st] for st in rows])
            lead, ready = np.zeros_like(c), c
        med = np.median(c, axis=1)
        scale = np.divide(float(np.median(med)), med, out=np.ones_like(med), where=med > 0)
        lead_med = np.median(lead, axis=1)
        at_median_lead = lead - (lead_med - float(np.median(lead_med)))[:, None]
        step = np.array([[s.step_s for s in st] for st in rows]).max(axis=0)
        rest = np.maximum(step - ready.max(axis=0), 0.0)
        measured = float(np.sum(step))
        median_speed = float(np.sum((at_median_lead + c * scale[:, None]).max(axis=0) + rest))
        return {
            "measured_s": measured,
            "at_median_speed_s": median_speed,
            "fraction": 1.0 - median_speed / measured if measured > 0 else 0.0,
            "steps": c.shape[1],
            "sync": synced is not None,
        }


def fit_traces(traces: list[RankTrace]) -> TraceFit:
    by_rank = check_same_run(traces)
    ranks = {r: fit_rank(t, r) for r, t in by_rank.items()}
    return TraceFit(ranks=ranks, traces=by_rank)
