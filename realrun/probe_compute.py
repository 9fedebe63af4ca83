"""Compute probes: forward/backward and optimizer time, the bucket-ready profile of a
real DDP backward, and the overlap interference factor gamma (docs/design.md "Overlap interference").

Each rank times compute on training's own path: realrun/train.py's Trainer with DDP
reducing over a process group of that rank alone, so the times hold all of a training
step's own work (DDP's bucket copies, the comm hook, AdamW) and no communication. The
bucket profile wraps a copy in DDP over every rank and records, from hooks, when each
gradient and each bucket is ready within backward, so the simulator's bucket-ready
profile can be measured instead of assumed from FLOP counts.
"""

import argparse
import math
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from realrun import ddp_wrap
from realrun.data import Batches
from realrun.device import peak_memory, reset_peak
from realrun.dist import DistEnv, now
from realrun.hooks import staged_allreduce
from realrun.model import build
from realrun.recipe import Recipe, backward, optimizer_step

# DDP builds buckets in reverse parameter order for step 1 and rebuilds them in the
# order gradients became ready at the start of step 2 (reducer.cpp rebuild_buckets). The
# profile is the median over the steps after that (BUCKET_PROFILED of them): one step's ready
# times move by a preempted thread on a loaded CPU (the last bucket at 0.64 of backward in one
# step beside a second test suite, 0.89 quiet).
BUCKET_STEPS, BUCKET_PROFILED = 5, 3
OVERLAP_COMM_BYTES = 16 * 1024 * 1024  # one background allreduce: a 16 MiB bucket


def model_for(name: str, env: DistEnv, seed: int, recipe: Recipe):
    # Seed the weights without touching the caller's global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return recipe.prepare(build(name).to(env.device))


def _loss(model, batch, recipe: Recipe) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, loss): forward and loss under the run's autocast; backward goes outside it
    (the AMP recipe). Callers hold the logits through backward, as realrun/train.py does, so
    peak memory is a training step's (the logits are one of its largest tensors)."""
    with recipe.autocast():
        logits, per_seq = model(*batch)
        return logits, per_seq.mean()


def _fwd_bwd(model, batch, recipe: Recipe, scaler) -> tuple[float, float]:
    device = recipe.device
    model.zero_grad(set_to_none=True)
    t0 = now(device)
    _logits, loss = _loss(model, batch, recipe)
    t1 = now(device)
    backward(loss, scaler)
    return t1 - t0, now(device) - t1


def _batch(batches: Batches, size: int, device):
    # contiguous: the targets are a slice of the token rows, and GPT.forward .view()s them
    return tuple(t.to(device).contiguous() for t in batches.next(size))


def _own_group(env: DistEnv):
    """A process group of this rank alone. Every rank creates every such group, in the same
    order (torch.distributed.new_group is collective over the default group)."""
    groups = [dist.new_group([r]) for r in range(env.world_size)]
    return groups[env.rank]


def training_path(env: DistEnv, a, recipe: Recipe, micro_batch: int, comm_hook: str = "none"):
    """realrun/train.py's Trainer, the probe's bucket cap and no comm hook, reducing over a group
    of this rank alone: each step runs the whole of a training step (DDP's forward, its
    autograd hooks copying gradients into buckets, the timing comm hook, the mean's divide,
    the allreduce call, the copy back into .grad, the loss's sync, AdamW, zero_grad) with
    nothing to exchange. ``comm_hook``: the compression hook's own work too (bench only)."""
    from realrun.train import Trainer

    return Trainer(training_args(a, micro_batch, comm_hook), env, recipe, group=_own_group(env))


def training_args(a, micro_batch: int, comm_hook: str = "none") -> argparse.Namespace:
    """The Trainer's arguments: the probe's model, sequence, bucket cap, seed and timeout, and
    `ddplab train`'s defaults for the rest (realrun/cli.py train_parser, not imported here: it
    imports this module; tests/test_realrun_probe.py checks the two agree)."""
    return argparse.Namespace(
        out=a.out, model=a.model, seq_len=a.seq_len, seed=a.seed, micro_batch=micro_batch, timeout_s=a.timeout_s,
        comm_hook=comm_hook, micro_batch_per_rank=None, grad_accum=1, bucket_cap_mb=a.bucket_cap_mb,
        no_overlap=False, grad_staging="none", data=None, loader_workers=0, loader_delay_ms=0.0, loader_prefetch=2,
        lr=3e-4, straggler=[], loader_straggler=[], no_instrument=False, fault=[], save_grads=False, tp=1, pp=1,
        pp_schedule="1f1b", pp_virtual_stages=None,
    )  # fmt: skip


def compute(env: DistEnv, a, writer, recipe: Recipe) -> dict:
    """Forward, backward and the rest of a training step per micro-batch size, timed on
    training's own path (``training_path``) so that what the calibration calls compute is
    what a training step spends outside communication. Until 2026-12 this timed a bare local
    copy (``bare_step``) and missed ~29 ms a step, 2.8-4.4 % (docs/validation.md "The -2.5 %
    compute bias"; bench/compute_path.py measures the difference). Returns this rank's means:
    {"forward_s": {B: s}, "backward_s": {B: s}, "peak_allocated_bytes": {B: bytes or None},
    "optimizer_s": s, "params": n}."""
    trainer = training_path(env, a, recipe, a.micro_batches[0])
    # Step 0 runs DDP's bootstrap bucket order; buckets are rebuilt at step 1's forward.
    # Both untimed, as AdamW's first step allocates its state.
    for step in range(2):
        trainer.step = step
        trainer.train_step()
    out = {"forward_s": {}, "backward_s": {}, "peak_allocated_bytes": {}}
    rest = []
    # The sizes take turns, step by step, so each size's samples span the same stretch of time:
    # on a box whose speed drifts over minutes, blocks of one size each put one size in a slow
    # minute and the next in a fast one (the sitting of 2026-12-01, docs/validation.md).
    steps = {b: [] for b in a.micro_batches}
    for turn in range(a.warmup + a.iters):
        for b in a.micro_batches:
            trainer.micro_batch = b
            r = trainer.train_step()
            if turn >= a.warmup:
                steps[b].append(r)
    for b, recs in steps.items():
        shape = {"model": a.model, "micro_batch": b, "seq_len": a.seq_len, "tokens": b * a.seq_len}
        for i, r in enumerate(recs):
            # Backward as the rank lives it with no peer: to its last bucket ready, then DDP's
            # divide, hook and copy back (what a training run's record counts as wait).
            bwd = r["backward_s"] + r["wait_s"]
            writer.write(
                {"type": "compute", **shape, "forward_s": r["forward_s"], "backward_s": bwd,
                 "backward_ready_s": r["backward_s"], "iter": i}
            )  # fmt: skip
            # The rest of the step: data, the optimizer and zero_grad, the loss's sync.
            rest.append(r["step_wall_s"] - r["forward_s"] - bwd)
            writer.write(
                {"type": "optimizer", "params": _params(trainer), "optimizer_s": rest[-1],
                 "adamw_s": r["optimizer_s"], "micro_batch": b, "iter": i}
            )  # fmt: skip
        peaks = [r["mem_peak_allocated_bytes"] for r in recs]
        reserved = [r["mem_peak_reserved_bytes"] for r in recs]
        peak = {
            "peak_allocated_bytes": None if None in peaks else max(peaks),
            "peak_reserved_bytes": None if None in reserved else max(reserved),
        }
        writer.write({"type": "compute_memory", **{k: shape[k] for k in ("micro_batch", "seq_len", "tokens")}, **peak})
        out["forward_s"][b] = statistics.fmean(r["forward_s"] for r in recs)
        out["backward_s"][b] = statistics.fmean(r["backward_s"] + r["wait_s"] for r in recs)
        out["peak_allocated_bytes"][b] = peak["peak_allocated_bytes"]
    out["params"] = _params(trainer)
    out["optimizer_s"] = statistics.fmean(rest)
    out["hook_cast_s"] = hook_casts(env, a, writer, trainer)
    return out


HOOK_CASTS = {"fp16": torch.float16, "bf16": torch.bfloat16}


def hook_casts(env: DistEnv, a, writer, trainer) -> dict[str, float]:
    """The compression hooks' own work, what they cost over the plain hook, on a buffer the size
    of all the model's gradients: torch's fp16/bf16_compress_hook casts the bucket
    (``buffer.to(dtype).div_(world)``) and, when the allreduce is back, copies it into the
    fp32 bucket (``buffer.copy_(value)``); the plain hook (realrun/hooks.py ``_allreduce_mean``)
    divides in place, which the compute records already hold. So the record's ``extra_s`` is
    casts - divide, per pass over every gradient. The three take turns, as the micro-batch
    sizes do above, so a drifting box moves them alike. Until 2026-12-06 nothing measured this
    and fp16-hook runs were predicted fast by the casts (docs/validation.md, the sixth sitting).
    Returns {hook: mean extra seconds per pass}."""
    # DDP's buckets hold the gradients in the parameters' dtype (zero_grad has freed .grad).
    params = [p for p in trainer.ddp.module.parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    buffer = torch.zeros(numel, dtype=params[0].dtype, device=env.device)
    world = max(env.world_size, 2)  # the divide's value does not change its time
    samples = {hook: [] for hook in HOOK_CASTS}
    for turn in range(a.warmup + a.iters):
        t0 = now(env.device)
        buffer.div_(world)
        plain_s = now(env.device) - t0
        for hook, dtype in HOOK_CASTS.items():
            t0 = now(env.device)
            compressed = buffer.to(dtype).div_(world)
            buffer.copy_(compressed)
            cast_s = now(env.device) - t0
            del compressed
            if turn >= a.warmup:
                samples[hook].append((cast_s, plain_s))
    out = {}
    for hook, rows in samples.items():
        for i, (cast_s, plain_s) in enumerate(rows):
            writer.write(
                {"type": "hook_cast", "hook": hook, "grad_bytes": numel * buffer.element_size(),
                 "cast_s": cast_s, "plain_s": plain_s, "extra_s": cast_s - plain_s, "iter": i}
            )  # fmt: skip
        out[hook] = statistics.fmean(c - p for c, p in rows)
    return out


def _params(trainer) -> int:
    return sum(p.numel() for p in trainer.ddp.module.parameters())


def bare_step(model, opt, batch, recipe: Recipe, scaler) -> tuple[float, float, float]:
    """(forward_s, backward_s, optimizer_s) of a local copy, no DDP: what the compute probe
    timed until 2026-12, kept for bench/compute_path.py's comparison."""
    fwd, bwd = _fwd_bwd(model, batch, recipe, scaler)
    t0 = now(recipe.device)
    optimizer_step(opt, scaler)
    opt.zero_grad(set_to_none=True)
    return fwd, bwd, now(recipe.device) - t0


class _Marks:
    """Timestamps taken inside autograd hooks. On CPU the clock is the truth; on a GPU
    the hooks run when kernels are queued, not done, so record CUDA events instead."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


def bucket_profile(env: DistEnv, a, micro_batch: int, writer, recipe: Recipe) -> list[dict]:
    """Real DDP (the probe's ``--bucket-cap-mb``) for BUCKET_STEPS training steps; records the
    bucket and gradient ready times of the last BUCKET_PROFILED, each the median over them, as
    seconds and fractions of backward compute, and the peak memory."""
    model = model_for(a.model, env, a.seed, recipe)
    ddp = ddp_wrap.wrap(model, env, bucket_cap_mb=a.bucket_cap_mb)
    staged = ddp_wrap.needs_staging(env)  # MPS over gloo: reduce each bucket through a CPU copy
    opt, scaler = recipe.optimizer(ddp.parameters(), 1e-4), recipe.scaler()
    marks, names = _Marks(env.device), {id(p): n for n, p in model.named_parameters()}
    ready, launched, members, end = {}, {}, {}, {}
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _p, name=name: ready.__setitem__(name, marks.mark()))

    def recording_hook(state, bucket):  # learn the bucket's members; then DDP's default allreduce
        launched[bucket.index()] = marks.mark()
        buf = bucket.buffer()
        members[bucket.index()] = (
            [names[id(p)] for p in bucket.parameters()],
            buf.numel() * buf.element_size(),
        )
        return staged_allreduce((None, buf.dtype), bucket) if staged else allreduce_hook(state, bucket)

    def end_of_graph(grad):  # runs first in backward; its callback runs when the graph is done,
        # before DDP's own callback (queued later) waits for the collectives (reducer.cpp).
        torch.autograd.Variable._execution_engine.queue_callback(lambda: end.__setitem__("t", marks.mark()))
        return grad

    ddp.register_comm_hook(None, recording_hook)
    batches = Batches(vocab_size=model.cfg.vocab_size, seq_len=a.seq_len, seed=a.seed, rank=env.rank)
    profiled = []  # per profiled step: (backward_s, compute_s, {name: ready_s}, {bucket: launch_s})
    for step in range(BUCKET_STEPS):
        for d in (ready, launched, members):
            d.clear()
        batch = _batch(batches, micro_batch, env.device)
        now(env.device)  # the previous step's kernels are done before the peak restarts
        reset_peak(env.device)
        _logits, loss = _loss(ddp, batch, recipe)
        loss.register_hook(end_of_graph)
        start = marks.mark()
        backward(loss, scaler)
        stop = marks.mark()
        del _logits  # held through backward, as a training step holds them; not into the next step
        optimizer_step(opt, scaler)
        opt.zero_grad(set_to_none=True)
        if step >= BUCKET_STEPS - BUCKET_PROFILED:
            now(env.device)  # CUDA events: elapsed only once recorded
            profiled.append(
                (
                    marks.seconds(start, stop),
                    marks.seconds(start, end["t"]),
                    {name: marks.seconds(start, m) for name, m in ready.items()},
                    {i: marks.seconds(start, m) for i, m in launched.items()},
                )
            )
    now(env.device)
    peak = peak_memory(env.device)
    backward_s = statistics.median(x[0] for x in profiled)
    compute_s = statistics.median(x[1] for x in profiled)
    ready_s = {name: statistics.median(x[2][name] for x in profiled) for name in profiled[-1][2]}
    for name, _ in model.named_parameters():
        t = ready_s[name]
        writer.write({"type": "grad_ready", "name": name, "ready_s": t, "ready_fraction": t / compute_s})
    rows = []
    for index in sorted(members):  # the last step's buckets: membership is fixed after the rebuild
        params, nbytes = members[index]
        t = max(ready_s[p] for p in params)
        row = {
            "type": "bucket_ready",
            "step": BUCKET_STEPS - 1,
            "steps": list(range(BUCKET_STEPS - BUCKET_PROFILED, BUCKET_STEPS)),
            "micro_batch": micro_batch,
            "bucket": index,
            "bytes": nbytes,
            "params": params,
            "ready_s": t,
            "launch_s": statistics.median(x[3][index] for x in profiled),
            "ready_fraction": t / compute_s,
            "backward_compute_s": compute_s,
            "backward_s": backward_s,
        }
        writer.write(row)
        rows.append(row)
    writer.write(
        {
            "type": "ddp_memory",
            "micro_batch": micro_batch,
            "seq_len": a.seq_len,
            "tokens": micro_batch * a.seq_len,
            "buckets": len(rows),
            "grad_dtype": recipe.precision.describe()["grad_dtype"],
            **peak,
        }
    )
    return rows


# Tries of the overlap phase, each with OVERLAP_GROWTH x the allreduces, while some rank saw
# no iteration run entirely under them (the box slowed the compute, or sped the comm, after
# the single allreduce that sized the first try).
OVERLAP_TRIES = 3
OVERLAP_GROWTH = 4
OVERLAP_MAX_OPS = 4096  # allreduces of a try at most (16 MiB each: 64 GiB through the link)


def overlap(env: DistEnv, a, micro_batch: int, writer, recipe: Recipe) -> dict:
    """gamma = compute time with a concurrent allreduce / alone - 1. Every rank queues
    the same number of async allreduces (so the collectives match) and keeps computing
    until they are done; only iterations that ran entirely under communication count.
    The compute alone is timed half before and half after, so that a box whose speed drifts
    (a loaded or throttling machine) shifts both sides alike, not gamma."""
    model = model_for(a.model, env, a.seed, recipe)
    scaler = recipe.scaler()
    batches = Batches(vocab_size=model.cfg.vocab_size, seq_len=a.seq_len, seed=a.seed, rank=env.rank)
    batch = _batch(batches, micro_batch, env.device)
    # On a GPU time the compute stream only: a device-wide sync would wait for the comm too.
    cuda = env.device.type == "cuda"

    def step() -> float:
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.current_stream().synchronize()
        t0 = time.perf_counter()
        backward(_loss(model, batch, recipe)[1], scaler)
        if cuda:
            torch.cuda.current_stream().synchronize()
        return time.perf_counter() - t0

    for _ in range(a.warmup):
        step()
    first = (a.iters + 1) // 2
    alone_s = [step() for _ in range(first)]
    alone = statistics.fmean(alone_s)  # sizes the allreduces; the row's is both halves'
    buf = torch.zeros(OVERLAP_COMM_BYTES // 4, device=env.comm_device)  # zeros: racing sums stay 0
    dist.all_reduce(buf)
    dist.barrier()
    t0 = now(env.device)
    dist.all_reduce(buf)
    one_s = now(env.device) - t0
    # Enough allreduces to cover about 2 x iters computations; the largest count wins.
    ops = torch.tensor([min(OVERLAP_MAX_OPS, max(4, math.ceil(2 * a.iters * alone / one_s)))], device=env.comm_device)
    dist.all_reduce(ops, op=dist.ReduceOp.MAX)
    for attempt in range(OVERLAP_TRIES):
        if attempt:
            ops = torch.clamp(ops * OVERLAP_GROWTH, max=OVERLAP_MAX_OPS)
        dist.barrier()
        works = [dist.all_reduce(buf, async_op=True) for _ in range(int(ops.item()))]
        with_comm = []
        while not all(w.is_completed() for w in works):
            t = step()
            if not all(w.is_completed() for w in works):
                with_comm.append(t)
        for w in works:
            w.wait()
        # Every rank tries again, or none does: their collectives must stay matched.
        missed = torch.tensor([0 if with_comm else 1], device=env.comm_device)
        dist.all_reduce(missed, op=dist.ReduceOp.MAX)
        if not missed.item() or ops.item() >= OVERLAP_MAX_OPS:
            break
    alone_s += [step() for _ in range(a.iters - first)]
    alone = statistics.fmean(alone_s)
    busy = statistics.fmean(with_comm) if with_comm else None  # comm ended within one iteration
    row = {
        "type": "overlap",
        "micro_batch": micro_batch,
        "compute_alone_s": alone,
        "compute_with_comm_s": busy,
        "iters_alone": a.iters,
        "iters_with_comm": len(with_comm),
        "gamma": None if busy is None else busy / alone - 1.0,
        "comm_bytes": OVERLAP_COMM_BYTES,
        "comm_ops": int(ops.item()),
    }
    writer.write(row)
    return row
