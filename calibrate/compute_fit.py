"""Compute parameters from the probe's compute, optimizer, grad_ready and overlap records.

Per rank and micro-batch size the probe times forward and backward of a local copy
(no communication). The fastest rank is the reference (speed factor 1); every rank's
times are divided by its persistent speed factor (sim/noise.py's model: compute time
= base x speed factor x a mean-1 jitter draw) before the base is fitted, so the fit
describes one speed-1 rank and the factors describe the others.

Time per micro-step is affine in tokens, t = t0 + tokens x per-token (weighted least
squares on the per-size means, weights 1/t^2 so each size counts by its relative
error). Means, not medians: the simulator draws mean-1 multipliers around the base.
"""

from collections import defaultdict
from typing import NamedTuple

import numpy as np

from calibrate.calibration import AffineFit, BucketReady, ComputePeak, DdpPeak, Memory, PpSchedule, TpBlock
from calibrate.records import Run
from sim.config import DEFAULT_BUCKET_CAP_MB
from sim.pipeline import run_pipeline


def fit_affine(tokens: list[int], seconds: list[float]) -> AffineFit:
    x, y = np.asarray(tokens, float), np.asarray(seconds, float)
    if len(x) == 1:  # one size: proportional through the origin
        return AffineFit(0.0, float(y[0] / x[0]), 1.0, [(int(x[0]), float(y[0]))])
    w = 1.0 / y
    slope, intercept = np.polyfit(x, y, 1, w=w)
    if intercept < 0:  # time cannot fall below zero at small batches: refit through the origin
        slope, intercept = float(np.sum(w * w * x * y) / np.sum(w * w * x * x)), 0.0
    pred = intercept + slope * x
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    return AffineFit(float(intercept), float(slope), r2, [(int(a), float(b)) for a, b in zip(x, y, strict=True)])


class ComputeSamples(NamedTuple):
    """Per rank and micro-batch size, per-iteration (forward_s, backward_s) arrays."""

    model: str
    seq_len: int
    by_rank: dict[int, dict[int, np.ndarray]]  # {rank: {micro_batch: (iters, 2)}}
    files: list[str]


def compute_samples(runs: list[Run]) -> ComputeSamples | None:
    """The compute records of every run (they must agree on model and sequence length)."""
    by_rank: dict = defaultdict(lambda: defaultdict(list))
    shapes, files = set(), []
    for run in runs:
        recs = run.of("compute")
        if recs:
            files.append(str(run.path))
        for r in recs:
            shapes.add((r["model"], r["seq_len"]))
        for rank in run.records:
            for r in run.of("compute", rank):
                by_rank[rank][r["micro_batch"]].append((r["forward_s"], r["backward_s"]))
    if not shapes:
        return None
    if len(shapes) > 1:
        listed = ", ".join(f"{m} at seq {s}" for m, s in sorted(shapes))
        raise ValueError(f"compute records: runs disagree on the model ({listed}); calibrate one model at a time")
    model, seq = shapes.pop()
    arrays = {rank: {b: np.array(v) for b, v in sorted(d.items())} for rank, d in sorted(by_rank.items())}
    return ComputeSamples(model, seq, arrays, files)


def speed_factors(samples: ComputeSamples) -> dict[int, float]:
    """Each rank's persistent compute-time factor against the fastest rank: the geometric
    mean over micro-batch sizes of its median over the fastest median, scaled so the
    fastest rank's factor is 1."""
    medians = {r: {b: float(np.median(x.sum(axis=1))) for b, x in d.items()} for r, d in samples.by_rank.items()}
    sizes = set.intersection(*(set(d) for d in medians.values()))
    fastest = {b: min(m[b] for m in medians.values()) for b in sizes}
    raw = {r: float(np.exp(np.mean([np.log(m[b] / fastest[b]) for b in sizes]))) for r, m in medians.items()}
    # Each rank can be fastest at some size; the fastest overall is the reference.
    low = min(raw.values())
    return {r: f / low for r, f in raw.items()}


class ComputeFits(NamedTuple):
    forward: AffineFit
    backward: AffineFit
    step: AffineFit  # forward + backward
    samples: int  # iterations behind them


def fit_compute(samples: ComputeSamples, factors: dict[int, float]) -> ComputeFits:
    """Forward, backward and their sum per micro-step as affine functions of tokens,
    on speed-1-normalised means pooled over ranks."""
    fwd, bwd = defaultdict(list), defaultdict(list)
    for rank, d in samples.by_rank.items():
        for b, x in d.items():
            fwd[b].extend(x[:, 0] / factors[rank])
            bwd[b].extend(x[:, 1] / factors[rank])
    sizes = sorted(fwd)
    tokens = [b * samples.seq_len for b in sizes]
    f_mean = [float(np.mean(fwd[b])) for b in sizes]
    b_mean = [float(np.mean(bwd[b])) for b in sizes]
    return ComputeFits(
        forward=fit_affine(tokens, f_mean),
        backward=fit_affine(tokens, b_mean),
        step=fit_affine(tokens, [a + b for a, b in zip(f_mean, b_mean, strict=True)]),
        samples=int(sum(len(v) for v in fwd.values())),
    )


def normalised_compute(samples: ComputeSamples) -> dict[int, np.ndarray]:
    """Per rank, forward + backward of every iteration over its (rank, size) mean: the
    mean-1 jitter multipliers the simulator draws (sim/noise.py)."""
    out = {}
    for rank, d in samples.by_rank.items():
        parts = [x.sum(axis=1) / x.sum(axis=1).mean() for x in d.values()]
        out[rank] = np.concatenate(parts)
    return out


def normalised_by_micro_batch(samples: ComputeSamples) -> dict[int, np.ndarray]:
    """Per micro-batch size, every rank's forward + backward over its (rank, size) mean: the
    jitter at that size alone."""
    sizes = sorted({b for d in samples.by_rank.values() for b in d})
    out = {}
    for b in sizes:
        parts = [d[b].sum(axis=1) / d[b].sum(axis=1).mean() for d in samples.by_rank.values() if b in d]
        out[b] = np.concatenate(parts)
    return out


def optimizer_s(runs: list[Run]) -> tuple[float, int] | None:
    """The slowest rank's mean optimizer record (the step waits for it), and the sample count.
    Probes since 2026-12 record there all of a training step outside forward and backward
    (AdamW, zero_grad, the data, the loss's sync; realrun/probe_compute.py); earlier ones, the
    AdamW step alone, repeated on fixed gradients. The mean, not the median: the simulator adds
    this constant to every step, so the mean step comes out right only with the mean (on a box
    whose speed drifts the two differ by several %; docs/validation.md)."""
    per_rank = defaultdict(list)
    for run in runs:
        for rank in run.records:
            per_rank[rank] += [r["optimizer_s"] for r in run.of("optimizer", rank)]
    if not per_rank:
        return None
    return max(float(np.mean(v)) for v in per_rank.values()), sum(len(v) for v in per_rank.values())


def hook_cast_s_per_gb(runs: list[Run]) -> dict[str, tuple[float, int]] | None:
    """Per compression hook, what its casts add to a step per GB of (uncompressed) gradient: the
    slowest rank's mean ``extra_s`` over the buffer's bytes (realrun/probe_compute.py
    hook_casts), and the sample count. The slowest rank, as for the optimizer: the step waits
    for it. None for probes from before 2026-12-06, which did not time the casts."""
    per = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for rank in run.records:
            for r in run.of("hook_cast", rank):
                per[r["hook"]][rank].append(r["extra_s"] / (r["grad_bytes"] / 1e9))
    if not per:
        return None
    return {
        hook: (max(float(np.mean(v)) for v in ranks.values()), sum(len(v) for v in ranks.values()))
        for hook, ranks in sorted(per.items())
    }


def ready_profile(runs: list[Run]) -> tuple[dict[str, float], int] | None:
    """Per parameter, the mean over ranks and runs of the fraction of backward done when
    its gradient was ready (DDP's step 3, realrun/probe_compute.py)."""
    fractions = defaultdict(list)
    for run in runs:
        for r in run.of("grad_ready"):
            fractions[r["name"]].append(r["ready_fraction"])
    if not fractions:
        return None
    return {k: float(np.mean(v)) for k, v in fractions.items()}, max(len(v) for v in fractions.values())


def bucket_profile(runs: list[Run]) -> list[BucketReady]:
    """Rank 0's measured default-cap buckets of the first run that has them (for the report);
    a probe run at another cap (`probe --bucket-cap-mb`) is not one."""
    for run in runs:
        if run.config.get("bucket_cap_mb", DEFAULT_BUCKET_CAP_MB) != DEFAULT_BUCKET_CAP_MB:
            continue
        recs = run.of("bucket_ready", 0)
        if recs:
            return [BucketReady(bucket=r["bucket"], bytes=r["bytes"], ready_fraction=r["ready_fraction"]) for r in recs]
    return []


def interference_gamma(runs: list[Run]) -> tuple[float, int] | None:
    """Mean over ranks of the overlap probe's gamma, weighted by its iterations with
    communication in flight; None when no rank fitted one."""
    num = den = 0.0
    for run in runs:
        for r in run.of("overlap"):
            if r.get("gamma") is not None and r.get("iters_with_comm"):
                num += r["gamma"] * r["iters_with_comm"]
                den += r["iters_with_comm"]
    if not den:
        return None
    return num / den, int(den)


def memory_fit(runs: list[Run]) -> Memory | None:
    """Rank 0's peak allocated device memory: per micro-batch size of the compute probe (since
    2026-12 a training step over a one-rank group, DDP's buckets included; before, a local copy
    with AdamW's state; only the per-token slope is used), fitted affine in tokens, and one real
    DDP training step's
    peak (the bucket profile's last step, optimizer included). None without device statistics
    (CPU probes record none)."""
    points = {}
    for run in runs:
        for r in run.of("compute_memory", 0):
            if r.get("peak_allocated_bytes") is not None:
                points[r["tokens"]] = max(points.get(r["tokens"], 0), r["peak_allocated_bytes"])
    ddp = [r for run in runs for r in run.of("ddp_memory", 0) if r.get("peak_allocated_bytes") is not None]
    if not points or not ddp:
        return None
    tokens = sorted(points)
    if len(tokens) > 1:
        slope, intercept = np.polyfit(tokens, [points[t] for t in tokens], 1)
    else:
        slope, intercept = 0.0, float(points[tokens[0]])
    last = ddp[-1]
    return Memory(
        compute_peak_bytes=ComputePeak(
            intercept_bytes=float(intercept),
            per_token_bytes=float(slope),
            points=[(t, float(points[t])) for t in tokens],
        ),
        ddp_peak_bytes=DdpPeak(
            value=last["peak_allocated_bytes"],
            reserved=last.get("peak_reserved_bytes"),
            tokens=last["tokens"],
            micro_batch=last["micro_batch"],
        ),
        source="torch.cuda.max_memory_allocated per micro-batch (no DDP) and of a DDP training step",
    )


def tp_block_fit(runs: list[Run]) -> TpBlock | None:
    """realrun/probe_tp.py's records: per micro-batch size, the median over every rank's
    iterations of what the TP split added to the block's forward and backward, and rank 0's median
    in-step send. None for a probe without them (one rank, or from before the TP probe)."""
    rows = [r for run in runs for r in run.of("tp_block")]
    if not rows:
        return None
    sends = [r for run in runs for r in run.of("p2p")]
    points = []
    for tokens in sorted({r["tokens"] for r in rows}):
        mine = [r for r in rows if r["tokens"] == tokens]
        f = float(np.median([(r["tp_model_forward_s"] - r["model_forward_s"]) / r["blocks"] for r in mine]))
        b = float(np.median([(r["tp_model_backward_s"] - r["model_backward_s"]) / r["blocks"] for r in mine]))
        s = [r["time_s"] for r in sends if r["micro_batch"] * mine[0]["seq_len"] == tokens]
        mf = float(np.median([r["model_forward_s"] for r in mine]))
        mb = float(np.median([r["model_backward_s"] for r in mine]))
        points.append([float(tokens), f, b, float(np.median(s)) if s else -1.0, mf, mb])
    return TpBlock(
        tp=int(rows[0]["tp"]),
        points=points,
        samples=len(rows),
        source="realrun/probe_tp.py: the model with its blocks TP-split over the probe's ranks minus the bare model,"
        " per block, median over ranks and iterations; send: half a round trip after each rank's blocks' forward,"
        " rank 0's median; model: the bare model's forward and backward, median over ranks and iterations",
    )


def pipeline_action_s(
    schedule: str, forward_s: np.ndarray, backward_s: np.ndarray, micro_batches: int, step_s: float
) -> float:
    """The cost ``a`` per forward or backward action that makes sim/pipeline.py's replay of
    ``schedule`` (stage i's ``forward_s[i]`` and ``backward_s[i]`` per micro-batch, each action
    ``a`` longer, no sends) last ``step_s``: bisection, the replay's makespan growing with ``a``.
    0 where the replay without it is already as long (nothing beyond compute and the bubble).
    Shapes (pp,) or, per model chunk, (pp, v)."""
    f, b = np.asarray(forward_s, dtype=float), np.asarray(backward_s, dtype=float)
    f, b = (f, b) if f.ndim == 2 else (f.reshape(-1, 1), b.reshape(-1, 1))
    pp, v = f.shape

    def makespan(a: float) -> float:
        return run_pipeline(schedule, pp, micro_batches, v, f + a, b + a, 0.0).makespan_s

    if makespan(0.0) >= step_s:
        return 0.0
    lo, hi = 0.0, step_s / (2 * micro_batches * v)  # a stage runs 2 m v actions: a >= hi overshoots
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if makespan(mid) < step_s else (lo, mid)
    return (lo + hi) / 2


def _stage_compute(stages: list[list[dict]], m: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """(pp, v) forward and backward per micro-batch, each stage's (each chunk's) median over the
    probe's iterations; with one chunk a stage, its whole compute."""
    if v == 1:
        keys, pick = ("forward_s", "backward_s"), lambda r, k, c: r[k]
    else:
        keys, pick = ("chunk_forward_s", "chunk_backward_s"), lambda r, k, c: r[k][c]
        for r in (r for rs in stages for r in rs):
            got = r.get("chunk_forward_s")
            if not (isinstance(got, list) and len(got) == v and len(r.get("chunk_backward_s") or []) == v):
                raise ValueError(f"pp_schedule.chunk_forward_s: expected {v} chunk times, got {got!r:.40}")
    f, b = (np.array([[np.median([pick(r, k, c) for r in rs]) / m for c in range(v)] for rs in stages]) for k in keys)
    return f, b


def pp_schedules_fit(runs: list[Run]) -> dict[str, PpSchedule] | None:
    """realrun/probe_pp.py's records: per schedule and micro-batch size, each stage's median
    forward and backward per micro-batch, the median over iterations of the slowest stage's step,
    and the action cost the replay needs to last that long. None for a probe without them."""
    rows = [r for run in runs for r in run.of("pp_schedule")]
    if not rows:
        return None
    out = {}
    for schedule in sorted({r["schedule"] for r in rows}):
        if schedule not in ("gpipe", "1f1b", "interleaved"):
            raise ValueError(f"pp_schedule.schedule: {schedule!r} is not gpipe, 1f1b or interleaved")
        mine = [r for r in rows if r["schedule"] == schedule]
        pp, m, v = mine[0]["pp"], mine[0]["micro_batches"], mine[0].get("virtual", 1)
        points = []
        for tokens in sorted({r["tokens"] for r in mine}):
            at = [r for r in mine if r["tokens"] == tokens]
            stages = [[r for r in at if r["stage"] == i] for i in range(pp)]
            if any(not rs for rs in stages):
                raise ValueError(f"pp_schedule: the {schedule} probe at {tokens} tokens lacks some of its {pp} stages")
            f, b = _stage_compute(stages, m, v)
            by_iter = defaultdict(list)
            for r in at:
                by_iter[r["iter"]].append(r["pipeline_s"])
            step = float(np.median([max(ts) for ts in by_iter.values() if len(ts) == pp]))
            points.append([float(tokens), pipeline_action_s(schedule, f, b, m, step), step])
        out[schedule] = PpSchedule(
            pp=pp,
            virtual=v,
            micro_batches=m,
            points=points,
            samples=len(mine),
            source=f"realrun/probe_pp.py: torch.distributed.pipelining's {schedule} on the probe's {pp} ranks,"
            f" {m} micro-batches a step; per micro-batch size the cost per action that sim/pipeline.py's replay of"
            " the stages' measured compute needs to last the measured step (median over iterations)",
        )
    return out
