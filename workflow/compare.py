"""Set-ups side by side, one row each, each simulated exactly as `ddplab simulate` would (the
same scenario, seed and numbers, workflow/simulation.py), relative to the first row: what
`ddplab compare` prints.

    rows = compare([parse_setup("h100-1024"), parse_setup("4x200G=h100-1024:network.nics_per_node=4")])
    rows[1].vs_first["tokens_per_s"], rows[1].result.tokens_per_s  # a Summary (sim/summary.py)
"""

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

from calibrate.record import track_record
from output.atomic import write_csv_atomic
from output.export import SUMMARY_COLUMNS
from output.jsonfile import write_json_atomic
from output.outdir import ensure
from output.plot import plot_breakdown, run_title
from sim.patches import Patch, flag_patches, parse_set, split_assignments
from sim.scenario_file import SECTIONS, resolve
from sim.summary import Summary
from workflow import limits, train_cost
from workflow.simulation import out_of_memory, refuse_3d, run_scale


class Setup(NamedTuple):
    name: str  # the table's label
    scenario: str  # a preset name or a .toml path
    sets: tuple[Patch, ...]  # its KEY=VALUE changes, parsed once (as --set)
    text: str  # as typed


@dataclass
class CompareRow:
    name: str
    setup: str  # as typed
    result: Summary | dict  # simulate's Summary, or its out-of-memory verdict (workflow/simulation.py)
    vs_first: dict  # step_time, tokens_per_s (None where either is OOM) and tokens_per_step against the first row

    @property
    def simulated(self) -> bool:
        return isinstance(self.result, Summary)

    def to_json_dict(self) -> dict:
        """The row as compare.json and `--json` hold it: name, set-up, the summary, vs_first."""
        body = self.result.to_json_dict() if self.simulated else self.result
        return {"name": self.name, "setup": self.setup, **body, "vs_first": self.vs_first}


def parse_setup(text: str) -> Setup:
    """``[NAME=]SCENARIO[:KEY=VALUE,...]``. The name, when given, is before the first ``=`` of
    what precedes the first ``:`` (a scenario name or path has neither)."""
    head, colon, tail = text.partition(":")
    name = None
    if "=" in head:
        name, _, head = (part.strip() for part in head.partition("="))
        if not name:
            raise ValueError(f"set-up {text!r}: empty NAME before '='")
        if name.partition(".")[0] in SECTIONS:  # `training.mode=fsdp` alone: a scenario key, not a name
            raise ValueError(
                f"set-up {text!r}: {name} is a scenario key, not a name; a change is written"
                f" SCENARIO:KEY=VALUE, e.g. h100-1024:{name}={head}"
            )
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
) -> list[CompareRow]:
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
            refuse_3d(scenarios[-1])
        except ValueError as e:
            raise ValueError(f"set-up {s.text!r}: {e}") from None
    limits.check_in_turn(scenarios, "set-ups", yes=yes)
    if out:  # fail before simulating, not after
        ensure(out)  # marked as ours: a rerun may replace what it wrote, nothing else
    rows = [
        CompareRow(s.name, s.text, _row(sc, ignore_memory, progress), {})
        for s, sc in zip(setups, scenarios, strict=True)
    ]
    for r, sc in zip(rows, scenarios, strict=True):
        train_cost.attach(r.result, sc, tokens, price)
    first = rows[0].result
    batch = [sc.global_batch_tokens for sc in scenarios]
    for r, tokens in zip(rows, batch, strict=True):
        # An OOM row (not simulated) has no ratio, and with an OOM first row none has.
        ran = r.simulated and rows[0].simulated
        r.vs_first = {
            "step_time": r.result.step_time_s.mean / first.step_time_s.mean if ran else None,
            "tokens_per_s": r.result.tokens_per_s / first.tokens_per_s if ran else None,
            # A set-up stepping another global batch trains another job: its tokens/s says so.
            "tokens_per_step": tokens / batch[0],
        }
    if out:
        write(rows, out)
    return rows


def _row(sc, ignore_memory: bool, progress) -> Summary | dict:
    """simulate's summary of the set-up (with the public record of its class of job, as simulate
    has it), or, when it does not fit its device, simulate's OOM verdict."""
    oom = out_of_memory(sc, ignore=ignore_memory)
    if oom:
        return oom
    summary = run_scale(sc, progress=progress)[1]
    summary.record = track_record(sc, step_s=summary.step_time_s.mean)
    return summary


# compare.csv: the set-up, then simulate's summary as output/export.py flattens it, then the ratios.
CSV_EXTRA = (
    ("step_time_vs_first", lambda r: r.vs_first["step_time"]),
    ("tokens_per_s_vs_first", lambda r: r.vs_first["tokens_per_s"]),
    ("tokens_per_step_vs_first", lambda r: r.vs_first["tokens_per_step"]),
)


def write(rows: list[CompareRow], out: Path) -> None:
    """compare.json (the rows), compare.csv (the summary flattened, then the ratios) and
    compare.png (each simulated row's step split into its parts)."""
    head = (("name", lambda r: r.name), ("setup", lambda r: r.setup))
    summary = tuple((h, lambda r, f=f: f(r.result)) for h, f in SUMMARY_COLUMNS)
    columns = (*head, *summary, *CSV_EXTRA)
    write_json_atomic(out / "compare.json", rows)
    ran = [r for r in rows if r.simulated]
    oom = [r for r in rows if not r.simulated]  # a row with its set-up and memory, every simulated number empty
    write_csv_atomic(
        out / "compare.csv",
        [h for h, _ in columns] + ["out_of_memory"],
        [[f(r) if r.simulated else _cell(r, f) for _, f in columns] + [not r.simulated] for r in rows],
    )
    if not ran:  # an OOM set-up has no step to draw
        return
    notes = [f"{r.vs_first['tokens_per_s']:.3f}x tokens/s" if r.vs_first["tokens_per_s"] else "" for r in ran]
    labels = [f"{r.name}\n{r.result.ranks} ranks, {r.result.mode.upper()}" for r in ran]
    title = "ddplab compare: " + run_title(
        [r.result.scenario for r in ran], [r.result.ranks for r in ran], [r.result.mode for r in ran]
    )
    if oom:
        title += f" (out of memory, not drawn: {', '.join(r.name for r in oom)})"
    plot_breakdown([r.result.to_json_dict() for r in ran], labels, out / "compare.png", title=title, notes=notes)


def _cell(row: CompareRow, get):
    """An OOM row's CSV cell: what its verdict has (its scenario, ranks, memory), else empty."""
    try:
        value = get(CompareRow(row.name, row.setup, SimpleNamespace(**row.result), row.vs_first))
    except AttributeError:
        return ""
    return "" if value is None else value
