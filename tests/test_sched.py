"""realrun/sched.py: the collective sweep's threads go real-time and come back.

Needs root (or CAP_SYS_NICE) for SCHED_FIFO; CI runs as root. Without it the
context must say so and change nothing, which a child that drops to `nobody`
checks from root.
"""

import os
import subprocess
import sys
import threading

import pytest
from conftest import ROOT

from realrun.sched import FIFO_PRIORITY, realtime

root = pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root (CI runs as root)")


def policies() -> dict[int, int]:
    """Each live thread's policy. A thread that ends between the listing and the query (a
    library's helper thread; seen once under a loaded `make test`) is left out, not an error."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            out[int(t)] = os.sched_getscheduler(int(t))
        except ProcessLookupError:
            pass
    return out


@root
def test_every_thread_runs_fifo_inside_and_returns_after():
    started, stop = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), stop.wait()))
    born_inside = threading.Thread(target=stop.wait)  # started in the block: inherits FIFO
    worker.start()
    started.wait()
    before = policies()
    try:
        with realtime(True) as sched:
            assert sched == "fifo"
            inside = policies()
            assert worker.native_id in inside and set(inside.values()) == {os.SCHED_FIFO}
            assert os.sched_getparam(worker.native_id).sched_priority == FIFO_PRIORITY
            born_inside.start()
            assert os.sched_getscheduler(born_inside.native_id) == os.SCHED_FIFO
        after = policies()
        assert {t: p for t, p in after.items() if t in before} == before
        assert after[born_inside.native_id] == os.SCHED_OTHER and os.SCHED_FIFO not in before.values()
    finally:
        stop.set()
        worker.join()
        if born_inside.ident:
            born_inside.join()


def test_other_changes_nothing():
    before = policies()
    with realtime(False) as sched:
        now = policies()
        assert sched.startswith("other")
        assert {t: now[t] for t in before if t in now} == {t: p for t, p in before.items() if t in now}


@root
def test_without_permission_it_says_so_and_changes_nothing():
    child = (  # imports first: `nobody` may not read a checkout under a private directory
        "import os, resource\n"
        "from realrun.sched import realtime\n"
        "resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "with realtime(True) as s:\n"
        "    print(s); print(os.sched_getscheduler(0) == os.SCHED_OTHER)\n"
    )
    out = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=True)
    line, still_other = out.stdout.splitlines()
    assert line.startswith("other (SCHED_FIFO needs root") and still_other == "True"
