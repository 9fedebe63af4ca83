"""`ddplab launch --exec`: this machine's torchrun line run with the doctor's settings
(realrun/doctor.py, realrun/nodes.py), its whole output logged, the ranks' lines echoed."""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from realrun import doctor as doc
from realrun import nodes
from realrun.cli import PARSERS
from realrun.launch import RunLog, die_with_parent, start_echo
from realrun.runfolder import LIFELINE, Lifeline


def this_node(master: str, nnodes: int, nproc_per_node: int, verb_args) -> tuple[str, int, list[str], dict]:
    """`ddplab launch`'s flags checked (a ValueError before anything starts): the master's host
    and port, the verb and its arguments, and this machine's doctor settings (a short port
    check: launch only needs the interface)."""
    host, port = nodes.parse_endpoint(master)
    nodes.check_counts(nnodes, nproc_per_node)
    verb_args = nodes.check_verb_args(verb_args)
    here = doc.diagnose(host, port, connect_timeout_s=0.5, nnodes=nnodes, nproc_per_node=nproc_per_node,
                        verb_args=verb_args)  # fmt: skip
    return host, port, verb_args, here


def run_this_node(args) -> int:
    """`ddplab launch --exec`: run this node's command with the doctor's settings; the exit code
    is torchrun's."""
    host, port, verb_args, here = this_node(args.master, args.nodes, args.nproc_per_node, args.verb_args)
    env_vars = nodes.env_for(args.iface) or here["settings"]["env"]
    argv = nodes.torchrun_argv(
        nnodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        rdzv_endpoint=nodes.endpoint(host, port),
        is_host=here["master"]["local"],
        local_addr=here["node"]["address"],
        verb_args=verb_args,
    )
    # The line below sets the interface, --local-addr and is_host, which is what these
    # findings call for; what it cannot fix (no route, a firewall) stays a warning.
    handled = ("gloo:", "nccl:", "hostname:", "rendezvous:") if env_vars else ("rendezvous:",)
    for p in here["problems"]:
        if p.startswith(handled):
            print(f"ddplab launch: auto-detection would fail, the line below avoids it: {p}", file=sys.stderr)
        else:
            print(f"ddplab launch: warning: {p}", file=sys.stderr)
    print(nodes.shell_line(env_vars, argv), file=sys.stderr, flush=True)
    # This node's ranks die with this process, as `ddplab train`'s do (realrun/launch.py). The
    # lifeline lives in a private folder: the run folder may be shared by every node.
    with tempfile.TemporaryDirectory(prefix="ddplab-launch-") as private:
        lifeline = Lifeline(Path(private) / LIFELINE)
        env = {**os.environ, **env_vars, **lifeline.env(), "PYTHONUNBUFFERED": "1"}
        # `torchrun` is `python -m torch.distributed.run`; this interpreter has our torch.
        # Its own folder in the private one, or torchrun leaves a /tmp/torchelastic_* behind.
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--log-dir={Path(private) / 'torchrun'}", *argv[1:]]
        return _run_logged(cmd, env, _log_path(verb_args))


def _log_path(verb_args: list[str]) -> Path:
    """This node's torchrun log: in the run folder (created if need be; shared by the nodes, so
    named by this host), or in the current folder for a verb run without --out."""
    out = getattr(PARSERS[verb_args[0]](prog=verb_args[0]).parse_args(verb_args[1:]), "out", None)
    folder = Path(out) if out else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{verb_args[0]}-launch-{socket.gethostname()}.log"


def _run_logged(cmd: list[str], env: dict, log_path: Path) -> int:
    """torchrun with its whole output in ``log_path`` and, on the console, the ranks' lines
    less torchrun's logging and its ChildFailedError traceback (realrun/launch.py TorchrunFilter);
    a failure is then one line naming the log."""
    with RunLog(log_path) as log:
        proc = subprocess.Popen(
            cmd, env=env, cwd=Path.cwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=die_with_parent
        )
        echoes = start_echo(proc, log)
        code = proc.wait()
        for echo in echoes:
            echo.join(timeout=5)
    if log.error:
        print(f"ddplab launch: warning: {log_path}: {log.error}; the log stops there", file=sys.stderr)
    if code != 0:
        print(f"ddplab launch: torchrun exited with code {code}; its whole output: {log_path}", file=sys.stderr)
    return code


def add_arguments(la: argparse.ArgumentParser) -> None:
    """`ddplab launch`'s flags."""
    la.add_argument("--nodes", type=int, required=True, help="machines in the job")
    la.add_argument("--master", required=True, metavar="ADDR:PORT", help="node 0's address and the port")
    la.add_argument("--nproc-per-node", type=int, default=1, help="processes (GPUs) per machine")
    la.add_argument("--iface", help="the interface every node shares (GLOO/NCCL_SOCKET_IFNAME)")
    la.add_argument("--slurm", type=Path, metavar="FILE", help="also write an sbatch script here")
    la.add_argument("--job-name", default="ddplab", help="Slurm job name")
    la.add_argument("--time", default="01:00:00", help="Slurm time limit")
    la.add_argument("--exec", action="store_true", help="run this machine's command; exit with its code")
    la.add_argument("--json", action="store_true", help="print JSON: commands (per node), slurm")
    la.add_argument("verb_args", nargs="*", metavar="VERB ARGS", help="after --: realrun verb (default train)")
