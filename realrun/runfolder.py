"""One run per folder, claimed atomically, and a lifeline from the launcher to its ranks.

A run folder holds two lock files, both locked with ``flock`` by the process that
launched the run (``ddplab probe/train``, ``ddplab netlab run``):

- ``.ddplab.lock``, the claim: a second launcher pointed at the same ``--out`` is
  refused while the first lives. The kernel drops a ``flock`` when its holder dies,
  however it dies (``kill -9``, the OOM killer), so a crashed run never leaves the
  folder stuck; there is no stale-lock file to clean by hand.
- ``.ddplab.alive``, the lifeline: every rank polls it (realrun/lifeline.py) and
  ends itself, marking its records interrupted, once it can take the lock, i.e.
  once the launcher is gone or lets go on purpose (Ctrl-C, its deadline). Each
  rank's torchrun starts it in a session of its own, so neither a signal to the
  launcher's process group nor the parent-death signal reaches it; a lock the
  kernel releases does, on Linux and macOS alike, and needs no PID that could be
  reused.

torch-free.
"""

import datetime
import fcntl
import os
from pathlib import Path

CLAIM = ".ddplab.lock"
LIFELINE = ".ddplab.alive"
LIFELINE_ENV = "DDPLAB_LIFELINE"  # the lifeline's path, for the ranks
RUN_ID_ENV = "DDPLAB_RUN_ID"  # one id per launch, in every rank's meta record
OURS = (CLAIM, LIFELINE)
# What marks a folder ddplab made: a run's claim, or simulation output (output/ownfiles.py
# OUT_MARKER; realrun stands alone, so the name is repeated here).
MARKERS = (CLAIM, ".ddplab.out")


class Lifeline:
    """The launcher's end: an exclusive flock on ``path`` for as long as the run may go on."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd = _locked(self.path)
        if self._fd < 0:  # a rank of a dead launcher's run holds it: that run is still ending
            raise ValueError(
                f"{self.path.parent}: ranks of an earlier run are still ending; try again in a few seconds"
            )
        self._say(f"interrupted: the launcher (pid {os.getpid()}) is gone")  # what a kill -9 leaves

    def env(self) -> dict[str, str]:
        return {LIFELINE_ENV: str(self.path)}

    def let_go(self, reason: str) -> None:
        """Tell the ranks to stop: write why (their records' end reason, "interrupted: ..."),
        then release the lock."""
        if self._fd < 0:
            return
        self._say(reason)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = -1

    def _say(self, reason: str) -> None:
        _put(self._fd, reason, self.path)


class RunFolder:
    """A claimed run folder; hold it for the whole run (the claim ends with the process)."""

    def __init__(self, path: Path, claim_fd: int, moved_to: Path | None):
        self.path, self.moved_to, self._claim_fd = path, moved_to, claim_fd
        self.lifeline = Lifeline(path / LIFELINE)

    def release(self) -> None:
        self.lifeline.let_go("interrupted: the launcher ended the run")
        if self._claim_fd >= 0:
            os.close(self._claim_fd)  # closing drops the flock
            self._claim_fd = -1


def claim(path: Path, *, force: bool = False) -> RunFolder:
    """Claim ``path`` for a new run. Refused (ValueError) while another launcher holds it,
    or when it holds an earlier run, unless ``force``, which moves that run aside to a
    sibling ``<name>.old-<time>`` folder: never deleted."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path}: exists and is not a folder")
    _refuse_foreign(path)
    path.mkdir(parents=True, exist_ok=True)
    claim_fd = _locked(path / CLAIM)
    if claim_fd < 0:
        holder = (path / CLAIM).read_text().strip() or "another process"
        raise ValueError(f"--out {path}: in use by a running ddplab run ({holder}); wait for it or pick another folder")
    try:
        earlier = sorted(p for p in path.iterdir() if p.name not in OURS)
        if earlier and not force:
            names = ", ".join(p.name for p in earlier[:3]) + (", ..." if len(earlier) > 3 else "")
            raise ValueError(
                f"--out {path}: holds an earlier run ({len(earlier)} entries: {names});"
                " pick a new folder, or --force to move that run aside"
            )
        moved_to = _aside(path, earlier) if earlier else None
        _put(claim_fd, f"pid {os.getpid()}\n", path / CLAIM)
        return RunFolder(path, claim_fd, moved_to)
    except BaseException:
        os.close(claim_fd)
        raise


def _refuse_foreign(path: Path) -> None:
    """A folder that holds files but no run marker is not an earlier run: ``--force`` once moved
    any folder aside (a home directory, a thesis), so it is refused, with or without ``--force``,
    before a lock file is left in it (issue 25, D19)."""
    if not path.is_dir() or any((path / m).exists() for m in MARKERS):
        return
    entries = sorted(p.name for p in path.iterdir())
    if entries:
        names = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ValueError(
            f"--out {path}: holds files that are not a ddplab run ({len(entries)} entries: {names});"
            " pick a new or empty folder (--force moves aside only an earlier ddplab run)"
        )


def _put(fd: int, text: str, path: Path) -> None:
    """``text`` as the whole of the file at ``fd``; a full disk names ``path`` (os.pwrite's
    OSError names no file: "None: No space left on device" before, issue 25 D16)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


def _locked(path: Path) -> int:
    """An fd holding an exclusive flock on ``path``, or -1 when someone else holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


def _aside(path: Path, entries: list[Path]) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.old-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.old-{stamp}-{n}")
    aside.mkdir()
    for e in entries:
        e.rename(aside / e.name)
    return aside
