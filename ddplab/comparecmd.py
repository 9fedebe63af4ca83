"""`ddplab compare SETUP SETUP ...`: set-ups side by side, one row each, each simulated exactly as
`ddplab simulate` would (workflow/compare.py), relative to the first row;
with ``--out DIR`` also compare.csv, compare.json and compare.png."""

from pathlib import Path

from ddplab import simcmds, traincost
from realrun.cli import EpilogFormatter
from workflow import compare as comparison
from workflow.units import FLOP_COUNT, fmt_seconds

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
    c.add_argument("--ranks", type=int, help="ranks of every set-up (default: each scenario's)")
    c.add_argument("--steps", type=int, help="steps of every set-up (default: each scenario's)")
    c.add_argument("--seed", type=int, help="seed of every set-up (default: each scenario's)")
    c.add_argument("--out", type=Path, metavar="DIR", help="write compare.csv, compare.json and compare.png here")
    c.add_argument(
        "--ignore-memory", action="store_true", help="simulate set-ups whose memory estimate exceeds the device too"
    )
    c.add_argument("--yes", action="store_true", help="run even when the estimate says it takes over 5 minutes")
    c.add_argument(
        "--json",
        action="store_true",
        help="print JSON: a list, per set-up: name, setup, vs_first {step_time, tokens_per_s} and what"
        " `simulate --json` prints for it",
    )
    traincost.add_arguments(c)
    c.set_defaults(func=compare)


def compare(args):
    if not args.setups:
        raise ValueError(
            "SETUP: give the set-ups to compare, e.g. `ddplab compare h100-1024"
            " h100-1024:network.nics_per_node=4,network.nic_gbit_s=200` (see --help)"
        )
    parsed = [comparison.parse_setup(t) for t in args.setups]
    tokens, price = traincost.parse(args)
    rows = comparison.compare(
        parsed, ranks=args.ranks, steps=args.steps, seed=args.seed, tokens=tokens, price=price,
        ignore_memory=args.ignore_memory, yes=args.yes, out=args.out, progress=simcmds.step_progress,
    )  # fmt: skip
    if args.json:
        return rows
    _print(rows)
    for r in rows:
        if "verdict" in r:
            print(f"{r['name']}: out of memory, not simulated;")
            simcmds.print_alternatives(r["alternatives"])
    if any("verdict" in r for r in rows):
        print("--ignore-memory simulates OOM set-ups anyway")
    over = [r["name"] for r in rows if "verdict" not in r and r["memory_gib"].get("fits") is False]
    if over:
        print(f"over their device's memory, simulated anyway (--ignore-memory): {', '.join(over)}")
    if args.out:
        print(f"compare.csv, compare.json and compare.png in {args.out}/")
    return rows


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}x"


# The table: header, width, value; units in the header.
_COLUMNS = (
    ("ranks", 5, lambda r: f"{r['ranks']}"),
    ("steps", 5, lambda r: f"{r['steps']}"),
    ("seed", 4, lambda r: f"{r['seed']}"),
    ("step", 9, lambda r: fmt_seconds(r["step_time_s"]["mean"])),
    ("p50", 9, lambda r: fmt_seconds(r["step_time_s"]["p50"])),
    ("p95", 9, lambda r: fmt_seconds(r["step_time_s"]["p95"])),
    ("exp comm", 9, lambda r: fmt_seconds(r["exposed_comm_s"])),
    ("wait", 9, lambda r: fmt_seconds(r["straggler_wait_s"])),
    ("eff", 6, lambda r: f"{r['scaling_efficiency']:.1%}"),
    ("tokens/s", 12, lambda r: f"{r['tokens_per_s']:,.0f}"),
    ("MFU", 6, lambda r: f"{r['mfu']:.1%}"),
    ("stack", 9, lambda r: r["stack"]),
    ("GiB/GPU", 7, lambda r: f"{r['memory_gib']['total_gib']:.2f}"),
    ("step vs 1st", 11, lambda r: _ratio(r["vs_first"]["step_time"])),
    ("tok/s vs 1st", 12, lambda r: _ratio(r["vs_first"]["tokens_per_s"])),
)


def _print_oom(r: dict) -> str:
    cells = [f"{r[k]:>{w}}" for k, w in (("ranks", 5), ("steps", 5), ("seed", 4))]
    return " ".join(cells) + f"  OOM: {r['peak_gib']:.2f} GiB per GPU > {r['device_memory_gib']:g} GiB, not simulated"


def _print(rows: list[dict]) -> None:
    width = max(len("set-up"), *(len(r["name"]) for r in rows))
    print(
        f"compare: {len(rows)} set-ups, each row as `ddplab simulate` gives it (step: the mean;"
        " exp comm, wait: per rank per step); vs 1st: against the first row;"
        f" MFU: {FLOP_COUNT} FLOPs per token x tokens/s per GPU / the precision's dense peak;"
        " stack: what compute rests on"
    )
    print(f"{'set-up':<{width}} " + " ".join(f"{h:>{w}}" for h, w, _ in _COLUMNS))
    for r in rows:
        if "verdict" in r:
            print(f"{r['name']:<{width}} " + _print_oom(r))
            continue
        print(f"{r['name']:<{width}} " + " ".join(f"{f(r):>{w}}" for _, w, f in _COLUMNS))
    for r in rows:
        for line in traincost.lines(r, indent=f"{r['name']}: "):
            print(line)
