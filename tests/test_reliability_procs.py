"""Issue 25, process and launch: what a run or a sweep leaves behind when it is killed or
interrupted, what it listens on, and what reaches the console (docs/reliability.md).

Each test starts the real command (tests/procs.py: its own session, SIGINT at its default),
stops it in a finally block, and asserts on the process table, the exit code, stderr and
what the run wrote. Bounds are several times what was measured on the 2-core development
machine, so a second test suite running beside this one does not cross them."""

import os
import signal
import time
from pathlib import Path

import pytest
from procs import family, start, stop, wait_gone

LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
# Two runs of ~20 s each (h100-1024, 10,000 steps), one per worker: long enough that a sweep
# which waited for its runs in progress would take far longer than the bounds below.
LONG_SWEEP = ["sweep", "h100-1024", "--steps", "10000", "--seeds", "2", "--workers", "2", "--yes"]


def _workers(pid: int, timeout_s: float = 60) -> set[int]:
    """The sweep's processes once both pool workers have started (the resource tracker too)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = family(pid) - {pid}
        spawned = [k for k in kids if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()]
        if len(spawned) >= 2:
            time.sleep(3.0)  # the workers import and start their runs
            return family(pid) - {pid}
        time.sleep(0.2)
    raise AssertionError(f"no pool workers under {pid} within {timeout_s} s")


@LINUX_PROC
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_d1_a_killed_sweep_takes_its_workers_and_resource_tracker_with_it(tmp_path, sig):
    p = start(LONG_SWEEP, tmp_path)
    try:
        kids = _workers(p.pid)
        assert len(kids) >= 3, kids  # two workers and multiprocessing's resource tracker
        os.kill(p.pid, sig)
        p.wait(timeout=10)
        # Measured: gone within 0.1 s (the parent-death signal); the poll is every 0.5 s.
        assert wait_gone(kids, 5.0) == []
    finally:
        stop(p)


@LINUX_PROC
def test_d1_ctrl_c_ends_a_sweep_promptly_in_one_line(tmp_path):
    p = start(LONG_SWEEP, tmp_path)
    try:
        kids = _workers(p.pid)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)  # what a terminal sends to its foreground job, workers included
        assert p.wait(timeout=60) == 130
        took = time.monotonic() - t0
        assert wait_gone(kids, 5.0) == []
    finally:
        stop(p)
    # Measured: ~0.3 s (was 20-67 s: the runs in progress finished first).
    assert took < 5.0, took
    err = (tmp_path / "stderr.txt").read_text()
    assert err.splitlines()[-1:] == ["ddplab sweep: interrupted"] and "Traceback" not in err, err
