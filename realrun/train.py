"""``torchrun ... -m realrun train``: real DDP GPT-2 training, one record per rank per step.

Each optimizer step: K micro-steps (gradient accumulation), the first K-1 under
``ddp.no_sync()`` so only the last backward launches bucket allreduces (the seed's
first fix: K-fold less traffic). A timing comm hook (realrun/hooks.py) records
when every bucket was ready, launched and reduced; from those the step splits into
data, forward, backward compute, the wait for the allreduces, and the optimizer.
Record schema: realrun/SCHEMA.md, "train".
"""

import gc
import os
import re
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from realrun import ddp_wrap
from realrun import dist as rdist
from realrun.data import Batches, Loader
from realrun.device import peak_memory, reset_peak
from realrun.hooks import BucketHook, Clock, inner_hook
from realrun.lifeline import let_go_reason
from realrun.model import build
from realrun.recipe import Recipe, backward, optimizer_step
from realrun.records import RecordWriter, one_line, rank_file
from realrun.runfolder import RUN_ID_ENV
from realrun.throttle import Throttle


class Terminated(Exception):
    """SIGTERM: torchrun stops the surviving ranks once one has failed."""


class Trainer:
    """One rank's training loop. ``group``: the process group DDP and its comm hook reduce over
    (default: every rank); the compute probe passes a group of this rank alone, so a step runs
    all of training's code with nothing to exchange (realrun/probe_compute.py)."""

    def __init__(self, args, env: rdist.DistEnv, recipe: Recipe, group=None):
        self.args, self.env, self.recipe = args, env, recipe
        self.step = -1
        self.enter("setup")
        sizes = args.micro_batch_per_rank or [args.micro_batch] * env.world_size
        if len(sizes) != env.world_size:
            raise ValueError(f"--micro-batch-per-rank: {len(sizes)} values for {env.world_size} ranks")
        self.micro_batch = sizes[env.rank]
        # Weight each sequence by W / sum_r(b_r) / K: DDP averages gradients over the W
        # ranks, so the result is the mean over all sum_r(b_r) x K sequences of the step,
        # the full-batch gradient, however unevenly the batch is split (the seed's fix for
        # a slow rank: balance work, not ranks). Even batches reduce to 1 / (b K).
        self.loss_scale = env.world_size / sum(sizes) / args.grad_accum
        # Same initial weights on every rank without touching the global RNG (DDP also
        # broadcasts rank 0's weights at construction).
        with torch.random.fork_rng(devices=[env.device] if env.device.type == "cuda" else []):
            torch.manual_seed(args.seed)
            model = recipe.prepare(build(args.model, device=env.device))
        self.seq_len = args.seq_len or model.cfg.block_size
        self.batches = Batches(
            vocab_size=model.cfg.vocab_size, seq_len=self.seq_len, seed=args.seed, rank=env.rank,
            data_file=args.data,
        )  # fmt: skip
        delay_ms = args.loader_delay_ms + sum(ms for r, ms in args.loader_straggler if r == env.rank)
        if args.loader_workers or delay_ms:
            self.batches = Loader(
                self.batches, seed=args.seed, rank=env.rank, batch=self.micro_batch, workers=args.loader_workers,
                prefetch=args.loader_prefetch, delay_s=delay_ms / 1e3,
            )  # fmt: skip
        self.throttle = None
        for rank, factor in args.straggler:
            if rank == env.rank:
                self.throttle = Throttle(model, factor, env.device)
        self.ddp = ddp_wrap.wrap(model, env, process_group=group, bucket_cap_mb=args.bucket_cap_mb)
        self.opt = recipe.optimizer(self.ddp.parameters(), args.lr)
        self.scaler = recipe.scaler()
        self.instrument = not args.no_instrument
        self.step_span = nullcontext
        if getattr(args, "profile", None):
            from torch.profiler import record_function

            from realrun.profiling import STEP_SPAN

            self.step_span = lambda: record_function(STEP_SPAN)
        self.clock = Clock(env.device)
        self.hook = None
        # MPS over gloo: every bucket goes through a CPU copy (realrun/ddp_wrap.py).
        staging = "cpu" if ddp_wrap.needs_staging(env) else args.grad_staging
        if self.instrument or args.comm_hook != "none" or args.no_overlap or staging != "none":
            inner, state = inner_hook(args.comm_hook, staging, group)
            # torch's PowerSGD hook issues its P and Q allreduces from future callbacks; on gloo
            # those run on worker threads in completion order, so with several buckets in flight
            # the ranks issue collectives in different orders and gloo aborts on a size mismatch
            # (pytorch/pytorch#58467; seen here). One bucket at a time keeps the order.
            serial = args.comm_hook == "powersgd" and dist.get_backend() == "gloo"
            clock = self.clock if self.instrument else None
            self.hook = BucketHook(args.comm_hook, inner, state, defer=args.no_overlap, serial=serial, clock=clock)
            self.ddp.register_comm_hook(None, self.hook.comm_hook)

    def enter(self, phase: str) -> None:
        """Where this rank is, for the message if a collective fails or torchrun stops it."""
        self.phase, self.phase_t = phase, time.perf_counter()

    def now(self) -> float:
        return rdist.now(self.env.device)

    def train_step(self) -> dict:
        a, dev = self.args, self.env.device
        reset_peak(dev)
        with self.step_span():  # a no-op unless profiled (realrun/profiling.py STEP_SPAN)
            t0 = self.now()
            self.clock.start(t0)
            if self.hook is not None:
                self.hook.begin_step()
            data_s = forward_s = backward_s = wait_s = 0.0
            loss_sum = torch.zeros((), device=dev)
            saved, buckets = [], []
            for micro in range(a.grad_accum):
                last = micro == a.grad_accum - 1
                self.enter("data")
                t = self.now()
                x, y = self.batches.next(self.micro_batch)
                x, y = x.to(dev), y.to(dev)
                t1 = self.now()
                with nullcontext() if last else self.ddp.no_sync():
                    self.enter("forward")
                    with self.recipe.autocast():  # forward and loss only (the AMP recipe)
                        _, per_seq = self.ddp(x, y)
                        loss = per_seq.sum() * self.loss_scale
                    t2 = self.now()
                    self.enter("backward")
                    backward(loss, self.scaler)
                    if self.throttle is not None:
                        self.throttle.backward_end()
                    t3 = self.now()
                loss_sum += per_seq.detach().float().sum()
                data_s, forward_s = data_s + t1 - t, forward_s + t2 - t1
                if last and self.instrument:
                    # Backward compute ends when the last bucket is ready; the rest is waiting.
                    buckets = self.hook.step_buckets()
                    compute_end = t0 + max(b["ready_s"] for b in buckets)
                    backward_s, wait_s = backward_s + compute_end - t2, t3 - compute_end
                else:
                    backward_s += t3 - t2
                if a.save_grads and self.step == 0:
                    saved.append((x.cpu(), y.cpu()))
            if saved:
                self._save_grads(saved)
            # The scale this step's gradients carry, read before update() changes it (a sync,
            # so before the optimizer's clock starts).
            grad_scale = self.scaler.get_scale() if self.scaler is not None else None
            self.enter("optimizer")
            t = self.now()
            optimizer_step(self.opt, self.scaler)
            self.opt.zero_grad(set_to_none=True)
            t_end = self.now()
        peak = peak_memory(dev)
        rec = {
            "type": "step",
            "step": self.step,
            "tokens": self.micro_batch * self.seq_len * a.grad_accum,
            "micro_batch": self.micro_batch,
            "loss": loss_sum.item() / (self.micro_batch * a.grad_accum),
            "step_wall_s": t_end - t0,
            "mem_peak_allocated_bytes": peak["peak_allocated_bytes"],
            "mem_peak_reserved_bytes": peak["peak_reserved_bytes"],
        }
        if grad_scale is not None:
            rec["grad_scale"] = grad_scale
        if not self.instrument:
            return rec
        burned, measured = self.throttle.take() if self.throttle else (0.0, None)
        rec.update(
            data_s=data_s, forward_s=forward_s, backward_s=backward_s, wait_s=wait_s,
            optimizer_s=t_end - t, throttle_s=burned,
            bucket_count=len(buckets), buckets=buckets,
        )  # fmt: skip
        if measured is not None:
            rec["throttle_compute_s"] = measured
        return rec

    def _save_grads(self, batches) -> None:
        """Test-only (--save-grads): step 0's batches, weights and reduced gradients."""
        model = self.ddp.module
        torch.save(
            {
                "inputs": [x for x, _ in batches],
                "targets": [y for _, y in batches],
                "params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
                "grads": {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()},
            },
            Path(self.args.out) / f"grads-rank{self.env.rank:04d}.pt",
        )

    def inject_fault(self) -> None:
        """Test-only (--fault RANK:STEP:kill|hang): die or hang at the start of a step."""
        for rank, step, kind in self.args.fault:
            if rank == self.env.rank and step == self.step:
                if kind == "kill":
                    os._exit(9)
                self.enter("an injected hang")
                while True:
                    signal.pause()

    def describe(self, err: BaseException) -> tuple[str, dict]:
        """One line naming the step, the phase or collective, and the likely cause."""
        coll = None
        if self.phase == "backward":  # without timing records, which bucket is unknown
            coll = self.hook.in_flight() if self.instrument else "the gradient allreduce"
        fault = {"type": "fault", "step": self.step, "phase": self.phase, "collective": coll}
        where = f"step {self.step}: " if self.step >= 0 else ""
        if isinstance(err, Terminated):
            during = f"while waiting for {coll}" if coll else f"during {self.phase}, outside any collective"
            return f"{where}terminated by torchrun after a peer failed ({during})", fault | {"terminated": True}
        detail = _first_line(err)
        if coll and isinstance(err, RuntimeError):  # torch.distributed's errors are RuntimeErrors
            waited_s = time.perf_counter() - self.phase_t
            cause = (
                f"nothing arrived within --timeout-s {self.args.timeout_s:g}: a peer hung or is far slower"
                if waited_s >= 0.9 * self.args.timeout_s
                else "a peer rank died or closed its connection"
            )
            return f"{where}{coll} failed after {waited_s:.1f} s in backward: {cause} [{detail}]", fault | {
                "terminated": False
            }
        return f"{where}{self.phase} failed: {detail}", fault | {"terminated": False}


def run(args) -> int:
    if getattr(args, "tp", 1) * getattr(args, "pp", 1) > 1:  # tensor/pipeline parallel: its own loop
        from realrun.train3d import run as run_3d

        return run_3d(args)
    env = rdist.init(args.backend, args.timeout_s, args.device)
    recipe = Recipe.for_run(args, env.device)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    writer = RecordWriter(
        rank_file(args.out, "train", env.rank),
        verb="train",
        config=config,
        dist_info=env.info(),
        run_info=recipe.meta(),
    )
    closing = False

    def on_sigterm(*_):
        if not closing:  # already failing on our own: let that path write the record
            raise Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    trainer = profiler = None
    try:
        trainer = Trainer(args, env, recipe)
        if args.profile:
            profiler = _profiler(args, env, recipe, trainer)
        for step in range(args.steps):
            trainer.step = step
            trainer.inject_fault()
            writer.write(trainer.train_step())
            if profiler is not None:
                profiler.step(step)
        if profiler is not None:
            profiler.stop()
    except (Exception, Terminated) as err:
        closing = True
        if trainer is None:
            reason, fault = f"setup failed: {type(err).__name__}: {err}", {"type": "fault", "step": -1}
        else:
            reason, fault = trainer.describe(err)
        stopped = let_go_reason()
        reason = f"{stopped} (then {reason})" if stopped else reason
        writer.write(fault)
        writer.abandon(reason)
        try:
            print(f"realrun train: rank {env.rank}: {reason}", file=sys.stderr, flush=True)
        except OSError:  # the launcher that read it was killed: a broken pipe must not skip the exit
            pass
        # Not sys.exit: tearing down a process group whose peer is gone can block forever.
        os._exit(1)
    writer.close(steps=args.steps, ddp_bucket_bytes=_ddp_bucket_bytes(trainer.ddp))
    # torch 2.13 + gloo: destroying the group while DDP's reducer is alive, or while a peer still
    # reads the last bucket, aborts the process now and then ("terminate called without an active
    # exception"; 3 of 8 plain runs here, 0 of 25 with this order). Meet, drop DDP, then destroy.
    dist.barrier()
    del trainer
    gc.collect()
    dist.destroy_process_group()
    return 0


def _profiler(args, env: rdist.DistEnv, recipe: Recipe, trainer: Trainer):
    """The --profile trace's writer, with what calibrate reads beside the events (docs/traces.md)."""
    from realrun.profiling import StepProfiler

    meta = {
        "run_id": os.environ.get(RUN_ID_ENV) or os.environ.get("TORCHELASTIC_RUN_ID"),
        "rank": env.rank,
        "world_size": env.world_size,
        "backend": env.backend,
        "device": str(env.device),
        **recipe.meta(),
        "model": args.model,
        "seq_len": trainer.seq_len,
        "micro_batch": trainer.micro_batch,
        "grad_accum": args.grad_accum,
        "bucket_cap_mb": args.bucket_cap_mb,
    }
    return StepProfiler(args.out, env.rank, args.profile, meta, env.device)


def _first_line(err: BaseException) -> str:
    """The exception's first line, less the wrappers futures add around a collective's error."""
    name, _, text = one_line(err).partition(": ")
    text = re.sub(r"^(Got the following error when running the callback: |RuntimeError: )+", "", text)
    return f"{name}: {text[:300]}"


def _ddp_bucket_bytes(ddp: DDP) -> list[int] | None:
    """DDP's own rebuilt bucket sizes (its logging data; private, so optional)."""
    try:
        sizes = ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes", "")
        return [int(s) for s in str(sizes).split(",") if s.strip()] or None
    except Exception:
        return None
