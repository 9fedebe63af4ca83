"""Reading realrun's run directories (realrun/SCHEMA.md, ``ddplab.realrun`` v1) as
files: calibrate never imports realrun, only agrees with its documented schema.

A run directory holds one ``<verb>-rankNNNN.jsonl`` per rank. ``read_run`` checks
what every consumer needs before any fitting starts: one verb, every rank of the
world present and complete, one world size. Each failure is one line naming the
file and what is wrong, raised as ``ValueError`` (the CLI's exit 2).
"""

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from calibrate.record_check import check_record
from sim.readfile import MIB, read_text

SCHEMA, SCHEMA_VERSION = "ddplab.realrun", 1
RECORDS_CAP = 1024 * MIB  # a rank's records: ~200 B a step, so millions of steps fit
VERBS = ("probe", "train")


def read_jsonl(path: Path) -> list[dict]:
    """Records of one rank file; a torn last line (a killed writer) is dropped."""
    try:
        # A regular file of bounded size (sim/readfile.py): a FIFO never hangs, /dev/zero is refused.
        lines = read_text(path, RECORDS_CAP).splitlines()
    except ValueError as e:
        raise ValueError(str(e).replace("not UTF-8 text", "not a text file")) from None
    out = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON record") from None
        except RecursionError:
            raise ValueError(f"{path}:{i + 1}: nested too deeply to be a record") from None
        out.append(record)
    meta = out[0] if out and isinstance(out[0], dict) else {}
    if meta.get("type") != "meta" or (meta.get("schema"), meta.get("schema_version")) != (SCHEMA, SCHEMA_VERSION):
        raise ValueError(f"{path}: not a {SCHEMA} v{SCHEMA_VERSION} record file")
    for i, record in enumerate(out):  # a corrupt field is one line here, not a SciPy error later
        check_record(record, f"{path}:{i + 1}")
    for r in out:  # realrun/SCHEMA.md: a step's step_wall_s was total_s in files written before the rename
        if r.get("type") == "step" and "total_s" in r and "step_wall_s" not in r:
            r["step_wall_s"] = r.pop("total_s")
    return out


@dataclass(frozen=True)
class Run:
    """One complete run: its verb, world size, and every rank's records by type."""

    path: Path
    verb: str
    world_size: int
    backend: str
    device: str
    config: dict  # rank 0's meta config (the verb's arguments)
    precision: str  # as resolved on the device (fp32 in files from before --precision)
    compiled: bool
    device_info: dict | None  # the device's name, memory and SM/CU count (None in older files)
    lab: dict | None  # the emulated lab (netlab/commands.json), or None on real machines
    records: dict[int, dict[str, list[dict]]]  # {rank: {type: [records]}}
    files: tuple[str, ...]
    layout: dict | None = None  # a --tp/--pp train run's tp, pp, dp, schedule, micro_batches (rank 0's meta)

    def complete_steps(self, warmup: int) -> tuple[dict[int, dict[int, dict]], list[int]]:
        """({step: {rank: its step record}}, the steps after ``warmup`` that every rank
        recorded, in order); at least 3 of them, else one line naming the run."""
        steps: dict[int, dict[int, dict]] = {}
        for rank in self.records:
            for rec in self.of("step", rank):
                steps.setdefault(rec["step"], {})[rank] = rec
        kept = [s for s in sorted(steps) if s >= warmup and len(steps[s]) == self.world_size]
        if len(kept) < 3:
            raise ValueError(f"{self.path}: {len(kept)} complete steps after {warmup} warm-up steps; need 3 or more")
        return steps, kept

    def of(self, kind: str, rank: int | None = None) -> list[dict]:
        """Records of one type, of one rank or of all ranks (rank order)."""
        ranks = [rank] if rank is not None else sorted(self.records)
        return [r for k in ranks for r in self.records[k].get(kind, [])]

    @property
    def label(self) -> str:
        """The network this run measured: the lab's link rate, or the directory name."""
        return str(self.lab["rate"]) if self.lab and self.lab.get("rate") else self.path.name


def read_run(path: Path, verb: str | None = None) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a run directory")
    files = sorted(p for v in VERBS for p in path.glob(f"{v}-rank[0-9][0-9][0-9][0-9].jsonl"))
    if not files:
        raise ValueError(f"{path}: no probe-rank*.jsonl or train-rank*.jsonl files")
    verbs = {f.name.split("-rank")[0] for f in files}
    if len(verbs) > 1:
        raise ValueError(f"{path}: holds both probe and train records; one run per directory")
    found = verbs.pop()
    if verb and found != verb:
        raise ValueError(f"{path}: a {found} run, {verb} records are needed here")
    records: dict[int, dict[str, list[dict]]] = {}
    metas = {}
    for f in files:
        recs = read_jsonl(f)
        meta = recs[0]
        if recs[-1].get("type") != "complete":
            raise ValueError(f"{f}: incomplete run (no completion record; the rank stopped early)")
        by_type: dict[str, list[dict]] = defaultdict(list)
        for r in recs[1:]:
            by_type[r.get("type")].append(r)
        records[meta["rank"]] = dict(by_type)
        metas[meta["rank"]] = meta
    sizes = {m["world_size"] for m in metas.values()}
    runs = {m.get("run_id") for m in metas.values()} - {None}
    if len(sizes) > 1 or len(runs) > 1 or len(files) > max(sizes):
        raise ValueError(
            f"{path}: files of more than one run are mixed here (run ids {sorted(runs)}, world sizes"
            f" {sorted(sizes)}, {len(files)} files); keep one run per folder"
        )
    world = sizes.pop()
    missing = sorted(set(range(world)) - set(records))
    if missing:
        raise ValueError(f"{path}: world size {world} but no file for rank {missing[0]}")
    lab = None
    commands = path / "netlab" / "commands.json"
    if commands.exists():
        try:
            lab = json.loads(commands.read_text())["lab"]["spec"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{commands}: unreadable lab description") from None
    m0 = metas[0]
    return Run(
        path=path,
        verb=found,
        world_size=world,
        backend=m0.get("backend", "?"),
        device=m0.get("device", "?"),
        config=m0.get("config", {}),
        precision=(m0.get("precision") or {}).get("name", "fp32"),
        compiled=bool(m0.get("compile", False)),
        device_info=m0.get("device_info"),
        lab=lab,
        records=records,
        files=tuple(str(f) for f in files),
        layout=m0.get("layout"),
    )


def collective_times(run: Run) -> dict[tuple[str, int], dict[int, list[float]]]:
    """{(op, ranks): {size_bytes: [time of the slowest rank, per timed iteration]}} from
    rank 0 (every rank records the same per-iteration maximum)."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in run.of("collective", 0):
        out[(r["op"], r["ranks"])][r["size_bytes"]].append(r["time_max_s"])
    return {k: dict(v) for k, v in out.items()}


def link_gbit_s(run: Run) -> tuple[float, int] | None:
    """(the slowest direction's median raw TCP rate, samples), or None without link records."""
    by_dir = defaultdict(list)
    for r in run.of("link", 0):
        by_dir[(r["src"], r["dst"])].append(r["gbit_s"])
    if not by_dir:
        return None
    rate = min(sorted(v)[len(v) // 2] for v in by_dir.values())
    return rate, sum(len(v) for v in by_dir.values())
