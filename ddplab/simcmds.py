"""`ddplab simulate`: one scale or a sweep of a scenario, optionally calibrated; the summary,
the memory estimate and the sweep table as people read them, or JSON."""

import time

from calibrate.calibration import Calibration
from ddplab import limits, traincost
from ddplab.progress import StepProgress, say
from sim.scenario_file import load_scenario
from sim.units import fmt_bytes, fmt_seconds, parse_int_list


def simulate(args):
    if args.sweep_ranks and args.ranks:
        raise ValueError("--ranks and --sweep-ranks: give one of them")
    counts = parse_int_list(args.sweep_ranks, "--sweep-ranks") if args.sweep_ranks else [args.ranks]
    tokens, price = traincost.parse(args)
    # Validate every scale before simulating any, so a bad count fails fast.
    if getattr(args, "calib", None):
        scenarios, provenance = _calibrated_scenarios(args, counts)
    else:
        scenarios = [load_scenario(args.scenario, args.set, ranks=n, steps=args.steps, seed=args.seed) for n in counts]
        provenance = None
    sweep = args.sweep_ranks is not None
    if args.records and not args.out:
        raise ValueError("--records: needs --out DIR to write them to")
    _check_size(args, scenarios)
    if args.out:  # fail before simulating, not after
        args.out.mkdir(parents=True, exist_ok=True)
    summaries = []
    for i, sc in enumerate(scenarios, 1):
        t = time.perf_counter()
        # With --out, ranks.csv carries each rank's median compute, estimated as it runs.
        medians = args.out is not None
        result, summary = run_scale(sc, getattr(args, "device_gib", None), records=args.records, medians=medians)
        if provenance:
            summary.update(provenance[i - 1])
        traincost.attach(summary, tokens, price)
        summaries.append(summary)
        if sweep:
            say(f"[{i}/{len(scenarios)}] {sc.ranks} ranks x {sc.steps} steps: {time.perf_counter() - t:.2f} s")
        if args.out:
            from sim.export import write_result

            write_result(result, args.out)
    if args.out:
        from sim.export import write_summaries

        write_summaries(summaries, args.out, sweep=sweep)
    if args.json:
        return summaries if sweep else summaries[0]
    if sweep:
        _print_sweep(scenarios[0], summaries)
        for s in summaries:
            for line in traincost.lines(s, indent=f"  {s['ranks']} ranks: "):
                print(line)
    else:
        _print_summary(scenarios[0], summaries[0])
        for line in traincost.lines(summaries[0]):
            print(line)
    if provenance:
        _print_parameters(summaries[0])
    if args.out:
        plots = ", scaling.png and scaling.csv" if sweep else " and breakdown.png"
        tables = "records, per-step and per-rank tables" if args.records else "per-step and per-rank tables"
        print(f"{tables}, Chrome trace{plots} in {args.out}/")
    return summaries


def run_scale(sc, device_gib: float | None = None, *, records: bool = False, medians: bool = False):
    """(result, summary) of one scale as `simulate` prints it: the engine's summary with the
    memory estimate. `ddplab compare` runs each set-up through here, so its rows are these."""
    from sim.engine import simulate as run

    progress = StepProgress(f"simulating {sc.ranks} ranks")
    try:
        result = run(sc, progress=progress, records=records, medians=medians)
    finally:
        progress.close()
    summary = result.summary()
    summary["memory_gib"] = _memory(sc, device_gib)
    return result, summary


def _check_size(args, scenarios) -> None:
    """Refuse, before any array exists, what this machine cannot hold or finish (ddplab/limits.py)."""
    from sim.limits import simulation_cost, sweep_cost

    cost = sweep_cost([simulation_cost(sc, export=args.out is not None, records=args.records) for sc in scenarios])
    ranks = f"--sweep-ranks {args.sweep_ranks}" if args.sweep_ranks else f"ranks {scenarios[0].ranks}"
    limits.check_simulation(cost, f"{ranks} x steps {scenarios[0].steps}", yes=getattr(args, "yes", False))


def _memory(sc, device_gib: float | None) -> dict:
    from sim.memory import estimate_memory

    if device_gib is not None and device_gib <= 0:
        raise ValueError(f"--device-gib: must be > 0, got {device_gib}")
    est = estimate_memory(sc)
    out = {k: v for k, v in est._asdict().items() if k.endswith("_gib")} | {"peak_phase": est.peak_phase}
    measured = sc.compute.memory_peak_gib
    if measured is not None:  # a GPU calibration's own peak decides; the estimate stays beside it
        out["measured_peak_allocated_gib"] = measured
        out["total_gib"] = measured + est.cuda_context_gib
    if device_gib is not None:
        out["device_gib"], out["fits"] = device_gib, out["total_gib"] <= device_gib
    return out


def _calibrated_scenarios(args, counts):
    """Each scale's scenario with the calibration applied, and {calibration, parameters}
    for its summary (calibrate/apply.py)."""
    from calibrate.apply import calibrated_scenario, transfer_warning

    calib = Calibration.read(args.calib)
    pairs = [
        calibrated_scenario(
            args.scenario, args.set, calib, str(args.calib), args.calib_network, args.calib_mode,
            ranks=n, steps=args.steps, seed=args.seed,
        )
        for n in counts
    ]  # fmt: skip
    first, extra = pairs[0]
    warning = transfer_warning(first, calib, extra["parameters"])  # the same at every scale of a sweep
    if warning:
        say(f"ddplab simulate: warning: {warning}")
    return [sc for sc, _ in pairs], [extra for _, extra in pairs]


def _print_parameters(summary: dict) -> None:
    cal = summary["calibration"]
    print(f"  parameters       calibration {cal['file']} applied in mode {cal['mode']!r} ({cal['why']}):")
    for p in summary["parameters"]:
        value = p["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value or '""')
        print(f"    {p['key']:<28} {shown:>12}  {p['source']}")


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
        f"  {s['model']}{_mode(sc)}, {s['ranks']} ranks on {s['nodes']} nodes, {network_line(sc)};"
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
    for name, value in parts:
        if value > 0 or name.startswith(("compute", "exposed", "straggler")):
            print(f"    {name:<18} {fmt_seconds(value):>10}  {value / st['mean']:6.1%}")
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
    print(f"  throughput       {s['tokens_per_s']:,.0f} tokens/s")
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


def _print_memory(sc, m: dict) -> None:
    verdict = f"; {'fits' if m['fits'] else 'does NOT fit'} {m['device_gib']:g} GiB" if "fits" in m else ""
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
    ("algorithms", 24, lambda s: "+".join(s["algorithms"])),
)


def _mode(sc) -> str:
    t = sc.training
    return f" (FSDP, prefetch {t.fsdp_prefetch})" if t.mode == "fsdp" else ""


def _print_sweep(sc, summaries: list[dict]) -> None:
    from sim.describe import description_over

    # sc is the first scale's, its description already written for sc.ranks (sim/describe.py).
    counts = [s["ranks"] for s in summaries]
    print(f"{sc.name}: {description_over(sc.description, sc.ranks, counts, sc.network.gpus_per_node)}")
    print(f"  {sc.model.preset}{_mode(sc)}, {network_line(sc)}; {sc.steps} steps, seed {sc.seed}")
    print(" ".join(f"{h:>{w}}" for h, w, _ in _SWEEP_COLUMNS))
    for s in summaries:
        print(" ".join(f"{f(s):>{w}}" for _, w, f in _SWEEP_COLUMNS))
