"""Straggler detection on per-rank step records, real (``ddplab train``) or simulated.

Two signals, which must agree on a true straggler (and a third for a rank that is slow for
another reason):

- the score: the fastest rank's median compute time per step / this rank's
  (1 = the fastest), flagged below 0.75. This is NVIDIA resiliency-ext's
  straggler detector's "relative performance score" (nvidia_resiliency_ext
  ``straggler.Detector``: a rank's median section time against the best
  rank's), with the threshold calibrate already uses (noise_fit.py);
- the wait: in synchronous data parallelism every rank waits at the step's
  collectives for the last one to arrive, so the slowest rank waits least (it
  only sees the communication that could not be hidden). A rank with the lowest
  score that is not also the least-waiting one is a sign of noise, not of a
  slow GPU;
- the lateness: a rank can hold every other back with compute as fast as theirs, late to the
  sync for a reason outside it (a slow data loader, host work). Its lateness is how much less it
  waits than the other ranks' median, less how much longer it computes than their median: the
  time the others wait for it that its compute does not explain. A rank whose score is not
  flagged is flagged late where the others wait for it as long as for a flagged straggler,
  (1 / 0.75 - 1) x the fastest rank's median compute. A train run's records also say how long
  each rank waited for its data.

Sources and definitions, per rank, over the kept steps:

- train (realrun/SCHEMA.md "train"): compute = ``forward_s + backward_s`` (an
  injected ``--straggler``'s throttle is inside both), wait = ``wait_s`` (last
  bucket ready until backward returned). The first ``WARMUP_STEPS`` are dropped
  as in validate.py (step 0 runs DDP's single bootstrap bucket; step 1 is the
  first with rebuilt buckets);
- sim (output/export.py ``ranks-NNNN/records.npz``): compute = ``compute_s``, wait
  = ``collective_wait_s`` (what a profiler shows, sim/results.py) capped at the
  rank's idle time in the step, ``exposed_comm_s + straggler_wait_s``. The cap
  matters: a bucket's wait for the slowest rank's launch starts when *this* rank
  made it ready, while it still computes the later buckets, so the per-bucket sum
  counts time the rank spent computing and can exceed the step's idle time (h100-1024:
  83 ms summed against 11 ms idle). The simulator has no warm-up, so every step is kept.

Bad input is a ``ValueError`` whose message is one line naming the path.
"""

import re
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from calibrate.noise_fit import STRAGGLER_SCORE_FLAG
from calibrate.records import read_run
from calibrate.validate import WARMUP_STEPS
from sim.results import SCHEMA as SIM_SCHEMA

_RANKS_DIR = re.compile(r"ranks-(\d{4,})")


class RankStat(NamedTuple):
    rank: int
    compute_s_p50: float  # median compute time per step
    score: float  # fastest rank's compute_s_p50 / this rank's (1 = the fastest)
    flagged: bool  # score < STRAGGLER_SCORE_FLAG
    wait_s_mean: float  # mean collective wait per step
    late_s: float  # what the others wait for it beyond its compute, mean per step (module docstring)
    late_flagged: bool  # late_s > Report.late_flag_s, its score not flagged (a slow GPU is said as one)
    data_s_mean: float | None  # train: its mean data_s (waiting for the batch); sim: None


class Records(NamedTuple):
    """Per-step per-rank times, as read from a run directory."""

    source: str  # "train" | "sim"
    path: Path  # the directory the records came from (a sim run's ranks-NNNN)
    compute_s: np.ndarray  # (steps, ranks)
    wait_s: np.ndarray  # (steps, ranks)
    skipped_steps: int  # warm-up steps dropped
    injected: dict[int, float]  # train: --straggler RANK:FACTOR as configured; sim: {}
    data_s: np.ndarray | None = None  # train: (steps, ranks) its data_s; sim: None


class Report(NamedTuple):
    source: str
    path: Path
    steps: int
    skipped_steps: int
    ranks: tuple[RankStat, ...]
    flagged: tuple[int, ...]  # rank order
    lowest_score_rank: int
    least_waiting_rank: int
    wait_s_median: float  # median over ranks of wait_s_mean
    injected: dict[int, float]
    late_flag_s: float  # the lateness above which a rank is flagged late: LATE_FLAG x the fastest median compute
    late: tuple[int, ...] = ()  # ranks late outside compute (RankStat.late_flagged), latest first

    @property
    def agrees(self) -> bool:
        """The slowest rank is the one that waits least, as a true straggler does."""
        return self.lowest_score_rank == self.least_waiting_rank

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "path": str(self.path),
            "steps": self.steps,
            "skipped_warmup_steps": self.skipped_steps,
            "world_size": len(self.ranks),
            "score_flag": STRAGGLER_SCORE_FLAG,
            "ranks": [r._asdict() for r in self.ranks],
            "flagged": list(self.flagged),
            "lowest_score_rank": self.lowest_score_rank,
            "least_waiting_rank": self.least_waiting_rank,
            "agrees": self.agrees,
            "wait_s_median": self.wait_s_median,
            "late": list(self.late),
            "late_flag_s": self.late_flag_s,
            "injected": {str(k): v for k, v in sorted(self.injected.items())},
            "verdict": verdict(self),
        }


def analyse(rec: Records) -> Report:
    compute, wait = rec.compute_s, rec.wait_s
    p50 = np.median(compute, axis=0)
    if not (p50 > 0).all():
        r = int(np.argmax(~(p50 > 0)))
        raise ValueError(f"{rec.path}: rank {r}'s median compute time is {p50[r]:g} s; no speed to compare")
    score = p50.min() / p50
    wait_mean = wait.mean(axis=0)
    late = (others_median(wait_mean) - wait_mean) - (compute.mean(axis=0) - others_median(compute.mean(axis=0)))
    flag_s = LATE_FLAG * float(p50.min())
    data = rec.data_s.mean(axis=0) if rec.data_s is not None else None
    ranks = tuple(
        RankStat(
            r,
            float(p50[r]),
            float(score[r]),
            bool(score[r] < STRAGGLER_SCORE_FLAG),
            float(wait_mean[r]),
            float(late[r]),
            bool(late[r] > flag_s and score[r] >= STRAGGLER_SCORE_FLAG),
            None if data is None else float(data[r]),
        )
        for r in range(compute.shape[1])
    )
    return Report(
        source=rec.source,
        path=rec.path,
        steps=compute.shape[0],
        skipped_steps=rec.skipped_steps,
        ranks=ranks,
        flagged=tuple(r.rank for r in ranks if r.flagged),
        lowest_score_rank=int(np.argmin(score)),
        least_waiting_rank=int(np.argmin(wait_mean)),
        wait_s_median=float(np.median(wait_mean)),
        injected=rec.injected,
        late_flag_s=flag_s,
        late=tuple(sorted((r.rank for r in ranks if r.late_flagged), key=lambda k: -late[k])),
    )


# A rank late outside compute is flagged where the others wait for it as long as for a rank whose
# compute scores at the flag: 1 / 0.75 - 1 = 1/3 of the fastest rank's median compute.
LATE_FLAG = 1.0 / STRAGGLER_SCORE_FLAG - 1.0


def others_median(x: np.ndarray) -> np.ndarray:
    """Per element, the median of the other elements (0 where there are none), in O(n log n):
    a 65,536-rank simulation's records are read too."""
    n = len(x)
    if n < 2:
        return np.zeros(n)
    order = np.argsort(x, kind="stable")
    s = x[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)

    def kth(k: int) -> np.ndarray:  # the k-th smallest of the others, for every element at once
        return np.where(k < pos, s[k], s[min(k + 1, n - 1)])

    m = n - 1
    return kth((m - 1) // 2) if m % 2 else (kth(m // 2 - 1) + kth(m // 2)) / 2


def verdict(rep: Report) -> str:
    """One line: who is a straggler, and whether the wait says the same."""
    low, least = rep.ranks[rep.lowest_score_rank], rep.ranks[rep.least_waiting_rank]
    waits = f"({fmt_wait(least.wait_s_mean)} vs {fmt_wait(rep.wait_s_median)} median)"
    if not rep.flagged:
        head = f"no straggler: every score >= {STRAGGLER_SCORE_FLAG} (lowest {low.score:.2f}, rank {low.rank})"
        if rep.late:
            head = f"no slow GPU: every score >= {STRAGGLER_SCORE_FLAG} (lowest {low.score:.2f}, rank {low.rank})"
        return f"{head}; rank {least.rank} waits least {waits}{late_note(rep)}"
    if len(rep.flagged) == 1:
        head = f"rank {low.rank} is a straggler: score {low.score:.2f}"
    else:
        scores = ", ".join(f"{rep.ranks[r].score:.2f}" for r in rep.flagged)
        names = ", ".join(map(str, rep.flagged))
        head = f"ranks {names} are stragglers: scores {scores}; rank {low.rank} is the slowest"
    if rep.agrees:
        return f"{head}, it waits least {waits}{late_note(rep)}"
    return (
        f"{head}, but rank {least.rank} waits least {waits}: the wait does not confirm it"
        f" (rank {low.rank} waits {fmt_wait(low.wait_s_mean)}){late_note(rep)}"
    )


def late_note(rep: Report) -> str:
    """The ranks late to the sync outside compute, the latest named with its data wait where the
    records have one; "" where none is."""
    if not rep.late:
        return ""
    r = rep.ranks[rep.late[0]]
    also = f" (and {len(rep.late) - 1} more)" if len(rep.late) > 1 else ""
    cause = "data, host work"
    if r.data_s_mean is not None:
        others = others_median(np.array([x.data_s_mean for x in rep.ranks]))[r.rank]
        cause = f"its data loading {fmt_wait(r.data_s_mean)} a step, the others' median {fmt_wait(others)}"
    return (
        f"; rank {r.rank}{also} is late to the gradient sync, its compute not flagged (score {r.score:.2f}):"
        f" the others wait {fmt_wait(r.late_s)} a step for it outside its compute ({cause})"
    )


def fmt_wait(s: float) -> str:
    """3.1 ms, 40 ms, 1.2 s, 0 s: two or three significant digits."""
    if s == 0:
        return "0 s"
    if abs(s) >= 1:
        return f"{s:.3g} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


# Reading run directories.


def load(path: Path, ranks: int | None = None) -> Records:
    """The records of a train run directory, a simulation's ``ranks-NNNN`` directory,
    or a ``simulate --out`` directory (one of a sweep's rank counts chosen by ``ranks``)."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory")
    if sim_dirs(path) or (path / "records.npz").exists() or _RANKS_DIR.fullmatch(path.name):
        return read_sim(sim_records_dir(path, ranks))
    if not list(path.glob("train-rank[0-9][0-9][0-9][0-9].jsonl")) and not list(
        path.glob("probe-rank[0-9][0-9][0-9][0-9].jsonl")
    ):
        raise ValueError(f"{path}: no train-rank*.jsonl files and no simulation records (ranks-NNNN/records.npz)")
    rec = read_train(path)
    world = rec.compute_s.shape[1]
    if ranks is not None and ranks != world:
        raise ValueError(f"{path}: a train run of {world} ranks, not --ranks {ranks}")
    return rec


def sim_dirs(path: Path) -> dict[int, Path]:
    """{ranks: directory} of the ``ranks-NNNN`` subdirectories of a ``simulate --out`` directory."""
    out = {}
    for d in path.iterdir():
        m = _RANKS_DIR.fullmatch(d.name)
        if m and d.is_dir():
            out[int(m.group(1))] = d
    return dict(sorted(out.items()))


def sim_records_dir(path: Path, ranks: int | None) -> Path:
    m = _RANKS_DIR.fullmatch(path.name)
    if (path / "records.npz").exists() or m:
        if ranks is not None and m and int(m.group(1)) != ranks:
            raise ValueError(f"{path}: simulated {int(m.group(1))} ranks, not --ranks {ranks}")
        return path
    found = sim_dirs(path)
    if ranks is not None:
        if ranks not in found:
            raise ValueError(f"{path}: no ranks-{ranks:04d} directory (simulated: {_list(found)} ranks)")
        return found[ranks]
    if len(found) > 1:
        raise ValueError(
            f"{path}: a sweep of {_list(found)} ranks; pass --ranks N or one of its ranks-NNNN directories"
        )
    return next(iter(found.values()))


def _list(found: dict[int, Path]) -> str:
    return ", ".join(map(str, found))


def read_sim(d: Path) -> Records:
    f = d / "records.npz"
    if not f.is_file():
        raise ValueError(f"{d}: no records.npz (written by `ddplab simulate SCENARIO --records --out DIR`)")
    try:
        with np.load(f, allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("schema", *_SIM_ARRAYS) if k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):  # not a zip, or pickled objects
        raise ValueError(f"{f}: not a readable .npz file") from None
    schema = str(arrays["schema"]) if "schema" in arrays else None
    if schema != SIM_SCHEMA:
        raise ValueError(f"{f}: not a {SIM_SCHEMA} records file (schema {schema})")
    missing = [k for k in _SIM_ARRAYS if k not in arrays]
    if missing:
        raise ValueError(f"{f}: no {missing[0]} array")
    a = {k: arrays[k].astype(float) for k in _SIM_ARRAYS}
    compute = a["compute_s"]
    odd = [k for k in _SIM_ARRAYS if a[k].shape != compute.shape]
    if compute.ndim != 2 or odd or compute.size == 0:
        k = odd[0] if odd else "collective_wait_s"
        raise ValueError(f"{f}: compute_s {compute.shape} and {k} {a[k].shape} must be the same (steps, ranks)")
    return Records("sim", d, compute, idle_capped_wait(a), 0, {})


# The sim records stragglers reads: compute, the per-bucket wait, and the two parts of the idle time.
_SIM_ARRAYS = ("compute_s", "collective_wait_s", "exposed_comm_s", "straggler_wait_s")


def idle_capped_wait(a: dict[str, np.ndarray]) -> np.ndarray:
    """The collective wait, never more than the idle time it explains (see the module's docstring)."""
    idle = a["exposed_comm_s"] + a["straggler_wait_s"]
    return np.minimum(a["collective_wait_s"], idle)


def read_train(path: Path) -> Records:
    run = read_run(path, verb="train")  # one-line ValueErrors: a probe run, missing ranks, incomplete files
    world = run.world_size
    steps: dict[int, dict[int, dict]] = {}
    for rank in range(world):
        for r in run.of("step", rank):
            steps.setdefault(r["step"], {})[rank] = r
    kept = [s for s in sorted(steps) if s >= WARMUP_STEPS and len(steps[s]) == world]
    if not kept:
        raise ValueError(f"{path}: no step of every rank after the {WARMUP_STEPS} warm-up steps")
    first = steps[kept[0]][0]
    if not all(k in first for k in ("forward_s", "backward_s", "wait_s")):
        raise ValueError(f"{path}: an uninstrumented run (--no-instrument) has no forward/backward/wait times")
    rows = [[steps[s][r] for r in range(world)] for s in kept]
    compute = np.array([[x["forward_s"] + x["backward_s"] for x in row] for row in rows], float)
    wait = np.array([[x["wait_s"] for x in row] for row in rows], float)
    data = np.array([[x.get("data_s", 0.0) for x in row] for row in rows], float)
    injected = {int(r): float(f) for r, f in run.config.get("straggler") or []}
    return Records("train", path, compute, wait, len([s for s in steps if s < WARMUP_STEPS]), injected, data)
