"""`ddplab compare SETUP SETUP ...`: set-ups side by side, one row each, each simulated exactly as
`ddplab simulate` would (workflow/compare.py), relative to the first row;
with ``--out DIR`` also compare.csv, compare.json and compare.png."""

from ddplab import options, simcmds
from output.terminal import show
from realrun.cli import EpilogFormatter
from workflow import compare as comparison
from workflow.render_studies import compare_lines

EPILOG = """\
a SETUP is [NAME=]SCENARIO[:KEY=VALUE,KEY=VALUE,...]:
  h100-1024                                   a preset (`ddplab scenarios`)
  scenarios/examples/my-cluster.toml          a scenario file
  h100-1024:network.nics_per_node=4,network.nic_gbit_s=200
                                              a preset or file with changes (as --set; a piece
                                              without '=' continues the value before it, so
                                              stragglers=17:1.4,100:2.0 is one change)
  4x200G=h100-1024:network.nics_per_node=4,network.nic_gbit_s=200
                                              the same, named 4x200G in the table
--ranks, --steps and --seed apply to every set-up (as `simulate`'s do, they win over a
set-up's own ranks=, steps= or seed=).

example: ddplab compare h100-1024 scenarios/examples/my-cluster.toml --ranks 512
"""


def add_parser(sub) -> None:
    c = sub.add_parser(
        "compare",
        help="set-ups side by side (presets, .toml files, either with KEY=VALUE changes): one row each",
        description="Set-ups side by side, one row each: each simulated exactly as `ddplab simulate` would"
        " (the same scenario, seed and numbers), relative to the first row.",
        epilog=EPILOG,
        formatter_class=EpilogFormatter,
    )
    # nargs="*": no set-up at all is our one line naming the syntax, not argparse's usage.
    c.add_argument("setups", nargs="*", metavar="SETUP", help="[NAME=]SCENARIO[:KEY=VALUE,...] (see below)")
    options.every_run(c, "set-up")
    options.out_dir(c, "compare.csv, compare.json and compare.png")
    options.guards(c, "set-ups")
    options.json_flag(
        c, "a list, per set-up: name, setup, vs_first {step_time, tokens_per_s} and what `simulate --json` prints"
    )
    options.to_train(c)
    c.set_defaults(func=compare)


def compare(args):
    if not args.setups:
        raise ValueError(
            "SETUP: give the set-ups to compare, e.g. `ddplab compare h100-1024"
            " h100-1024:network.nics_per_node=4,network.nic_gbit_s=200` (see --help)"
        )
    parsed = [comparison.parse_setup(t) for t in args.setups]
    tokens, price = options.tokens_and_price(args)
    rows = comparison.compare(
        parsed, ranks=args.ranks, steps=args.steps, seed=args.seed, tokens=tokens, price=price,
        ignore_memory=args.ignore_memory, yes=args.yes, out=args.out, progress=simcmds.step_progress,
    )  # fmt: skip
    if args.json:
        return rows
    show(compare_lines(rows))
    if args.out:
        print(f"compare.csv, compare.json and compare.png in {args.out}/")
    return rows
