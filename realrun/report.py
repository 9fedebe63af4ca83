"""What `ddplab train` prints after torchrun returns: per-rank medians, and for a run
that ended early, which rank stopped and why. torch-free: reads the record files
(realrun/SCHEMA.md), so it works on a run directory copied from elsewhere."""

from pathlib import Path
from statistics import median

from realrun.records import RankRecords, read_run

COLUMNS = ("step_wall_s", "data_s", "forward_s", "backward_s", "wait_s", "optimizer_s")


def _devices(ranks) -> str:
    """Where the ranks computed: "cpu", or "cuda:0 (rank 0), mps (rank 1)" when they differ."""
    where = [r.meta.get("device", "?") for r in ranks]
    if len(set(where)) == 1:
        return where[0]
    return ", ".join(f"{d} (rank {r.meta.get('rank', i)})" for i, (r, d) in enumerate(zip(ranks, where, strict=True)))


def summarize_train(out_dir: Path) -> list[str]:
    ranks = read_run(out_dir, "train")
    meta = ranks[0].meta
    cfg = meta.get("config", {})
    done = all(r.complete for r in ranks)
    lines = [
        f"train: {len(ranks)} of {meta.get('world_size')} ranks, {cfg.get('model')}, {cfg.get('steps')} steps,"
        f" backend {meta.get('backend')}, compute on {_devices(ranks)}: {'complete' if done else 'INCOMPLETE'}"
        f" ({out_dir})",
        f"{'rank':>4} {'steps':>5} " + " ".join(f"{c:>11}" for c in COLUMNS) + f" {'last_loss':>9}  status",
    ]
    for r in ranks:
        steps = r.of_type("step")
        cells = []
        for c in COLUMNS:
            values = [s[c] for s in steps if c in s]
            cells.append(f"{median(values):>11.4f}" if values else f"{'-':>11}")
        last = steps[-1].get("loss", float("nan")) if steps else None
        loss = f"{'-':>9}" if not steps else f"{float('nan') if last is None else last:>9.4f}"  # null: diverged
        status = "complete" if r.complete else ("error" if r.error else "no end record")
        lines.append(f"{r.meta.get('rank'):>4} {len(steps):>5} " + " ".join(cells) + f" {loss}  {status}")
    if not done:
        lines.append("diagnosis: " + "; ".join(_diagnose(ranks)))
    return lines


def _last_step(r: RankRecords) -> str:
    steps = r.of_type("step")
    return f"after step {steps[-1]['step']}" if steps else "before its first step"


def _diagnose(ranks: list[RankRecords]) -> list[str]:
    """One clause per unfinished rank, the likely culprits first: a rank that left no error
    record (killed, or hung until torchrun killed it); failing that, one torchrun terminated
    while it was outside any collective (it never reached the one its peers waited in)."""
    unfinished = [r for r in ranks if not r.complete]
    silent = [r for r in unfinished if r.error is None]
    culprits, others = [], []
    for r in unfinished:
        rank = r.meta.get("rank")
        faults = r.of_type("fault")
        fault = faults[-1] if faults else {}
        if r.error is None:
            interrupted = (r.ended_by_launcher or "").startswith("interrupted")
            note = f"; the launcher: {r.ended_by_launcher}" if interrupted else ""
            culprits.append(f"rank {rank} stopped {_last_step(r)} without an error record (killed or hung{note})")
        elif not silent and fault.get("terminated") and not fault.get("collective"):
            culprits.append(
                f"rank {rank} stopped {_last_step(r)} during {fault.get('phase')}, outside any collective"
                " (hung or far slower than its peers; torchrun terminated it)"
            )
        else:
            others.append(f"rank {rank}: {r.error}")
    return culprits + others


def whole_despite(out_dir: Path, verb: str, code: int) -> bool:
    """A run that torchrun reports failed (``code``) but whose every rank, world_size of them,
    closed its records as complete: the failure came after the measurements, in tearing the
    process group down (torch + gloo aborts there now and then, "terminate called without an
    active exception": realrun/train.py), and the run is whole. Never an interrupt or a time
    limit, which stop a run on purpose."""
    if code in (0, 124, 130):
        return False
    try:
        ranks = read_run(out_dir, verb)
    except ValueError:
        return False
    return len(ranks) == ranks[0].meta.get("world_size") and all(r.complete for r in ranks)


def whole_line(code: int, log: str) -> str:
    """The launcher's word on a run ``whole_despite`` excuses: what exited, why the run is whole,
    and where torchrun's output is (``log``: each launcher keeps its own)."""
    return (
        f"every rank finished and closed its records; exit code {code} came after, from the process"
        f" group's teardown (torchrun's output: {log}): the run is whole"
    )


def failure_line(out_dir: Path, verb: str, code: int) -> str:
    """The launcher's last word on a run that did not finish: how it ended and where to look."""
    where = f"records so far in {out_dir}/ (each rank's file ends with why); torchrun's output: {out_dir}/{verb}.log"
    if code == 130:
        return f"interrupted; {where}"
    if code == 124:
        return f"stopped at its time limit; {where}"
    return f"ranks exited with code {code}; {where}"
