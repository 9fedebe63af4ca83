"""Rebalancing a data-parallel step by rank speed, in whole samples.

A rank's share of the global batch moves by whole samples (sequences): a sampler hands each
rank a list of sequences, and the step's global batch is the sum of them. So "work sized to
speed" (whatif's ``rebalance``) is an integer split: ``whole_samples`` gives each rank n_r >= 1
samples per optimizer step, the n_r summing to the ranks' configured total (the global batch
and the tokens per step are unchanged), so that the slowest rank's time, max_r n_r u_r, is least,
where u_r is rank r's time per sample (its step time at the configured samples over them: a
rank's time is taken as proportional to its samples, as the continuous split took it). A rank
late by d_r a step whatever its samples (a host delay before its forward) has time d_r + n_r u_r,
and the split takes that in: a late rank gives samples to the others until its delay is paid.

At 8 sequences per GPU one sample is 12.5 % of a rank's work: GPUs that differ by the 1-2 % of
identical parts cannot be rebalanced at all, and a lemon GPU 1.4 x slow drops to 6 of 8 while
two of the others take a ninth, so the step is 9/8 of a healthy rank's, not the healthy
cluster's (docs/design.md "Persistent straggler").

A rank's extra samples go into its micro-steps, so the fullest runs a micro-batch of
ceil(n_r / K), and the memory check is made there (sim/workload.py largest_micro_batch,
sim/memory_fit.py): at one 8k-token sequence per micro-step a ninth sample is a micro-batch of
two. Under DDP a rank could run an extra micro-step under no_sync instead; FSDP cannot (each
micro-step's all-gathers are collective, so every rank runs the same count). Not modelled.

The split: start from the continuous optimum's samples rounded down (at least one each), then
hand each remaining sample to the rank whose time with it would be least. For costs that grow
with n_r this greedy is optimal: the integer optimum M* is at least the continuous T*, so every
rank's floor((T* - d_r) / u_r) is within its room floor((M* - d_r) / u_r); the greedy always
takes the cheapest next sample, and while samples remain some rank has room at cost <= M*, so
it never exceeds M*.
"""

import heapq

import numpy as np


def whole_samples(per_step_s: np.ndarray, samples: int, fixed_s: np.ndarray | None = None) -> np.ndarray:
    """Samples per rank (integers >= 1, summing to ranks x ``samples``) that minimise the slowest
    rank's time, each rank's time being fixed_s[r] + per_step_s[r] x n_r / ``samples`` (module
    docstring): ``fixed_s``, default none, is what a rank pays a step whatever its samples (a
    host delay before its forward, sim/workload.py host_delay_s)."""
    t = np.asarray(per_step_s, dtype=float)
    d = np.zeros_like(t) if fixed_s is None else np.asarray(fixed_s, dtype=float)
    if samples < 1 or t.ndim != 1 or not np.all(t > 0) or d.shape != t.shape or not np.all(d >= 0):
        raise ValueError(
            f"whole_samples: needs samples >= 1, positive step times and fixed times >= 0 of their shape,"
            f" got {samples}, {t!r}, {d!r}"
        )
    u = t / samples
    total = len(u) * samples
    # Every rank's time when work is continuous: the T with sum_r (T - d_r) / u_r = total.
    continuous = (total + np.sum(d / u)) / np.sum(1.0 / u)
    # (1 + 1e-12): equal ranks' continuous share is ``samples`` itself, which rounding may put a
    # hair under; too many is taken back below.
    n = np.maximum(1, np.floor((continuous - d) / u * (1 + 1e-12)).astype(np.int64))
    # At least one each can overshoot where ranks slower than the continuous optimum were raised
    # to one: take back, one at a time, from the rank with the longest time that has more than one.
    while n.sum() > total:
        spare = np.where(n > 1, d + n * u, -np.inf)
        n[int(np.argmax(spare))] -= 1
    heap = [(float(d[r] + (n[r] + 1) * u[r]), r) for r in range(len(u))]
    heapq.heapify(heap)
    for _ in range(total - int(n.sum())):
        _, r = heapq.heappop(heap)
        n[r] += 1
        heapq.heappush(heap, (float(d[r] + (n[r] + 1) * u[r]), r))
    return n


def describe(n: np.ndarray, samples: int) -> str:
    """The split in words, for whatif's note: the ranks that left the configured samples."""

    def who(ranks: np.ndarray, verb: str) -> str:
        low, high = int(n[ranks].min()), int(n[ranks].max())
        if len(ranks) > 3:
            return f"{len(ranks)} ranks {verb} {low if low == high else f'{low}-{high}'}"
        ids = [str(int(r)) for r in ranks]
        names = ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} and {ids[-1]}"
        same = len(set(n[ranks].tolist())) == 1
        amount = str(int(n[ranks[0]])) if same else "/".join(str(int(n[r])) for r in ranks)
        return f"rank{'s' if len(ranks) > 1 else ''} {names} {verb}{'' if len(ranks) > 1 else 's'} {amount}"

    fewer, more = np.flatnonzero(n < samples), np.flatnonzero(n > samples)
    if not len(fewer) and not len(more):
        return f"every rank keeps its {samples} samples a step (one is {1 / samples:.1%} of its work)"
    parts = [who(group, "take") for group in (fewer, more) if len(group)]
    return f"{', '.join(parts)} samples a step (each had {samples})"
