"""The model arithmetic's old home: every name lives in sim/transformer.py now, which adds
the Llama layout to GPT-2's; the callers that import from here keep working."""

from sim.transformer import (
    LAYOUTS,
    BackwardOp,
    ComputeShares,
    GPT2Shape,
    ParamTensor,
    TransformerShape,
    backward_ops,
    compute_shares,
    flops_per_token,
    gradient_ready_order,
    model_shape,
    param_count,
    param_tensors,
)

__all__ = [
    "LAYOUTS",
    "BackwardOp",
    "ComputeShares",
    "GPT2Shape",
    "ParamTensor",
    "TransformerShape",
    "backward_ops",
    "compute_shares",
    "flops_per_token",
    "gradient_ready_order",
    "model_shape",
    "param_count",
    "param_tensors",
]
