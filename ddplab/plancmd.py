"""`ddplab plan MODEL CLUSTER`: the TP x PP x DP layouts of a model on a cluster that fit in
memory, fastest first (sim/planner.py), with the keys that give each to `ddplab simulate`."""

import time

from sim.parallel3d import ASSUMED
from sim.planner import plan
from sim.scenario_file import load_scenario
from sim.units import fmt_seconds


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
    sets = [f"model.preset={args.model}", *args.set]
    sets.append(f"training.seq_len={args.seq_len or 0}")  # 0: the model's context
    base = load_scenario(args.cluster, sets)
    gpus = args.gpus or base.ranks
    batch = args.global_batch or gpus
    if gpus < 1 or batch < 1:
        raise ValueError(f"--gpus and --global-batch: must be >= 1, got {gpus} and {batch}")
    t0 = time.perf_counter()
    ranked, considered = plan(base, gpus, batch, finalists=max(1, args.finalists))
    took = time.perf_counter() - t0
    if not ranked:
        raise ValueError(f"no layout of {args.model} on {gpus} GPUs at global batch {batch} fits in memory")
    rows = [_row(s) for s in ranked[: args.top]]
    if args.json:
        return {"model": args.model, "cluster": args.cluster, "gpus": gpus, "global_batch": batch,
                "seq_len": base.seq_len, "considered": considered, "fitting": len(ranked),
                "seconds": took, "assumed": ASSUMED, "layouts": rows}  # fmt: skip
    replayed = min(len(ranked), args.finalists)
    print(f"{args.model} on {gpus} GPUs of {args.cluster}, global batch {batch} x {base.seq_len} tokens: "
          f"{len(ranked)} of {considered} layouts fit; {replayed} replayed ({took:.1f} s)")  # fmt: skip
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
        + " ".join(f"--set {x}" for x in [*sets, *rows[0]["sets"]])
    )
    print(f"  assumed: {ASSUMED}; sequence parallelism on whenever tp > 1; identical GPUs")
    return rows


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _s(x) -> str:
    return "-" if x is None else fmt_seconds(x)


def _row(s) -> dict:
    c, step = s.candidate, s.step
    return c._asdict() | {
        "step_time_s": s.step_s,
        "estimate_s": s.estimate_s,
        "replayed": step is not None,
        "memory_gib": s.memory_gib,
        "mfu": step.mfu if step else None,
        "tokens_per_s": step.tokens_per_s if step else None,
        "bubble_fraction": step.bubble_fraction if step else None,
        "tp_comm_s": step.tp_comm_s if step else None,
        "dp_exposed_s": step.dp_exposed_s if step else None,
        "sets": c.sets(),
    }
