"""`ddplab doctor` and `ddplab launch`: the seed's section 2.2 on real machines.

Like commands.py, each returns what `--json` prints and otherwise prints for people.
"""

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from output.atomic import write_atomic
from output.ownfiles import check_target
from realrun import doctor as doc
from realrun import nodes
from realrun.launch import die_with_parent
from realrun.runfolder import LIFELINE, Lifeline


def doctor(args):
    d = doc.run(args)
    if not args.json:
        print("\n".join(doc.format_report(d)))
    # A script (or a launch wrapper) can then stop before a job that would hang at init.
    args.exit_code = 1 if d["problems"] else 0
    return d


def _this_node(args, host: str, port: int) -> dict:
    """This machine's doctor settings; a short port check: launch only needs the interface."""
    return doc.diagnose(
        host,
        port,
        connect_timeout_s=0.5,
        nnodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        verb_args=args.verb_args,
    )


def launch(args):
    host, port = nodes.parse_endpoint(args.master)
    nodes.check_counts(args.nodes, args.nproc_per_node)
    verb_args = nodes.check_verb_args(args.verb_args)
    if args.slurm:  # a new file or ddplab's own script, in a folder that exists (output/ownfiles.py)
        check_target(args.slurm, "--slurm")
    if args.exec:
        return _exec(args, host, port, verb_args)
    # When this machine is the master, the doctor fills node 0's interface for real.
    here = _this_node(args, host, port)
    ifaces = {}
    if here["master"]["local"] and not here["master"]["loopback"] and here["node"]["interface"]:
        ifaces[0] = here["node"]["interface"]
    commands = nodes.launch_commands(args.nodes, host, port, args.nproc_per_node, args.iface, verb_args, ifaces=ifaces)
    out = {"commands": commands, "slurm": None}
    if args.slurm:
        script = nodes.slurm_script(
            args.nodes, args.nproc_per_node, port, args.iface, verb_args, args.job_name, args.time
        )
        write_atomic(args.slurm, lambda tmp: (tmp.write_text(script), tmp.chmod(0o755)))
        out["slurm"] = str(args.slurm)
    if args.json:
        return out
    print(f"# {args.nodes} node(s); node 0 owns {host} and hosts the rendezvous (is_host=1).")
    if not args.iface:
        print("# No --iface: auto-detection chooses each node's NIC; `ddplab doctor --master")
        print(f"# {args.master}` on each node checks that choice and prints its exact line.")
    if any("<node " in c for c in commands):
        print("# Replace <node i address> with that machine's address on the shared network.")
    for i, c in enumerate(commands):
        print(f"\n# node {i}\n{c}")
    if args.slurm:
        print(f"\n# Slurm: wrote {args.slurm} (sbatch {args.slurm})")
    return out


def _exec(args, host: str, port: int, verb_args: list[str]) -> int:
    """Run this node's command with the doctor's settings; the exit code is torchrun's."""
    args.returns_code = True  # main() returns this instead of printing JSON
    here = _this_node(args, host, port)
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
        cmd = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
        return _run_logged(cmd, env, _log_path(verb_args))


def _log_path(verb_args: list[str]) -> Path:
    """This node's torchrun log: in the run folder (created if need be; shared by the nodes, so
    named by this host), or in the current folder for a verb run without --out."""
    from realrun.cli import PARSERS

    out = getattr(PARSERS[verb_args[0]](prog=verb_args[0]).parse_args(verb_args[1:]), "out", None)
    folder = Path(out) if out else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{verb_args[0]}-launch-{socket.gethostname()}.log"


def _run_logged(cmd: list[str], env: dict, log_path: Path) -> int:
    """torchrun with its whole output in ``log_path`` and, on the console, the ranks' lines
    less torchrun's logging and its ChildFailedError traceback (realrun/launch.py TorchrunFilter);
    a failure is then one line naming the log."""
    from realrun.launch import RunLog, start_echo

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
