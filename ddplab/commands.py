"""The commands behind the CLI. Each returns what `--json` prints; without
`--json` it prints a table for people instead."""

import sys
import time

from sim.collectives import algbw_busbw_gb_s, collective_cost
from sim.config import load_scenario
from sim.cost import SEED_LINKS, link_costs, parse_link
from sim.units import fmt_bytes, fmt_seconds, parse_int_list, parse_sizes
from sim.workload import fabric_for


def cost(args):
    links = [parse_link(x) for x in args.link] if args.link else SEED_LINKS
    rows = link_costs(
        params=args.params,
        bytes_per_param=args.bytes_per_param,
        ranks=args.ranks,
        efficiency=args.efficiency,
        links=links,
        compute_s=args.compute_s,
        grad_accum=args.grad_accum,
    )
    out = []
    for r in rows:
        row = {
            "link": r.link,
            "link_gbit_s": r.link_gbit_s,
            "traffic_bytes": r.traffic_bytes,
            "seconds_per_step": r.seconds_per_step,
        }
        if r.comm_compute_ratio is not None:
            row["comm_compute_ratio"] = r.comm_compute_ratio
        out.append(row)
    if args.json:
        return out
    s = args.params * args.bytes_per_param
    print(
        f"Ring allreduce of {args.params:.4g} params x {args.bytes_per_param:g} B = {s / 1e9:.2f} GB"
        f" over N={args.ranks}: 2(N-1)/N x S = {rows[0].traffic_bytes / 1e9:.2f} GB per rank per step,"
        f" at {args.efficiency:.0%} of line rate"
    )
    if args.grad_accum > 1:
        print(f"Gradient accumulation K={args.grad_accum}: one allreduce per {args.grad_accum} micro-steps")
    header = f"{'link':<12} {'Gbit/s':>8} {'allreduce/step':>15}"
    if args.compute_s:
        header += f" {'T_comm/T_compute':>17}"
    print(header)
    for r in rows:
        line = f"{r.link:<12} {r.link_gbit_s:>8g} {fmt_seconds(r.seconds_per_step):>15}"
        if r.comm_compute_ratio is not None:
            k = r.comm_compute_ratio
            verdict = f"communication-bound x {k:.1f}" if k >= 1 else f"compute-bound ({k:.2f})"
            line += f" {k:>17.2f}  {verdict}"
        print(line)
    return out


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def simulate(args):
    from sim.engine import simulate as run

    if args.sweep_ranks and args.ranks:
        raise ValueError("--ranks and --sweep-ranks: give one of them")
    counts = parse_int_list(args.sweep_ranks, "--sweep-ranks") if args.sweep_ranks else [args.ranks]
    # Validate every scale before simulating any, so a bad count fails fast.
    if getattr(args, "calib", None):
        scenarios, provenance = _calibrated_scenarios(args, counts)
    else:
        scenarios = [load_scenario(args.scenario, args.set, ranks=n, steps=args.steps, seed=args.seed) for n in counts]
        provenance = None
    sweep = args.sweep_ranks is not None
    if args.out:  # fail before simulating, not after
        args.out.mkdir(parents=True, exist_ok=True)
    summaries = []
    for i, sc in enumerate(scenarios, 1):
        t = time.perf_counter()
        result = run(sc)
        summary = result.summary()
        summary["memory_gib"] = _memory(sc, getattr(args, "device_gib", None))
        if provenance:
            summary.update(provenance[i - 1])
        summaries.append(summary)
        if sweep:
            _progress(f"[{i}/{len(scenarios)}] {sc.ranks} ranks x {sc.steps} steps: {time.perf_counter() - t:.2f} s")
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
    else:
        _print_summary(scenarios[0], summaries[0])
    if provenance:
        _print_parameters(summaries[0])
    if args.out:
        print(f"records, Chrome trace{' and scaling.png' if sweep else ''} in {args.out}/")
    return summaries


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
    for its summary: every parameter as measured (file) or assumed (preset and source)."""
    from calibrate.apply import load_for_simulation, provenance
    from ddplab.calcmds import read_calib
    from sim.config import scenario_from_dict

    calib = read_calib(args.calib)
    scenarios, extra = [], []
    for n in counts:
        cal = load_for_simulation(
            args.scenario,
            args.set,
            calib,
            str(args.calib),
            args.calib_network,
            args.calib_mode,
            ranks=n,
            steps=args.steps,
            seed=args.seed,
        )
        sc = scenario_from_dict(cal.data)
        scenarios.append(sc)
        extra.append(
            {
                "calibration": {"file": str(args.calib), "mode": cal.mode, "why": cal.why},
                "parameters": provenance(sc, cal.measured, cal.path),
            }
        )
    return scenarios, extra


def _print_parameters(summary: dict) -> None:
    cal = summary["calibration"]
    print(f"  parameters       calibration {cal['file']} applied in mode {cal['mode']!r} ({cal['why']}):")
    for p in summary["parameters"]:
        value = p["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value or '""')
        print(f"    {p['key']:<28} {shown:>12}  {p['source']}")


def _network_line(sc) -> str:
    net = sc.network
    if not net.enabled:
        return "network off (free communication)"
    if net.backend == "gloo":
        return f"gloo ring over {net.nic_gbit_s:.4g} Gbit/s x {net.nic_efficiency:.0%}"
    library = "RCCL" if net.tuner.startswith("rccl") else "NCCL"
    return (
        f"{library} {net.algorithm}; {net.gpus_per_node}/node on {net.intra_gb_s:g} GB/s {net.intra_link},"
        f" {net.nics_per_node} x {net.nic_gbit_s:g} Gbit/s NICs"
    )


def _print_summary(sc, s: dict) -> None:
    st = s["step_time_s"]
    print(f"{sc.name}: {sc.description}")
    print(
        f"  {s['model']}{_mode(sc)}, {s['ranks']} ranks on {s['nodes']} nodes, {_network_line(sc)};"
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
    print(f"{sc.name}: {sc.description}")
    print(f"  {sc.model.preset}{_mode(sc)}, {_network_line(sc)}; {sc.steps} steps, seed {sc.seed}")
    print(" ".join(f"{h:>{w}}" for h, w, _ in _SWEEP_COLUMNS))
    for s in summaries:
        print(" ".join(f"{f(s):>{w}}" for _, w, f in _SWEEP_COLUMNS))


def collective(args):
    from sim.collectives import candidates

    sizes = parse_sizes(args.sizes)
    sc = load_scenario(args.scenario, args.set, ranks=args.ranks)
    fabric = fabric_for(sc)
    if fabric.ranks < 2:
        raise ValueError(f"--ranks: a collective needs 2 or more ranks, got {fabric.ranks}")
    rows = []
    for size in sizes:
        c = collective_cost(args.op, size, fabric)
        algbw, busbw = algbw_busbw_gb_s(args.op, size, c.time_s, fabric.ranks)
        row = {
            "op": args.op,
            "size_bytes": size,
            "count": size // 4,
            "type": "float",
            "ranks": fabric.ranks,
            "algorithm": c.algorithm,
            "time_us": c.time_s * 1e6,
            "algbw_gb_s": algbw,
            "busbw_gb_s": busbw,
        }
        if c.chosen is not None:  # NCCL/RCCL: what the library estimated, and the runner-up
            ranked = sorted(candidates(args.op, size, fabric), key=lambda o: o.tuner_us)
            row["why"] = {
                "library_estimate_us": c.chosen.tuner_us,
                "next": [{"algorithm": o.algorithm, "library_estimate_us": o.tuner_us} for o in ranked[1:3]],
                "latency_us": c.chosen.latency_us,
                "network_steps": c.chosen.network_steps,
                "bytes_us": c.chosen.time_us - c.chosen.latency_us,
            }
        rows.append(row)
    if args.json:
        return rows
    redop = "sum" if args.op in ("allreduce", "reduce_scatter") else "none"
    print(f"# ddplab collective: predicted {args.op} on {sc.name} ({_network_line(sc)})")
    how = (
        f"{sc.network.tuner}'s choice replayed from its own estimate, then timed (sim/nccl.py)"
        if sc.network.backend == "nccl"
        else "gloo's ring"
    )
    print(f"# nranks {fabric.ranks}, nodes {fabric.nodes}; {how}")
    print("#")
    head = ("size", "count", "type", "redop", "algorithm", "time", "algbw", "busbw")
    units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)")
    widths = (12, 12, 6, 6, 15, 10, 8, 8)
    print("# " + " ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    print("# " + " ".join(f"{u:>{w}}" for u, w in zip(units, widths, strict=True)))
    for r in rows:
        print(
            f"  {r['size_bytes']:>12} {r['count']:>12} {r['type']:>6} {redop:>6} {r['algorithm']:>15}"
            f" {r['time_us']:>10.1f} {r['algbw_gb_s']:>8.2f} {r['busbw_gb_s']:>8.2f}"
        )
    avg = sum(r["busbw_gb_s"] for r in rows) / len(rows)
    print(f"# Avg bus bandwidth    : {avg:.3f}")
    if rows and "why" in rows[0]:
        print("#")
        print(f"# why: {sc.network.tuner}'s estimate (us), its pick first; then our time = latency + bytes")
        for r in rows:
            w = r["why"]
            others = " < ".join(f"{n['algorithm']} {n['library_estimate_us']:.1f}" for n in w["next"])
            net = f", {w['network_steps']} network steps" if w["network_steps"] else ""
            print(
                f"#   {r['size_bytes']:>12}: {r['algorithm']} {w['library_estimate_us']:.1f}"
                f"{' < ' + others if others else ''}; {r['time_us']:.1f} = {w['latency_us']:.1f} latency{net}"
                f" + {w['bytes_us']:.1f} bytes"
            )
    return rows


def scenarios(args):
    from scenarios import scenario_names, scenario_path
    from sim.config import load_scenario_data

    out = []
    for name in scenario_names():
        data = load_scenario_data(scenario_path(name))
        out.append({"name": name, "description": data.get("description", ""), "ranks": data.get("ranks")})
    if not args.json:
        for row in out:
            print(f"{row['name']:<16} {row['ranks']:>5} ranks  {row['description']}")
    return out


def models(args):
    from realrun.model import build
    from scenarios import load_models

    out = []
    for name, shape in load_models().items():
        module = build(name, device="meta")  # shapes only, no memory
        params = sum(p.numel() for p in module.parameters())
        out.append(
            {
                "model": name,
                **shape,
                "params": params,
                "grad_bytes_fp32": 4 * params,
                "grad_bytes_bf16": 2 * params,
            }
        )
    if not args.json:
        cols = (
            ("model", 11, lambda r: r["model"]),
            ("layers", 6, lambda r: r["n_layer"]),
            ("d_model", 7, lambda r: r["n_embd"]),
            ("heads", 5, lambda r: r["n_head"]),
            ("context", 7, lambda r: r["block_size"]),
            ("params", 13, lambda r: f"{r['params']:,}"),
            ("grads fp32", 11, lambda r: fmt_bytes(r["grad_bytes_fp32"])),
            ("grads bf16", 11, lambda r: fmt_bytes(r["grad_bytes_bf16"])),
        )
        print(" ".join(f"{h:>{w}}" for h, w, _ in cols))
        for r in out:
            print(" ".join(f"{f(r):>{w}}" for _, w, f in cols))
    return out


def _worker_argv(argv: list[str]) -> list[str]:
    """The verb's own arguments, less the launcher's --nproc."""
    rest, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return rest


def _launch(verb: str, args):
    from realrun.cli import check_args
    from realrun.launch import run_local

    check_args(verb, args)

    if args.nproc < 1:
        raise ValueError(f"--nproc: must be >= 1, got {args.nproc}")
    if getattr(args, "straggler", None):
        for rank, _ in args.straggler:
            if rank >= args.nproc:
                raise ValueError(f"--straggler: rank {rank} out of range for --nproc {args.nproc}")
    if getattr(args, "micro_batch_per_rank", None) and len(args.micro_batch_per_rank) != args.nproc:
        raise ValueError(f"--micro-batch-per-rank: {len(args.micro_batch_per_rank)} values for --nproc {args.nproc}")
    if args.backend == "nccl":
        import torch  # check_args has imported it already

        gpus = torch.cuda.device_count()
        if args.nproc > gpus:  # realrun/dist.py puts rank LOCAL_RANK on cuda:LOCAL_RANK
            raise ValueError(
                f"--nproc {args.nproc}: this machine has {gpus} GPU(s); NCCL runs one rank per GPU"
                f" (use --nproc {max(gpus, 1)})"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    code = run_local(verb, _worker_argv(args.argv), args.nproc)
    if code != 0:
        print(
            f"ddplab {verb}: ranks exited with code {code}; records so far are in {args.out}/",
            file=sys.stderr,
        )
    return code


def probe(args):
    return _launch("probe", args)


def train(args):
    code = _launch("train", args)
    print_train_summary(args.out, code)
    return code


def print_train_summary(out_dir, code: int) -> None:
    """Per-rank medians after torchrun returns; on failure, on stderr with the diagnosis."""
    from realrun.report import summarize_train

    try:
        lines = summarize_train(out_dir)
    except ValueError as e:  # no readable records (a rank failed before writing any)
        lines = [f"ddplab train: {e}"]
    for line in lines:
        print(line, file=sys.stdout if code == 0 else sys.stderr)
