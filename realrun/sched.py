"""Real-time scheduling for the collective sweep, so it times the link and not the tick.

Measured on this 2-core VM (Linux 6.18, HZ=250, PREEMPT_DYNAMIC): under the normal
scheduler, 25-50 % of small gloo allreduces take 2-8 ms instead of 0.1-0.2 ms,
whether the ranks are pinned or not, over loopback and over netlab. gloo hands each
collective across three threads (caller, ProcessGroupGloo worker, the TCP loop);
a woken thread that shares a core with a running one waits for the next 4 ms tick.
Under SCHED_FIFO the same sweep has no such tail (loopback, 100 iterations per
size: p75 0.10-0.14 ms against 0.3-3.9 ms), and the 10 Gbit netlab allreduce
reaches 1.00 of raw TCP instead of 0.82 (docs/validation.md). Two real hosts, each
with cores to spare, rarely share a core like this; two emulated hosts on two
cores always do.

Where the training runs' gloo threads do share a core with CPU compute (the emulated home
lab), they pay that tick and the sweep should too: docs/validation/measure.sh probes with
`--sched other` (docs/validation.md, fourth and fifth sittings: the 10 Gbit/s runs' 63 MB allreduce took 79 ms
against the FIFO sweep's 53). Only the collective sweep runs this way. Compute and the overlap probe stay under
the normal scheduler: at equal FIFO priority the compute thread would keep gloo's
threads off its core until it blocked, and gamma would measure that instead.
"""

import os
from contextlib import contextmanager

FIFO_PRIORITY = 1  # the lowest real-time priority: above every normal thread, below the kernel's


def _threads() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]


@contextmanager
def realtime(wanted: bool):
    """Run the block with every thread of this process under SCHED_FIFO when ``wanted``
    and permitted (root or CAP_SYS_NICE). Yields what was used, for the records:
    "fifo", or "other" with the reason. The previous policies come back on exit."""
    if not wanted:
        yield "other (--sched other)"
        return
    if not hasattr(os, "sched_setscheduler"):
        yield "other (no sched_setscheduler on this platform)"
        return
    saved = {}
    try:
        for tid in _threads():
            try:
                saved[tid] = (os.sched_getscheduler(tid), os.sched_getparam(tid))
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
            except ProcessLookupError:  # the thread ended while we walked the list
                continue
    except PermissionError:
        _restore(saved)
        yield "other (SCHED_FIFO needs root or CAP_SYS_NICE; small sizes may carry scheduler-tick stalls)"
        return
    try:
        yield "fifo"
    finally:
        _restore(saved)


def _restore(saved: dict) -> None:
    """Saved threads get their policy back. A thread started inside the block inherited
    FIFO from its creator and goes to the normal scheduler; other threads are left be."""
    for tid in _threads():
        try:
            if tid in saved:
                os.sched_setscheduler(tid, *saved[tid])
            elif os.sched_getscheduler(tid) == os.SCHED_FIFO:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except ProcessLookupError:  # ended meanwhile
            continue
