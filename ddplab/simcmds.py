"""`ddplab simulate`: one scale or a sweep of a scenario, optionally calibrated
(workflow/simulation.py); the summary, the memory estimate and the sweep table as people read
them, or JSON."""

from ddplab import threedcmd, traincost
from ddplab.progress import StepProgress, say
from ddplab.signals import sigterm_as_ctrl_c
from workflow import simulation, threed
from workflow.units import fmt_bytes, fmt_count, fmt_seconds


def simulate(args):
    # SIGTERM as Ctrl-C: a file being written (records.npz takes minutes at 64k ranks) then
    # loses its temporary in output/atomic.py's cleanup, where SIGTERM's default left it behind.
    with sigterm_as_ctrl_c():
        return _simulate(args)


def _simulate(args):
    counts = simulation.rank_counts(args.ranks, args.sweep_ranks)
    tokens, price = traincost.parse(args)
    # Validate every scale before simulating any, so a bad count fails fast.
    calib = getattr(args, "calib", None)
    scenarios, provenance, warning = simulation.build_scenarios(
        args.scenario, args.set, counts, steps=args.steps, seed=args.seed,
        device_gib=getattr(args, "device_gib", None), calib=calib,
        calib_network=getattr(args, "calib_network", None), calib_mode=getattr(args, "calib_mode", "auto"),
    )  # fmt: skip
    if warning:
        say(f"ddplab simulate: warning: {warning}")
    sweep = args.sweep_ranks is not None
    if any(threed.is_3d(sc) for sc in scenarios):  # tensor or pipeline parallel: sim/parallel3d.py
        if getattr(args, "engine", "fast") == "simpy":
            raise ValueError("--engine simpy: the reference models a DDP step; training.tp/pp run sim/parallel3d.py")
        return threedcmd.simulate(args, scenarios)
    if args.records and not args.out:
        raise ValueError("--records: needs --out DIR to write them to")
    engine = getattr(args, "engine", "fast")
    ranks = f"--sweep-ranks {args.sweep_ranks}" if args.sweep_ranks else f"ranks {scenarios[0].ranks}"
    simulation.check_sizes(
        scenarios, f"{ranks} x steps {scenarios[0].steps}", engine=engine, out=args.out is not None,
        records=args.records, yes=getattr(args, "yes", False),
    )  # fmt: skip
    if args.out:  # fail before simulating, not after; a reused folder would mix two runs' records
        moved = simulation.claim_out(args.out, force=args.force)
        if moved is not None:
            say(f"--force: moved the earlier run in {args.out} to {moved}")
    summaries = simulation.simulate_scales(
        scenarios, provenance, engine=engine, records=args.records, out=args.out, sweep=sweep,
        horizon_h=args.horizon_h, tokens=tokens, price=price, ignore_memory=getattr(args, "ignore_memory", False),
        progress=step_progress, say=say,
    )  # fmt: skip
    if any("verdict" in s for s in summaries):
        args.exit_code = 3
    simulated = [s for s in summaries if "verdict" not in s]
    if args.json:
        return summaries if sweep else summaries[0]
    if sweep:
        _print_sweep(scenarios[0], summaries)
        for s in summaries:
            for line in traincost.lines(s, indent=f"  {s['ranks']} ranks: "):
                print(line)
    elif not simulated:
        _print_out_of_memory(scenarios[0], summaries[0])
        return summaries
    else:
        _print_summary(scenarios[0], summaries[0])
        if "episodes" in summaries[0]:
            _print_episodes(summaries[0]["episodes"])
        for line in traincost.lines(summaries[0]):
            print(line)
    if provenance:
        _print_parameters(summaries[0])
    if args.out and simulated:
        plots = ", scaling.png and scaling.csv" if sweep else " and breakdown.png"
        tables = "records, per-step and per-rank tables" if args.records else "per-step and per-rank tables"
        print(f"{tables}, Chrome trace{plots} in {args.out}/")
    return summaries


def step_progress(sc) -> StepProgress:
    """The engine's progress line for one scale (ddplab/progress.py)."""
    return StepProgress(f"simulating {sc.ranks} ranks")


def _print_episodes(e: dict) -> None:
    if e["warning"]:
        print(f"  {e['warning']}")
    print(
        f"  episodes         expected over {e['horizon_h']:g} h: {e['expected_tokens_per_s']:,.0f} tokens/s, a cost of"
        f" {e['cost']:.1%} (+-{1.96 * e['cost_sd']:.1%}, 95 %, over that horizon) against"
        f" {e['clear_tokens_per_s']:,.0f} without; network degraded {e['comm_share']:.0%} of the time, a rank"
        f" throttled {e['compute_share']:.0%} (each state's steady step weighed by its share: docs/episodes.md)"
    )


# What each compute basis means, beside the compute time (sim/mfu.py compute_basis).
STACK_NOTES = {
    "eager": "stack eager: plain PyTorch, unfused kernels (compute.stack=compiled: a fused step)",
    "compiled": "stack compiled: a fused step (torch.compile, llm.c)",
    "given": "given: compute.step_compute_s",
    "fixed MFU": "fixed MFU: compute.mfu",
    "measured": "measured: the calibration's compute",
}


def mfu_line(s: dict) -> str:
    """MFU over the step and over compute, naming the FLOP count and the peak (sim/mfu.py)."""
    return (
        f"{s['mfu']:.1%} of the step, {s['compute_mfu']:.1%} of compute ({s['flop_count']} ="
        f" {s['flops_per_token'] / 1e9:.3g} GFLOP/token against {s['peak_tflop_s']:g} TFLOP/s peak)"
    )


def _print_parameters(summary: dict) -> None:
    cal = summary["calibration"]
    print(f"  parameters       calibration {cal['file']} applied in mode {cal['mode']!r} ({cal['why']}):")
    for p in summary["parameters"]:
        value = p["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value or '""')
        print(f"    {p['key']:<28} {shown:>12}  {p['source']}")
    if cal.get("withheld"):
        print("  not carried      measured, left at the scenario's value, and why:")
    for w in cal.get("withheld", []):
        value = w["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"    {w['key']:<28} {shown:>12}  {w['reason']}")


def network_line(sc) -> str:
    net = sc.network
    if not net.enabled:
        return "network off (free communication)"
    if net.backend == "gloo":
        return f"gloo ring over {net.nic_gbit_s:.4g} Gbit/s x {net.nic_efficiency:.0%}"
    library = "RCCL" if net.tuner.startswith("rccl") else "NCCL"
    line = (
        f"{library} {net.algorithm}; {net.gpus_per_node}/node on {net.intra_gb_s:g} GB/s {net.intra_link},"
        f" {net.nics_per_node} x {net.nic_gbit_s:g} Gbit/s NICs"
    )
    tiers = [f"racks of {net.gpus_per_rack}"] if net.gpus_per_rack else []
    if net.gpus_per_pod:  # sim/topology.py
        tiers.append(f"pods of {net.gpus_per_pod} at 1:{net.pod_oversubscription:g} above, {net.placement}")
    return f"{line}, {', '.join(tiers)}" if tiers else line


def _print_summary(sc, s: dict) -> None:
    st = s["step_time_s"]
    print(f"{sc.name}: {sc.description}")
    print(
        f"  {s['model']} ({fmt_count(s['params'])} params){_mode(sc)}, {s['ranks']} ranks on {s['nodes']} nodes,"
        f" {network_line(sc)};"
        f" {s['steps']} steps, seed {s['seed']}"
    )
    print(
        f"  step time        {fmt_seconds(st['mean'])} mean  (p50 {fmt_seconds(st['p50'])},"
        f" p95 {fmt_seconds(st['p95'])}, p99 {fmt_seconds(st['p99'])})"
    )
    print("  where it goes    per rank, mean of a step:")
    parts = [
        ("compute (fwd+bwd)", s["compute_s"]),
        ("exposed comm", s["exposed_comm_s"]),
        ("straggler wait", s["straggler_wait_s"]),
        ("optimizer", s["optimizer_s"]),
        ("dataloader", s["dataloader_s"]),
    ]
    notes = {
        "compute (fwd+bwd)": STACK_NOTES[s["stack"]],
        "optimizer": simulation.optimizer_basis(sc),
        "dataloader": "waiting for batches the DataLoader's workers have not built (docs/loader.md)",
    }
    for name, value in parts:
        if value > 0 or name.startswith(("compute", "exposed", "straggler")):
            print(f"    {name:<18} {fmt_seconds(value):>10}  {value / st['mean']:6.1%}  {notes.get(name, '')}".rstrip())
    _print_memory(sc, s["memory_gib"])
    if s["slowest_rank_compute_s"] > 1.05 * s["compute_s"]:
        print(
            f"  slowest rank     rank {s['slowest_rank']}: compute {fmt_seconds(s['slowest_rank_compute_s'])}"
            f" ({s['slowest_rank_compute_s'] / s['compute_s']:.2f} x the mean); every step waits for it"
        )
    ratio = s["comm_compute_ratio"]
    verdict = f"communication-bound x {ratio:.1f}" if ratio >= 1 else "comm fits inside compute"
    print(f"  T_comm/T_compute {ratio:.3f}  ({verdict}; {fmt_seconds(s['comm_s'])} of collectives per step)")
    print(f"  efficiency       {s['scaling_efficiency']:.1%} of each rank's time is useful work")
    print(f"  throughput       {s['tokens_per_s']:,.0f} tokens/s ({s['tokens_per_s'] / s['ranks']:,.0f} per GPU)")
    print(f"  MFU              {mfu_line(s)}")
    print(
        f"  buckets          {s['buckets']} ({fmt_bytes(s['traffic_bytes_per_step'])} on each rank's bus"
        f" per step; {', '.join(s['algorithms'])})"
    )
    print(f"  simulated in     {s['wall_s']:.2f} s")


# The memory terms as printed: (label, key); zero terms are left out.
_MEMORY_TERMS = (
    ("params", "parameters_gib"),
    ("grads", "gradients_gib"),
    ("optimizer", "optimizer_state_gib"),
    ("weight copies", "weight_copies_gib"),
    ("activations", "activations_gib"),
    ("logits", "logits_gib"),
    ("DDP buckets", "ddp_buckets_gib"),
    ("FSDP gathered", "fsdp_unsharded_gib"),
    ("CUDA context", "cuda_context_gib"),
)


def _print_memory(sc, m: dict, *, simulated: bool = True) -> None:
    verdict = ""
    if "fits" in m:
        verdict = f"; {'fits' if m['fits'] else 'does NOT fit'} {m['device_gib']:g} GiB"
        if not m["fits"] and simulated:
            verdict += ": simulated anyway (--ignore-memory); a real device runs out of memory"
    terms = ", ".join(f"{label} {m[key]:.2f}" for label, key in _MEMORY_TERMS if m[key] > 0)
    estimate = f"at the {m['peak_phase']} peak ({sc.training.mode}, {sc.training.precision}: {terms})"
    if "measured_peak_allocated_gib" in m:
        print(
            f"  memory/GPU       {m['total_gib']:.2f} GiB: {m['measured_peak_allocated_gib']:.2f} measured"
            f" + CUDA context {m['cuda_context_gib']:.2f}{verdict}"
        )
        print(f"    estimate       {m['peak_allocated_gib']:.2f} GiB allocated {estimate}")
        return
    print(f"  memory/GPU       {m['total_gib']:.2f} GiB {estimate}{verdict}")


def _print_out_of_memory(sc, v: dict) -> None:
    """Where the step time would be: that there is none, and what would fit."""
    print(f"{sc.name}: {sc.description}")
    print(
        f"  {v['model']}{_mode(sc)}, {v['ranks']} ranks on {v['nodes']} nodes, {network_line(sc)};"
        f" {v['steps']} steps, seed {v['seed']}"
    )
    print(
        f"  step time        none: out of memory, {v['peak_gib']:.2f} GiB per GPU against the device's"
        f" {v['device_memory_gib']:g} GiB (compute.device_memory_gib); not simulated"
    )
    _print_memory(sc, v["memory_gib"], simulated=False)
    print_alternatives(v["alternatives"])
    print("  --ignore-memory simulates it anyway")


def print_alternatives(alternatives: list[dict], indent: str = "  ") -> None:
    if not alternatives:
        print(
            f"{indent}what would fit   nothing tried fits: FSDP/HSDP, activation checkpointing, a smaller micro-batch"
        )
        return
    print(f"{indent}what would fit   each with its peak per GPU (sim/memory.py), as --set:")
    width = max(len(a["set"]) for a in alternatives)
    for a in alternatives:
        print(f"{indent}  {a['set']:<{width}}  {a['peak_gib']:6.2f} GiB")


def _sweep_row(s: dict) -> str:
    if "verdict" in s:  # not simulated: out of memory
        cells = [f"{s['ranks']:>6}", f"{s['nodes']:>5}"]
        return (
            " ".join(cells) + f"  OOM: {s['peak_gib']:.2f} GiB per GPU > {s['device_memory_gib']:g} GiB, not simulated"
        )
    return " ".join(f"{f(s):>{w}}" for _, w, f in _SWEEP_COLUMNS)


# Sweep table columns: header (units in the name), width, value.
_SWEEP_COLUMNS = (
    ("ranks", 6, lambda s: f"{s['ranks']}"),
    ("nodes", 5, lambda s: f"{s['nodes']}"),
    ("step_p50(s)", 11, lambda s: f"{s['step_time_s']['p50']:.4f}"),
    ("step_p95(s)", 11, lambda s: f"{s['step_time_s']['p95']:.4f}"),
    ("compute(s)", 10, lambda s: f"{s['compute_s']:.4f}"),
    ("exp_comm(s)", 11, lambda s: f"{s['exposed_comm_s']:.4f}"),
    ("wait(s)", 9, lambda s: f"{s['straggler_wait_s']:.4f}"),
    ("comm/comp", 9, lambda s: f"{s['comm_compute_ratio']:.3f}"),
    ("eff(%)", 7, lambda s: f"{s['scaling_efficiency'] * 100:.1f}"),
    ("tokens/s", 13, lambda s: f"{s['tokens_per_s']:,.0f}"),
    ("MFU(%)", 6, lambda s: f"{s['mfu'] * 100:.1f}"),
    ("algorithms", 24, lambda s: "+".join(s["algorithms"])),
)


def _mode(sc) -> str:
    t = sc.training
    if t.mode == "hsdp":
        return f" (HSDP, shards of {sc.shard_size} x {sc.ranks // sc.shard_size} replicas, prefetch {t.fsdp_prefetch})"
    return f" (FSDP, prefetch {t.fsdp_prefetch})" if t.mode == "fsdp" else ""


def _print_sweep(sc, summaries: list[dict]) -> None:
    # sc is the first scale's, its description already written for sc.ranks (sim/describe.py).
    counts = [s["ranks"] for s in summaries]
    print(f"{sc.name}: {simulation.description_over(sc.description, sc.ranks, counts, sc.network.gpus_per_node)}")
    params = fmt_count(simulation.param_count(sc.model.shape))
    print(f"  {sc.model.shape.name} ({params} params){_mode(sc)}, {network_line(sc)}; {sc.steps} steps, seed {sc.seed}")
    print(" ".join(f"{h:>{w}}" for h, w, _ in _SWEEP_COLUMNS))
    for s in summaries:
        print(_sweep_row(s))
    ran = next((s for s in summaries if "verdict" not in s), None)
    if ran is not None:
        print(f"  compute: {STACK_NOTES[ran['stack']]}; MFU: {ran['flop_count']} FLOPs per token"
              f" x tokens/s per GPU / {ran['peak_tflop_s']:g} TFLOP/s peak")  # fmt: skip
    oom = next((s for s in summaries if "verdict" in s), None)
    if oom is not None:
        print(f"  at {oom['ranks']} ranks:")
        print_alternatives(oom["alternatives"])
        print("  --ignore-memory simulates it anyway")
