"""FSDP / ZeRO-3 steps (Rajbhandari et al. 2020, "ZeRO", stage 3; PyTorch FSDP, Zhao et al. 2023).

Units are what PyTorch FSDP builds when it wraps each GPT-2 block: a root unit with what lies
outside the blocks (wte, wpe, ln_f; lm_head is tied to wte) and one unit per block, each a flat
parameter sharded 1/N over the ranks. One micro-step on each rank:

  forward:  allgather the root, embeddings; per block: allgather it, compute it (then it is
            freed again); ln_f + lm_head on the root, still gathered
  backward: lm_head + ln_f; per block in reverse: allgather it again, compute its backward,
            reduce-scatter its gradients; the embedding backward, then reduce-scatter the
            root's gradients (wte's completes last: the lookup adds its share after lm_head's)

then, after the last micro-step's last reduce-scatter, the optimizer on the rank's shard
(sim/optimizer.py's step is the whole model's, so the shard's is that / S, the ranks it is sharded over: AdamW is
memory-bound, its time goes with the elements it touches).

The root is allgathered once per micro-step, the blocks twice: torch keeps the root's
parameters gathered from forward to backward (FSDP1 ``_runtime_utils._post_forward_reshard``
skips the root; FSDP2 sets the root's ``reshard_after_forward`` to False), so the traffic is
(3 P - P_root)(N-1)/N parameter bytes, a little under ZeRO's 3 P(N-1)/N = 1.5 x DDP's.

Prefetch p: when unit i starts (before it waits for its own allgather), the allgathers of the
units up to i + p are issued; forward and backward prefetch separately, nothing crosses from
forward into backward. p = 0 issues each allgather when its unit starts: no overlap at all.

One FIFO collective stream shared by allgathers and reduce-scatters, as in sim/engine.py (NCCL
runs a communicator's collectives in issue order): collective c starts when every rank has
issued it and collective c-1 has ended, so every collective waits for the slowest rank's issue.
A compute segment starts when the rank's previous segment has ended and its unit's allgather
has finished. Every micro-step reduce-scatters (FSDP without ``no_sync``, which would keep
unsharded gradients, the memory FSDP exists to save): K micro-steps carry K x the traffic.

Noise, stragglers, jitter, interference, episodes and pauses are drawn and applied as in
sim/engine.py: persistent speed factors (with stragglers) from ``build_workload``, a mean-1
multiplier per rank and micro-step on all of its compute, one per collective per step, compute
slowed by (1 + gamma) while a collective runs. The same seed gives DDP and FSDP the same draws
of speed factors and noise.

HSDP (``training.mode = "hsdp"``, sim/hsdp.py) runs the same program inside shard groups of S
ranks (allgathers and reduce-scatters over S ranks, the optimizer on 1/S), and issues after each
reduce-scatter the allreduce of its 1/S gradient shard across the R = N / S groups. That
allreduce runs on its own stream (another communicator on other links: FSDP2 gives it its own
CUDA stream, so the next reduce-scatter does not queue behind it), starts when its
reduce-scatter has ended and the previous allreduce too, and the optimizer waits for the last.
Every collective still waits for every rank (no shard group runs ahead of the others).

Per rank a step splits, as DDP's (sim/results.py), into dataloader + host delay + compute + optimizer +
exposed comm + straggler wait. The rank's idle time (waiting for an allgather, and from its
last compute to the end of the last collective) splits against the rank's solo run: the same
program with the rank's own compute segments, as they ran, and streams fed by its own issue
times alone, as if every rank were as fast as it. The solo run's idle time is exposed comm
(the collectives' own transfer, which this rank could not hide); how much later the real step
ends is straggler wait (every collective waits for the last rank to issue it, so a slower
rank's lateness reaches all the others). The slowest rank's solo run is the real one, so it
waits for no one; without noise or stragglers no rank waits. A lemon's added time is then all
wait, whether the step is compute-bound (it delays every collective) or communication-bound
(it hides behind the collectives and adds little). DDP (sim/results.py) splits its idle time
by whether the stream is busy, which for DDP's one burst of allreduces after backward books
most of a lemon as wait too (tests/test_answers_fsdp.py).
"""

import math
import operator
import time
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from sim.buckets import Bucket
from sim.busy import Busy
from sim.collectives import bus_factor, collective_cost
from sim.config import Scenario
from sim.episodes import Effects, Held
from sim.hsdp import merged, replica_fabric, replica_groups, shard_fabric
from sim.noise import SizePools, comm_multipliers, multipliers
from sim.online import OnlineStats
from sim.precision import Precision
from sim.results import SimResult, pick_trace_ranks
from sim.roofline import FP8_BYTES
from sim.transformer import ComputeShares, GPT2Shape, param_tensors
from sim.workload import block_rerun_share, build_workload, forward_shares

ROOT = 0  # unit index of the root; block i is unit 1 + i


def unit_params(shape: GPT2Shape) -> list[tuple[str, ...]]:
    """Parameter names per FSDP unit: [root, block 0, ..., block L-1]."""
    units: list[list[str]] = [[] for _ in range(shape.n_layer + 1)]
    for t in param_tensors(shape):
        parts = t.name.split(".")
        units[1 + int(parts[2]) if parts[1] == "h" else ROOT].append(t.name)
    return [tuple(u) for u in units]


def unit_numels(shape: GPT2Shape) -> np.ndarray:
    """Elements per unit, [root, block 0, ..., block L-1]."""
    numel = {t.name: t.numel for t in param_tensors(shape)}
    return np.array([sum(numel[n] for n in names) for names in unit_params(shape)])


def unit_matrix_numels(shape: GPT2Shape) -> np.ndarray:
    """Elements of each unit's 2-D tensors (matmul weights and embeddings; norms and biases are
    1-D), [root, block 0, ..., block L-1]."""
    tensors = {t.name: t for t in param_tensors(shape)}
    return np.array(
        [sum(tensors[n].numel for n in names if len(tensors[n].shape) == 2) for names in unit_params(shape)]
    )


def unit_gather_bytes(shape: GPT2Shape, dtypes: Precision, fp8_all_gather: bool = False) -> np.ndarray:
    """Bytes one allgather of each unit gathers, [root, block 0, ...]: the compute dtype (FSDP's
    mixed precision), or with ``fp8_all_gather`` one byte for each block's linear weights (its
    2-D tensors; the norms' are 1-D) and the compute dtype for the rest and the root."""
    total = unit_numels(shape).astype(float)
    if not fp8_all_gather:
        return total * dtypes.compute_bytes
    linear = unit_matrix_numels(shape).astype(float)
    linear[ROOT] = 0.0  # the embeddings and the output layer stay 16-bit (torchtitan's filter_fqns)
    return linear * FP8_BYTES + (total - linear) * dtypes.compute_bytes


class _Op(NamedTuple):
    """One entry of a micro-step's program, in the order every rank runs it."""

    issue: int  # >= 0: issue this collective (index within the micro-step); -1: compute
    wait: int  # compute: the allgather it needs finished (index), -1 for none
    fwd_share: float  # compute: share of the micro-step's forward time
    bwd_share: float  # compute: share of its backward time


def _program(n_layer: int, prefetch: int, shares: ComputeShares, rerun_share: float, allreduce: bool = False):
    """One micro-step's program and its collectives [(op, unit)] in issue order; ``rerun_share``: the
    share of the forward each block's backward runs again (activation checkpointing: the block's
    share, its attention core's under selective recomputation, what torchtitan's per-op AC
    reruns under op: sim/workload.py block_rerun_share; 0 without); ``allreduce``
    (hsdp): each reduce-scatter is followed by the allreduce of its shard across the groups."""
    colls: list[tuple[str, int]] = []
    prog: list[_Op] = []

    def issue(op: str, unit: int) -> int:
        index = len(colls)
        prog.append(_Op(index, -1, 0.0, 0.0))
        colls.append((op, unit))
        if op == "reduce_scatter" and allreduce:
            issue("allreduce", unit)  # issued with it, in FSDP's post-backward hook
        return index

    # Forward: segment u computes unit u (0: the root's embeddings, 1 + i: block i), then the head.
    ag: dict[int, int] = {}
    for u in range(n_layer + 1):
        for ahead in range(len(ag), min(u + prefetch, n_layer) + 1):
            ag[ahead] = issue("allgather", ahead)
        prog.append(_Op(-1, ag[u], shares.embedding if u == ROOT else shares.block, 0.0))
    prog.append(_Op(-1, -1, shares.head, 0.0))  # the root is still gathered
    # Backward: segment 0 is the head, segment s = 1..L is block L - s (unit 1 + L - s).
    ag = {}
    for s in range(n_layer + 1):
        for ahead in range(len(ag) + 1, min(s + prefetch, n_layer) + 1):
            ag[ahead] = issue("allgather", 1 + n_layer - ahead)
        if s == 0:
            prog.append(_Op(-1, -1, 0.0, shares.head))
        else:
            # Activation checkpointing reruns the block's forward (or its core) inside its backward.
            prog.append(_Op(-1, ag[s], rerun_share, shares.block))
            issue("reduce_scatter", 1 + n_layer - s)
    prog.append(_Op(-1, -1, 0.0, shares.embedding))
    issue("reduce_scatter", ROOT)
    return prog, colls


@dataclass(frozen=True, kw_only=True)
class FsdpWorkload:
    """What an FSDP step costs before anything runs; the attributes sim/results.py, export and
    plots read from a DDP ``Workload`` mean the same here, per collective instead of per bucket."""

    ranks: int
    grad_accum: int
    tokens_per_step: int  # all ranks together
    speed_factor: np.ndarray  # (ranks,) persistent compute-time multiplier
    forward_s: np.ndarray  # (ranks,) one micro-step's forward, before noise
    backward_s: np.ndarray  # (ranks,) one micro-step's backward, before noise (no recompute)
    dataloader_s: np.ndarray  # (ranks,)
    host_delay_s: np.ndarray  # (ranks,)
    optimizer_s: float  # on the shard: the whole model's (sim/optimizer.py) / shard_size
    buckets: list[Bucket]  # the FSDP units as flat parameters: root, block 0..L-1
    ops: tuple[str, ...]  # (collectives per step,) in issue order, K micro-steps
    units: tuple[int, ...]  # (collectives per step,) the unit each one moves
    wire_bytes: np.ndarray  # (collectives per step,) collective size S (allgather: the gathered unit)
    group_ranks: tuple[int, ...]  # (collectives per step,) ranks in the group each one runs over
    collective_s: np.ndarray  # (collectives per step,) before jitter
    algorithms: tuple[str, ...]
    program: tuple[_Op, ...]  # one micro-step
    prefetch: int
    interference_gamma: float
    shard_size: int  # ranks a unit is sharded over: every rank (fsdp) or a shard group (hsdp)

    @property
    def replica_stream(self) -> np.ndarray:
        """(collectives per step,) True for hsdp's allreduces, which run on their own stream."""
        return np.array([op == "allreduce" for op in self.ops], dtype=bool)

    @property
    def traffic_bytes_per_step(self) -> float:
        """Bytes each rank puts on its bus per optimizer step (nccl-tests convention)."""
        if self.ranks == 1:
            return 0.0
        pairs = zip(self.ops, self.wire_bytes, self.group_ranks, strict=True)
        return float(sum(bus_factor(op, n) * s for op, s, n in pairs if n > 1))


def build_fsdp_workload(sc: Scenario, rng: np.random.Generator) -> FsdpWorkload:
    """Compute per rank from the DDP workload (the same first draws: speed factors), then
    the FSDP units and their collectives."""
    # The DDP workload without recompute: the program below reruns each block's forward itself.
    t = sc.training
    base = build_workload(replace(sc, training=replace(t, activation_checkpointing=False)), rng)
    shape = sc.model.shape
    numels = unit_numels(shape)
    sh, _ = forward_shares(sc)
    shard, replicas = sc.shard_size, replica_groups(sc)
    prog, colls = _program(shape.n_layer, t.fsdp_prefetch, sh, block_rerun_share(sc), replicas > 1)
    colls = colls * t.grad_accum
    ops = tuple(op for op, _ in colls)
    units = tuple(u for _, u in colls)
    # FSDP mixed precision: gather the compute dtype (or FP8 weights: unit_gather_bytes), reduce
    # the gradient dtype (sim/precision.py); hsdp's allreduce moves the reduce-scattered shard,
    # 1/S of the unit's gradient.
    gathered = unit_gather_bytes(shape, t.dtypes, t.fp8_all_gather)
    size = {"reduce_scatter": t.dtypes.grad_bytes, "allreduce": t.dtypes.grad_bytes / shard}
    wire = np.array([float(gathered[u] if op == "allgather" else numels[u] * size[op]) for op, u in colls])
    fabrics = {"allgather": shard_fabric(sc), "reduce_scatter": shard_fabric(sc)}
    if replicas > 1:
        fabrics["allreduce"] = replica_fabric(sc)
    costs = [collective_cost(op, w, fabrics[op]) for op, w in zip(ops, wire, strict=True)]
    coll_s = np.array([c.time_s for c in costs])
    if not sc.network.enabled:
        coll_s = np.zeros_like(coll_s)
    names = unit_params(shape)
    # A unit's gradients are ready when its backward is done: the head, blocks in reverse, and
    # the root last (wte's gradient completes with the embedding backward).
    ready = [1.0] + [sh.head + (shape.n_layer - i) * sh.block for i in range(shape.n_layer)]
    buckets = [
        Bucket(u, names[u], int(numels[u]), int(numels[u]) * t.dtypes.grad_bytes, ready[u], int(numels[u]))
        for u in range(len(names))
    ]
    return FsdpWorkload(
        ranks=sc.ranks,
        grad_accum=t.grad_accum,
        tokens_per_step=base.tokens_per_step,
        speed_factor=base.speed_factor,
        forward_s=base.forward_s,
        backward_s=base.backward_s,
        dataloader_s=base.dataloader_s,
        host_delay_s=base.host_delay_s,
        optimizer_s=base.optimizer_s / shard,
        buckets=buckets,
        ops=ops,
        units=units,
        wire_bytes=wire,
        group_ranks=tuple(fabrics[op].ranks for op in ops),
        collective_s=coll_s,
        algorithms=tuple(c.algorithm for c in costs),
        program=tuple(prog),
        prefetch=t.fsdp_prefetch,
        interference_gamma=sc.compute.interference_gamma,
        shard_size=shard,
    )


def _busy(starts: np.ndarray, ends: np.ndarray, two_streams: bool) -> Busy:
    """The collectives' busy intervals; with hsdp's two streams, their union."""
    return Busy(*map(np.array, merged(starts, ends))) if two_streams else Busy(starts, ends)


# Leaders are picked one at a time while so few remain; past this many, all the rest are kept.
_MAX_LEADERS = 64


def _leaders(start: np.ndarray, fwd: np.ndarray, bwd: np.ndarray, keep: list[int]) -> np.ndarray:
    """Sorted indices of a set of ranks that holds, for every rank, one that starts no earlier
    and computes each micro-step's forward and backward no faster (plus ``keep``). A rank's
    times in the step are nondecreasing in those inputs (max, +, float rounding and
    Busy.finish's V(t) all are), so the latest rank to issue any collective is among them:
    the stream needs no other rank. ``fwd``, ``bwd``: (ranks, micro-steps)."""
    columns = [start, *fwd.T, *bwd.T]
    top = int(np.argmax(start + fwd[:, -1] + bwd[:, -1]))  # a rank near the top outruns few others
    outrun = np.zeros(len(start), dtype=bool)  # ranks that top does not cover
    for col in columns:
        outrun |= col > col[top]
    remaining, picked = np.flatnonzero(outrun), [top]
    keys = np.column_stack([col[remaining] for col in columns])
    while len(remaining) and len(picked) < _MAX_LEADERS:
        i = int(keys.sum(axis=1).argmax())
        picked.append(int(remaining[i]))
        still = (keys > keys[i]).any(axis=1)
        remaining, keys = remaining[still], keys[still]
    return np.union1d(np.union1d(picked, keep), remaining).astype(np.intp)


class _Segments:
    """One micro-step's compute segments, share_f x forward + share_b x backward, each pair
    computed once (every block's segment is the same)."""

    def __init__(self, fwd: np.ndarray, bwd: np.ndarray):
        self.fwd, self.bwd, self._cache = fwd, bwd, {}

    def __call__(self, op: _Op) -> np.ndarray:
        key = (op.fwd_share, op.bwd_share)
        seg = self._cache.get(key)
        if seg is None:  # a share of 0 adds +0.0: leaving it out gives the same floats
            seg = op.fwd_share * self.fwd if op.fwd_share else np.zeros_like(self.fwd)
            if op.bwd_share:
                seg = seg + op.bwd_share * self.bwd
            self._cache[key] = seg
        return seg


class _Stream(NamedTuple):
    """One step's collectives, from the leaders' real run."""

    starts: np.ndarray  # (collectives per step,)
    ends: np.ndarray
    free: np.ndarray  # the shard stream's end before each of its collectives (-inf: the step's first)
    bound: np.ndarray  # bool: it started when the last rank issued it (the stream was free before)
    comm_end: float  # both streams' end


def _stream(
    wl: FsdpWorkload, t: np.ndarray, fwd: np.ndarray, bwd: np.ndarray, durations: np.ndarray, gamma: float, trace
) -> _Stream:
    """Pass 1 of a step: the real run of the leaders (``t``: their start times; ``fwd``, ``bwd``:
    (leaders, micro-steps)), whose latest issue starts each collective (NCCL runs a
    communicator's collectives in issue order). ``trace``: None, or (spans, [(rank, index in
    the leaders)]) to record the traced ranks' spans."""
    n_coll, per_micro = len(wl.ops), len(wl.ops) // wl.grad_accum
    replica = wl.replica_stream
    two_streams = bool(replica.any())
    starts, ends, free = np.zeros(n_coll), np.zeros(n_coll), np.full(n_coll, -math.inf)
    bound = np.zeros(n_coll, dtype=bool)
    stream_end = replica_end = -math.inf
    issued = 0
    for k in range(wl.grad_accum):
        segs, first = _Segments(fwd[:, k], bwd[:, k]), k * per_micro
        for op in wl.program:
            if op.issue >= 0:
                c = first + op.issue
                if replica[c]:  # hsdp: the shard the reduce-scatter before it just made
                    start = max(ends[c - 1], replica_end)
                    replica_end = start + durations[c]
                else:
                    t_max = float(t.max())
                    start = max(t_max, stream_end)
                    free[c], bound[c] = stream_end, t_max > stream_end
                    stream_end = start + durations[c]
                starts[c], ends[c] = start, start + durations[c]
                issued = c + 1
                if trace:
                    name, lane = f"{wl.ops[c]} unit {wl.units[c]}", 3 if replica[c] else 1  # sim/trace.py's lanes
                    trace[0].extend((r, lane, name, start, float(ends[c])) for r, _ in trace[1])
                continue
            if op.wait >= 0:
                t = np.maximum(t, ends[first + op.wait])
            seg = segs(op)
            # Collectives issued later start after this segment ends on this rank: the ones
            # issued so far are all that can slow it.
            done = _busy(starts[:issued], ends[:issued], two_streams).finish(t, seg, gamma) if gamma else t + seg
            if trace:
                name = f"{'backward' if op.bwd_share else 'forward'} {k}"
                trace[0].extend((r, 0, name, float(t[i]), float(done[i])) for r, i in trace[1])
            t = done
    return _Stream(starts, ends, free, bound, max(stream_end, replica_end))


class _RankRun(NamedTuple):
    """Pass 2's per-rank results for one step, (ranks,) each."""

    took_s: np.ndarray | None  # compute as slowed by interference (None without: the segments' sum)
    collective_wait_s: np.ndarray
    solo_end_s: np.ndarray  # the solo run's last compute
    solo_comm_end_s: np.ndarray  # the solo run's last collective, on either stream


def _ranks(
    wl: FsdpWorkload,
    start: np.ndarray,
    fwd: np.ndarray,
    bwd: np.ndarray,
    durations: np.ndarray,
    gamma: float,
    st: _Stream,
    rows: np.ndarray,
) -> _RankRun:
    """Pass 2 of a step: every rank against the stream pass 1 found. The real run is only
    followed as far as a rank's own time matters: to the last collective that waited for the
    last issuer (what a rank waits there depends on when it issued), or to the end with
    interference (each segment's slowdown depends on when it runs). Each rank's solo run (the
    module docstring) is followed to the end. ``rows``: (collectives per micro-step, ranks)
    scratch for the solo run's collective ends."""
    n, per_micro = len(start), len(wl.ops) // wl.grad_accum
    replica = wl.replica_stream
    two_streams = bool(replica.any())
    t, solo, wait, tmp = start.copy(), start.copy(), np.zeros(n), np.empty(n)
    took_s = np.zeros(n) if gamma else None
    solo_end = solo_replica_end = np.full(n, -math.inf)
    pending, issued = int(st.bound.sum()), 0  # bound collectives still to come
    for k in range(wl.grad_accum):
        segs, first = _Segments(fwd[:, k], bwd[:, k]), k * per_micro
        for op in wl.program:
            real = gamma or pending
            if op.issue >= 0:
                c, row = first + op.issue, rows[op.issue]
                if replica[c]:
                    np.maximum(rows[op.issue - 1], solo_replica_end, out=row)
                    row += durations[c]
                    solo_replica_end = row
                else:
                    if st.bound[c]:  # each rank waits from its issue or the stream's end
                        np.maximum(t, st.free[c], out=tmp)
                        np.subtract(st.starts[c], tmp, out=tmp)
                        wait += tmp
                        pending -= 1
                    np.maximum(solo, solo_end, out=row)
                    row += durations[c]
                    solo_end = row
                issued = c + 1
                continue
            if op.wait >= 0:
                if real:
                    np.maximum(t, st.ends[first + op.wait], out=t)
                np.maximum(solo, rows[op.wait], out=solo)
            seg = segs(op)
            if gamma:
                done = _busy(st.starts[:issued], st.ends[:issued], two_streams).finish(t, seg, gamma)
                took = np.subtract(done, t, out=t)  # t is done with: reuse its memory
                took_s += took
                solo += took
                t = done
            else:
                solo += seg
                if real:
                    t += seg
    return _RankRun(took_s, wait, solo, np.maximum(solo_end, solo_replica_end))


class _Line(NamedTuple):
    """A time of every rank at once, affine in the rank's inputs: const + coef . x, with
    x = (start, forward of micro-step 0..K-1, backward of micro-step 0..K-1). Python floats:
    the closed form makes a few hundred a step, each of a handful of numbers."""

    const: float
    coef: tuple[float, ...]

    def plus(self, const: float = 0.0, coef: tuple[float, ...] | None = None) -> "_Line":
        if coef is None:
            return _Line(self.const + const, self.coef)
        return _Line(self.const + const, tuple(map(operator.add, self.coef, coef)))

    def at(self, x: list[np.ndarray]) -> np.ndarray:
        """(ranks,) the line at each rank's inputs ``x`` (arrays, in coef's order)."""
        out = np.full(len(x[0]), self.const)
        for c, xi in zip(self.coef, x, strict=True):
            if c:
                out += c * xi
        return out


class _Resume(NamedTuple):
    """Where _closed_real or _closed_solo stopped: its position in the step's plan and its
    state there."""

    pos: int
    lines: tuple


class _Split(Exception):
    """A max in the closed form that picks a for some ranks of the group and b for others: ``above``,
    (group,) bool, where a >= b; ``resume``: the state before the operation that holds it."""

    def __init__(self, above: np.ndarray):
        super().__init__()
        self.above = above
        self.resume: _Resume | None = None


class _Group:
    """Ranks that the closed form follows as one: their inputs ``xs`` (arrays, in _Line's order) and
    the box around them."""

    def __init__(self, index: np.ndarray, xs: list[np.ndarray]):
        self.index, self.xs = index, xs
        self.lo, self.hi = [float(v.min()) for v in xs], [float(v.max()) for v in xs]

    def later(self, a: _Line, b: _Line) -> _Line:
        """max(a, b) if it is the same one of the two for every rank of the group, else raises
        _Split. A linear function's least and greatest values over the box are at its corners
        (ties give either the same time); where the box cannot tell, the ranks' own values do.
        Plain loops: the closed form calls this ~1000 times a step."""
        margin = a.const - b.const
        if a.coef == b.coef or margin in (math.inf, -math.inf):
            return a if margin >= 0.0 else b
        least = most = margin
        for p, q, low, high in zip(a.coef, b.coef, self.lo, self.hi, strict=True):
            s = p - q
            if s > 0.0:
                least, most = least + s * low, most + s * high
            elif s < 0.0:
                least, most = least + s * high, most + s * low
        if least >= 0.0:
            return a
        if most <= 0.0:
            return b
        values = _Line(margin, tuple(map(operator.sub, a.coef, b.coef))).at(self.xs)
        if values.min() >= 0.0:
            return a
        if values.max() <= 0.0:
            return b
        raise _Split(values >= 0.0)

    def part(self, side: np.ndarray) -> "_Group":
        return _Group(self.index[side], [v[side] for v in self.xs])


def _plan(wl: FsdpWorkload, durations: np.ndarray, st: _Stream) -> list[tuple]:
    """A step's program for the closed form, over every micro-step, the stream's numbers as floats:
    (index of the collective in its micro-step, hsdp's allreduce?, bound?, stream free, start,
    duration) for an issue, (index of the allgather waited for or -1, its end, the segment's
    coefficients) for a compute."""
    k_micro, per_micro = wl.grad_accum, len(wl.ops) // wl.grad_accum
    replica, bound = wl.replica_stream.tolist(), st.bound.tolist()
    starts, ends, free, dur = st.starts.tolist(), st.ends.tolist(), st.free.tolist(), durations.tolist()
    plan: list[tuple] = []
    for k in range(k_micro):
        first = k * per_micro
        for op in wl.program:
            c = first + op.issue
            if op.issue >= 0:
                plan.append((op.issue, replica[c], bound[c], free[c], starts[c], dur[c]))
                continue
            seg = [0.0] * (1 + 2 * k_micro)
            seg[1 + k], seg[1 + k_micro + k] = op.fwd_share, op.bwd_share
            plan.append((op.wait, ends[first + op.wait] if op.wait >= 0 else 0.0, tuple(seg)))
    return plan


def _closed_starts(wl: FsdpWorkload, st: _Stream) -> tuple[_Resume, _Resume]:
    """_closed_real's and _closed_solo's states at the step's start: each run at the rank's
    start, no collective yet."""
    zero = (0.0,) * (1 + 2 * wl.grad_accum)
    start, never = _Line(0.0, (1.0, *zero[1:])), _Line(-math.inf, zero)
    per_micro = len(wl.ops) // wl.grad_accum
    return _Resume(0, (start, _Line(0.0, zero), int(st.bound.sum()))), _Resume(
        0, (start, never, never, (never,) * per_micro)
    )


def _closed_real(plan: list[tuple], group: _Group, state: _Resume) -> tuple[_Line]:
    """The collective wait in closed form: the real run from ``state`` on, as far as a bound
    collective is left, when every max picks the same side for every rank of ``group``;
    raises _Split where one does not. State: (t, wait so far, bound collectives to come)."""
    t, wait, pending = state.lines
    zero, later = (0.0,) * len(t.coef), group.later
    for pos in range(state.pos, len(plan)):
        if not pending:
            break
        before = (t, wait, pending)
        try:
            if len(plan[pos]) == 6:  # an issue
                bound, free, start = plan[pos][2:5]
                if bound:
                    issued = later(t, _Line(free, zero))  # waits from its issue or the stream's end
                    wait = wait.plus(start - issued.const, tuple(-v for v in issued.coef))
                    pending -= 1
                continue
            index, end, seg = plan[pos]
            if index >= 0:
                t = later(t, _Line(end, zero))
            t = t.plus(coef=seg)
        except _Split as split:
            split.resume = _Resume(pos, before)
            raise
    return (wait,)


def _closed_solo(plan: list[tuple], group: _Group, state: _Resume) -> tuple[_Line, _Line]:
    """The solo run in closed form from ``state`` on (its last compute, its last collective),
    when every max picks the same side for every rank of ``group``; raises _Split where one
    does not. State: (solo, its stream's end, its replica stream's end, its collective ends)."""
    solo, solo_end, solo_replica_end, rows = state.lines
    rows, later = list(rows), group.later
    for pos in range(state.pos, len(plan)):
        before = (solo, solo_end, solo_replica_end)
        try:
            if len(plan[pos]) == 6:  # an issue
                index, replica, duration = plan[pos][0], plan[pos][1], plan[pos][5]
                row = later(rows[index - 1], solo_replica_end) if replica else later(solo, solo_end)
                rows[index] = row = row.plus(duration)
                solo_replica_end, solo_end = (row, solo_end) if replica else (solo_replica_end, row)
                continue
            index, _, seg = plan[pos]
            if index >= 0:
                solo = later(solo, rows[index])
            solo = solo.plus(coef=seg)
        except _Split as split:
            split.resume = _Resume(pos, (*before, tuple(rows)))  # rows change only once no max is left
            raise
    return solo, later(solo_end, solo_replica_end)


# A split costs ~0.5 ms of Python (hsdp at 65,536 ranks: ~6 splits and ~17 runs or resumes
# a step in ~9 ms), what _ranks spends on ~1000-2000 ranks (~25 ms a step there): past ranks /
# 2048 splits a step, _ranks is the cheaper way. _ranks also runs every rank where the ranks
# left to it (the leaders) are more than this share of them (tiny jobs).
_RANKS_PER_SPLIT = 2048
_EXACT_SHARE = 0.125
# Below this many ranks _ranks' numpy calls cost less than the closed form's Python (~1-2 ms a step).
_CLOSED_MIN_RANKS = 8192


def _grouped(run, state: _Resume, plan: list[tuple], group: _Group, max_splits: int, out: list[np.ndarray]) -> bool:
    """``out``: ``run``'s lines (_closed_real or _closed_solo) at the inputs of each rank of
    ``group``. Where a max splits a group, each side goes on as a group of its own from there;
    False past ``max_splits``."""
    todo, splits = [(group, state)], 0
    while todo:
        group, state = todo.pop()
        try:
            lines = run(plan, group, state)
        except _Split as split:
            splits += 1
            if splits > max_splits:
                return False
            todo += [(group.part(side), split.resume) for side in (split.above, ~split.above)]
            continue
        for whole, line in zip(out, lines, strict=True):
            whole[group.index] = line.at(group.xs)
    return True


def _closed_run(wl, start, fwd, bwd, durations, st: _Stream, exact: np.ndarray) -> _RankRun | None:
    """_ranks' results: the ranks ``exact`` by _ranks itself, the others in closed form (the
    real run and the solo run each on its own: a max that splits one need not split the
    other). None where _ranks would be cheaper."""
    n = len(start)
    if n < _CLOSED_MIN_RANKS or len(exact) > _EXACT_SHARE * n:
        return None
    x = [start, *fwd.T, *bwd.T]
    rest = np.ones(n, dtype=bool)
    rest[exact] = False
    index, plan = np.flatnonzero(rest), _plan(wl, durations, st)
    group, (real, solo) = _Group(index, [v[index] for v in x]), _closed_starts(wl, st)
    out = [np.empty(n) for _ in range(3)]
    limit = n // _RANKS_PER_SPLIT
    if not (
        _grouped(_closed_real, real, plan, group, limit, out[:1])
        and _grouped(_closed_solo, solo, plan, group, limit, out[1:])
    ):
        return None
    few = _ranks(wl, start[exact], fwd[exact], bwd[exact], durations, 0.0, st, np.empty((len(wl.ops), len(exact))))
    for whole, part in zip(out, few[1:], strict=True):
        whole[exact] = part
    return _RankRun(None, *out)


def _compute_s(wl: FsdpWorkload, fwd: np.ndarray, bwd: np.ndarray) -> np.ndarray:
    """(ranks,) a step's compute without interference: every micro-step's segments summed."""
    fwd_share = sum(op.fwd_share for op in wl.program if op.issue < 0)
    bwd_share = sum(op.bwd_share for op in wl.program if op.issue < 0)
    return (fwd * fwd_share + bwd * bwd_share).sum(axis=1)


def simulate_fsdp(
    sc: Scenario,
    *,
    trace_steps: int = 3,
    trace_ranks=None,
    progress=None,
    records=False,
    medians=False,
    held: Held | None = None,
) -> SimResult:
    """Simulate ``sc.steps`` FSDP optimizer steps of ``sc.ranks`` ranks (``training.mode`` is
    not read: the caller chose FSDP). The first ``trace_steps`` steps of ``trace_ranks``
    (default: as sim/results.py picks them) are kept as Chrome trace spans. ``progress``,
    ``records``, ``medians``, ``held``: as sim/engine.py's simulate().

    Each step runs in two passes, so that its cost is O(ranks) per collective with a small
    constant: pass 1 (_stream) runs the leaders alone (_leaders: the ranks that can be the
    last to issue) to place the collectives; pass 2 (_ranks) runs every rank against them with
    in-place updates, and a rank's idle and exposed time follow from its compute and run ends."""
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    wl = build_fsdp_workload(sc, rng)
    traced = sorted(trace_ranks) if trace_ranks is not None else pick_trace_ranks(sc, wl)
    spans: list[tuple] = []  # (rank, lane, name, start_s, end_s); lane 0 compute, 1 comm, 3 hsdp's allreduces
    n, k_micro, steps = sc.ranks, wl.grad_accum, sc.steps
    gamma = wl.interference_gamma if wl.collective_s.any() else 0.0
    needed = Effects.needed(sc.episodes, sc.pauses, held)
    effects = Effects(sc.episodes, sc.pauses, n, sc.seed, held) if needed else None
    noise_cfg, net = sc.noise, sc.network
    pools = SizePools.of(net.jitter_samples, net.jitter_samples_bytes, wl.wire_bytes)
    rows = np.empty((len(wl.ops) // k_micro, n))
    step_time, step_end, comm_busy = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    stats = OnlineStats(steps, n, records=records, medians=medians)
    t0 = 0.0
    for step in range(steps):
        # Draw order as sim/engine.py: the step's noise, then its jitter.
        noise = multipliers(
            rng, noise_cfg.distribution, noise_cfg.sigma, (n, k_micro), noise_cfg.samples, noise_cfg.samples_by_rank
        )
        jitter = comm_multipliers(rng, net.jitter_sigma, net.jitter_samples, len(wl.ops), pools)
        begin = t0 + wl.dataloader_s + wl.host_delay_s  # compute starts here, after any pause
        start, pause = begin, None
        if effects:  # episodes and pauses, as sim/engine.py applies them
            fx = effects.at(step, t0)
            noise, jitter = fx.apply(noise, jitter)
            if fx.pause_s is not None:  # a pause counts as compute, as in sim/results.py
                start, pause = begin + fx.pause_s, fx.pause_s
        fwd, bwd = wl.forward_s[:, None] * noise, wl.backward_s[:, None] * noise
        durations = wl.collective_s * jitter
        lead = _leaders(start, fwd, bwd, traced if step < trace_steps else [])
        trace = (spans, [(r, int(np.searchsorted(lead, r))) for r in traced]) if step < trace_steps else None
        st = _stream(wl, start[lead], fwd[lead], bwd[lead], durations, gamma, trace)
        run = None if gamma else _closed_run(wl, start, fwd, bwd, durations, st, lead)
        run = run or _ranks(wl, start, fwd, bwd, durations, gamma, st, rows)
        work = run.took_s if gamma else _compute_s(wl, fwd, bwd)
        if pause is not None:
            work = work + pause
        # A rank's step from ``begin`` is compute plus idle (waiting for an allgather, and from
        # its last compute to the end of the last collective), in the real run and in its solo one.
        idle = st.comm_end - begin - work
        exposed = np.maximum(run.solo_comm_end_s, run.solo_end_s) - begin - work
        # The real run ends no earlier than the solo one (every real collective starts no earlier
        # than its solo twin), so its extra idle time, the straggler wait, is >= 0; the minimum
        # only absorbs rounding.
        exposed = np.minimum(exposed, idle)
        end = st.comm_end + wl.optimizer_s
        if step < trace_steps:
            spans.extend((r, 0, "optimizer", st.comm_end, end) for r in traced if wl.optimizer_s > 0)
            spans.extend((r, 2, f"step {step}", t0, end) for r in traced)
        step_time[step], step_end[step], comm_busy[step] = end - t0, end, durations.sum()
        stats.add(
            step,
            compute_s=work,
            exposed_comm_s=exposed,
            straggler_wait_s=idle - exposed,
            collective_wait_s=run.collective_wait_s,
        )
        t0 = end
        if progress:
            progress(step + 1, steps)
    return SimResult(
        scenario=sc,
        workload=wl,
        step_time_s=step_time,
        step_end_s=step_end,
        comm_busy_s=comm_busy,
        rank_mean=stats.rank_mean(),
        step_mean=stats.step_mean,
        wall_s=time.perf_counter() - wall0,
        compute_p50_s=stats.compute_p50(),
        records=stats.records,
        trace={"spans": spans},
    )
