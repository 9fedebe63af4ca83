"""Where a sweep's runs execute: local processes (the standard library's ProcessPoolExecutor),
or a Dask cluster (`pip install 'ddplab[dask]'`). Both run workflow/sweep.py's simulate_run on
each task and hand the results back in the order of the tasks, so the rows are the same
whichever engine ran them; neither schedules anything itself.

Dask rather than Ray: Dask's distributed scheduler is pure Python (two wheels of about a
megabyte each), and its LocalCluster starts worker processes from this process in seconds,
with no daemon to install or leave behind, which is also how the tests run it; Ray's wheel is
some 60 MB with a native raylet per node, a lot to carry for a grid of one-second simulations.
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed

DASK_HINT = "pip install 'ddplab[dask]'"
CONNECT_TIMEOUT_S = 10


class LocalEngine:
    """``workers`` processes on this machine; one runs in this process, with no pool to start."""

    name = "local"

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"--workers: must be >= 1, got {workers}")
        self.workers = self.parallelism = workers
        self.pool = None

    def __enter__(self):
        if self.workers > 1:
            # spawn: every worker starts from a clean interpreter, as Dask's do, on every
            # platform; nothing of this process (its threads, its state) is forked into them.
            self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc):
        if self.pool:
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


class DaskEngine:
    """A Dask cluster: the one at ``scheduler`` (an address such as tcp://10.0.0.5:8786), or a
    LocalCluster of ``workers`` single-threaded processes started here and closed afterwards."""

    name = "dask"

    def __init__(self, workers: int, scheduler: str | None = None):
        if workers < 1:
            raise ValueError(f"--workers: must be >= 1, got {workers}")
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
            try:
                self.client = Client(self.scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
            except (OSError, TimeoutError, ValueError, TypeError) as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(f"--scheduler {self.scheduler}: cannot connect ({first})") from None
            self.parallelism = max(1, sum(self.client.nthreads().values()))
        else:
            # One thread per process: the simulator is Python and numpy, which a second thread
            # in the same interpreter would only slow (the GIL). ":0": the scheduler's HTTP
            # server on a free port, never a clash (and a warning) with a dashboard on 8787.
            self.cluster = LocalCluster(
                n_workers=self.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
            )
            self.client = Client(self.cluster)
        return self

    def __exit__(self, *exc):
        if self.client:
            self.client.close()
        if self.cluster:
            self.cluster.close()
        return False

    def map(self, fn, tasks: list, on_done=None) -> list:
        from distributed import as_completed as dask_completed

        # pure=False: two equal tasks are still two runs (Dask would otherwise share one result).
        futures = self.client.map(fn, tasks, pure=False)
        for f in dask_completed(futures):
            f.result()
            if on_done:
                on_done()
        return self.client.gather(futures)


def make_engine(kind: str, workers: int, scheduler: str | None = None):
    if scheduler and kind != "dask":
        raise ValueError(f"--scheduler {scheduler}: only with --engine dask")
    if kind == "local":
        return LocalEngine(workers)
    if kind == "dask":
        return DaskEngine(workers, scheduler)
    raise ValueError(f"--engine: expected local or dask, got {kind!r}")
