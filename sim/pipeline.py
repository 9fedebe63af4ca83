"""Pipeline parallelism, event by event: the order each stage runs its micro-batches' forwards
and backwards in (``training.pp_schedule``), and when each runs, given what it waits for.

Schedules (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", Sec. 2.2):

- gpipe (Huang et al. 2019): every micro-batch's forward, then every backward. Each stage
  holds all m micro-batches' activations at once.
- 1f1b (PipeDream-Flush): stage i runs min(p - i - 1, m) forwards to fill the pipeline, then
  alternates one forward and one backward, then drains; stage i holds at most p - i
  micro-batches. Same bubble as GPipe: (p - 1) / (m + p - 1) of the step for equal stages.
- interleaved: each stage holds v model chunks (virtual stages g = chunk x p + stage, so a
  micro-batch crosses the p stages v times); Megatron's order walks micro-batches in groups of
  p through one chunk after another, warms up with 2 (p - i - 1) + (v - 1) p forwards, then
  alternates. The bubble shrinks to (p - 1) / (v m + p - 1); the first stage holds
  (1 + (p - 1) / (p v)) of a stage's activations for p micro-batches (Korthikanti et al. 2022,
  Sec. 4.2.3).
- zb-h1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, Sec. 3.1): 1F1B
  with each backward split into B (the input's gradient, passed on at once) and W (the weights'
  gradient, run later where the drain would wait); 1F1B's activations in flight, the bubble
  (p - 1)(T_F + T_B - T_W) instead of (p - 1)(T_F + T_B + T_W); needs m >= p.

The event model: every operation starts when its stage is free and its input has arrived
(the previous virtual stage's forward, plus the point-to-point send between GPUs; a backward
needs the next virtual stage's backward, the last one its own forward). Each stage runs its
list in order, as Megatron's does, so a slow stage delays every stage that waits on it, and
the makespan, each stage's idle time and where it idled come out of the replay rather than a
formula. ``bubble_fraction`` gives the closed forms the replay is held to in tests.
"""

from typing import NamedTuple

import numpy as np

F, B, W = "F", "B", "W"
# Zero-bubble schedules split a backward into B (the input's gradient, which the previous stage
# waits for) and W (the weights' gradient, which nothing downstream waits for). Each weight
# matmul's backward is two matmuls of its forward's size, one per gradient, so W is about half
# a backward (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, Sec. 2,
# take T_F = T_B = T_W); attention's score and softmax backward, which has no weights, makes it
# a little less, which this share ignores.
W_SHARE = 0.5


class Op(NamedTuple):
    kind: str  # F | B | W (zb-h1 only: then B is the input's gradient alone)
    micro_batch: int
    chunk: int  # model chunk on this stage (0 unless interleaved)


def stage_ops(schedule: str, p: int, m: int, v: int, stage: int) -> list[Op]:
    """The operations stage ``stage`` of ``p`` runs, in order, for ``m`` micro-batches."""
    if schedule == "gpipe":
        return [Op(F, j, 0) for j in range(m)] + [Op(B, j, 0) for j in range(m)]
    if schedule == "zb-h1":
        return _zb_h1_ops(p, m, stage)
    if schedule == "1f1b":
        v = 1
    total = m * v

    def nth(k: int, backward: bool) -> Op:
        group, within = divmod(k, p * v)
        chunk = (k // p) % v
        mb = group * p + within % p
        return Op(B, mb, v - 1 - chunk) if backward else Op(F, mb, chunk)

    if schedule == "1f1b":
        warm = min(p - stage - 1, m)
    else:  # Megatron's interleaved warm-up (schedules.py, forward_backward_pipelining_with_interleaving)
        warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    ops = [nth(k, False) for k in range(warm)]
    for j in range(total - warm):
        ops += [nth(warm + j, False), nth(j, True)]
    ops += [nth(j, True) for j in range(total - warm, total)]
    return ops


def _zb_h1_ops(p: int, m: int, stage: int) -> list[Op]:
    """ZB-H1 (Qi et al. 2023, Sec. 3.1): each backward split into B and W; at step x stage i runs
    F_x, then B_(x - (p - 1 - i)) (1F1B's lag, so the same activations in flight), then
    W_(x - (p - 1)): every stage's weight gradients lag its forwards by p - 1, which puts the W's
    where 1F1B's drain would wait for the next backward. Each index is run where it lies in
    [0, m). The bubble: (p - 1)(T_F + T_B - T_W) for m >= p, against 1F1B's (p - 1)(T_F + T_B + T_W)."""
    ops = []
    for x in range(m + p - 1):
        for kind, j in ((F, x), (B, x - (p - 1 - stage)), (W, x - (p - 1))):
            if 0 <= j < m:
                ops.append(Op(kind, j, 0))
    return ops


def ops_per_stage(schedule: str, m: int, v: int = 1) -> int:
    """Operations each stage runs in a step: a forward and a backward per micro-batch and chunk,
    and a W per micro-batch in a zero-bubble schedule."""
    if schedule == "zb-h1":
        return 3 * m
    return 2 * m * (v if schedule == "interleaved" else 1)


def bubble_fraction(schedule: str, p: int, m: int, v: int = 1) -> float:
    """The idle share of a step of equal stages without communication: (p - 1) / (m + p - 1)
    for GPipe and 1F1B, (p - 1) / (v m + p - 1) interleaved (Narayanan et al. 2021, Sec. 2.2)."""
    if schedule == "zb-h1":  # T_F = T_B = T_W: (p - 1)(1 + 1 - 1) over 3 m + that
        return (p - 1) / (3 * m + p - 1)
    chunks = v if schedule == "interleaved" else 1
    return (p - 1) / (chunks * m + p - 1)


class PipelineRun(NamedTuple):
    """One replay; with a batch of pipelines (leading axes B of ``forward_s``) each array has
    them in front: makespan_s (B), stage_end_s (B, p), ...; peak_in_flight is the schedule's,
    the same for every pipeline."""

    makespan_s: float | np.ndarray
    stage_end_s: np.ndarray  # (p,) when each stage's last backward ends
    last_backward_start_s: np.ndarray  # (p,) when it started
    busy_s: np.ndarray  # (p,) compute time on each stage
    idle_s: np.ndarray  # (p,) makespan - busy: the bubble, and waiting on a slower stage
    peak_in_flight: np.ndarray  # (p,) most chunk-micro-batches whose activations a stage held at once
    ops: int
    chunk_end_s: np.ndarray  # (p, chunks) when each model chunk's last backward ended
    chunk_last_start_s: np.ndarray  # (p, chunks) when it started


def run_pipeline(
    schedule: str,
    p: int,
    m: int,
    v: int,
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    p2p_s: float,
    start_s: np.ndarray | None = None,
    op_noise: np.ndarray | None = None,
    sync_forward_s: np.ndarray | None = None,
    sync_backward_s: np.ndarray | None = None,
) -> PipelineRun:
    """Replay the schedule. ``forward_s[..., i, c]`` and ``backward_s[..., i, c]``: stage i's
    chunk c, one micro-batch (a slow GPU's factor already in its stage's row), any leading axes
    a batch of pipelines replayed together (the same schedule, so the same order of events;
    only the times differ); ``p2p_s``: one activation (or gradient) send between consecutive
    stages; ``start_s[i]``: when stage i may begin (FSDP's first gather); ``op_noise[..., i, k]``:
    a multiplier on stage i's k-th operation's time; ``sync_forward_s``/``sync_backward_s``
    (p, v): time added to each operation after the noise, neither scaled nor drawn (the TP
    group's collectives as measured with the group, its wait for its slower member already in
    them)."""
    chunks = v if schedule == "interleaved" else 1
    n_virtual = p * chunks
    forward_s, backward_s = np.asarray(forward_s, dtype=float), np.asarray(backward_s, dtype=float)
    batch = forward_s.shape[:-2]
    lists = [stage_ops(schedule, p, m, v, i) for i in range(p)]
    split = schedule == "zb-h1"
    ptr = [0] * p
    free = np.zeros((*batch, p))
    if start_s is not None:
        free[...] = start_s
    busy = np.zeros((*batch, p))
    in_flight = np.zeros(p, dtype=int)
    peak = np.zeros(p, dtype=int)
    last_b_start = np.zeros((*batch, p))
    chunk_end = np.zeros((*batch, p, chunks))
    chunk_start = np.zeros((*batch, p, chunks))
    f_end = np.zeros((*batch, m, n_virtual))
    b_end = np.zeros((*batch, m, n_virtual))
    f_done = np.zeros((m, n_virtual), dtype=bool)  # the order of events is every pipeline's
    b_done = np.zeros((m, n_virtual), dtype=bool)
    remaining = sum(len(x) for x in lists)
    total = remaining
    while remaining:
        progressed = False
        for i in range(p):
            ops = lists[i]
            while ptr[i] < len(ops):
                op = ops[ptr[i]]
                g = op.chunk * p + i
                if op.kind == F:
                    if g and not f_done[op.micro_batch, g - 1]:
                        break  # its input has not been produced yet: another stage must run first
                    ready = 0.0 if g == 0 else f_end[..., op.micro_batch, g - 1] + p2p_s
                    dur = forward_s[..., i, op.chunk]
                elif op.kind == W:  # after this stage's own B of the micro-batch; nothing waits on it
                    if not b_done[op.micro_batch, g]:
                        break
                    ready = b_end[..., op.micro_batch, g]
                    dur = backward_s[..., i, op.chunk] * W_SHARE
                elif g == n_virtual - 1:
                    if not f_done[op.micro_batch, g]:
                        break
                    ready = f_end[..., op.micro_batch, g]  # the loss is on this stage
                    dur = backward_s[..., i, op.chunk]
                else:
                    if not b_done[op.micro_batch, g + 1]:
                        break
                    ready = b_end[..., op.micro_batch, g + 1] + p2p_s
                    dur = backward_s[..., i, op.chunk]
                if op.kind == B and split:
                    dur = dur * (1.0 - W_SHARE)  # the input's gradient alone; W follows
                if op_noise is not None:
                    dur = dur * op_noise[..., i, ptr[i]]
                sync = sync_forward_s if op.kind == F else sync_backward_s if op.kind == B else None
                if sync is not None:
                    dur = dur + sync[i, op.chunk]
                start = np.maximum(free[..., i], ready)
                end = start + dur
                if op.kind == F:
                    f_end[..., op.micro_batch, g] = end
                    f_done[op.micro_batch, g] = True
                    in_flight[i] += 1
                    peak[i] = max(peak[i], in_flight[i])
                elif op.kind == B:
                    b_end[..., op.micro_batch, g] = end
                    b_done[op.micro_batch, g] = True
                    in_flight[i] -= 1  # what W still needs (its layers' inputs) is not counted
                    last_b_start[..., i] = start
                    chunk_start[..., i, op.chunk], chunk_end[..., i, op.chunk] = start, end
                else:  # the weights' gradients are ready when W ends: the DP reduction's input
                    chunk_start[..., i, op.chunk], chunk_end[..., i, op.chunk] = start, end
                free[..., i] = end
                busy[..., i] += dur
                ptr[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"pipeline schedule {schedule} deadlocked (p={p}, m={m}, v={v})")
    makespan = free.max(axis=-1)
    if not batch:
        makespan = float(makespan)
    idle = np.expand_dims(makespan, -1) - busy
    return PipelineRun(makespan, free, last_b_start, busy, idle, peak, total, chunk_end, chunk_start)


def in_flight_closed_form(schedule: str, p: int, m: int, v: int, stage: int) -> int:
    """Chunk-micro-batches stage ``stage`` holds at its peak: m (GPipe), min(p - stage, m)
    (1F1B, and ZB-H1, whose held-back W's keep only their layers' inputs), min(2 (p - stage - 1)
    + (v - 1) p + 1, v m) interleaved (Megatron's warm-up + 1)."""
    if schedule == "gpipe":
        return m
    if schedule in ("1f1b", "zb-h1"):
        return min(p - stage, m)
    return min(2 * (p - stage - 1) + (v - 1) * p + 1, v * m)
