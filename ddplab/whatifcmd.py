"""`ddplab whatif SCENARIO --try ... [--json]`: mitigations side by side (sim/whatif.py)."""

from pathlib import Path

from workflow.units import fmt_seconds


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
    from workflow.whatif import study  # scipy.stats (sim/episode_cost.py): only when asked

    found = study(
        args.scenario,
        args.set,
        ranks=args.ranks,
        steps=args.steps,
        seed=args.seed,
        tries=args.tries,
        horizon_h=args.horizon_h,
        restart_min=args.restart_min,
        ignore_memory=args.ignore_memory,
        usd_per_gpu_hour=args.usd_per_gpu_hour,
        yes=args.yes,
        out=args.out,
    )
    out, sc, chosen = found.rows, found.scenario, found.chosen
    if args.json:
        return out
    print(f"{sc.name}: {sc.description}")
    if chosen:
        print(f"  {chosen}")
    episodic = any(r.get("episode_cost") is not None for r in out)
    if episodic:
        print(
            f"  {found.steps} steps per episode state, seed {found.seed}, same jitter draws in every"
            f" row; each row is expected over {args.horizon_h:g} h, the states (network degraded, a rank throttled,"
            " the diurnal phase) weighed by their share of time (docs/episodes.md)"
        )
    else:
        print(f"  {found.steps} steps per row, seed {found.seed}, same jitter draws in every row")
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
