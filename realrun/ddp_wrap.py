"""DistributedDataParallel on the rank's compute device, including one the backend cannot take.

CUDA and CPU parameters are plain DDP (gloo reduces CUDA tensors too). MPS parameters over gloo
are not: torch 2.13's gloo takes cpu and cuda tensors only (distributed_c10d.py
``Backend.backend_capability``; pytorch/pytorch#160732, open), and besides the gradient buckets
DDP runs three kinds of collective on the parameters' own device: the shape check and the
weight broadcast at construction (``init_sync``), buffer broadcasts before each forward
(``forward_sync_buffers``), and the broadcast of the rebuilt bucket order before the second
forward (reducer.cpp ``sync_bucket_indices``). So for MPS: no init sync (every rank seeds the
same weights, realrun/train.py, and a CPU checksum proves them equal), no buffer sync (the
models' only buffers, RoPE tables, are computed alike on every rank), the first step's buckets
kept (no rebuild), and every bucket reduced through a CPU copy (realrun/hooks.py
``staged_allreduce``, which the caller registers when ``needs_staging``). This is the path the
seed's Mac needs; it was written without an Apple GPU at hand and is checked on CPU ranks forced
through it (tests/test_answers_calib.py); docs/gpu.md says what to run on a Mac.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def needs_staging(env) -> bool:
    """Whether gradients must go through the CPU: the compute device is not the comm device."""
    return env.comm_device != env.device


DEFAULT_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB


def wrap(
    model: torch.nn.Module, env, *, bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB, staged: bool | None = None, **kwargs
) -> DDP:
    """DDP of ``model`` (already on env.device); ``staged`` forces the MPS path (tests)."""
    staged = needs_staging(env) if staged is None else staged
    # torch 2.13 (DDP _BucketCapacityConfig.create) makes the first bucket 1 MiB only when
    # bucket_cap_mb is left unset; any value passed, even 25, makes every bucket that size.
    # sim/buckets.py models exactly this rule, so pass the cap only when it is not 25.
    if bucket_cap_mb != DEFAULT_BUCKET_CAP_MB:
        kwargs["bucket_cap_mb"] = bucket_cap_mb
    if not staged:
        ids = [env.device.index] if env.device.type == "cuda" else None
        return DDP(model, device_ids=ids, **kwargs)
    _check_same_weights(model)
    return _StagedDDP(model, init_sync=False, forward_sync_buffers=False, **kwargs)


class _KeepBuckets:
    """The reducer, except that it never rebuilds its buckets (a broadcast on the parameters'
    device); DDP's Python _pre_forward is its only caller of _rebuild_buckets."""

    def __init__(self, reducer):
        self._reducer = reducer

    def __getattr__(self, name):
        return getattr(self._reducer, name)

    def _rebuild_buckets(self) -> bool:
        return False


class _StagedDDP(DDP):
    def _pre_forward(self, *inputs, **kwargs):
        real = self.reducer
        self.reducer = _KeepBuckets(real)  # only for this call: C++ entry points need the real one
        try:
            return super()._pre_forward(*inputs, **kwargs)
        finally:
            self.reducer = real


def _check_same_weights(model: torch.nn.Module) -> None:
    """Without DDP's broadcast, the ranks must start equal: compare a checksum over CPU."""
    with torch.no_grad():
        total = sum(p.detach().cpu().double().sum() for p in model.parameters())  # MPS has no float64
        mine = torch.tensor([float(total)], dtype=torch.float64)
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if lo.item() != hi.item():
        raise RuntimeError(f"ranks start from different weights (checksums {lo.item()!r} to {hi.item()!r})")
