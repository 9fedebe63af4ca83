"""Megatron-style tensor parallelism of realrun/model.py's blocks with torch's own API
(torch.distributed.tensor.parallel over a DeviceMesh; it runs on CPU with gloo in torch 2.13):
Q/K/V and the MLP's first matmul column-parallel, each attention and MLP output projection
row-parallel, so a block's forward has two allreduces (after each row-parallel matmul) and its
backward two (on the input gradients of the column-parallel ones), as Shoeybi et al. 2019 and
sim/tp.py count them. Norms, the embedding and the output layer stay whole on every TP rank
(replicated; their gradients agree because every input gradient is allreduced).

The model fuses Q, K and V in one c_attn, and SwiGLU's gate and up in one c_fc. A column shard
of the fused weight as it stands would give rank 0 all of Q and rank 1 K and V; so the rows are
reordered first, rank r's heads of Q, K and V (gate and up units) made contiguous, before
ColwiseParallel cuts it in tp equal pieces. The attention then runs on its local heads.
"""

import torch
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def _interleave(t: torch.Tensor, sizes: tuple[int, ...], tp: int) -> torch.Tensor:
    """Rows [A | B | C] (``sizes``) reordered to [A_0 B_0 C_0 | A_1 B_1 C_1 | ...]."""
    parts = [p.chunk(tp) for p in t.split(sizes)]
    return torch.cat([p[r] for r in range(tp) for p in parts])


def _regroup(linear: torch.nn.Linear, sizes: tuple[int, ...], tp: int) -> None:
    with torch.no_grad():
        linear.weight.copy_(_interleave(linear.weight, sizes, tp))
        if linear.bias is not None:
            linear.bias.copy_(_interleave(linear.bias, sizes, tp))


def shard_blocks(model, tp_mesh) -> None:
    """Every block of ``model`` (realrun/model.py's GPT, or a pipeline stage holding blocks) split
    over ``tp_mesh``, in place. The weights must be the whole model's (same seed on every rank)."""
    tp = tp_mesh.size()
    if tp == 1:
        return
    for block in model.transformer.h if hasattr(model, "transformer") else model.h:
        attn = block.attn
        q, kv = attn.n_head * attn.head_dim, attn.n_kv_head * attn.head_dim
        _regroup(attn.c_attn, (q, kv, kv), tp)
        attn.n_head //= tp  # the local heads (realrun/parallel.py checked tp divides both)
        attn.n_kv_head //= tp
        plan = {
            "attn.c_attn": ColwiseParallel(),
            "attn.c_proj": RowwiseParallel(),
            "mlp.c_fc": ColwiseParallel(),
            "mlp.c_proj": RowwiseParallel(),
        }
        if block.mlp.c_fc.out_features == 2 * block.mlp.c_proj.in_features:  # SwiGLU: gate | up
            half = block.mlp.c_proj.in_features
            _regroup(block.mlp.c_fc, (half, half), tp)
        parallelize_module(block, tp_mesh, plan)
