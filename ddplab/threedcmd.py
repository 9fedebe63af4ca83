"""`ddplab simulate` of a tensor- or pipeline-parallel scenario (training.tp or training.pp > 1):
the steps workflow/threed.py simulates, printed per scale with their memory per stage and what a
straggler costs, and with --out the records written."""

from ddplab.progress import StepProgress, say
from workflow import simulation, threed
from workflow.units import fmt_seconds


def simulate(args, scenarios) -> list[dict]:
    if args.records and not args.out:
        raise ValueError("--records: needs --out DIR to write them to")
    if args.out:  # fail before simulating, not after; a reused folder would mix two runs' records
        moved = simulation.claim_out(args.out, force=args.force)
        if moved is not None:
            say(f"--force: moved the earlier run in {args.out} to {moved}")
    out = []
    runs = threed.simulate(
        scenarios, ignore_memory=getattr(args, "ignore_memory", False), records=args.records, out=args.out,
        sweep=args.sweep_ranks is not None, progress=lambda sc: StepProgress(f"simulating {sc.ranks} ranks"),
    )  # fmt: skip
    for sc, run, s in runs:
        if "verdict" in s:
            args.exit_code = 3
        out.append(s)
        if not args.json:
            print_run(sc, run, s)
    if args.out and not args.json and any("verdict" not in s for s in out):
        tables = "records, per-step and per-rank tables" if args.records else "per-step and per-rank tables"
        print(f"{tables} in {args.out}/")
    if args.json:
        return out if len(out) > 1 else out[0]
    return out


def print_run(sc, run, s: dict) -> None:
    lay, first = run.layout, run.first
    sched = lay.schedule + (f", v={lay.v}" if lay.v > 1 else "")
    mb = f"{lay.m} micro-batches of {sc.training.micro_batch_size} x {sc.seq_len}"
    print(f"{sc.name}: {sc.model.shape.name}, {sc.ranks} GPUs = tp {lay.tp} x pp {lay.pp} x dp {lay.dp} "
          f"({sc.training.mode}), {mb}, {sched}")  # fmt: skip
    if "verdict" in s:
        print(f"  {s['verdict']} (--ignore-memory to simulate anyway)")
    pct = s["step_time_percentiles_s"]
    print(f"  step time      {fmt_seconds(s['step_time_s'])} mean over {sc.steps} steps (p50 {fmt_seconds(pct['p50'])},"
          f" p99 {fmt_seconds(pct['p99'])}; {s['tokens_per_s']:,.0f} tokens/s, MFU {s['mfu']:.1%})")  # fmt: skip
    idle = s["stage_idle_fraction"]
    print(f"  pipeline       {fmt_seconds(s['pipeline_s'])}  bubble (closed form) {first.bubble_fraction:.1%}, "
          f"stage idle {min(idle):.1%}-{max(idle):.1%}")  # fmt: skip
    print(f"  TP comm        {fmt_seconds(first.tp_comm_s)} exposed per step on the busiest stage; "
          f"p2p send {fmt_seconds(first.p2p_s)}")  # fmt: skip
    print(f"  DP reduction   {fmt_seconds(s['dp_exposed_s'])} exposed after the pipeline; optimizer "
          f"{fmt_seconds(first.optimizer_s)}")  # fmt: skip
    parts = s["parts_s"]
    print(f"  per GPU        compute {fmt_seconds(parts['compute_s'])}, bubble {fmt_seconds(parts['bubble_s'])},"
          f" exposed comm {fmt_seconds(parts['exposed_comm_s'])}, straggler wait"
          f" {fmt_seconds(parts['straggler_wait_s'])} (means over GPUs and steps)")  # fmt: skip
    mem = ", ".join(f"{m.total_gib:.1f}" for m in first.memory[:8]) + (" ..." if len(first.memory) > 8 else "")
    print(f"  memory per GPU {first.peak_memory_gib:.1f} GiB at most (by stage: {mem})")
    if "straggler" in s:
        g = s["straggler"]
        c = g["charged_to"]
        print(f"  straggler      ranks {g['ranks']} in stage(s) {g['stages']}: +{fmt_seconds(g['cost_s'])} per step "
              f"({g['cost_fraction']:+.1%}) over {fmt_seconds(g['step_time_without_s'])} without; "
              f"charged to stage {c['stage']} (pipeline {c['replica']}: its compute grew most)")  # fmt: skip
    print(f"  assumed: {threed.ASSUMED}")
