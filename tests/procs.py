"""Processes a test starts, and the guarantee that none outlives the suite.

Every process a test starts (the ddplab command and whatever it starts: torchrun, ranks, pool
workers, Dask's) inherits MARK in its environment, which conftest.py sets for the whole
session; a rank in a session of its own or a worker reparented to init still carries it, so
the session's end can find any that survived (conftest.py's pytest_sessionfinish). ``start``
gives a test a child it can stop for sure: its own session (a process group to kill whole),
SIGINT at its default whatever the suite inherited, and ``stop`` in the test's finally block.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MARK = "DDPLAB_TEST_SESSION"  # its value: the pytest process's pid
ROOT = Path(__file__).resolve().parents[1]
STOP_GRACE_S = 5.0


def _as_a_terminal_job() -> None:
    """Ctrl-C's default action, as a job started from a terminal has it: a test run started in the
    background by a shell (`make test &`, nohup) ignores SIGINT, and an ignored signal stays
    ignored across exec, so ddplab would never see the Ctrl-C a test sends. The signal mask is
    cleared too, for a suite started from a thread that blocked it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def start(argv: list[str], log_dir: Path, **kw) -> subprocess.Popen:
    """``python -m ddplab ARGV`` in a session of its own (as a shell job is), output to files in
    ``log_dir`` so no pipe fills."""
    return subprocess.Popen(
        [sys.executable, "-m", "ddplab", *argv],
        cwd=ROOT,
        stdout=open(log_dir / "stdout.txt", "w"),
        stderr=open(log_dir / "stderr.txt", "w"),
        start_new_session=True,
        preexec_fn=_as_a_terminal_job,
        **kw,
    )


def stop(p: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """For a test's finally block: SIGTERM to ``p``'s process group, SIGKILL after ``grace_s``,
    then reap it. What it started in sessions of its own is the session check's to find."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        if p.poll() is not None:
            break
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
    try:  # the group may hold more than the leader: a pool worker, a resource tracker
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent to reap it."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def marked(session: str) -> dict[int, str]:
    """Live processes carrying MARK=session: pid -> its command line."""
    out = {}
    needle = f"{MARK}={session}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0") and alive(int(d.name)):
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


def children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def family(pid: int) -> set[int]:
    """``pid`` and every descendant now alive."""
    kids, out, todo = children(), set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += kids.get(p, [])
    return out


def wait_gone(pids, timeout_s: float) -> list[int]:
    """The pids still alive after up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _socket_inodes(pids) -> set[str]:
    out = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    out.add(target[8:-1])
        except OSError:
            continue
    return out


def _address(hex_addr: str) -> str:
    """/proc/net/tcp's address (little-endian words) in the usual notation."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    import ipaddress

    return str(ipaddress.ip_address(words))


def listening(pids) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the processes ``pids`` listen on (Linux /proc)."""
    inodes, out = _socket_inodes(pids), set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                addr, port = local.split(":")
                out.add((_address(addr), int(port, 16)))
    return out
