"""Per-GPU memory of one training rank, estimated from the scenario: does it fit?

Model states (ZeRO, Rajbhandari et al. 2020, Sec. 3.1: mixed-precision Adam keeps 16-bit
parameters and gradients and K = 12 bytes of fp32 master copy, momentum and variance per
parameter, 2 + 2 + 12 = 16 bytes per parameter):
  ddp:  every rank holds all of them, plus DDP's bucket buffers: with the default
        ``gradient_as_bucket_view=False`` the reducer copies gradients into flat buckets,
        one more gradient's worth (torch.nn.parallel.DistributedDataParallel docs);
  fsdp: each rank holds 1/N of each (ZeRO-3, P_os+g+p: (2 + 2 + K) Psi / N), plus the
        unsharded working set: the root unit gathered from forward to backward with its
        unsharded gradient, the block computing and the ``fsdp_prefetch`` blocks gathered
        ahead of it, and the computing block's unsharded gradient before its reduce-scatter.

Activations of one micro-batch (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", Sec. 4, 16-bit activations, no tensor or sequence parallelism):
  per block: s b h (34 + 5 a s / h) bytes; the 5 a s^2 b of it are the attention scores, the
        softmax output and its dropout mask, which a fused attention kernel (FlashAttention,
        Dao et al. 2022; PyTorch SDPA) never stores: s b h 34 with ``fused_attention``;
  full activation checkpointing: only each block's input, 2 s b h, plus one block's full
        activations while it is recomputed in backward;
  outside the blocks: 4 s b h (1 + v / h) (the final layer norm and output projection inputs,
        and the fp32 logits the loss keeps, Sec. 4.3).
Everything else (CUDA context, cuBLAS workspaces, allocator slack) is one fixed, assumed
overhead. Not counted: fragmentation, temporary buffers inside kernels, FSDP's padding of
flat parameters to a multiple of N (under N elements per unit).
"""

from typing import NamedTuple

from sim.config import Scenario
from sim.fsdp import ROOT, unit_numels
from sim.gpt2 import GPT2Shape, model_shape

GIB = float(1 << 30)
# Assumed, not sourced: the CUDA context, PyTorch's lazily loaded kernels and cuBLAS workspaces
# take a few hundred MiB; measure it as torch.cuda.mem_get_info() before and after a first matmul.
CUDA_OVERHEAD_GIB = 0.5


class MemoryEstimate(NamedTuple):
    """One rank's peak memory, GiB (2^30 bytes)."""

    mode: str  # "ddp" | "fsdp"
    ranks: int
    parameters_gib: float  # ddp: all; fsdp: the rank's shard
    gradients_gib: float  # ddp: all; fsdp: the shard
    optimizer_state_gib: float  # ddp: all; fsdp: the shard
    activations_gib: float  # one micro-batch's, at the start of backward
    ddp_buckets_gib: float  # DDP's flat gradient buckets (0 for fsdp)
    fsdp_unsharded_gib: float  # FSDP's gathered units and their unsharded gradients (0 for ddp)
    cuda_overhead_gib: float  # assumed, fixed
    total_gib: float

    @property
    def model_states_gib(self) -> float:
        return self.parameters_gib + self.gradients_gib + self.optimizer_state_gib


def block_activation_bytes(shape: GPT2Shape, seq_len: int, micro_batch: int, *, fused_attention: bool) -> float:
    """One transformer block's stored activations, bytes (Korthikanti et al. 2022, Eq. 1)."""
    s, b, h, a = seq_len, micro_batch, shape.n_embd, shape.n_head
    scores = 0.0 if fused_attention else 5.0 * a * s / h
    return s * b * h * (34.0 + scores)


def activation_bytes(
    shape: GPT2Shape, seq_len: int, micro_batch: int, *, checkpointing: bool, fused_attention: bool
) -> float:
    """One micro-batch's activations kept for backward, bytes (see the module docstring)."""
    s, b, h, v = seq_len, micro_batch, shape.n_embd, shape.vocab_size
    block = block_activation_bytes(shape, s, b, fused_attention=fused_attention)
    blocks = shape.n_layer * 2.0 * s * b * h + block if checkpointing else shape.n_layer * block
    return blocks + 4.0 * s * b * h * (1.0 + v / h)


def estimate_memory(sc: Scenario, *, cuda_overhead_gib: float = CUDA_OVERHEAD_GIB) -> MemoryEstimate:
    """Peak memory of one rank of ``sc`` (``training.mode``, ``sc.ranks`` for FSDP's sharding)."""
    t = sc.training
    shape = model_shape(sc.model.preset)
    seq = t.seq_len or shape.block_size
    numels = unit_numels(shape)
    params = float(numels.sum())
    pb, gb, ob = t.param_bytes_per_param, t.grad_bytes_per_param, t.optimizer_state_bytes_per_param
    act = activation_bytes(
        shape, seq, t.micro_batch_size, checkpointing=t.activation_checkpointing, fused_attention=t.fused_attention
    )
    buckets = unsharded = 0.0
    if t.mode == "fsdp":
        shard = 1.0 / sc.ranks
        block = float(numels[1:].max())
        in_flight = min(1 + t.fsdp_prefetch, shape.n_layer)
        unsharded = numels[ROOT] * (pb + gb) + in_flight * block * pb + block * gb
    else:
        shard = 1.0
        buckets = params * gb  # the buckets (sim/buckets.py) hold every gradient once
    parts = [
        params * pb * shard / GIB,
        params * gb * shard / GIB,
        params * ob * shard / GIB,
        act / GIB,
        buckets / GIB,
        float(unsharded) / GIB,
        cuda_overhead_gib,
    ]
    return MemoryEstimate(t.mode, sc.ranks, *parts, sum(parts))


def fits(estimate: MemoryEstimate, device_gib: float) -> bool:
    """Whether the estimate's total fits in a device of ``device_gib`` GiB."""
    return estimate.total_gib <= device_gib
