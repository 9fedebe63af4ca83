"""`ddplab plan MODEL CLUSTER`: the TP x PP x DP layouts of a model on a cluster that fit in
memory, fastest first (workflow/layouts.py), with the keys that give each to `ddplab simulate`;
here, in local processes or on a Dask cluster (workflow/sweep_engines.py, as `ddplab sweep`)."""

import os
import sys

from ddplab import options
from output.terminal import show
from realrun.signals import sigterm_as_ctrl_c
from workflow import render_tables
from workflow.layouts import plan_layouts


def add_arguments(sub) -> None:
    p = sub.add_parser("plan", help="search TP x PP x DP layouts of a model on a cluster, fastest first")
    p.add_argument("model", help="model preset (scenarios/models.toml), e.g. llama3-70b")
    p.add_argument("cluster", help="cluster preset or .toml file (its GPUs, network and compute), e.g. h100-1024")
    p.add_argument("--gpus", type=int, help="GPUs to plan for (default: the cluster's ranks)")
    p.add_argument("--global-batch", type=int, help="sequences per optimizer step (default: one per GPU)")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the model's context)")
    options.sets(p)
    p.add_argument("--top", type=int, default=10, help="layouts to print (default 10)")
    p.add_argument("--finalists", type=int, default=12, help="layouts replayed event by event (default 12)")
    options.json_flag(p, "the ranked layouts with their --set keys")
    options.engines(
        p,
        local="this process (--workers N: N processes)",
        workers_default=None,
        workers_help="processes: local's pool (default 1: this process, no pool), or the LocalCluster --engine dask"
        " starts without --scheduler (default: every core)",
    )
    p.set_defaults(func=run)


def run(args):
    from workflow.sweep_engines import make_engine

    workers = args.workers
    if workers is None:  # local: this process; a LocalCluster: every core, as `ddplab sweep`'s
        workers = 1 if args.engine == "local" else os.cpu_count() or 1
    engine = make_engine(args.engine, workers, args.scheduler, args.dashboard)
    # SIGTERM as Ctrl-C: the engine's exit then ends its workers (and Dask's) and says one line;
    # a LocalCluster starts with SIGINT blocked (sweep_engines.py), as `ddplab sweep`'s does.
    with sigterm_as_ctrl_c():
        found = plan_layouts(args.model, args.cluster, gpus=args.gpus, global_batch=args.global_batch,
                             seq_len=args.seq_len, sets=args.set, top=args.top, finalists=args.finalists,
                             engine=engine, started=_listens)  # fmt: skip
    if args.json:
        return found
    show(render_tables.plan_lines(args.model, args.cluster, found["sets"], args.finalists, found))
    return found["layouts"]


def _listens(engine) -> None:
    if engine.name == "dask":  # what listens, and where (issue 25 D5)
        print(engine.listens(), file=sys.stderr, flush=True)
