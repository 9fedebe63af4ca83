"""`ddplab launch`'s journey without --exec: the torchrun line for each of N machines, with this
machine's interface filled in by the doctor when it is the master (realrun/doctor.py), and with
``slurm`` an sbatch script written whole (output/atomic.py).

    out = launch_commands("10.0.0.1:29500", nodes_n=2, nproc_per_node=8, verb_args=["train"])
    out["commands"][0]  # node 0's shell line
"""

from pathlib import Path

from output.atomic import write_atomic
from output.ownfiles import check_target
from realrun import nodes
from realrun.launch_node import this_node


def launch_commands(
    master: str,
    *,
    nodes_n: int,
    nproc_per_node: int = 1,
    iface: str | None = None,
    verb_args: list[str] | None = None,
    slurm: Path | None = None,
    job_name: str = "ddplab",
    time: str = "01:00:00",
) -> dict:
    """{"commands": one shell line per node, "slurm": the script's path or None}. Bad input (the
    endpoint, the counts, the verb, a --slurm path that is not ours to replace) is a ValueError
    before anything is written."""
    host, port, verb_args, here = this_node(master, nodes_n, nproc_per_node, verb_args or [])
    if slurm:  # a new file or ddplab's own script, in a folder that exists (output/ownfiles.py)
        check_target(slurm, "--slurm")
    # When this machine is the master, the doctor fills node 0's interface for real.
    ifaces = {}
    if here["master"]["local"] and not here["master"]["loopback"] and here["node"]["interface"]:
        ifaces[0] = here["node"]["interface"]
    commands = nodes.launch_commands(nodes_n, host, port, nproc_per_node, iface, verb_args, ifaces=ifaces)
    out = {"commands": commands, "slurm": None}
    if slurm:
        script = nodes.slurm_script(nodes_n, nproc_per_node, port, iface, verb_args, job_name, time)
        write_atomic(slurm, lambda tmp: (tmp.write_text(script), tmp.chmod(0o755)))
        out["slurm"] = str(slurm)
    return out


def launch_lines(out: dict, *, master: str, nodes_n: int, iface: str | None) -> list[str]:
    """The commands and the script as people read them (realrun/nodes.py launch_text)."""
    host, _ = nodes.parse_endpoint(master)
    return nodes.launch_text(nodes_n, master, host, iface, out["commands"], out["slurm"])
