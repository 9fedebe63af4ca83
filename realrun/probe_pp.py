"""The pipeline probe: what torch.distributed.pipelining costs per action on these ranks, beyond
the stages' own compute and the schedule's bubble.

Why (docs/parallelism.md, "Real runs on CPU"): on a CPU with gloo, a 2-stage run of llama-tiny
waits 11-13 ms a step where the bubble and the sends come to 4 ms. The rest is the framework's own
work around every forward and backward (its point-to-point batches and their waits, the stage's
bookkeeping, `stage_backward` through autograd.grad), about a millisecond an action here and not
the same per action in GPipe and 1F1B (torch's 1F1B fuses a send with the next receive; GPipe
does not), nor at every micro-batch size (the last stage's loss, outside its module's timed
forward, grows with the tokens). No other probe times it, so this one runs each schedule itself:
the probe's model cut into one stage per rank (realrun/pp.py, as `train --pp` cuts it),
PP_MICRO_BATCHES micro-batches per step at each of the probe's micro-batch sizes, as the TP probe
times its sizes, warm-up steps dropped, in fp32 as `train --pp` trains. Each rank records its
stage's compute (forward and backward, timed as realrun/pp.py times them) and the schedule's
step; calibrate solves the per-action cost from them (calibrate/compute_fit.py
pp_schedules_fit). The interleaved schedule runs too, with PP_VIRTUAL chunks a stage where the
model has the layers (pp x v <= layers + 2, as `train` allows), each chunk timed apart.
"""

import statistics

import torch

from realrun.dist import DistEnv, now
from realrun.model import build
from realrun.parallel import DEFAULT_VIRTUAL
from realrun.pp import SCHEDULE_CLASSES, Chunks, build_schedule, stage_chunks

# Micro-batches per probed step: more than a 2-stage pipeline's warm-up, so 1F1B reaches its
# steady state (at 2 it is all warm-up and drain: 1.08 ms an action against 0.57-0.66 at 4 and 8
# here), and not the 4 that tests/test_train3d.py's and bench/validate3d_cpu.sh's runs use.
PP_MICRO_BATCHES = 8
PP_VIRTUAL = DEFAULT_VIRTUAL  # the interleaved schedule's chunks a stage, as `train`'s default


def pp_schedules(env: DistEnv, a, writer) -> dict[str, dict[int, float]]:
    """Records ``pp_schedule`` (each rank, each schedule, each of the probe's micro-batch sizes,
    each iteration) and returns rank 0's median step per schedule and size for the printout.
    Every rank is one stage (pp = world size)."""
    pp, stage = env.world_size, env.rank
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(a.seed)
        model = build(a.model).to(env.device)
    out = {}
    schedules = [(s, 1) for s in SCHEDULE_CLASSES]
    if pp * PP_VIRTUAL <= model.cfg.n_layer + 2 and PP_MICRO_BATCHES % pp == 0:
        schedules.append(("interleaved", PP_VIRTUAL))
    cuts = {v: stage_chunks(model, pp, v, stage) for v in {v for _, v in schedules}}  # once each: hooks on the weights
    for schedule, v in schedules:
        chunks = cuts[v]
        module = chunks[0] if v == 1 else Chunks(chunks)
        first, last = stage == 0, stage == pp - 1
        out[schedule] = {}
        for b in a.micro_batches:  # the stage's shapes are static: one schedule per size
            sched = build_schedule(module, stage, pp, None, env.device, schedule, PP_MICRO_BATCHES, (b, a.seq_len))
            gen = torch.Generator().manual_seed(a.seed)
            ids = torch.randint(0, model.cfg.vocab_size, (b * PP_MICRO_BATCHES, a.seq_len + 1), generator=gen)
            x, y = ids[:, :-1].contiguous().to(env.device), ids[:, 1:].contiguous().to(env.device)
            steps = []
            for i in range(a.warmup + a.iters):
                module.zero_grad(set_to_none=True)  # as a training step starts; no optimizer here
                for c in chunks:
                    c.take_times()
                t = now(env.device)
                if first:
                    sched.step(x)
                elif last:
                    sched.step(target=y, losses=[])
                else:
                    sched.step()
                pipeline_s = now(env.device) - t
                for c in chunks:
                    c.close_backward()
                times = [c.take_times() for c in chunks]  # per chunk, this stage's chunk order
                if i >= a.warmup:
                    steps.append(pipeline_s)
                    writer.write(
                        {"type": "pp_schedule", "schedule": schedule, "pp": pp, "stage": stage, "virtual": v,
                         "micro_batches": PP_MICRO_BATCHES, "micro_batch": b, "seq_len": a.seq_len,
                         "tokens": b * a.seq_len, "pipeline_s": pipeline_s,
                         "forward_s": sum(f for f, _ in times), "backward_s": sum(b_ for _, b_ in times),
                         "chunk_forward_s": [f for f, _ in times], "chunk_backward_s": [b_ for _, b_ in times],
                         "iter": i - a.warmup}
                    )  # fmt: skip
            out[schedule][b] = statistics.median(steps)
    return out
