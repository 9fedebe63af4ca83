"""Where a sweep's runs execute: local processes (the standard library's ProcessPoolExecutor),
or a Dask cluster (`pip install 'ddplab[dask]'`). Both run workflow/sweep.py's simulate_run on
each task and hand the results back in the order of the tasks, so the rows are the same
whichever engine ran them; neither schedules anything itself.

Dask rather than Ray: Dask's distributed scheduler is pure Python (two wheels of about a
megabyte each), and its LocalCluster starts worker processes from this process in seconds,
with no daemon to install or leave behind, which is also how the tests run it; Ray's wheel is
some 60 MB with a native raylet per node, a lot to carry for a grid of one-second simulations.
"""

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

DASK_HINT = "pip install 'ddplab[dask]'"
CONNECT_TIMEOUT_S = 10
LOOPBACK_ANY_PORT = "127.0.0.1:0"
CONNECT_GRACE_S = 5  # past Dask's own timeout, before the connection is given up here
# A local worker's memory before its first run: a spawned interpreter with sim imported, 42.5 MB
# resident as measured here; the sweep's memory check adds it per worker.
WORKER_BYTES = 45e6
# Worker processes on this machine, per core: more only share the same cores (no faster) and
# each costs WORKER_BYTES.
WORKERS_PER_CORE = 4


def check_workers(workers: int) -> None:
    """--workers for processes started here: at least 1, at most WORKERS_PER_CORE per core."""
    cores = os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers: must be >= 1, got {workers}")
    if workers > WORKERS_PER_CORE * cores:
        raise ValueError(
            f"--workers: at most {WORKERS_PER_CORE * cores} on this machine ({WORKERS_PER_CORE} per core; more"
            f" share the same {cores} cores and only cost memory), got {workers}"
        )


PARENT_POLL_S = 0.5  # a worker's check that the sweep that started it is still there
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _worker_start(parent: int) -> None:
    """Each local worker's initializer: die with the sweep, however it ends, and leave Ctrl-C to it.

    A terminal's Ctrl-C reaches the whole foreground group, workers too; the sweep alone answers
    it (by killing the workers, LocalEngine.__exit__), so a worker ignores it rather than print
    a traceback. A sweep killed by SIGKILL or SIGTERM runs no cleanup at all: on Linux the kernel
    sends each worker SIGKILL when the thread that started it dies (PR_SET_PDEATHSIG), and
    everywhere a daemon thread ends the worker once its parent is gone (the kernel then gives it
    a new parent). With the workers gone, multiprocessing's resource tracker reads the end of
    its pipe and exits too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), name="ddplab-parent", daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:  # checked first: the parent may have died before prctl took hold
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers now, runs in progress included: shutdown() would wait for them
    (20-67 s of a big grid's runs after a Ctrl-C). Python 3.14 has kill_workers(); before it the
    pool's own table of processes is the only way to them."""
    kill = getattr(pool, "kill_workers", None)
    if kill is not None:
        kill()
        return
    for process in list((pool._processes or {}).values()):
        process.kill()


class LocalEngine:
    """``workers`` processes on this machine; one runs in this process, with no pool to start."""

    name = "local"

    def __init__(self, workers: int):
        check_workers(workers)
        self.workers = self.parallelism = workers
        self.pool = None

    def __enter__(self):
        if self.workers > 1:
            # spawn: every worker starts from a clean interpreter, as Dask's do, on every
            # platform; nothing of this process (its threads, its state) is forked into them.
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_start,
                initargs=(os.getpid(),),
            )
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.pool:
            if exc_type is not None:  # Ctrl-C, a failed run: what is still running is not wanted
                _kill_workers(self.pool)
            self.pool.shutdown(cancel_futures=True)
        return False

    def map(self, fn, tasks: list, on_done=None) -> list:
        if self.pool is None:
            out = []
            for task in tasks:
                out.append(fn(task))
                if on_done:
                    on_done()
            return out
        futures = [self.pool.submit(fn, task) for task in tasks]
        for f in as_completed(futures):
            f.result()  # a failed run fails the sweep now, not after the rest
            if on_done:
                on_done()
        return [f.result() for f in futures]


HEARTBEAT_FAILURE = "Failed to communicate with scheduler during heartbeat"  # distributed/worker.py


def _not_a_heartbeat_failure(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(HEARTBEAT_FAILURE)


def quiet_heartbeat_failure() -> None:
    """Run on each of a LocalCluster's workers (Client.run): drop the one message a worker logs
    when its heartbeat finds the scheduler gone. A scheduler on loopback that this process
    started and stops is gone only at the end of the sweep, when that is no news; a task's
    error still reaches the sweep through its future, and every other message is kept."""
    logging.getLogger("distributed.worker").addFilter(_not_a_heartbeat_failure)


class DaskEngine:
    """A Dask cluster: the one at ``scheduler`` (an address such as tcp://10.0.0.5:8786), or a
    LocalCluster of ``workers`` single-threaded processes started here and closed afterwards."""

    name = "dask"

    def __init__(self, workers: int, scheduler: str | None = None, dashboard: str | None = None):
        if dashboard and scheduler:
            raise ValueError(f"--dashboard {dashboard}: the cluster at --scheduler serves its own (its scheduler's)")
        self.dashboard = dashboard
        if not scheduler:  # a LocalCluster's processes are this machine's; a cluster's are its own
            check_workers(workers)
        self.workers, self.scheduler = workers, scheduler
        # A cluster's size is known only once connected to it; a local one's is ours to choose.
        self.parallelism = None if scheduler else workers
        self.cluster = self.client = None

    def __enter__(self):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ValueError(f"--engine dask: Dask is not installed here; {DASK_HINT}") from None
        if self.scheduler:
            self.client = _connect(Client, self.scheduler)
            self.parallelism = max(1, sum(self.client.nthreads().values()))
        else:
            # One thread per process: the simulator is Python and numpy, which a second thread
            # in the same interpreter would only slow (the GIL). LocalCluster's scheduler and
            # workers listen on loopback; its dashboard (an HTTP server Dask always starts), which
            # ":0" put on every interface, is on loopback too unless the user names an address,
            # on a free port so that it never clashes (with a warning) with another on 8787.
            # Dask's workers log to the console they inherit; a Ctrl-C, which reaches them too,
            # had each print warnings about its cancelled task. Errors still show.
            os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
            with _sigint_blocked():
                self.cluster = LocalCluster(
                    n_workers=self.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=self.dashboard or LOOPBACK_ANY_PORT,
                )
                self.client = Client(self.cluster)
            # Our own workers only: on a Ctrl-C the scheduler may close while a worker's
            # heartbeat is in flight, and that worker logs the failure at ERROR (once in ~10
            # runs of tests/test_reliability_procs.py's Ctrl-C test): the teardown's echo.
            self.client.run(quiet_heartbeat_failure)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self._close()
            return False
        # Ctrl-C or a failed run: what Dask says while it tears down runs in progress (cancelled
        # tasks, workers killed after their grace, a CancelledError traceback from the nanny) is
        # the echo of that, not news; the sweep's own one line says what happened.
        quiet = logging.getLogger("distributed")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL + 1)
        try:
            self._close()
        except BaseException:  # noqa: BLE001 - a second Ctrl-C, or a teardown error: the first cause wins
            pass
        finally:
            quiet.setLevel(level)
        return False

    def _close(self) -> None:
        if self.client:
            self.client.close()
        if self.cluster:
            self.cluster.close()

    def listens(self) -> str:
        """Where this engine's servers listen, for the console: a LocalCluster's are ours."""
        if self.cluster is None:
            return f"dask: the cluster at {self.scheduler}"
        where = f"dask: a LocalCluster of {self.workers} worker(s), scheduler at {self.cluster.scheduler_address}"
        where += f", dashboard at {self.client.dashboard_link}"
        return where if self.dashboard else f"{where} (this machine only; --dashboard HOST:PORT to choose)"

    def map(self, fn, tasks: list, on_done=None) -> list:
        from distributed import as_completed as dask_completed

        # pure=False: two equal tasks are still two runs (Dask would otherwise share one result).
        futures = self.client.map(fn, tasks, pure=False)
        for f in dask_completed(futures):
            f.result()
            if on_done:
                on_done()
        return self.client.gather(futures)


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT blocked in this thread while a LocalCluster starts, so that what starts in the
    meantime never sees a Ctrl-C: a signal mask is inherited by every thread created under it
    (the cluster's event loop, the threads that spawn each worker process) and kept across
    fork and exec. A terminal's Ctrl-C reaches the whole foreground group, and each Dask worker
    process answered it with a KeyboardInterrupt traceback from its nanny's event loop (issue
    25 D11); the sweep alone answers it, by closing the cluster. A Ctrl-C during the start-up
    stays pending and is delivered here once the mask is restored."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no masks; Ctrl-C is per console there
        yield
        return
    # multiprocessing starts its resource tracker with SIGINT blocked, then unblocks it in the
    # thread that asked (whatever the mask was before): started first, outside the window.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _connect(client_class, address: str):
    """A Client of the scheduler at ``address``, or one line saying why not, within
    CONNECT_TIMEOUT_S and a grace: Dask's own timeout covers the TCP connect but not the
    handshake after it, so a server that accepts and never answers held the sweep for good, and
    one that answers something else (an HTTP server) had Dask decode its bytes as a frame
    length (a 3 EiB numpy allocation, a 42-line traceback). The attempt runs in a daemon
    thread; one still stuck at the deadline is left to the interpreter's exit."""
    box: dict = {}

    def attempt():
        try:
            box["client"] = client_class(address, timeout=f"{CONNECT_TIMEOUT_S}s")
        except BaseException as e:  # whatever the reply made Dask raise (MemoryError included)
            box["error"] = e

    thread = threading.Thread(target=attempt, name="ddplab-dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S + CONNECT_GRACE_S)
    if "client" in box:
        return box["client"]
    if thread.is_alive():
        why = f"no Dask scheduler answered within {CONNECT_TIMEOUT_S} s"
    else:
        e = box["error"]
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if isinstance(e, (OSError, TimeoutError)):
            why = f"cannot connect ({first})"
        else:
            why = f"what answered is not a Dask scheduler ({type(e).__name__}: {first})"
    raise ValueError(f"--scheduler {address}: {why}; expected a Dask scheduler's address, e.g. tcp://HOST:8786")


def make_engine(kind: str, workers: int, scheduler: str | None = None, dashboard: str | None = None):
    if scheduler and kind != "dask":
        raise ValueError(f"--scheduler {scheduler}: only with --engine dask")
    if dashboard and kind != "dask":
        raise ValueError(f"--dashboard {dashboard}: only with --engine dask")
    if kind == "local":
        return LocalEngine(workers)
    if kind == "dask":
        return DaskEngine(workers, scheduler, dashboard)
    raise ValueError(f"--engine: expected local or dask, got {kind!r}")
