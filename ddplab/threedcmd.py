"""`ddplab simulate` of a tensor- or pipeline-parallel scenario (training.tp or training.pp > 1):
the steps workflow/threed.py simulates, printed per scale with their memory per stage and what a
straggler costs."""

from workflow import threed
from workflow.units import fmt_seconds


def simulate(args, scenarios) -> list[dict]:
    if args.out or args.records:
        raise ValueError("--out, --records: tp/pp scenarios write no tables or traces yet; use --json")
    out = []
    for sc, step, s in threed.simulate(scenarios, ignore_memory=getattr(args, "ignore_memory", False)):
        if "verdict" in s:
            args.exit_code = 3
        out.append(s)
        if not args.json:
            print_step(sc, step, s)
    if args.json:
        return out if len(out) > 1 else out[0]
    return out


def print_step(sc, step, s: dict) -> None:
    lay = step.layout
    sched = lay.schedule + (f", v={lay.v}" if lay.v > 1 else "")
    mb = f"{lay.m} micro-batches of {sc.training.micro_batch_size} x {sc.seq_len}"
    print(f"{sc.name}: {sc.model.shape.name}, {sc.ranks} GPUs = tp {lay.tp} x pp {lay.pp} x dp {lay.dp} "
          f"({sc.training.mode}), {mb}, {sched}")  # fmt: skip
    if "verdict" in s:
        print(f"  {s['verdict']} (--ignore-memory to simulate anyway)")
    print(f"  step time      {fmt_seconds(step.step_s)}  ({step.tokens_per_s:,.0f} tokens/s, MFU {step.mfu:.1%})")
    print(f"  pipeline       {fmt_seconds(step.pipeline_s)}  bubble (closed form) {step.bubble_fraction:.1%}, "
          f"stage idle {min(step.idle_fraction):.1%}-{max(step.idle_fraction):.1%}")  # fmt: skip
    print(f"  TP comm        {fmt_seconds(step.tp_comm_s)} exposed per step on the busiest stage; "
          f"p2p send {fmt_seconds(step.p2p_s)}")  # fmt: skip
    print(f"  DP reduction   {fmt_seconds(step.dp_exposed_s)} exposed after the pipeline; optimizer "
          f"{fmt_seconds(step.optimizer_s)}")  # fmt: skip
    mem = ", ".join(f"{m.total_gib:.1f}" for m in step.memory[:8]) + (" ..." if len(step.memory) > 8 else "")
    print(f"  memory per GPU {step.peak_memory_gib:.1f} GiB at most (by stage: {mem})")
    if "straggler" in s:
        g = s["straggler"]
        print(f"  straggler      ranks {g['ranks']} in stage(s) {g['stages']}: +{fmt_seconds(g['cost_s'])} per step "
              f"({g['cost_fraction']:+.1%}) over {fmt_seconds(g['step_time_without_s'])} without; "
              f"charged to stage {g['stages'][0]}")  # fmt: skip
    print(f"  assumed: {threed.ASSUMED}")
