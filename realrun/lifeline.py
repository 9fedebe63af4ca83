"""A rank's end of the launcher's lifeline (realrun/runfolder.py): end this rank, with
its records marked interrupted, within a poll interval of its launcher going away.

Started by realrun/cli.py in every rank whose launcher set ``DDPLAB_LIFELINE``; a
rank started by hand under torchrun has no lifeline and runs as before.
torch-free.
"""

import fcntl
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from realrun.runfolder import LIFELINE_ENV

POLL_S = 0.2  # the acceptance bound is "no process of the run alive 2 s after the kill"
# torchrun gone, the launcher's lock still held: how long its other threads may take to exit
# (milliseconds when idle) before torchrun alone is blamed; within the 2 s bound with POLL_S.
PARENT_GRACE_S = 0.6
_parent: int | None = None  # this rank's parent when watch() began: torchrun's agent


def _parent_gone() -> str | None:
    if _parent is not None and os.getppid() != _parent:
        return f"interrupted: torchrun (pid {_parent}), this rank's parent, is gone"
    return None


def watch(on_gone: Callable[[str], None], environ=os.environ) -> threading.Thread | None:
    """Poll the lifeline in a daemon thread; call ``on_gone(reason)`` once the launcher has let
    go or died. A thread, not a signal handler: the main thread may sit for minutes inside
    a C++ collective, where Python runs no handler, but such calls release the GIL."""
    path = environ.get(LIFELINE_ENV)
    if not path:
        return None
    global _parent
    _parent = os.getppid()  # torchrun's agent, which started this rank
    t = threading.Thread(target=_poll, args=(Path(path), on_gone), name="ddplab-lifeline", daemon=True)
    t.start()
    return t


def _poll(path: Path, on_gone: Callable[[str], None]) -> None:
    """Until the launcher lets go, or torchrun, this rank's parent, dies: a kill -9 of torchrun
    alone leaves the launcher holding the lifeline, and the ranks (in sessions of their own,
    out of reach of its process group) trained on for ~10 s, writing while the launcher, seeing
    torchrun end, appended its end records to the same files. The kernel gives an orphan a new
    parent, so a changed parent pid says torchrun is gone, with no pid that could be reused."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # the folder went away: so did the launcher's hold on it
        on_gone(f"interrupted: the lifeline {path} is gone")
        return
    while (reason := _why_gone(fd)) is None:
        time.sleep(POLL_S)
    on_gone(reason)


def _why_gone(fd: int) -> str | None:
    """The launcher's reason first. A launcher killed outright takes torchrun with it (its
    parent-death signal), but that signal comes when the launcher's *thread* that started torchrun
    exits (prctl(2): the parent is the creating thread), while its lock lives until its last
    thread (the output echoes) has gone: on a loaded box a rank saw torchrun gone with the lock
    still held (2026-12-02). So a parent gone waits up to PARENT_GRACE_S for the lock."""
    if (released := _released(fd)) is not None or _parent_gone() is None:
        return released
    deadline = time.monotonic() + PARENT_GRACE_S
    while time.monotonic() < deadline:
        time.sleep(POLL_S / 4)
        if (released := _released(fd)) is not None:
            return released
    return _parent_gone()


def _released(fd: int) -> str | None:
    """Why the launcher let go of the lifeline open on ``fd``, or None while it holds it.
    It wrote why before letting go (realrun/runfolder.py); after a kill -9 the file still
    says what the claim wrote: that the launcher is gone."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    return os.pread(fd, 4096, 0).decode(errors="replace").strip() or "interrupted: the launcher is gone"


def let_go_reason(environ=os.environ) -> str | None:
    """The launcher's reason when it has let go of (or lost) this rank's lifeline, else None.
    A rank whose collective fails because a peer has just answered the lifeline reports the
    launcher's reason first: the peer's exit is the effect, not the cause."""
    path = environ.get(LIFELINE_ENV)
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return "interrupted: the launcher's lifeline is gone"
    try:
        # None: the launcher still holds it and torchrun lives; the failure is the rank's own.
        return _why_gone(fd)
    finally:
        os.close(fd)
