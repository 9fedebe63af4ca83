"""`ddplab plan MODEL CLUSTER`: the TP x PP x DP layouts of a model on a cluster that fit in
memory, fastest first (workflow/layouts.py), with the keys that give each to `ddplab simulate`."""

from workflow.layouts import plan_layouts, scenario_sets
from workflow.units import fmt_seconds


def add_arguments(sub) -> None:
    p = sub.add_parser("plan", help="search TP x PP x DP layouts of a model on a cluster, fastest first")
    p.add_argument("model", help="model preset (scenarios/models.toml), e.g. llama3-70b")
    p.add_argument("cluster", help="cluster preset or .toml file (its GPUs, network and compute), e.g. h100-1024")
    p.add_argument("--gpus", type=int, help="GPUs to plan for (default: the cluster's ranks)")
    p.add_argument("--global-batch", type=int, help="sequences per optimizer step (default: one per GPU)")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the model's context)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key")
    p.add_argument("--top", type=int, default=10, help="layouts to print (default 10)")
    p.add_argument("--finalists", type=int, default=12, help="layouts replayed event by event (default 12)")
    p.add_argument("--json", action="store_true", help="print JSON: the ranked layouts with their --set keys")
    p.set_defaults(func=run)


def run(args):
    found = plan_layouts(args.model, args.cluster, gpus=args.gpus, global_batch=args.global_batch,
                         seq_len=args.seq_len, sets=args.set, top=args.top, finalists=args.finalists)  # fmt: skip
    if args.json:
        return found
    rows, gpus, batch = found["layouts"], found["gpus"], found["global_batch"]
    fit, replayed = found["fitting"], min(found["fitting"], args.finalists)
    print(f"{args.model} on {gpus} GPUs of {args.cluster}, global batch {batch} x {found['seq_len']} tokens: "
          f"{fit} of {found['considered']} layouts fit; {replayed} replayed ({found['seconds']:.1f} s)")  # fmt: skip
    print(f"  {'tp':>2} {'pp':>3} {'dp':>4} {'mb':>2} {'accum':>5} {'schedule':<14} {'recompute':<9} {'mode':<4}"
          f" {'step':>9} {'MFU':>6} {'memory':>9} {'bubble':>6} {'TP comm':>9} {'DP exp.':>9}")  # fmt: skip
    for r in rows:
        sched = r["schedule"] + (f" v={r['virtual']}" if r["virtual"] > 1 else "")
        mark = "" if r["replayed"] else "  (estimate)"
        print(f"  {r['tp']:>2} {r['pp']:>3} {r['dp']:>4} {r['micro_batch']:>2} {r['grad_accum']:>5} {sched:<14} "
              f"{r['recompute']:<9} {r['mode']:<4} {fmt_seconds(r['step_time_s']):>9} {_pct(r['mfu']):>6} "
              f"{r['memory_gib']:>5.1f} GiB {_pct(r['bubble_fraction']):>6} {_s(r['tp_comm_s']):>9} "
              f"{_s(r['dp_exposed_s']):>9}{mark}")  # fmt: skip
    print(
        f"  best: ddplab simulate {args.cluster} --ranks {gpus} "
        + " ".join(f"--set {x}" for x in [*scenario_sets(args.model, args.set, args.seq_len), *rows[0]["sets"]])
    )
    print(f"  assumed: {found['assumed']}; sequence parallelism on whenever tp > 1; identical GPUs")
    return rows


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _s(x) -> str:
    return "-" if x is None else fmt_seconds(x)
