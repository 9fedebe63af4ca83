"""`ddplab whatif SCENARIO --try ... [--json]`: mitigations side by side (sim/whatif.py)."""

from pathlib import Path

from ddplab import limits
from sim.units import fmt_seconds


def add_parser(sub) -> None:
    w = sub.add_parser("whatif", help="compare mitigations on one scenario: step time, throughput, efficiency, cost")
    w.add_argument("scenario", help="preset name or .toml (e.g. straggler-lemon, straggler-gc)")
    w.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="FIX",
        help="rebalance | exclude-slowest | sync-gc | fix-loader | accum=K | workers=N | KEY=VALUE, or several in"
        " one row separated by"
        " commas (network.nics_per_node=4,network.nic_gbit_s=200); repeatable, a row each (default: the"
        " mitigations that fit the scenario, named with the reason)",
    )
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key first")
    w.add_argument("--ranks", type=int, help="ranks (default: the scenario's)")
    w.add_argument("--steps", type=int, default=300, help="steps per simulation (default 300)")
    w.add_argument("--seed", type=int, help="random seed (default: the scenario's)")
    w.add_argument(
        "--horizon-h",
        type=float,
        default=24.0,
        help="hours over which a restart is paid and episodes are expected (default 24)",
    )
    w.add_argument("--restart-min", type=float, default=10.0, help="restart cost of exclude-slowest (default 10)")
    w.add_argument("--usd-per-gpu-hour", type=float, help="also print cost in dollars per billion tokens")
    w.add_argument(
        "--ignore-memory", action="store_true", help="simulate rows whose memory estimate exceeds the device too"
    )
    w.add_argument("--yes", action="store_true", help="run even when the estimate says it takes over 5 minutes")
    w.add_argument("--out", type=Path, metavar="DIR", help="write whatif.csv, whatif.json and whatif.png here")
    w.add_argument(
        "--json",
        action="store_true",
        help="print JSON: a list, per row: mitigation, ranks, step_time_s, tokens_per_s, speedup, scaling_efficiency,"
        " gpu_h_per_btok, restart_s, note, and the step's parts (compute_s, exposed_comm_s, straggler_wait_s, ...)",
    )
    w.set_defaults(func=whatif)


def whatif(args):
    from output.plot import run_title
    from sim.scenario_file import scenario_data, scenario_from_dict
    from sim.whatif import compare, row_scenarios

    if args.usd_per_gpu_hour is not None and args.usd_per_gpu_hour < 0:
        raise ValueError(f"--usd-per-gpu-hour: must be >= 0, got {args.usd_per_gpu_hour}")
    data = scenario_data(args.scenario, args.set, ranks=args.ranks, steps=args.steps, seed=args.seed)
    chosen = None
    if not args.tries:  # the mitigations that fit what the scenario models (sim/whatif_defaults.py)
        from sim.whatif_defaults import default_tries

        args.tries, why = default_tries(scenario_from_dict(data))
        chosen = f"no --try given: trying {', '.join(args.tries)} ({why})"
    # The rows run one after another, each result dropped before the next (ddplab/limits.py).
    limits.check_in_turn(row_scenarios(data, args.tries), "simulations", yes=args.yes)
    if args.out:  # fail before simulating, not after
        from output.outdir import ensure

        ensure(args.out)  # marked as ours: a rerun may replace what it wrote, nothing else
    rows = compare(
        data, args.tries, horizon_h=args.horizon_h, restart_min=args.restart_min, ignore_memory=args.ignore_memory
    )
    base = rows[0]
    out = []
    for r in rows:
        # A row not simulated (out of memory) has no throughput, and with the base one none has a ratio.
        ran = r.tokens_per_s is not None and base.tokens_per_s is not None
        row = r._asdict() | {"speedup": r.tokens_per_s / base.tokens_per_s if ran else None}
        if args.usd_per_gpu_hour is not None:
            row["usd_per_btok"] = r.gpu_h_per_btok * args.usd_per_gpu_hour if r.gpu_h_per_btok is not None else None
        out.append(row)
    sc = scenario_from_dict(data)
    if args.out:
        _write(out, args.out, run_title([sc.name], [r["ranks"] for r in out], [sc.training.mode]))
    if args.json:
        return out
    print(f"{sc.name}: {sc.description}")
    if chosen:
        print(f"  {chosen}")
    episodic = any(r.get("episode_cost") is not None for r in out)
    if episodic:
        print(
            f"  {data.get('steps')} steps per episode state, seed {data.get('seed', 0)}, same jitter draws in every"
            f" row; each row is expected over {args.horizon_h:g} h, the states (network degraded, a rank throttled,"
            " the diurnal phase) weighed by their share of time (docs/episodes.md)"
        )
    else:
        print(f"  {data.get('steps')} steps per row, seed {data.get('seed', 0)}, same jitter draws in every row")
    usd = args.usd_per_gpu_hour is not None
    width = max(22, *(len(r["mitigation"]) for r in out))  # a row of several keys is a long name
    print(
        f"{'mitigation':<{width}} {'ranks':>5} {'step':>9} {'p95':>9} {'tokens/s':>11} {'vs nothing':>10}"
        f" {'efficiency':>10} {'GPU-h/Btok':>10}" + (f" {'$/Btok':>9}" if usd else "") + "  note"
    )
    for r in out:
        if r["step_time_s"] is None:
            print(
                f"{r['mitigation']:<{width}} {r['ranks']:>5}  OOM: {r['memory_gib']:.2f} GiB per GPU >"
                f" {r['device_memory_gib']:g} GiB (compute.device_memory_gib), not simulated  {r['note']}".rstrip()
            )
            continue
        speedup = f"{r['speedup']:>9.3f}x" if r["speedup"] is not None else f"{'n/a':>10}"
        print(
            f"{r['mitigation']:<{width}} {r['ranks']:>5} {fmt_seconds(r['step_time_s']):>9}"
            f" {fmt_seconds(r['step_time_p95_s']):>9} {r['tokens_per_s']:>11,.0f} {speedup}"
            f" {r['scaling_efficiency']:>10.1%} {r['gpu_h_per_btok']:>10.1f}"
            + (f" {r['usd_per_btok']:>9,.2f}" if usd else "")
            + f"  {r['note']}"
            + (
                f"{'; ' if r['note'] else ''}episodes cost {r['episode_cost']:.1%} (+-{1.96 * r['episode_cost_sd']:.1%}"
                f" over {args.horizon_h:g} h, 95 %; {r['clear_tokens_per_s']:,.0f} tokens/s without)"
                if r.get("episode_cost") is not None
                else ""
            )
            + (f" (restart {r['restart_s'] / 60:g} min over {args.horizon_h:g} h)" if r["restart_s"] else "")
            + (f" (memory {r['memory_gib']:.2f} GiB exceeds the device: --ignore-memory)" if r["oom"] else "")
        )
    if any(r["step_time_s"] is None for r in out):
        print(
            "OOM rows: the per-GPU memory estimate (sim/memory.py) exceeds the device's, so they are not"
            " simulated or ranked; --ignore-memory simulates them anyway"
        )
    if args.out:
        print(f"whatif.csv, whatif.json and whatif.png in {args.out}/")
    return out


def _write(rows: list[dict], out: Path, title: str) -> None:
    """What --json prints, as whatif.json and (a column per key) whatif.csv; whatif.png: each
    row's mean step split into its parts, with its throughput against doing nothing."""
    from output.atomic import write_csv_atomic
    from output.jsonfile import write_json_atomic
    from output.plot import plot_breakdown

    write_json_atomic(out / "whatif.json", rows)
    header = list(rows[0])
    write_csv_atomic(out / "whatif.csv", header, [["" if r[k] is None else r[k] for k in header] for r in rows])
    ran = [r for r in rows if r["step_time_s"] is not None]  # an OOM row has no step to draw
    if not ran:
        return
    notes = [f"{r['speedup']:.3f}x tokens/s" if r["speedup"] is not None else "" for r in ran]
    oom = [r["mitigation"] for r in rows if r["step_time_s"] is None]
    labels = [f"{r['mitigation']}\n{r['ranks']} ranks" for r in ran]
    title = f"ddplab whatif {title}" + (f" (out of memory, not drawn: {', '.join(oom)})" if oom else "")
    plot_breakdown(ran, labels, out / "whatif.png", title=title, notes=notes)
