"""`ddplab whatif SCENARIO --try ... [--json]`: mitigations side by side (sim/whatif.py)."""

from pathlib import Path

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
        help="rebalance | exclude-slowest | sync-gc | accum=K | KEY=VALUE (repeatable)",
    )
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key first")
    w.add_argument("--ranks", type=int)
    w.add_argument("--steps", type=int, default=300, help="steps per simulation (default 300)")
    w.add_argument("--seed", type=int)
    w.add_argument("--horizon-h", type=float, default=24.0, help="hours over which a restart is paid (default 24)")
    w.add_argument("--restart-min", type=float, default=10.0, help="restart cost of exclude-slowest (default 10)")
    w.add_argument("--usd-per-gpu-hour", type=float, help="also print cost in dollars per billion tokens")
    w.add_argument("--yes", action="store_true", help="run even when the estimate says it takes over 5 minutes")
    w.add_argument("--json", action="store_true")
    w.set_defaults(func=whatif)


def whatif(args):
    from sim.scenario_file import scenario_data
    from sim.whatif import compare, row_scenarios

    if not args.tries:
        raise ValueError("--try: give at least one mitigation, e.g. --try rebalance --try accum=4")
    if args.usd_per_gpu_hour is not None and args.usd_per_gpu_hour < 0:
        raise ValueError(f"--usd-per-gpu-hour: must be >= 0, got {args.usd_per_gpu_hour}")
    data = scenario_data(args.scenario, args.set, ranks=args.ranks, steps=args.steps, seed=args.seed)
    _check_size(row_scenarios(data, args.tries), yes=args.yes)
    rows = compare(data, args.tries, horizon_h=args.horizon_h, restart_min=args.restart_min)
    base = rows[0]
    out = []
    for r in rows:
        row = r._asdict() | {"speedup": r.tokens_per_s / base.tokens_per_s}
        if args.usd_per_gpu_hour is not None:
            row["usd_per_btok"] = r.gpu_h_per_btok * args.usd_per_gpu_hour
        out.append(row)
    if args.json:
        return out
    name = Path(args.scenario).stem
    print(f"{name}: {data.get('steps')} steps per row, seed {data.get('seed', 0)}, same jitter draws in every row")
    usd = args.usd_per_gpu_hour is not None
    print(
        f"{'mitigation':<22} {'ranks':>5} {'step':>9} {'p95':>9} {'tokens/s':>11} {'vs nothing':>10}"
        f" {'efficiency':>10} {'GPU-h/Btok':>10}" + (f" {'$/Btok':>9}" if usd else "") + "  note"
    )
    for r in out:
        print(
            f"{r['mitigation']:<22} {r['ranks']:>5} {fmt_seconds(r['step_time_s']):>9}"
            f" {fmt_seconds(r['step_time_p95_s']):>9} {r['tokens_per_s']:>11,.0f} {r['speedup']:>9.3f}x"
            f" {r['scaling_efficiency']:>10.1%} {r['gpu_h_per_btok']:>10.1f}"
            + (f" {r['usd_per_btok']:>9,.2f}" if usd else "")
            + f"  {r['note']}"
            + (f" (restart {r['restart_s'] / 60:g} min over {args.horizon_h:g} h)" if r["restart_s"] else "")
        )
    return out


def _check_size(scenarios, *, yes: bool) -> None:
    """The rows run one after another, each result dropped before the next: the largest row's
    memory, every row's time (ddplab/limits.py)."""
    from ddplab import limits
    from sim.limits import SimCost, simulation_cost

    costs = [simulation_cost(sc) for sc in scenarios]
    total = SimCost(max(c.peak_bytes for c in costs), 0.0, sum(c.seconds for c in costs))
    big = max(scenarios, key=lambda sc: sc.ranks * sc.steps)
    what = f"{len(scenarios)} rows (the largest: ranks {big.ranks} x steps {big.steps})"
    limits.check_simulation(total, what, yes=yes)
