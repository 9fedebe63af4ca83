"""The torchrun command for each of N real machines, and the same job as a Slurm script.

torch-free, like the launcher. The commands follow the seed (section 2.2): every node
runs the same ``torchrun`` against one c10d rendezvous endpoint (rank 0's host runs
the TCP store, the others connect), with ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``
naming the wired interface so auto-detection cannot pick docker0, a VPN or Wi-Fi.
Two additions the seed lacks, both from torch's c10d rendezvous code:

- ``--rdzv-conf=is_host=1`` on the node that owns the endpoint address. Without it
  torchrun guesses by comparing the endpoint with what the hostname resolves to; a
  hostname mapped to 127.0.1.1 (common in /etc/hosts) makes the guess "no", every
  node then waits as a client for a store nobody hosts, and init hangs silently.
- ``--local-addr=<this node's address>``: the address a node publishes in the
  rendezvous; rank 0's becomes the workers' MASTER_ADDR. Left out, torchrun
  publishes ``socket.getfqdn()``, which other machines may not resolve.
"""

import ipaddress
import re
import shlex

from realrun import netrules

DEFAULT_PORT = 29500
"""torchrun's default rendezvous port (the seed's 29500)."""
DEFAULT_VERB_ARGS = ("train", "--out", "runs/multinode")
_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
# One printed torchrun line per node: 4x the largest cluster built so far (xAI Colossus, ~200k
# GPUs: 25k nodes of 8) and ~5 s of printing here; a count past it is a typo, and 10^8 nodes
# took minutes and gigabytes to print.
MAX_NODES = 100_000
# Processes on one machine, each a rank with its own device or cores: machines have 8-16 GPUs
# and at most a few hundred hardware threads.
MAX_NPROC_PER_NODE = 1024


def parse_endpoint(text: str, flag: str = "--master") -> tuple[str, int]:
    """``"10.0.0.1:29500"``, ``"node0:29500"`` or ``"[fe80::1]:29500"`` -> (host, port)."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^\s:\[\]]+):(\d+)", text.strip())
    if not m:
        raise ValueError(f"{flag}: expected ADDR:PORT like 192.168.1.10:29500, got {text!r}")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 1 <= port <= 65535:
        raise ValueError(f"{flag}: port must be in 1..65535, got {port} in {text!r}")
    if m.group(1):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{flag}: {host!r} in {text!r} is not an IPv6 address") from None
    return host, port


def endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_counts(nodes: int, nproc_per_node: int, flag_nodes: str = "--nodes") -> None:
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"{flag_nodes}: 1 to {MAX_NODES:,} nodes (4x the largest cluster built), got {nodes}")
    if not 1 <= nproc_per_node <= MAX_NPROC_PER_NODE:
        raise ValueError(f"--nproc-per-node: 1 to {MAX_NPROC_PER_NODE} processes per node, got {nproc_per_node}")


def check_verb_args(verb_args: list[str] | tuple[str, ...]) -> list[str]:
    """The realrun verb and its arguments (``train --out runs/x``); default DEFAULT_VERB_ARGS.
    Checked here with the workers' own parser, so a typo fails before N machines start."""
    from realrun.cli import PARSERS, check_args

    args = list(verb_args) or list(DEFAULT_VERB_ARGS)
    if args[0] not in PARSERS:
        raise ValueError(f"verb after --: one of {', '.join(PARSERS)}, got {args[0]!r}")
    parser = PARSERS[args[0]](prog=f"-- {args[0]}")

    def error(message):
        raise ValueError(f"{parser.prog}: {message}")

    parser.error = error  # a ValueError (one line, exit 2 in the CLI) instead of SystemExit
    # The ranks run on the nodes, whose GPUs this machine may not have: their workers
    # check precision and compile support on their own hardware.
    check_args(args[0], parser.parse_args(args[1:]), this_machine=False)
    return args


def env_for(iface: str | None) -> dict[str, str]:
    """Both libraries on one named interface (gloo takes a list, NCCL a prefix: one name suits both)."""
    return {"GLOO_SOCKET_IFNAME": iface, "NCCL_SOCKET_IFNAME": iface} if iface else {}


def torchrun_argv(
    *,
    nnodes: int | str,
    nproc_per_node: int,
    rdzv_endpoint: str,
    is_host: bool,
    local_addr: str | None,
    verb_args: list[str],
    rdzv_id: str | None = None,
) -> list[str]:
    """``torchrun ... -m realrun <verb> ...`` as argv (first item ``torchrun``)."""
    argv = [
        "torchrun",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rdzv_endpoint}",
    ]
    if rdzv_id:
        argv.append(f"--rdzv-id={rdzv_id}")
    if is_host:
        argv.append("--rdzv-conf=is_host=1")
    if local_addr:
        argv.append(f"--local-addr={local_addr}")
    return argv + ["-m", "realrun", *verb_args]


def shell_line(env: dict[str, str], argv: list[str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])


def launch_commands(
    nodes: int,
    master: str,
    port: int,
    nproc_per_node: int,
    iface: str | None,
    verb_args: list[str],
    *,
    local_addrs: dict[int, str] | None = None,
    ifaces: dict[int, str] | None = None,
) -> list[str]:
    """One shell line per node; node 0 is the rendezvous host (owns ``master``).

    ``local_addrs``/``ifaces``: what `ddplab doctor` found for particular nodes; the
    others get ``--local-addr=<node i address>`` to fill in, and ``iface`` (or, when
    None, no variables: auto-detection, which `ddplab doctor` on that node checks).
    """
    check_counts(nodes, nproc_per_node)
    args = check_verb_args(verb_args)
    local_addrs, ifaces = local_addrs or {}, ifaces or {}
    lines = []
    for i in range(nodes):
        addr = local_addrs.get(i) or (master if i == 0 else None)
        argv = torchrun_argv(
            nnodes=nodes,
            nproc_per_node=nproc_per_node,
            rdzv_endpoint=endpoint(master, port),
            is_host=i == 0,
            local_addr=addr,
            verb_args=args,
        )
        line = shell_line(env_for(ifaces.get(i) or iface), argv)
        if addr is None:  # a placeholder for the user to replace, left unquoted on purpose
            line = line.replace(" -m realrun ", f" --local-addr=<node {i} address> -m realrun ", 1)
        lines.append(line)
    return lines


def _on_the_gpus(args: list[str]) -> list[str]:
    """The verb's arguments for a job that asks for GPUs: every rank computes on its own GPU
    (``--device cuda``) and NCCL reduces (``--backend nccl``), unless the user chose either;
    a CPU rank there would leave the GPUs the job pays for idle."""
    verb, rest = args[0], list(args[1:])
    named = {a.split("=", 1)[0] for a in rest}
    if "--backend" not in named:
        rest += ["--backend", "nccl"]
    if "--device" not in named:
        rest += ["--device", "cuda"]
    return [verb, *rest]


def slurm_script(
    nodes: int,
    nproc_per_node: int,
    port: int,
    iface: str | None,
    verb_args: list[str],
    job_name: str = "ddplab",
    time_limit: str = "01:00:00",
) -> str:
    """An sbatch script: one torchrun agent per node (srun), the same c10d rendezvous."""
    check_counts(nodes, nproc_per_node)
    args = check_verb_args(verb_args)
    if not 1 <= port <= 65535:
        raise ValueError(f"--master: port must be in 1..65535, got {port}")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", job_name):
        raise ValueError(f"--job-name: letters, digits and _.+- only, got {job_name!r}")
    if not _SLURM_TIME.match(time_limit):
        raise ValueError(f"--time: a Slurm time like 01:00:00, 90 or 1-12:00:00, got {time_limit!r}")
    args = _on_the_gpus(args)
    argv = torchrun_argv(
        nnodes="$SLURM_NNODES",
        nproc_per_node=nproc_per_node,
        rdzv_endpoint=f"$MASTER_ADDR:{port}",
        is_host=False,
        local_addr=None,
        verb_args=args,
        rdzv_id="$SLURM_JOB_ID",
    )
    # $VARS must expand in the batch shell: quote only the realrun arguments.
    k = argv.index("-m")
    line = " ".join(argv[:k]) + " " + shlex.join(argv[k:])
    env = ""
    if iface:
        env = (
            "# The interface every node shares (the wrong NIC hangs init with no error).\n"
            "# On InfiniBand/RoCE clusters NCCL_IB_HCA picks the RDMA NICs; this names the socket one.\n"
            f"export NCCL_SOCKET_IFNAME={shlex.quote(iface)}\n"
            f"export GLOO_SOCKET_IFNAME={shlex.quote(iface)}\n"
        )
    return f"""#!/bin/bash
# ddplab: {nodes} node(s) x {nproc_per_node} GPU rank(s), torchrun's c10d rendezvous under Slurm:
# the same commands as on a LAN, with the allocation supplying the addresses.
#SBATCH --job-name={job_name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={nproc_per_node}
#SBATCH --time={time_limit}
set -euo pipefail

# The first node of the allocation hosts the rendezvous store. torchrun recognises it
# by name (the endpoint is its hostname), so unlike on a home LAN no is_host flag and
# no --local-addr are needed: cluster hostnames resolve to the nodes' addresses.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR
{env}# To see the interface and transport NCCL chose, per rank: export NCCL_DEBUG=INFO

# One task per node: srun starts one torchrun agent on each, which starts the workers.
# --rdzv-id keeps two jobs on the same nodes from joining each other's rendezvous.
srun {line}
"""


def launch_text(n_nodes: int, master: str, host: str, iface: str | None, commands: list[str], slurm) -> list[str]:
    """`ddplab launch` for people: what node 0 does, what to replace, each node's line, the script."""
    out = [f"# {n_nodes} node(s); node 0 owns {host} and hosts the rendezvous (is_host=1)."]
    if n_nodes > 1 and netrules.is_loopback_host(host):  # as `ddplab doctor` notes: no other machine reaches it
        out.append(f"# {host} is loopback: every node must run on this machine (a test); for {n_nodes} machines")
        out.append("# give --master node 0's address on the network they share.")
    if not iface:
        out.append("# No --iface: auto-detection chooses each node's NIC; `ddplab doctor --master")
        out.append(f"# {master}` on each node checks that choice and prints its exact line.")
    elif n_nodes > 1:  # interface names differ between systems: a Mac's en0, a Linux box's eth0 or enp*
        out.append(f"# --iface {iface} on every node; a node whose interface has another name (a Mac's en0)")
        out.append(f"# takes its own line from `ddplab doctor --master {master}` run there.")
    if any("<node " in c for c in commands):
        out.append("# Replace <node i address> with that machine's address on the shared network.")
    for i, c in enumerate(commands):
        out.append(f"\n# node {i}\n{c}")
    if slurm:
        out.append(f"\n# Slurm: wrote {slurm} (sbatch {slurm})")
    return out
