"""Process-group set-up under torchrun, device choice and timing discipline."""

import datetime
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    def info(self) -> dict:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "backend": self.backend,
            "device": str(self.device),
        }


def init(backend: str, timeout_s: float) -> DistEnv:
    """Join the process group torchrun set up (RANK, WORLD_SIZE, MASTER_ADDR in the env).

    ``timeout_s`` bounds every collective: a dead or hung peer turns into an error
    on the others instead of a silent hang (the seed: "treat timeouts as alarms").
    """
    if "RANK" not in os.environ:
        raise ValueError("not under torchrun: RANK is unset (use `ddplab probe/train` or torchrun -m realrun)")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("--backend nccl: CUDA is not available here (gloo works on CPU)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, backend, device)


def synchronize(device: torch.device) -> None:
    """Wait for queued device work before reading the clock (nanoGPT's timing discipline)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now(device: torch.device) -> float:
    synchronize(device)
    return time.perf_counter()
