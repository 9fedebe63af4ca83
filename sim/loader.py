"""The data loader as PyTorch's DataLoader runs it: what a rank waits for its batches.

torch.utils.data.DataLoader with ``num_workers = W > 0`` keeps ``W x prefetch_factor`` batch
indices dispatched: it sends that many when the iterator starts, round-robin over the workers,
and one more each time the training loop takes a batch (``_try_put_index`` in ``_next_data``).
Each worker builds its batches one after another, in the order sent, and the loop takes them in
index order. With ``W = 0`` the loop builds every batch itself, blocking.

The training loop here is a rank's optimizer step: K micro-steps, each taking one batch and then
computing ``micro_s``, then ``gap_s`` of other work (the optimizer step, the exposed part of the
last collectives) during which the workers keep building. So a loader costs only where it is
slower than what it hides behind: per micro-step in steady state when ``batch_s / W`` exceeds the
compute, per step when the queue of ``W x prefetch_factor`` batches cannot cover a step's burst
of K, and once, the first batch, when the run starts. docs/loader.md derives the cases and
measurements/loader-check.txt checks them against real runs.

The recurrence for batch i (0-based over the whole run, worker i mod W):
  dispatched_i = 0 for i < W x prefetch_factor, else taken_{i - W x prefetch_factor}
  built_i      = max(dispatched_i, built_{i - W}) + batch_s
  taken_i      = max(wanted_i, built_i)
where wanted_i is when the loop asks: the previous take plus micro_s inside a step, plus gap_s
across a step boundary. It runs vectorised over ranks; sim does no I/O.
"""

import math
from dataclasses import dataclass

import numpy as np

# Steps run before the steady state is read, and steps averaged after. The queue starts with
# nothing built, and the loop's waits for the first batches give the workers a head start of up
# to W x prefetch_factor batches, which a loader-bound rank works off by its deficit per step;
# 4 steps per queued batch work it off whenever the deficit is over a quarter of a batch time,
# and below that the steady wait is underestimated by less than the deficit itself. With W
# workers and K micro-steps the pattern then repeats every lcm(W, K) / K steps: the mean is
# taken over whole periods.
WARMUP_STEPS = 64
WARMUP_STEPS_PER_QUEUED = 4
AVERAGED_STEPS = 64


@dataclass(frozen=True)
class LoaderWait:
    first_step_s: np.ndarray  # (ranks,) wait in the run's first step (includes the first batch)
    steady_s: np.ndarray  # (ranks,) mean wait per step once the queue has settled


def loader_wait_s(
    batch_s: np.ndarray,
    *,
    workers: int,
    prefetch_factor: int,
    micro_s: np.ndarray,
    micro_steps: int,
    gap_s: np.ndarray,
) -> LoaderWait:
    """Each rank's wait for batches: in the first step and per step in steady state.

    ``batch_s``: one worker's time to build one micro-batch, per rank; ``micro_s``: the compute
    of one micro-step, per rank; ``gap_s``: per rank, the rest of a step after its last
    micro-step. Arrays broadcast to one shape."""
    batch_s, micro_s, gap_s = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (batch_s, micro_s, gap_s)))
    if workers == 0:  # built in the loop, blocking: every batch costs its full time
        per_step = micro_steps * batch_s
        return LoaderWait(first_step_s=per_step.copy(), steady_s=per_step.copy())
    queue = workers * prefetch_factor
    warmup = WARMUP_STEPS + WARMUP_STEPS_PER_QUEUED * queue
    period = math.lcm(workers, micro_steps) // micro_steps  # steps until the workers' turns repeat
    steps = warmup + period * math.ceil(AVERAGED_STEPS / period)
    # Ring buffers indexed by batch number modulo their length.
    built = np.zeros((workers, *batch_s.shape))  # the last batch each worker built: built_{i-W}
    taken = np.zeros((queue, *batch_s.shape))  # taken_{i - queue}
    wanted = np.zeros(batch_s.shape)
    # The steps' waits are summed as they come, rows in np.mean's order (axis 0 adds row after
    # row), so the mean is the (steps x ranks) table's without the table: 0.2 GB at 65,536 ranks.
    first_step, steady_sum = None, None
    i = 0
    for step in range(steps):
        waited = np.zeros(batch_s.shape)
        for _ in range(micro_steps):
            dispatched = taken[i % queue] if i >= queue else 0.0
            built[i % workers] = np.maximum(dispatched, built[i % workers]) + batch_s
            took = np.maximum(wanted, built[i % workers])
            waited += took - wanted
            taken[i % queue] = took
            wanted = took + micro_s
            i += 1
        wanted = wanted + gap_s
        if step == 0:
            first_step = waited
        if step >= warmup:
            steady_sum = waited.copy() if steady_sum is None else np.add(steady_sum, waited, out=steady_sum)
    return LoaderWait(first_step_s=first_step, steady_s=steady_sum / (steps - warmup))
