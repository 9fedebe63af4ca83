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
import threading
import time
from pathlib import Path
from typing import NamedTuple

from realrun.runfolder import RUN_ID_ENV

SCHEMA = "ddplab.realrun"
SCHEMA_VERSION = 1
END_TYPES = ("complete", "error")  # a rank file ending in neither is incomplete and unexplained
_open_writers: set["RecordWriter"] = set()  # for abandon_open: the lifeline ends a rank from a thread


class RecordWriter:
    def __init__(self, path: Path, *, verb: str, config: dict, dist_info: dict, run_info: dict | None = None):
        """``run_info``: what the run resolved beyond its arguments (precision, compile,
        optimizer, device_info; realrun/recipe.py), merged into the meta record."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w")
        self._t0 = time.time()
        self._lock = threading.Lock()  # the lifeline thread may write the last record
        _open_writers.add(self)
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
                # One id per launch in every rank's file, so that files of two runs are never read
                # as one: the launcher's, else torchrun's (its --rdzv-id, or a fresh one standalone).
                "run_id": os.environ.get(RUN_ID_ENV) or os.environ.get("TORCHELASTIC_RUN_ID"),
                **dist_info,
                **(run_info or {}),
            }
        )

    def write(self, record: dict) -> None:
        # One line per record, flushed: a rank killed mid-run loses nothing it wrote.
        line = _dumps(record) + "\n"
        with self._lock:
            if not self._f.closed:
                try:
                    self._f.write(line)
                    self._f.flush()
                except OSError as e:  # a full disk: name the file (the rank's main says it in one line)
                    raise OSError(e.errno, e.strerror, str(self.path)) from None

    def close(self, **summary) -> None:
        self._end({"type": "complete", "wall_s": time.time() - self._t0, **summary})

    def abandon(self, reason: str) -> None:
        """Record why the run ends early, without marking it complete."""
        self._end({"type": "error", "reason": reason, "wall_s": time.time() - self._t0})

    def _end(self, record: dict) -> None:
        self.write(record)
        with self._lock:
            self._f.close()
        _open_writers.discard(self)


def _dumps(record: dict) -> str:
    """Standard JSON: a value that is not finite (a diverged loss) is written as null."""
    try:
        return json.dumps(record, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(record), separators=(",", ":"), allow_nan=False)


def _finite(value):
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def abandon_open(reason: str) -> None:
    """End every record file this process still writes with ``reason`` (realrun/lifeline.py)."""
    for writer in list(_open_writers):
        writer.abandon(reason)


def end_unfinished(out_dir: Path, verb: str, reason: str) -> list[Path]:
    """After the ranks are gone: give every rank file without an end record one saying
    ``reason``, first dropping a torn last line (a rank killed mid-write). The files that
    needed it."""
    ended = []
    for path in sorted(Path(out_dir).glob(f"{verb}-rank*.jsonl")):
        raw = path.read_bytes()
        whole = raw[: raw.rfind(b"\n") + 1]
        try:
            last = json.loads(whole.splitlines()[-1]) if whole.strip() else {}
        except json.JSONDecodeError:
            continue  # not ours to mend: read_records names it
        if last.get("type") in END_TYPES:
            continue
        record = {"type": "error", "reason": reason, "by": "launcher"}
        try:
            with open(path, "r+b") as f:
                f.truncate(len(whole))
                f.seek(len(whole))
                f.write((_dumps(record) + "\n").encode())
        except OSError as e:  # a full disk: the launcher's one line names the file
            raise OSError(e.errno, e.strerror, str(path)) from None
        ended.append(path)
    return ended


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
    error: str | None  # the rank's own last error reason
    ended_by_launcher: str | None = None  # the launcher's reason, for a rank that could not write one

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
    body = [_renamed(r) for r in parsed[1:]]
    complete = bool(body) and body[-1].get("type") == "complete"
    own = [r["reason"] for r in body if r.get("type") == "error" and r.get("by") != "launcher"]
    launcher = [r["reason"] for r in body if r.get("type") == "error" and r.get("by") == "launcher"]
    return RankRecords(Path(path), meta, body, complete, own[-1] if own else None, launcher[-1] if launcher else None)


def _renamed(record: dict) -> dict:
    """A step record as written now: files from before the rename call ``step_wall_s`` ``total_s``
    (measurements/ holds such files)."""
    if record.get("type") == "step" and "total_s" in record and "step_wall_s" not in record:
        record["step_wall_s"] = record.pop("total_s")
    return record


def rank_file(out_dir: Path, verb: str, rank: int) -> Path:
    return Path(out_dir) / f"{verb}-rank{rank:04d}.jsonl"


def read_run(out_dir: Path, verb: str) -> list[RankRecords]:
    """Every rank's records of one verb in a run directory, by rank; files of two runs
    mixed in one folder are named as such (calibrate/records.py checks the same)."""
    files = sorted(Path(out_dir).glob(f"{verb}-rank*.jsonl"))
    if not files:
        raise ValueError(f"{out_dir}: no {verb} records (expected {verb}-rankNNNN.jsonl)")
    ranks = [read_records(f) for f in files]
    runs = {r.meta.get("run_id") for r in ranks} - {None}
    worlds = {r.meta.get("world_size") for r in ranks}
    if len(runs) > 1 or len(worlds) > 1 or len(ranks) > max(w or 0 for w in worlds):
        raise ValueError(
            f"{out_dir}: {verb} files of more than one run are mixed here (run ids {sorted(runs)},"
            f" world sizes {sorted(w or 0 for w in worlds)}, {len(ranks)} files); keep one run per folder"
        )
    return ranks
