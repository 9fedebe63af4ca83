"""JSON-lines records: one file per rank, a meta record first, one record per
measurement appended and flushed as soon as it exists, a completion record last.
A run whose file has no completion record is incomplete (a rank died or hung);
everything before that point is intact. Schema: realrun/SCHEMA.md."""

import json
import os
import platform
import re
import socket
import sys
import time
from pathlib import Path
from typing import NamedTuple

SCHEMA = "ddplab.realrun"
SCHEMA_VERSION = 1


class RecordWriter:
    def __init__(self, path: Path, *, verb: str, config: dict, dist_info: dict, run_info: dict | None = None):
        """``run_info``: what the run resolved beyond its arguments (precision, compile,
        optimizer, device_info; realrun/recipe.py), merged into the meta record."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w")
        self._t0 = time.time()
        self.write(
            {
                "type": "meta",
                "schema": SCHEMA,
                "schema_version": SCHEMA_VERSION,
                "verb": verb,
                "config": config,
                "argv": sys.argv,
                "versions": _versions(),
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "interface": {k: os.environ.get(k) for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")},
                "master": f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}",
                "time_unix": self._t0,
                **dist_info,
                **(run_info or {}),
            }
        )

    def write(self, record: dict) -> None:
        # One line per record, flushed: a rank killed mid-run loses nothing it wrote.
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self, **summary) -> None:
        self.write({"type": "complete", "wall_s": time.time() - self._t0, **summary})
        self._f.close()

    def abandon(self, reason: str) -> None:
        """Record why the run ends early, without marking it complete."""
        self.write({"type": "error", "reason": reason, "wall_s": time.time() - self._t0})
        self._f.close()


def one_line(err: BaseException) -> str:
    """``Type: first line`` of an exception: gloo, NCCL and compiler messages run to many lines.
    Inductor's compile errors (CppCompileError, torch/_inductor/exc.py) say only "C++ compile
    error" first and put the compiler's own words after "Output:"; those are added."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    output = re.search(r"\nOutput:\n\s*(\S[^\n]*)", text)
    if output:
        line += f" ({output.group(1).strip()})"
    return f"{type(err).__name__}: {line}"


def _versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        out["hip"] = getattr(torch.version, "hip", None)
        if torch.cuda.is_available():
            out["device_name"] = torch.cuda.get_device_name()
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return out


class RankRecords(NamedTuple):
    path: Path
    meta: dict
    records: list[dict]
    complete: bool
    error: str | None

    def of_type(self, kind: str) -> list[dict]:
        return [r for r in self.records if r.get("type") == kind]


def read_records(path: Path) -> RankRecords:
    """Read one rank's file. A torn last line (the writer was killed mid-write) is dropped."""
    lines = Path(path).read_text().splitlines()
    parsed = []
    for i, line in enumerate(lines):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON record") from None
    if not parsed or parsed[0].get("type") != "meta":
        raise ValueError(f"{path}: no meta record; not a ddplab realrun file")
    meta = parsed[0]
    if meta.get("schema") != SCHEMA or meta.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema {meta.get('schema')} v{meta.get('schema_version')}, expected {SCHEMA} v{SCHEMA_VERSION}"
        )
    body = parsed[1:]
    complete = bool(body) and body[-1].get("type") == "complete"
    errors = [r["reason"] for r in body if r.get("type") == "error"]
    return RankRecords(Path(path), meta, body, complete, errors[-1] if errors else None)


def rank_file(out_dir: Path, verb: str, rank: int) -> Path:
    return Path(out_dir) / f"{verb}-rank{rank:04d}.jsonl"


def read_run(out_dir: Path, verb: str) -> list[RankRecords]:
    """Every rank's records of one verb in a run directory, by rank."""
    files = sorted(Path(out_dir).glob(f"{verb}-rank*.jsonl"))
    if not files:
        raise ValueError(f"{out_dir}: no {verb} records (expected {verb}-rankNNNN.jsonl)")
    return [read_records(f) for f in files]
