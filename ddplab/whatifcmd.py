"""`ddplab whatif SCENARIO --try ... [--json]`: mitigations side by side (sim/whatif.py)."""

from ddplab import options
from output.terminal import show
from workflow.progress import say
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
        " one row separated by commas (network.nics_per_node=4,network.nic_gbit_s=200); repeatable, a row each"
        " (default: the mitigations that fit the scenario, named with the reason)",
    )
    options.sets(w, "override a scenario key first (none: unset an optional one)")
    options.calib(w, "each fix tried on the measured job, as simulate --calib lays it")
    w.add_argument("--ranks", type=int, help="ranks (default: the scenario's)")
    w.add_argument("--steps", type=int, default=300, help="steps per simulation (default 300)")
    w.add_argument("--seed", type=int, help="random seed (default: the scenario's)")
    w.add_argument(
        "--horizon-h",
        type=float,
        help="hours over which a restart is paid and episodes are expected (default 24; only where a row has either)",
    )
    w.add_argument("--restart-min", type=float, help="restart cost of exclude-slowest, minutes (default 10)")
    w.add_argument("--usd-per-gpu-hour", type=float, help="also print cost in dollars per billion tokens")
    options.guards(w, "rows")
    options.out_dir(w, "whatif.csv, whatif.json and whatif.png")
    options.json_flag(
        w,
        "a list, per row: mitigation, ranks, step_time_s, tokens_per_s, speedup, scaling_efficiency,"
        " gpu_h_per_btok, restart_s, note, and the step's parts (compute_s, exposed_comm_s, straggler_wait_s, ...)",
    )
    w.set_defaults(func=whatif)


def whatif(args):
    from workflow.whatif import study  # scipy.stats (sim/episode_cost.py): only when asked

    found = options.call(study, args, scenario=args.scenario, sets=args.set)
    if found.warning:
        say(f"ddplab whatif: warning: {found.warning}")
    if args.json:
        return found.rows
    show(whatif_lines(found, horizon_h=found.horizon_h, usd_per_gpu_hour=args.usd_per_gpu_hour))
    if args.out:
        print(f"whatif.csv, whatif.json and whatif.png in {args.out}/")
    return found.rows
