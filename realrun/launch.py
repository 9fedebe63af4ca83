"""Start ``torchrun -m realrun <verb>`` on this machine (``ddplab probe/train --nproc N``)
and own it until it ends: whatever ends the launcher ends the run.

torch-free: the CLI imports it without paying for torch. One machine, so the
rendezvous is c10d on 127.0.0.1 and a free port, every store of torchrun's listens
on loopback alone (realrun/torchrun_loopback.py), and gloo is pinned to loopback
unless the user chose an interface.

How the run dies with its owner (docs/reliability.md):
- torchrun gets a parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``) and a
  session of its own, so a terminal's Ctrl-C reaches the launcher alone, which
  then stops the run in order instead of three tracebacks;
- torchrun starts each rank in a new session, out of reach of both, so the ranks
  watch the folder's lifeline (realrun/runfolder.py, realrun/lifeline.py);
- after torchrun ends, any rank file without an end record gets one saying why.
torchrun's whole output goes to ``<out>/<verb>.log``; the console gets the ranks'
lines (stdout to stdout, stderr to stderr) less torchrun's logging and its ~45-line
ChildFailedError traceback, then ddplab's diagnosis.
"""

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TextIO

from realrun.records import end_unfinished
from realrun.runfolder import RUN_ID_ENV, RunFolder
from realrun.signals import sigterm_as_ctrl_c

STOP_GRACE_S = 3.0  # ranks poll the lifeline every 0.2 s; they are gone well within this
PR_SET_PDEATHSIG = 1  # linux/prctl.h
LOOPBACK = "127.0.0.1"


def torchrun_command(verb: str, worker_args: list[str], nproc: int, log_dir: Path) -> list[str]:
    """torchrun for one machine: what ``--standalone`` sets (one node, c10d on a free port, a
    fresh run id), but on 127.0.0.1 rather than "localhost" (which may be ::1, or anything
    /etc/hosts says), with the node's address 127.0.0.1 for the ranks to meet at, and every
    store's server bound to it (realrun/torchrun_loopback.py): nothing listens beyond this
    machine. ``log_dir``: torchrun's own folder (per-rank error files); without one it makes
    /tmp/torchelastic_* and never removes it (torch/distributed/elastic/multiprocessing/api.py
    DefaultLogsSpecs), a folder a run."""
    return [
        sys.executable,
        "-m",
        "realrun.torchrun_loopback",
        "--nnodes=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={LOOPBACK}:0",
        f"--rdzv-id={uuid.uuid4()}",
        f"--local-addr={LOOPBACK}",
        f"--nproc-per-node={nproc}",
        f"--log-dir={log_dir}",
        "-m",
        "realrun",
        verb,
        *worker_args,
    ]


def die_with_parent() -> None:
    """``preexec_fn``: SIGKILL this child when the process that started it dies (Linux; elsewhere
    the ranks' lifeline alone ends the run, and torchrun follows its ranks)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took hold
        os._exit(1)


def run_env(folder: RunFolder, base: dict[str, str] | None = None) -> dict[str, str]:
    """The ranks' environment: the lifeline and one run id for every rank's records."""
    env = dict(os.environ if base is None else base)
    env.update(folder.lifeline.env())
    env[RUN_ID_ENV] = uuid.uuid4().hex[:12]
    return env


def run_local(
    verb: str,
    worker_args: list[str],
    nproc: int,
    folder: RunFolder,
    timeout_s: float | None = None,
    console: TextIO | None = None,
) -> int:
    """Run torchrun with ``nproc`` ranks writing into ``folder``; returns its exit code, 130
    after Ctrl-C (or SIGTERM), 124 past ``timeout_s``. The ranks' filtered output goes to
    ``console`` (both streams; the demo gives its stage log), else to this process's own."""
    env = run_env(folder)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # Share the cores instead of every rank spawning one thread per core.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    log_path = folder.path / f"{verb}.log"
    # Unbuffered bytes: on a full disk a write fails where it happens and the close has nothing
    # left to flush (issue 25, D16: a thread traceback, then "error: None: No space left").
    log = RunLog(log_path)
    with log, tempfile.TemporaryDirectory(prefix="ddplab-torchrun-") as torchrun_logs:
        # Where the run listens, for whoever audits it: the console keeps to the ranks' lines.
        where = f"torchrun's stores listen on {LOOPBACK} only; gloo on interface {env['GLOO_SOCKET_IFNAME']}"
        log.write(f"ddplab: {where} (every rank is on this machine)\n".encode())
        proc = subprocess.Popen(
            torchrun_command(verb, worker_args, nproc, Path(torchrun_logs)),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        # Once the launcher stops the run, the ranks' last words (a peer gone, mid-collective)
        # are its echo: the log keeps them, the console gets the launcher's one line.
        stopping = threading.Event()
        echoes = start_echo(proc, log, stopping, console)
        code, why = _wait(proc, timeout_s)
        if why:
            stopping.set()
            _stop(proc, folder, why)
        else:  # torchrun ended; if it was killed its ranks may still be writing: let them finish first
            _wait_ranks_gone(folder, STOP_GRACE_S)
        for echo in echoes:
            echo.join(timeout=5)
    code = proc.returncode if code is None else code
    if log.error:
        print(f"{verb}: warning: {log_path}: {log.error}; the log stops there", file=sys.stderr)
    # Every rank is gone by now, so no rank's write can interleave with these end records.
    end_unfinished(folder.path, verb, why or f"the rank ended without an end record (torchrun exit code {code})")
    return code


def _wait(proc: subprocess.Popen, timeout_s: float | None) -> tuple[int | None, str | None]:
    """Wait for torchrun. (None, None) when it ended by itself, else the launcher's exit code
    and why it stopped the run."""
    try:
        with sigterm_as_ctrl_c():
            proc.wait(timeout=timeout_s)
        return None, None
    except subprocess.TimeoutExpired:
        return 124, f"interrupted: the run exceeded its {timeout_s:.0f} s limit"
    except KeyboardInterrupt:
        return 130, "interrupted: Ctrl-C (or SIGTERM) to the launcher"


def _stop(proc: subprocess.Popen, folder: RunFolder, why: str) -> None:
    """Let the ranks go (they mark their records and exit), then end torchrun's session."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    try:
        folder.lifeline.let_go(why)
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        _wait_ranks_gone(folder, 0.0)
    finally:
        signal.signal(signal.SIGINT, previous)


def _rank_pids(folder: RunFolder) -> list[int]:
    """The pids this machine's ranks wrote in their meta records, those still realrun's."""
    pids = []
    for path in folder.path.glob("*-rank*.jsonl"):
        with open(path) as f:
            first = f.readline()
        try:
            meta = json.loads(first)
        except json.JSONDecodeError:
            continue
        pid = meta.get("pid")
        if meta.get("host") == socket.gethostname() and isinstance(pid, int) and _is_rank(pid):
            pids.append(pid)
    return pids


def _wait_ranks_gone(folder: RunFolder, grace_s: float) -> None:
    """Ranks live in sessions of their own: wait up to ``grace_s`` for them to end (they watch
    the lifeline and their parent, realrun/lifeline.py), then kill any left (one stuck in a call
    that holds the GIL) by the pid its meta record gives, and wait until they are gone, so that
    nothing writes to their files after this returns."""
    pids = _rank_pids(folder)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [p for p in pids if _is_rank(p)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 1.0  # SIGKILL takes effect at once; reaping by init may lag
    while pids and time.monotonic() < deadline and any(_is_rank(p) for p in pids):
        time.sleep(0.05)


def _is_rank(pid: int) -> bool:
    """Alive and, where /proc tells, a realrun process (not a new one that got the pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"realrun" in f.read()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False
    except OSError:
        return False
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


# torchrun's own noise: glog-style log lines of torch.distributed ("W1130 20:30:00.123 4242
# torch/distributed/..."), c10d's C++ warnings ("[W1130 ...]"), and the traceback plus
# failure table it prints when a rank fails. All of it stays in the log.
_TORCH_LOG = re.compile(r"^\[?[WIEF]\d{4} \d\d:\d\d:\d\d")
# Kineto's profiler_start/profiler_stop notices under `train --profile` (torch 2.13: its logger's
# USDT level, above ERROR, so no KINETO_LOG_LEVEL hides them and keeps Kineto's errors).
_KINETO_USDT = re.compile(r"^USDT:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")


class TorchrunFilter:
    """Which lines of torchrun's merged output the console sees."""

    def __init__(self):
        self.in_traceback = False
        self.rest_is_torchrun = False  # after ChildFailedError: its failure table to the end

    def show(self, line: str) -> bool:
        if self.rest_is_torchrun:
            return False
        if line.startswith("Traceback (most recent call last):"):
            self.in_traceback = True
            return False
        if self.in_traceback:
            if line[:1].isspace() or not line.strip():
                return False
            self.in_traceback = False  # the exception's own line
            if "ChildFailedError" in line or "SignalException" in line:
                self.rest_is_torchrun = True
                return False
            return True
        return not (_TORCH_LOG.match(line) or _KINETO_USDT.match(line))


class RunLog:
    """torchrun's whole output, kept while the disk takes it: the first failed write (a full
    disk) is remembered and ends the logging, never the run or its echo."""

    def __init__(self, path):
        self._f = open(path, "wb", buffering=0)
        self.error: str | None = None

    def write(self, data: bytes) -> None:
        if self.error is None:
            try:
                self._f.write(data)
            except OSError as e:
                self.error = e.strerror or str(e)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def start_echo(
    proc: subprocess.Popen, log, stopping: threading.Event | None = None, console: TextIO | None = None
) -> list[threading.Thread]:
    """Threads copying torchrun's stdout and stderr (``proc`` started with both piped) whole into
    ``log`` and, filtered (TorchrunFilter), onto this process's (or both onto ``console``); join
    them after ``proc`` ends."""
    lock = threading.Lock()
    stopping = stopping or threading.Event()
    sinks = (console, console) if console is not None else (sys.stdout, sys.stderr)
    echoes = [
        threading.Thread(target=_echo, args=(stream, sink, log, lock, stopping), daemon=True)
        for stream, sink in zip((proc.stdout, proc.stderr), sinks, strict=True)
    ]
    for echo in echoes:
        echo.start()
    return echoes


def _echo(stream, sink, log, lock: threading.Lock, stopping: threading.Event) -> None:
    """Copy one of torchrun's streams into the log, whole, and onto ``sink``, filtered (and
    not at all once ``stopping`` is set)."""
    keep = TorchrunFilter()
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        with lock:  # one lock for both streams: they may share one console
            log.write(raw)
            if keep.show(line) and not stopping.is_set():
                try:
                    sink.write(line)
                    sink.flush()
                except (BrokenPipeError, ValueError):  # `ddplab train | head`: keep logging
                    pass
