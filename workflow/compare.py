"""Set-ups side by side, one row each, each simulated exactly as `ddplab simulate` would (the
same scenario, seed and numbers, workflow/simulation.py), relative to the first row: what
`ddplab compare` prints.

    rows = compare([parse_setup("h100-1024"), parse_setup("4x200G=h100-1024:network.nics_per_node=4")])
    rows[1]["vs_first"]["tokens_per_s"]
"""

from pathlib import Path
from typing import NamedTuple

from output.atomic import write_csv_atomic
from output.export import SUMMARY_COLUMNS
from output.jsonfile import write_json_atomic
from output.outdir import ensure
from output.plot import plot_breakdown, run_title
from sim.patches import Patch, flag_patches, parse_set, split_assignments
from sim.scenario_file import resolve
from workflow import limits, train_cost
from workflow.simulation import out_of_memory, run_scale


class Setup(NamedTuple):
    name: str  # the table's label
    scenario: str  # a preset name or a .toml path
    sets: tuple[Patch, ...]  # its KEY=VALUE changes, parsed once (as --set)
    text: str  # as typed


def parse_setup(text: str) -> Setup:
    """``[NAME=]SCENARIO[:KEY=VALUE,...]``. The name, when given, is before the first ``=`` of
    what precedes the first ``:`` (a scenario name or path has neither)."""
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
    return Setup(name, head.strip(), tuple(parse_set(s.strip()) for s in sets), text)


def compare(
    setups: list[Setup],
    *,
    ranks: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    tokens: float | None = None,
    price: float | None = None,
    ignore_memory: bool = False,
    yes: bool = False,
    out: Path | None = None,
    progress=None,
) -> list[dict]:
    """One row per set-up (parse_setup), each `simulate`'s summary of it (or its out-of-memory
    verdict) with its name, its text and ``vs_first``: step time and tokens/s against the first
    row. ``ranks``, ``steps`` and ``seed`` apply to every set-up; with ``tokens`` (and ``price``)
    each row has ``to_train``; with ``out``, compare.json, compare.csv and compare.png are
    written there. Every set-up is checked before any runs: a bad one is one ValueError line."""
    seen = set()
    for s in setups:
        if s.name in seen:
            raise ValueError(f"set-up {s.text!r}: a second set-up named {s.name!r}; name one NAME=SCENARIO...")
        seen.add(s.name)
    scenarios = []
    for s in setups:  # every set-up checked before any runs, so a typo fails fast
        try:
            scenarios.append(resolve(s.scenario, s.sets, flag_patches(ranks=ranks, steps=steps, seed=seed)).scenario)
        except ValueError as e:
            raise ValueError(f"set-up {s.text!r}: {e}") from None
    limits.check_in_turn(scenarios, "set-ups", yes=yes)
    if out:  # fail before simulating, not after
        ensure(out)  # marked as ours: a rerun may replace what it wrote, nothing else
    rows = [
        {"name": s.name, "setup": s.text, **_row(sc, ignore_memory, progress)}
        for s, sc in zip(setups, scenarios, strict=True)
    ]
    for r in rows:
        train_cost.attach(r, tokens, price)
    first = rows[0]
    for r in rows:
        # An OOM row (not simulated) has no ratio, and with an OOM first row none has.
        ran = "verdict" not in r and "verdict" not in first
        r["vs_first"] = {
            "step_time": r["step_time_s"]["mean"] / first["step_time_s"]["mean"] if ran else None,
            "tokens_per_s": r["tokens_per_s"] / first["tokens_per_s"] if ran else None,
        }
    if out:
        write(rows, out)
    return rows


def _row(sc, ignore_memory: bool, progress) -> dict:
    """simulate's summary of the set-up, or, when it does not fit its device, simulate's OOM verdict."""
    return out_of_memory(sc, ignore=ignore_memory) or run_scale(sc, progress=progress)[1]


# compare.csv: the set-up, then simulate's summary as output/export.py flattens it, then the ratios.
CSV_EXTRA = (
    ("step_time_vs_first", lambda r: r["vs_first"]["step_time"]),
    ("tokens_per_s_vs_first", lambda r: r["vs_first"]["tokens_per_s"]),
)


def write(rows: list[dict], out: Path) -> None:
    """compare.json (the rows), compare.csv (the summary flattened, then the ratios) and
    compare.png (each simulated row's step split into its parts)."""
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
