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

Per rank a step splits, as DDP's (sim/results.py), into dataloader + compute + optimizer +
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
from sim.noise import comm_multipliers, multipliers
from sim.online import OnlineStats
from sim.results import SimResult, pick_trace_ranks
from sim.transformer import ComputeShares, GPT2Shape, compute_shares, param_tensors
from sim.workload import build_workload

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


class _Op(NamedTuple):
    """One entry of a micro-step's program, in the order every rank runs it."""

    issue: int  # >= 0: issue this collective (index within the micro-step); -1: compute
    wait: int  # compute: the allgather it needs finished (index), -1 for none
    fwd_share: float  # compute: share of the micro-step's forward time
    bwd_share: float  # compute: share of its backward time


def _program(n_layer: int, prefetch: int, shares: ComputeShares, recompute: bool, allreduce: bool = False):
    """One micro-step's program and its collectives [(op, unit)] in issue order; ``allreduce``
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
            # Activation checkpointing reruns the block's forward inside its backward.
            prog.append(_Op(-1, ag[s], shares.block if recompute else 0.0, shares.block))
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
    shape, seq = sc.model.shape, sc.seq_len
    numels = unit_numels(shape)
    sh = compute_shares(shape, seq)
    shard, replicas = sc.shard_size, replica_groups(sc)
    prog, colls = _program(shape.n_layer, t.fsdp_prefetch, sh, t.activation_checkpointing, replicas > 1)
    colls = colls * t.grad_accum
    ops = tuple(op for op, _ in colls)
    units = tuple(u for _, u in colls)
    # FSDP mixed precision: gather the compute dtype, reduce the gradient dtype (sim/precision.py);
    # hsdp's allreduce moves the reduce-scattered shard, 1/S of the unit's gradient.
    size = {"allgather": t.dtypes.compute_bytes, "reduce_scatter": t.dtypes.grad_bytes}
    size["allreduce"] = t.dtypes.grad_bytes / shard
    wire = np.array([float(numels[u] * size[op]) for op, u in colls])
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
    ``records``, ``medians``, ``held``: as sim/engine.py's simulate()."""
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    wl = build_fsdp_workload(sc, rng)
    traced = sorted(trace_ranks) if trace_ranks is not None else pick_trace_ranks(sc, wl)
    spans: list[tuple] = []  # (rank, lane, name, start_s, end_s); lane 0 compute, 1 comm, 3 hsdp's allreduces
    n, k_micro, steps = sc.ranks, wl.grad_accum, sc.steps
    n_coll, per_micro = len(wl.ops), len(wl.ops) // wl.grad_accum
    gamma = wl.interference_gamma if wl.collective_s.any() else 0.0
    needed = Effects.needed(sc.episodes, sc.pauses, held)
    effects = Effects(sc.episodes, sc.pauses, n, sc.seed, held) if needed else None
    noise_cfg = sc.noise
    replica = wl.replica_stream
    two_streams = bool(replica.any())
    solo_ends: list = [None] * per_micro  # per collective of a micro-step, its end in each rank's solo run
    step_time, step_end, comm_busy = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    stats = OnlineStats(steps, n, records=records, medians=medians)
    t0 = 0.0
    for step in range(steps):
        # Draw order as sim/engine.py: the step's noise, then its jitter.
        noise = multipliers(rng, noise_cfg.distribution, noise_cfg.sigma, (n, k_micro), noise_cfg.samples)
        jitter = comm_multipliers(rng, sc.network.jitter_sigma, sc.network.jitter_samples, n_coll)
        t = t0 + wl.dataloader_s
        work = np.zeros(n)  # compute per rank this step
        coll_wait = np.zeros(n)
        if effects:  # episodes and pauses, as sim/engine.py applies them
            fx = effects.at(step, t0)
            noise, jitter = fx.apply(noise, jitter)
            if fx.pause_s is not None:  # a pause counts as compute, as in sim/results.py
                t, work = t + fx.pause_s, work + fx.pause_s
        starts, ends = np.zeros(n_coll), np.zeros(n_coll)
        durations = wl.collective_s * jitter
        stream_end = replica_end = -math.inf
        # Each rank's solo run: the same program with its own compute segments (as they really
        # ran) and streams fed by its own issue times alone, as if every rank were as fast as it.
        solo, solo_end, solo_replica_end = t.copy(), np.full(n, -math.inf), np.full(n, -math.inf)
        idle, exposed = np.zeros(n), np.zeros(n)  # exposed: the solo run's idle time
        issued = 0
        for k in range(k_micro):
            fwd, bwd = wl.forward_s * noise[:, k], wl.backward_s * noise[:, k]
            segs: dict[tuple[float, float], np.ndarray] = {}  # every block's segment is the same
            first = k * per_micro
            for op in wl.program:
                if op.issue >= 0:
                    c = first + op.issue
                    if replica[c]:  # hsdp: the shard the reduce-scatter before it just made
                        start = max(ends[c - 1], replica_end)
                        replica_end = start + durations[c]
                        solo_replica_end = np.maximum(solo_ends[op.issue - 1], solo_replica_end) + durations[c]
                        solo_ends[op.issue] = solo_replica_end
                    else:
                        t_max = float(t.max())
                        start = max(t_max, stream_end)
                        if t_max > stream_end:  # else every rank waits from the stream's end: 0 s
                            coll_wait += start - np.maximum(t, stream_end)
                        solo_end = np.maximum(solo, solo_end)
                        solo_end += durations[c]
                        solo_ends[op.issue] = solo_end
                    ends[c] = start + durations[c]
                    starts[c] = start
                    stream_end = stream_end if replica[c] else ends[c]
                    issued = c + 1
                    if step < trace_steps:
                        name = f"{wl.ops[c]} unit {wl.units[c]}"
                        lane = 3 if replica[c] else 1  # sim/trace.py's lanes
                        spans.extend((r, lane, name, start, float(ends[c])) for r in traced)
                    continue
                if op.wait >= 0:
                    w = first + op.wait
                    if ends[w] > float(t.min()):  # else no rank waits for it
                        done = np.maximum(t, ends[w])
                        idle += done - t
                        t = done
                    solo_done = np.maximum(solo, solo_ends[op.wait])
                    exposed += solo_done - solo
                    solo = solo_done
                seg = segs.get((op.fwd_share, op.bwd_share))
                if seg is None:  # a share of 0 adds +0.0: leaving it out gives the same floats
                    seg = op.fwd_share * fwd if op.fwd_share else np.zeros(n)
                    if op.bwd_share:
                        seg = seg + op.bwd_share * bwd
                    segs[(op.fwd_share, op.bwd_share)] = seg
                # Collectives issued later start after this segment ends on this rank: the
                # ones issued so far are all that can slow it.
                done = _busy(starts[:issued], ends[:issued], two_streams).finish(t, seg, gamma) if gamma else t + seg
                if step < trace_steps:
                    name = f"{'backward' if op.bwd_share else 'forward'} {k}"
                    spans.extend((r, 0, name, float(t[r]), float(done[r])) for r in traced)
                took = np.subtract(done, t, out=t)  # t is done with: reuse its memory
                work += took
                solo += took
                t = done
        # The step ends when both streams have (the optimizer needs every gradient shard).
        comm_end = max(stream_end, replica_end)
        idle += comm_end - t
        exposed += np.maximum(np.maximum(solo_end, solo_replica_end) - solo, 0.0)
        # The real run ends no earlier than the solo one (every real collective starts no earlier
        # than its solo twin), so its extra idle time, the straggler wait, is >= 0; the minimum
        # only absorbs rounding.
        exposed = np.minimum(exposed, idle)
        end = comm_end + wl.optimizer_s
        if step < trace_steps:
            spans.extend((r, 0, "optimizer", comm_end, end) for r in traced if wl.optimizer_s > 0)
            spans.extend((r, 2, f"step {step}", t0, end) for r in traced)
        step_time[step], step_end[step], comm_busy[step] = end - t0, end, durations.sum()
        stats.add(
            step,
            compute_s=work,
            exposed_comm_s=exposed,
            straggler_wait_s=idle - exposed,
            collective_wait_s=coll_wait,
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
