"""``ddplab train --tp T --pp P``: tensor x pipeline x data parallel training on torch's own
APIs, one record per rank per step, in the same files and fields as realrun/train.py's DDP runs
plus the layout (realrun/SCHEMA.md, "train").

Layout: realrun/parallel.py (Megatron's rank order; a DeviceMesh of shape (pp, dp, tp)).
Tensor parallelism: realrun/tp.py (torch.distributed.tensor.parallel). Pipeline: realrun/pp.py
(torch.distributed.pipelining, GPipe or 1F1B over --grad-accum micro-batches). Data
parallelism over the rest: one flat allreduce of this rank's (local-shard) gradients over its DP
group after the pipeline drains, by hand rather than DDP: DDP does not take DTensor parameters,
and it would overlap its buckets with a backward the pipeline schedule owns.

Every rank of a TP group, and every stage of a pipeline, reads the same batches (Batches seeded
by the DP rank, not the global rank), so a run with dp = 1 sees exactly the data of a one-rank
run with the same seed, and its loss must match that run's.
"""

import gc
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from realrun import dist as rdist
from realrun.data import Batches
from realrun.lifeline import let_go_reason
from realrun.model import build
from realrun.parallel import Layout, virtual_stages
from realrun.pp import Chunks, build_schedule, stage_chunks
from realrun.recipe import Recipe
from realrun.records import RecordWriter, one_line, rank_file
from realrun.tp import shard_blocks

# Step 1 runs under MemTracker: the first whose peak holds AdamW's state (made in step 0's
# optimizer step, after that step's activations were freed) as well as activations; a warm-up
# step, which calibrate/validate.py drops, since the tracker's dispatch overhead slows it.
MEM_TRACKED_STEP = 1
MEM_CATEGORIES = ("Parameter", "Buffer", "Gradient", "Activation", "Temp", "Optstate", "Other")


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (its storage, written in place), else the tensor."""
    return getattr(t, "_local_tensor", t)


class Trainer3D:
    def __init__(self, args, env: rdist.DistEnv, recipe: Recipe, lay: Layout):
        self.args, self.env, self.recipe, self.lay = args, env, recipe, lay
        self.step, self.phase = -1, "setup"
        # When the previous step ended: a step's wall runs from there, not from its own start, so
        # the loop's work between steps (the record written, the next batch asked for) is in it and
        # every stage's steps add up to the same span (below, train_step).
        self.last_end: float | None = None
        c = lay.coords(env.rank)
        self.stage, self.dp_rank = c["stage"], c["dp_rank"]
        self.mesh = init_device_mesh(env.device.type, (lay.pp, lay.dp, lay.tp), mesh_dim_names=("pp", "dp", "tp"))
        # The whole model from the seed on every rank, then cut: every shard holds the one-rank
        # run's initial weights.
        with torch.random.fork_rng():
            torch.manual_seed(args.seed)
            model = recipe.prepare(build(args.model, device=env.device))
        self.cfg = model.cfg
        self.seq_len = args.seq_len or model.cfg.block_size
        self.first, self.last = self.stage == 0, self.stage == lay.pp - 1
        if lay.pp > 1:  # this stage's chunks: one, or v under the interleaved schedule (g % pp)
            chunks = stage_chunks(model, lay.pp, lay.virtual, self.stage)
            self.module = chunks[0] if lay.virtual == 1 else Chunks(chunks)
            self.roots = chunks  # what the schedule calls, a micro-batch at a time
        else:
            self.module = model
            self.roots = [model]
        for m in self.roots:
            shard_blocks(m, self.mesh["tp"])
        self.schedule = None
        if lay.pp > 1:
            pp_group = self.mesh["pp"].get_group()
            self.schedule = build_schedule(
                self.module, self.stage, lay.pp, pp_group, env.device, lay.schedule, lay.micro_batches,
                (args.micro_batch, self.seq_len),
            )  # fmt: skip
            self.last_stage_rank = dist.get_global_rank(pp_group, lay.pp - 1)
            self.pp_group = pp_group
        self.dp_group = self.mesh["dp"].get_group() if lay.dp > 1 else None
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.opt = recipe.optimizer(self.params, args.lr)
        self.batches = Batches(
            vocab_size=model.cfg.vocab_size, seq_len=self.seq_len, seed=args.seed, rank=self.dp_rank,
            data_file=args.data,
        )  # fmt: skip

    def now(self) -> float:
        return rdist.now(self.env.device)

    def _one_rank_path(self, xs, ys) -> tuple[float, float, torch.Tensor]:
        """pp = 1: gradient accumulation, realrun/train.py's weighting (1 / (b K) per sequence)."""
        fwd = bwd = 0.0
        loss_sum = torch.zeros((), device=self.env.device)
        scale = 1.0 / (self.args.micro_batch * len(xs))
        for x, y in zip(xs, ys, strict=True):
            self.phase = "forward"
            t1 = self.now()
            _, per_seq = self.module(x, y)
            t2 = self.now()
            self.phase = "backward"
            (per_seq.sum() * scale).backward()
            t3 = self.now()
            fwd, bwd = fwd + t2 - t1, bwd + t3 - t2
            loss_sum += per_seq.detach().sum()
        return fwd, bwd, loss_sum * scale

    def _pipeline_path(self, xs, ys) -> tuple[float, float, float, torch.Tensor]:
        self.phase = "pipeline"
        self.module.take_times()
        losses = []
        t = self.now()
        if self.first:
            self.schedule.step(torch.cat(xs))
        elif self.last:
            self.schedule.step(target=torch.cat(ys), losses=losses)
        else:
            self.schedule.step()
        pipeline_s = self.now() - t
        self.module.close_backward()
        fwd, bwd = self.module.take_times()
        loss = torch.stack(losses).detach().mean() if losses else torch.zeros((), device=self.env.device)
        return fwd, bwd, pipeline_s, loss

    def _reduce_dp(self) -> float:
        """Average this rank's gradient shards over its DP group: one flat allreduce."""
        if self.dp_group is None:
            return 0.0
        self.phase = "the data-parallel allreduce"
        t = self.now()
        grads = [_local(p.grad) for p in self.params if p.grad is not None]
        flat = torch._utils._flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=self.dp_group)
        flat /= self.lay.dp
        for g, reduced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
            g.copy_(reduced)
        return self.now() - t

    def train_step(self) -> dict:
        a, lay = self.args, self.lay
        t_data = self.now()
        t0 = t_data if self.last_end is None else self.last_end
        self.phase = "data"
        pairs = [self.batches.next(a.micro_batch) for _ in range(lay.micro_batches)]
        xs = [x.to(self.env.device) for x, _ in pairs]
        ys = [y.to(self.env.device) for _, y in pairs]
        t1 = self.now()
        if self.schedule is None:
            fwd, bwd, loss = self._one_rank_path(xs, ys)
            pipeline_wait_s = 0.0
        else:
            fwd, bwd, pipeline_s, loss = self._pipeline_path(xs, ys)
            pipeline_wait_s = max(0.0, pipeline_s - fwd - bwd)
        dp_wait_s = self._reduce_dp()
        self.phase = "optimizer"
        t = self.now()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t_opt = self.now()
        if self.schedule is not None:  # every stage records the step's loss: the last stage's
            self.phase = "the loss broadcast"
            dist.broadcast(loss, src=self.last_stage_rank, group=self.pp_group)
            # Inside the step: the stages leave it together, so a stage that drained early (the
            # last, done before the first stage's final backward) waits here, and that wait is the
            # pipeline's. Timed outside it, the last stage's step_wall_s came out 12 % short of the
            # first's (llama-mini, 492 against 557 ms) and the step's mean over ranks short of the
            # period the pipeline runs at (2026-12-06).
            pipeline_wait_s += self.now() - t_opt
        t_end = self.last_end = self.now()
        return {
            "type": "step",
            "step": self.step,
            "tokens": a.micro_batch * self.seq_len * lay.micro_batches,
            "micro_batch": a.micro_batch,
            "micro_batches": lay.micro_batches,
            "stage": self.stage,
            "loss": float(loss),
            "step_wall_s": t_end - t0,
            "mem_peak_allocated_bytes": None,  # CPU: no allocator statistics (the mem_tracker record has them)
            "mem_peak_reserved_bytes": None,
            "data_s": t1 - t_data,
            "forward_s": fwd,
            "backward_s": bwd,
            "pipeline_wait_s": pipeline_wait_s,
            "dp_wait_s": dp_wait_s,
            "wait_s": pipeline_wait_s + dp_wait_s,
            "optimizer_s": t_opt - t,
            "throttle_s": 0.0,
            "bucket_count": 0,
            "buckets": [],
        }

    def tracked_step(self) -> tuple[dict, dict | None]:
        """A step under torch's MemTracker (torch.distributed._tools.mem_tracker: a dispatch mode
        that sizes every tensor's storage by what it is; it works on CPU, where the allocator keeps
        no statistics). Its dispatch overhead slows the step, so only MEM_TRACKED_STEP. The record:
        the peak of the step by category, bytes."""
        try:
            from torch.distributed._tools.mem_tracker import MemTracker
        except ImportError:
            return self.train_step(), None
        tracker = MemTracker()
        tracker.track_external(self.module, self.opt)

        def fresh_module_stats(module, _inputs):
            # MemTracker refuses a root module called twice in one tracking ("multiple iterative
            # calls"), and every micro-batch calls it again; the root's own entry is dropped before
            # each call, which it then makes afresh. Not the whole table (reset_mod_stats, its own
            # advice): under the interleaved schedule a chunk's forward runs while another's blocks
            # still owe their backward, whose hooks look their entries up (a KeyError, seen). Registered
            # before the tracker's hooks, so it runs first. The peak by category, which this record
            # keeps, is the dispatch mode's and stays.
            if any(module is m for m in self.roots):
                tracker.memory_tracking.pop(module, None)

        handle = torch.nn.modules.module.register_module_forward_pre_hook(fresh_module_stats)
        try:
            with tracker:
                rec = self.train_step()
        finally:
            handle.remove()
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
        by_kind = {getattr(k, "value", k): int(v) for k, v in peak.items()}
        mem = {"type": "mem_tracker", "step": self.step, "tool": "torch.distributed._tools.mem_tracker.MemTracker"}
        mem |= {f"{k.lower()}_bytes": by_kind.get(k, 0) for k in MEM_CATEGORIES}
        mem["peak_bytes"] = by_kind.get("Total", 0)
        return rec, mem


def run(args) -> int:
    env = rdist.init(args.backend, args.timeout_s, args.device)
    recipe = Recipe.for_run(args, env.device)
    dp = env.world_size // (args.tp * args.pp)
    schedule = args.pp_schedule if args.pp > 1 else "none"
    lay = Layout(args.tp, args.pp, dp, args.grad_accum, schedule, virtual_stages(args))
    config = {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in vars(args).items()}
    writer = RecordWriter(
        rank_file(args.out, "train", env.rank),
        verb="train",
        config=config,
        dist_info=env.info(),
        run_info=recipe.meta() | {"layout": lay.describe(env.rank)},
    )
    trainer = None

    def on_sigterm(*_):
        raise SystemExit("terminated by torchrun after a peer failed")

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        trainer = Trainer3D(args, env, recipe, lay)
        for step in range(args.steps):
            trainer.step = step
            if step == MEM_TRACKED_STEP:
                rec, mem = trainer.tracked_step()
                writer.write(rec)
                if mem:
                    writer.write(mem)
            else:
                writer.write(trainer.train_step())
    except (Exception, SystemExit) as err:
        where = f"step {trainer.step}: {trainer.phase}" if trainer else "setup"
        reason = f"{where} failed: {one_line(err)}"
        stopped = let_go_reason()
        reason = f"{stopped} (then {reason})" if stopped else reason
        writer.write({"type": "fault", "step": trainer.step if trainer else -1, "phase": where})
        writer.abandon(reason)
        print(f"realrun train: rank {env.rank}: {reason}", file=sys.stderr, flush=True)
        os._exit(1)  # not sys.exit: tearing down a group whose peer is gone can block
    writer.close(steps=args.steps, ddp_bucket_bytes=None)
    dist.barrier()
    del trainer
    gc.collect()
    dist.destroy_process_group()
    return 0
