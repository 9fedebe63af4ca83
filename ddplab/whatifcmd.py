"""`ddplab whatif SCENARIO --try ... [--json]`: mitigations side by side (sim/whatif.py)."""

from pathlib import Path

from ddplab.textout import show
from workflow.render_studies import whatif_lines


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
    out = found.rows
    if args.json:
        return out
    show(whatif_lines(found, horizon_h=args.horizon_h, usd_per_gpu_hour=args.usd_per_gpu_hour))
    if args.out:
        print(f"whatif.csv, whatif.json and whatif.png in {args.out}/")
    return out
