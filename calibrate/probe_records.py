"""Reading realrun's probe records (realrun/SCHEMA.md, ``ddplab.realrun`` v1) as files:
calibrate never imports realrun, only agrees with its documented schema."""

import json
from collections import defaultdict
from pathlib import Path

SCHEMA, SCHEMA_VERSION = "ddplab.realrun", 1


def read_jsonl(path: Path) -> list[dict]:
    """Records of one rank file; a torn last line (a killed writer) is dropped."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON record") from None
    meta = out[0] if out else {}
    if meta.get("type") != "meta" or (meta.get("schema"), meta.get("schema_version")) != (SCHEMA, SCHEMA_VERSION):
        raise ValueError(f"{path}: not a {SCHEMA} v{SCHEMA_VERSION} record file")
    return out


def collective_times(run_dir: Path) -> dict[tuple[str, int], dict[int, list[float]]]:
    """{(op, ranks): {size_bytes: [time of the slowest rank, per timed iteration]}} from
    rank 0's probe file (every rank records the same per-iteration maximum)."""
    path = Path(run_dir) / "probe-rank0000.jsonl"
    records = read_jsonl(path)
    if records[-1].get("type") != "complete":
        raise ValueError(f"{path}: incomplete run (no completion record)")
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("type") == "collective":
            out[(r["op"], r["ranks"])][r["size_bytes"]].append(r["time_max_s"])
    if not out:
        raise ValueError(f"{path}: no collective records (probe with --parts collectives)")
    return {k: dict(v) for k, v in out.items()}


def link_gbit_s(run_dir: Path) -> float | None:
    """The slowest direction's median raw TCP rate, or None without link records."""
    records = read_jsonl(Path(run_dir) / "probe-rank0000.jsonl")
    by_dir = defaultdict(list)
    for r in records:
        if r.get("type") == "link":
            by_dir[(r["src"], r["dst"])].append(r["gbit_s"])
    if not by_dir:
        return None
    return min(sorted(v)[len(v) // 2] for v in by_dir.values())
