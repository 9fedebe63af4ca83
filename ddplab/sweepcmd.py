"""`ddplab sweep SCENARIO... --vary KEY V1 V2 ... --seeds N`: a grid of scenarios x varied
values x seeds, each run as `ddplab simulate` would run it, gathered into one table of means
with 95 % intervals over the seeds (workflow/sweep.py); in local processes or on a Dask
cluster (workflow/sweep_engines.py)."""

import os

from ddplab import options
from output.terminal import show
from realrun.cli import EpilogFormatter
from realrun.signals import sigterm_as_ctrl_c
from workflow.progress import say
from workflow.render_studies import sweep_table_lines
from workflow.sweep_run import run_sweep

EPILOG = """\
the grid: every SCENARIO x every combination of the --vary values x every seed.
  --vary KEY V1 V2 ...   one scenario key and its values, each value its own argument, so a
                         value may hold commas: --vary stragglers 17:1.4 17:1.4,100:2.0
                         (repeatable: the product over the keys; any key `ddplab scenarios
                         --keys` lists, and ranks or steps)
  --set KEY=VALUE        a key fixed for every run (as simulate's --set)
  --seeds N | A,B,...    seeds 0..N-1, or exactly these (7, is the one seed 7)
Give the scenarios before the first --vary (its values run to the next option).

example: ddplab sweep h100-1024 --ranks 8 --steps 50 --vary noise.sigma 0.01 0.05 --seeds 5
"""


def add_parser(sub) -> None:
    s = sub.add_parser(
        "sweep",
        help="a grid of scenarios x --vary values x seeds: one table, means with 95%% intervals over seeds",
        description="A grid of scenarios x varied key values x seeds, each run as `ddplab simulate` runs it,"
        " gathered into one table: per grid point the mean over the seeds and its 95% Student-t interval.",
        epilog=EPILOG,
        formatter_class=EpilogFormatter,
    )
    # nargs="*": no scenario at all is our one line, not argparse's usage.
    s.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="presets (`ddplab scenarios`) or .toml files")
    s.add_argument(
        "--vary",
        action="append",
        nargs="*",
        default=[],
        metavar="KEY V1 V2",
        help="a key and its values, each value its own argument (repeatable: the product over keys)",
    )
    options.sets(s, "fix a scenario key for every run")
    s.add_argument("--seeds", default="5", metavar="N|A,B,...", help="seeds 0..N-1, or a comma list of seeds")
    options.every_run(s, "run", seed=False)
    options.engines(
        s,
        local="processes on this machine",
        workers_default=os.cpu_count() or 1,
        workers_help="processes: local's pool, or the LocalCluster --engine dask starts without --scheduler"
        " (default: every core; local 1: in this process, no pool)",
    )
    options.out_dir(s, "runs.csv (every run), sweep.csv, sweep.json, sweep.png")
    options.guards(s, "grid points", "run a grid of over 10,000 runs, or one estimated at over 5 minutes")
    options.json_flag(
        s,
        "grid (scenarios, vary, seeds, ...), runs (one per seed), rows (per grid point: each metric's mean,"
        " ci95_low, ci95_high)",
    )
    s.set_defaults(func=sweep)


def sweep(args):
    # SIGTERM as Ctrl-C: the engine's exit then ends its workers (and Dask's) and says one line.
    with sigterm_as_ctrl_c():
        result, written = run_sweep(
            args.scenarios, args.set, args.vary, args.seeds, ranks=args.ranks, steps=args.steps,
            engine=args.engine, workers=args.workers, scheduler=args.scheduler, dashboard=args.dashboard,
            yes=args.yes, ignore_memory=args.ignore_memory, out=args.out, say=say,
        )  # fmt: skip
    if args.json:
        return result
    show(sweep_table_lines(result, args.engine))
    if args.out:
        print(f"{', '.join(p.name for p in written[:-1])} and {written[-1].name} in {args.out}/")
    return result
