"""What a training step spends beyond a bare forward/backward: the compute probe's old path
against training's own, interleaved in one process per rank.

    .venv/bin/python bench/compute_path.py [--model gpt2-mini] [--seq-len 128] [--micro-batches 2,4,8]
                                           [--iters 30] [--warmup 3] [--json OUT.json]

Two ranks (gloo, one core each, as `ddplab netlab` pins its hosts), both computing at once as
in a probe or a training run. Each rank holds two copies of the model and alternates them
step by step (A B, then B A, so drift on a shared box falls on both alike):

- bare: what `ddplab probe` timed until 2026-12 (realrun/probe_compute.py ``bare_step``): a local
  copy, forward and backward, then AdamW and zero_grad;
- training: realrun/train.py's Trainer with DDP over a process group of this rank alone (the
  probe's path since, ``training_path``): DDP's forward, its autograd hooks copying gradients
  into buckets, the timing comm hook, the mean's divide, the allreduce call, the copy back into
  ``.grad``, AdamW, zero_grad, the loss's sync. No peer, so no communication.

Per micro-batch it prints the mean of each part over both ranks and the difference, in ms and
in % of the bare step. Last, the optimizer as the old probe timed it: the same AdamW step
repeated on fixed gradients with nothing in between (``isolated``).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARTS = ("forward", "backward_ready", "after_ready", "rest", "step")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-mini")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batches", default="2,4,8")
    ap.add_argument("--iters", type=int, default=30, help="timed steps per arm and micro-batch")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--comm-hook", default="none", help="the training arm's comm hook (fp16: its casts too)")
    ap.add_argument("--json", type=Path, help="write every timed step here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29561"]
    cmd += [__file__, "--worker", *sys.argv[1:]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def worker(a) -> int:
    import torch.distributed as dist

    from realrun.cli import probe_parser
    from realrun.data import Batches
    from realrun.dist import init, now
    from realrun.probe_compute import _batch, _fwd_bwd, bare_step, model_for, training_path
    from realrun.recipe import Recipe, optimizer_step

    rank = int(os.environ["RANK"])
    os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})  # one core per rank, as netlab's hosts
    env = init("gloo", 600.0, "cpu")
    args = probe_parser().parse_args(
        ["--out", "/tmp/compute-path-unused", "--model", a.model, "--seq-len", str(a.seq_len)]
        + ["--micro-batches", a.micro_batches, "--iters", str(a.iters), "--warmup", str(a.warmup)]
    )
    recipe = Recipe.for_run(args, env.device)
    trainer = training_path(env, args, recipe, args.micro_batches[0], comm_hook=a.comm_hook)
    for _ in range(2):  # DDP's bootstrap step and the step that rebuilds its buckets
        trainer.train_step()
    bare = model_for(args.model, env, args.seed, recipe)
    opt, scaler = recipe.optimizer(bare.parameters(), 3e-4), recipe.scaler()
    batches = Batches(vocab_size=bare.cfg.vocab_size, seq_len=args.seq_len, seed=args.seed, rank=env.rank)
    rows = []

    def run_bare(b, batch):
        fwd, bwd, opt_s = bare_step(bare, opt, batch, recipe, scaler)
        return {"forward": fwd, "backward_ready": bwd, "after_ready": 0.0, "rest": opt_s, "step": fwd + bwd + opt_s}

    def run_training(b):
        r = trainer.train_step()
        rest = r["step_wall_s"] - r["forward_s"] - r["backward_s"] - r["wait_s"]
        return {
            "forward": r["forward_s"],
            "backward_ready": r["backward_s"],
            "after_ready": r["wait_s"],
            "rest": rest,
            "step": r["step_wall_s"],
        }

    for b in args.micro_batches:
        trainer.micro_batch = b
        batch = _batch(batches, b, env.device)
        for _ in range(args.warmup):
            run_bare(b, batch)
            run_training(b)
        for i in range(args.iters):
            order = ("bare", "training") if i % 2 == 0 else ("training", "bare")
            for arm in order:
                parts = run_bare(b, batch) if arm == "bare" else run_training(b)
                rows.append({"rank": env.rank, "micro_batch": b, "arm": arm, "iter": i, **parts})
    # The old probe's optimizer timing: the same step repeated on fixed gradients.
    _fwd_bwd(bare, _batch(batches, args.micro_batches[0], env.device), recipe, scaler)
    grads = [p.grad.clone() for p in bare.parameters()]
    isolated = []
    for _ in range(args.iters):
        for p, g in zip(bare.parameters(), grads, strict=True):
            p.grad.copy_(g)
        t0 = now(env.device)
        optimizer_step(opt, scaler)
        isolated.append(now(env.device) - t0)
    every = [None] * env.world_size
    dist.all_gather_object(every, {"rows": rows, "isolated": isolated})
    if env.rank == 0:
        report(a, every)
    dist.barrier()
    trainer.ddp = None  # drop DDP's reducer before the group goes (realrun/train.py run says why)
    dist.destroy_process_group()
    return 0


def report(a, every) -> None:
    rows = [r for e in every for r in e["rows"]]
    sizes = sorted({r["micro_batch"] for r in rows})
    print(
        f"# {a.model} seq {a.seq_len}, training arm's comm hook {a.comm_hook}, 2 ranks x {a.iters} steps per arm"
        " and micro-batch, mean over ranks (ms)"
    )
    print(f"{'mb':>3} {'arm':<9} " + " ".join(f"{p:>14}" for p in PARTS))
    summary = {}
    for b in sizes:
        means = {}
        for arm in ("bare", "training"):
            mine = [r for r in rows if r["micro_batch"] == b and r["arm"] == arm]
            means[arm] = {p: statistics.fmean(r[p] for r in mine) for p in PARTS}
            print(f"{b:>3} {arm:<9} " + " ".join(f"{means[arm][p] * 1e3:>14.1f}" for p in PARTS))
        base = means["bare"]["step"]
        diff = {p: means["training"][p] - means["bare"][p] for p in PARTS}
        print(f"{b:>3} {'diff':<9} " + " ".join(f"{diff[p] * 1e3:>+9.1f} {diff[p] / base:>+4.1%}" for p in PARTS))
        # The step difference's standard error, from the per-pair differences (pairs share drift).
        pairs = {}
        for r in rows:
            if r["micro_batch"] == b:
                pairs.setdefault((r["rank"], r["iter"]), {})[r["arm"]] = r["step"]
        d = [p["training"] - p["bare"] for p in pairs.values()]
        se = statistics.stdev(d) / len(d) ** 0.5
        mean_ms = statistics.fmean(d) * 1e3
        print(f"{'':>3} {'':<9} step difference {mean_ms:+.1f} ms +- {se * 1e3:.1f} (1 s.e., {len(d)} pairs)")
        summary[b] = {"bare_ms": {p: v * 1e3 for p, v in means["bare"].items()},
                      "training_ms": {p: v * 1e3 for p, v in means["training"].items()},
                      "step_diff_ms": statistics.fmean(d) * 1e3, "step_diff_se_ms": se * 1e3}  # fmt: skip
    iso = [x for e in every for x in e["isolated"]]
    iso_ms = statistics.median(iso) * 1e3
    print(f"# optimizer as the old probe timed it (isolated, fixed gradients): median {iso_ms:.1f} ms")
    if a.json:
        a.json.write_text(json.dumps({"summary": summary, "isolated_optimizer_s": iso, "rows": rows}, indent=1))
        print(f"# wrote {a.json}")


if __name__ == "__main__":
    sys.exit(main())
