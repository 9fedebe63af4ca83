"""Start ``torchrun -m realrun <verb>`` on this machine (``ddplab probe/train --nproc N``).

torch-free: the CLI imports it without paying for torch. One machine, so the
rendezvous is torchrun's --standalone (c10d on localhost, a free port); gloo is
pinned to loopback unless the user chose an interface.
"""

import os
import subprocess
import sys


def torchrun_command(verb: str, worker_args: list[str], nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "realrun",
        verb,
        *worker_args,
    ]


def run_local(verb: str, worker_args: list[str], nproc: int, timeout_s: float | None = None) -> int:
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # Share the cores instead of every rank spawning one thread per core.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = torchrun_command(verb, worker_args, nproc)
    try:
        return subprocess.run(cmd, env=env, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        print(f"ddplab {verb}: torchrun did not finish within {timeout_s:.0f} s; stopped it", file=sys.stderr)
        return 124
