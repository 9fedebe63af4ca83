"""`ddplab compare SETUP SETUP ...`: set-ups side by side, one row each, each simulated exactly as
`ddplab simulate` would (the same scenario, seed and numbers), relative to the first row;
with ``--out DIR`` also compare.csv, compare.json and compare.png."""

from pathlib import Path
from typing import NamedTuple

from ddplab import limits, simcmds, traincost
from realrun.cli import EpilogFormatter
from sim.mfu import FLOP_COUNT
from sim.units import fmt_seconds

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


class Setup(NamedTuple):
    name: str  # the table's label
    scenario: str  # a preset name or a .toml path
    sets: list[str]  # KEY=VALUE changes, as --set
    text: str  # as typed


def parse_setup(text: str) -> Setup:
    """``[NAME=]SCENARIO[:KEY=VALUE,...]``. The name, when given, is before the first ``=`` of
    what precedes the first ``:`` (a scenario name or path has neither)."""
    from sim.scenario_file import split_assignments

    head, colon, tail = text.partition(":")
    name = None
    if "=" in head:
        name, _, head = (part.strip() for part in head.partition("="))
        if not name:
            raise ValueError(f"set-up {text!r}: empty NAME before '='")
    if not head.strip():
        raise ValueError(f"set-up {text!r}: no scenario (a preset or a .toml file) before ':'")
    sets = split_assignments(tail) if colon else []
    for s in sets:
        if not s.partition("=")[0].strip() or "=" not in s:
            raise ValueError(f"set-up {text!r}: expected KEY=VALUE after ':', got {s!r}")
    if name is None:
        name = (Path(head).stem if head.endswith(".toml") else head) + (f":{tail}" if colon else "")
    return Setup(name, head.strip(), [s.strip() for s in sets], text)


def compare(args):
    from sim.scenario_file import load_scenario

    if not args.setups:
        raise ValueError(
            "SETUP: give the set-ups to compare, e.g. `ddplab compare h100-1024"
            " h100-1024:network.nics_per_node=4,network.nic_gbit_s=200` (see --help)"
        )
    setups = [parse_setup(t) for t in args.setups]
    tokens, price = traincost.parse(args)
    seen = set()
    for s in setups:
        if s.name in seen:
            raise ValueError(f"set-up {s.text!r}: a second set-up named {s.name!r}; name one NAME=SCENARIO...")
        seen.add(s.name)
    scenarios = []
    for s in setups:  # every set-up checked before any runs, so a typo fails fast
        try:
            scenarios.append(load_scenario(s.scenario, s.sets, ranks=args.ranks, steps=args.steps, seed=args.seed))
        except ValueError as e:
            raise ValueError(f"set-up {s.text!r}: {e}") from None
    limits.check_in_turn(scenarios, "set-ups", yes=args.yes)
    if args.out:  # fail before simulating, not after
        from output.outdir import ensure

        ensure(args.out)  # marked as ours: a rerun may replace what it wrote, nothing else
    rows = [
        {"name": s.name, "setup": s.text, **_row(sc, args.ignore_memory)}
        for s, sc in zip(setups, scenarios, strict=True)
    ]
    for r in rows:
        traincost.attach(r, tokens, price)
    first = rows[0]
    for r in rows:
        # An OOM row (not simulated) has no ratio, and with an OOM first row none has.
        ran = "verdict" not in r and "verdict" not in first
        r["vs_first"] = {
            "step_time": r["step_time_s"]["mean"] / first["step_time_s"]["mean"] if ran else None,
            "tokens_per_s": r["tokens_per_s"] / first["tokens_per_s"] if ran else None,
        }
    if args.out:
        _write(rows, args.out)
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


def _row(sc, ignore_memory: bool) -> dict:
    """simulate's summary of the set-up, or, when it does not fit its device, simulate's OOM verdict."""
    return simcmds.out_of_memory(sc, ignore=ignore_memory) or simcmds.run_scale(sc)[1]


# compare.csv: the set-up, then simulate's summary as output/export.py flattens it, then the ratios.
CSV_EXTRA = (
    ("step_time_vs_first", lambda r: r["vs_first"]["step_time"]),
    ("tokens_per_s_vs_first", lambda r: r["vs_first"]["tokens_per_s"]),
)


def _write(rows: list[dict], out: Path) -> None:
    from output.atomic import write_csv_atomic
    from output.export import SUMMARY_COLUMNS
    from output.jsonfile import write_json_atomic
    from output.plot import plot_breakdown, run_title

    columns = (("name", lambda r: r["name"]), ("setup", lambda r: r["setup"]), *SUMMARY_COLUMNS, *CSV_EXTRA)
    write_json_atomic(out / "compare.json", rows)
    ran = [r for r in rows if "verdict" not in r]
    oom = [r for r in rows if "verdict" in r]  # a row with its set-up and memory, every simulated number empty
    write_csv_atomic(
        out / "compare.csv",
        [h for h, _ in columns] + ["out_of_memory"],
        [[_cell(r, f) if "verdict" in r else f(r) for _, f in columns] + ["verdict" in r] for r in rows],
    )
    if not ran:  # an OOM set-up has no step to draw
        return
    notes = [f"{r['vs_first']['tokens_per_s']:.3f}x tokens/s" if r["vs_first"]["tokens_per_s"] else "" for r in ran]
    labels = [f"{r['name']}\n{r['ranks']} ranks, {r['mode'].upper()}" for r in ran]
    title = "ddplab compare: " + run_title(
        [r["scenario"] for r in ran], [r["ranks"] for r in ran], [r["mode"] for r in ran]
    )
    if oom:
        title += f" (out of memory, not drawn: {', '.join(r['name'] for r in oom)})"
    plot_breakdown(ran, labels, out / "compare.png", title=title, notes=notes)


def _cell(row: dict, get):
    """An OOM row's CSV cell: what it has (its set-up, scenario, ranks, memory), else empty."""
    try:
        value = get(row)
    except (KeyError, TypeError):
        return ""
    return "" if value is None else value


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
