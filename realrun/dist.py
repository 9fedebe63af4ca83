"""Process-group set-up under torchrun, device choice and timing discipline."""

import datetime
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from realrun import cpu_alloc, device_choice


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device  # where this rank computes
    comm_device: torch.device  # where its collectives' tensors live (realrun/device_choice.py)
    requested: tuple[str, str] = ("auto", "auto")  # --backend, --device as asked
    cpu_malloc: str | None = None  # a CPU rank's heap (realrun/cpu_alloc.py); None on a GPU

    def info(self) -> dict:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "backend": self.backend,
            "device": str(self.device),
            "comm_device": str(self.comm_device),
            "backend_requested": self.requested[0],
            "device_requested": self.requested[1],
            "cpu_malloc": self.cpu_malloc,
        }


def init(backend: str, timeout_s: float, device: str = "auto") -> DistEnv:
    """Join the process group torchrun set up (RANK, WORLD_SIZE, MASTER_ADDR in the env).

    ``device`` and ``backend`` as realrun/device_choice.py resolves them: the compute device
    from this rank's machine, ``auto`` backends agreed by every rank through the rendezvous
    store before the group exists. ``timeout_s`` bounds every collective: a dead or hung peer
    turns into an error on the others instead of a silent hang (the seed: "treat timeouts as
    alarms").
    """
    if "RANK" not in os.environ:
        raise ValueError("not under torchrun: RANK is unset (use `ddplab probe/train` or torchrun -m realrun)")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    timeout = datetime.timedelta(seconds=timeout_s)
    store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
    try:
        compute = device_choice.compute_device(device, local_rank)
        mine = device_choice.local_backend(backend, compute, local_ranks)
        # A CPU rank stands in for a GPU: keep its heap as CUDA's caching allocator keeps memory.
        malloc = cpu_alloc.keep_freed_memory(local_ranks) if compute.type == "cpu" else None
    except ValueError as e:  # tell the peers at once, or they wait out the timeout for this rank
        store.set(f"ddplab/backend/{rank}", f"error: {e}")
        raise
    if compute.type == "cuda":
        torch.cuda.set_device(compute)
    chosen = agree_backend(store, rank, world, mine, asked=backend)
    warning = device_choice.cpu_while_gpu_warning(compute)
    if warning and local_rank == 0:
        print(f"realrun: rank {rank}: {warning}", file=sys.stderr, flush=True)
    dist.init_process_group(chosen, store=store, rank=rank, world_size=world, timeout=timeout)
    comm = device_choice.comm_device(chosen, compute)
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, chosen, compute, comm, (backend, device), malloc)


def agree_backend(store, rank: int, world: int, mine: str, *, asked: str) -> str:
    """The backend every rank runs: each posts what it can run (nccl or gloo) to the rendezvous
    store and reads everyone's; ``auto`` takes nccl only when all can. A rank that was asked
    for nccl where another cannot run it, or whose peer could not choose its device, fails
    here, naming that rank, instead of hanging."""
    store.set(f"ddplab/backend/{rank}", mine)
    can = {r: store.get(f"ddplab/backend/{r}").decode() for r in range(world)}  # get waits for the key
    failed = next((r for r, b in can.items() if b.startswith("error: ")), None)
    if failed is not None:
        raise ValueError(f"rank {failed} could not start: {can[failed].removeprefix('error: ')}")
    without = sorted(r for r, b in can.items() if b != "nccl")
    if not without:
        return "nccl"
    if asked == "nccl":
        raise ValueError(f"--backend nccl: rank(s) {', '.join(map(str, without))} cannot run NCCL (no CUDA device)")
    return "gloo"


def synchronize(device: torch.device) -> None:
    """Wait for queued device work before reading the clock (nanoGPT's timing discipline)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def now(device: torch.device) -> float:
    synchronize(device)
    return time.perf_counter()
