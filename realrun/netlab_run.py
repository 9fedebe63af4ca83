"""``ddplab netlab run``: one torchrun per emulated host, exactly as on real machines.

Each host's torchrun joins a c10d rendezvous at host 0's eth0 address. Host 0 is
told it is the rendezvous host (``--rdzv-conf is_host=1``) and every host passes
``--local-addr`` with its own address, and gloo is pinned to eth0
(``GLOO_SOCKET_IFNAME``): without these, inside namespaces the hostname resolves
to an address outside the host and discovery hangs with no error (docs/references.md
"Rendezvous inside network namespaces"; section 2.2 of the original article). The
switches that drop each fix exist to reproduce those hangs; the launcher's deadline
then turns a hang into a diagnosis.

Every host writes into the same run directory (namespaces share the filesystem),
so the records are gathered as they are written; host logs go to ``netlab/``.
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from realrun import netlab
from realrun.launch import TorchrunFilter, die_with_parent, run_env
from realrun.netlab import Lab, LabSpec
from realrun.records import end_unfinished
from realrun.runfolder import LIFELINE_ENV, RUN_ID_ENV, RunFolder
from realrun.signals import sigterm_as_ctrl_c


@dataclass(frozen=True, kw_only=True)
class Discovery:
    """The three settings that make discovery work inside namespaces (all on by default)."""

    gloo_ifname: bool = True
    local_addr: bool = True
    is_host: bool = True
    port: int = 29500


def host_argv(
    lab: Lab,
    host: int,
    verb: str,
    verb_args: list[str],
    d: Discovery,
    nproc: int = 1,
    run_env: dict | None = None,
    log_dir: Path | None = None,
) -> list[str]:
    """``run_env``: the lifeline and run id every rank gets (realrun/launch.py run_env);
    ``log_dir``: torchrun's own folder (else it makes a /tmp/torchelastic_* it never removes)."""
    spec = lab.spec
    env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.update({k: v for k, v in (run_env or {}).items() if k in (LIFELINE_ENV, RUN_ID_ENV)})
    if d.gloo_ifname:
        env["GLOO_SOCKET_IFNAME"] = "eth0"
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={spec.hosts}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={spec.address(0)}:{d.port}",
        f"--rdzv-id=ddplab-{spec.name}",
        "--max-restarts=0",
    ]
    if log_dir is not None:
        torchrun.append(f"--log-dir={log_dir}")
    if d.is_host:
        torchrun.append(f"--rdzv-conf=is_host={1 if host == 0 else 0}")
    if d.local_addr:
        torchrun.append(f"--local-addr={spec.address(host)}")
    torchrun += ["-m", "realrun", verb, *verb_args]
    # One core per emulated host, so two hosts do not fight for the same one.
    cpu = host % (os.cpu_count() or 1)
    return lab.host_command(host, torchrun, env=env, cpu=cpu)


def _started_ranks(out_dir: Path, verb: str) -> int:
    return len(list(out_dir.glob(f"{verb}-rank*.jsonl")))


def run(
    lab: Lab,
    verb: str,
    verb_args: list[str],
    folder: RunFolder,
    *,
    discovery: Discovery = Discovery(),
    start_timeout_s: float = 60.0,
    timeout_s: float = 1800.0,
    progress=print,
) -> tuple[int, list[str]]:
    """Run the verb on every host; returns (exit code, diagnosis lines).

    ``start_timeout_s``: how long discovery may take before no rank has started
    (written its meta record) counts as a hang. ``timeout_s``: the whole run.
    """
    out_dir = folder.path
    log_dir = out_dir / "netlab"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = run_env(folder, base={})
    argvs = [
        host_argv(lab, i, verb, verb_args, discovery, run_env=env, log_dir=log_dir / f"torchrun-host{i}")
        for i in range(lab.spec.hosts)
    ]
    (log_dir / "commands.json").write_text(json.dumps({"lab": lab.state(), "argv": argvs}, indent=2))
    procs = []
    ended = "interrupted: netlab run stopped (Ctrl-C, SIGTERM or an error of its own)"
    try:
        for i, argv in enumerate(argvs):
            log = open(log_dir / f"host{i}.log", "w")
            # Dies with this process (Linux's parent-death signal survives `ip netns exec`'s
            # exec); the ranks torchrun starts follow the run folder's lifeline.
            procs.append(
                subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
                )
            )
        t0 = time.monotonic()
        echo = _Tail(log_dir / "host0.log", progress)
        while True:
            echo.poll()
            codes = [p.poll() for p in procs]
            elapsed = time.monotonic() - t0
            if all(c is not None for c in codes):
                break
            if any(c not in (None, 0) for c in codes) and elapsed > 5:
                # One host failed; its peers exit within their collective timeout.
                _wait_all(procs, grace_s=30)
                break
            if _started_ranks(out_dir, verb) == 0 and elapsed > start_timeout_s:
                progress(f"netlab: no rank started within {start_timeout_s:.0f} s: discovery hangs; diagnosing")
                ended = f"interrupted: no rank started within {start_timeout_s:.0f} s"
                _kill_all(procs, folder, ended)
                return 124, diagnose(lab, discovery, log_dir)
            if elapsed > timeout_s:
                progress(f"netlab: the run exceeded {timeout_s:.0f} s; stopping it")
                ended = f"interrupted: the run exceeded its {timeout_s:.0f} s limit"
                _kill_all(procs, folder, ended)
                return 124, diagnose(lab, discovery, log_dir)
            time.sleep(0.2)
        echo.poll()
        code = next((c for c in codes if c), 0) if all(c is not None for c in codes) else 1
        ended = f"the rank ended without an end record (torchrun exit code {code})"
        return code, ([] if code == 0 else diagnose(lab, discovery, log_dir))
    finally:
        _kill_all(procs, folder, ended)
        end_unfinished(out_dir, verb, ended)


def run_in_lab(
    spec: LabSpec,
    verb: str,
    verb_args: list[str],
    folder: RunFolder,
    *,
    keep: bool = False,
    on_lab=lambda lab: None,
    **run_kw,
) -> tuple[int, list[str], Lab]:
    """``run`` in the lab ``spec`` names: the one up under that name, else a new one that is
    taken down again on any exit (Ctrl-C and SIGTERM included) unless ``keep``. ``on_lab``
    sees the lab before the run starts. Returns (exit code, diagnosis lines, the lab)."""
    existing = spec.name in {lab["name"] for lab in netlab.status()}
    lab = netlab.load(spec.name) if existing else netlab.up(spec)
    try:
        with sigterm_as_ctrl_c():  # a CI timeout or `kill` cleans up as Ctrl-C does
            on_lab(lab)
            code, diagnosis = run(lab, verb, verb_args, folder, **run_kw)
    finally:
        if not existing and not keep:
            netlab.down(spec.name)
    return code, diagnosis, lab


class _Tail:
    """Echo host 0's log as it grows (rank 0 prints the tables), less torchrun's logging and
    tracebacks (realrun/launch.py TorchrunFilter: the log keeps them, a failure's diagnosis
    names it) and torch's c10d warnings about reverse DNS, which every namespace without a
    resolver triggers."""

    def __init__(self, path: Path, progress):
        self.path, self.progress, self.offset, self.partial = path, progress, 0, ""
        self.keep = TorchrunFilter()

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            chunk = f.read()
            self.offset = f.tell()
        *lines, self.partial = (self.partial + chunk).split("\n")
        for line in lines:
            if self.keep.show(line + "\n") and "hostname of the client socket cannot be retrieved" not in line:
                self.progress(line)


def _wait_all(procs, grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)


def _kill_all(procs, folder: RunFolder, why: str) -> None:
    """Let the ranks go (they mark their records), then end every host's torchrun."""
    if any(p.poll() is None for p in procs):
        folder.lifeline.let_go(why)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    _wait_all(procs, grace_s=10)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def diagnose(lab: Lab, d: Discovery, log_dir: Path) -> list[str]:
    """Name the likely cause of a failed or hung run, from inside each host."""
    from realrun.netlab_diagnose import explain

    return explain(lab, d, log_dir)
