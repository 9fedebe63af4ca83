"""DDP gradient buckets, built the way PyTorch's reducer builds them.

After the first iteration DDP rebuilds its buckets in the order gradients became
ready (torch/csrc/distributed/c10d/reducer.cpp ``rebuild_buckets`` ->
``compute_bucket_assignment_by_size``): tensors are appended to the open bucket
and the bucket is closed as soon as its size reaches the limit, so a bucket can
exceed the cap by up to one tensor. The limits are ``[first, bucket_cap_mb]``:
with the default 25 MiB cap the first is 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``),
so communication starts early in backward; with a cap the user set, torch 2.13 uses
the cap for the first bucket too (``_BucketCapacityConfig.create``).
"""

from typing import NamedTuple

from sim.transformer import GPT2Shape, gradient_ready_order, param_tensors

MIB = 1024 * 1024


class Bucket(NamedTuple):
    index: int
    params: tuple[str, ...]
    numel: int
    size_bytes: int
    ready_fraction: float  # of the backward pass, when its last gradient is produced
    powersgd_numel: int  # elements sent by PowerSGD at the configured rank (see below)


def build_buckets(
    shape: GPT2Shape,
    seq_len: int,
    *,
    bytes_per_grad: int,
    bucket_cap_mb: float,
    first_bucket_mb: float,
    powersgd_rank: int = 1,
    ready_order: list[tuple[str, float]] | None = None,
) -> list[Bucket]:
    """Buckets in launch order (bucket 0 is reduced first). ``ready_order``: (parameter,
    ready fraction) in the order gradients became ready, measured; default from FLOPs."""
    if bucket_cap_mb <= 0:
        raise ValueError(f"training.bucket_cap_mb must be > 0, got {bucket_cap_mb}")
    if first_bucket_mb <= 0:
        raise ValueError(f"training.first_bucket_mb must be > 0, got {first_bucket_mb}")
    shapes = {t.name: t.shape for t in param_tensors(shape)}
    limits = [int(first_bucket_mb * MIB), int(bucket_cap_mb * MIB)]
    buckets: list[Bucket] = []
    open_names: list[str] = []
    open_bytes = 0
    open_ready = 0.0

    def close():
        nonlocal open_names, open_bytes, open_ready
        numel = sum(_numel(shapes[n]) for n in open_names)
        psgd = sum(_powersgd_numel(shapes[n], powersgd_rank) for n in open_names)
        buckets.append(Bucket(len(buckets), tuple(open_names), numel, open_bytes, open_ready, psgd))
        open_names, open_bytes, open_ready = [], 0, 0.0

    for name, ready in ready_order or gradient_ready_order(shape, seq_len):
        open_names.append(name)
        open_bytes += _numel(shapes[name]) * bytes_per_grad
        open_ready = max(open_ready, ready)
        if open_bytes >= limits[min(len(buckets), len(limits) - 1)]:
            close()
    if open_names:
        close()
    return buckets


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _powersgd_numel(shape: tuple[int, ...], rank: int) -> int:
    """Elements PowerSGD allreduces for one tensor: a matrix n x m becomes P (n x r)
    and Q (m x r); vectors are allreduced uncompressed (Vogels et al. 2019;
    torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook)."""
    if len(shape) < 2:
        return _numel(shape)
    n, m = shape[0], _numel(shape[1:])
    return min(n * m, (n + m) * rank)
