"""Training precision: the dtype each tensor of a PyTorch training step has, in bytes.

The five ways PyTorch users train (the names `ddplab train --precision` takes):

| precision  | weights stored | matmul operands | gradients (DDP buckets) | AdamW m, v | tensor peak |
|------------|----------------|-----------------|-------------------------|------------|-------------|
| `fp32`     | 4              | 4               | 4                       | 4 + 4      | fp32        |
| `tf32`     | 4              | 4 (TF32 math)   | 4                       | 4 + 4      | tf32        |
| `bf16-amp` | 4              | 2 (autocast)    | 4                       | 4 + 4      | bf16        |
| `fp16-amp` | 4              | 2 (autocast)    | 4                       | 4 + 4      | bf16 (same) |
| `bf16`     | 2              | 2               | 2                       | 2 + 2      | bf16        |
| `fp8`      | 4              | 2 (fp8 in GEMM) | 4                       | 4 + 4      | fp8         |

Why, from PyTorch itself:
- Autocast (torch.amp, "Automatic Mixed Precision") leaves parameters in fp32 and casts each
  matmul's operands to 16 bits for that op, so gradients, and DDP's flat buckets (which take
  the parameters' dtype, torch/csrc/distributed/c10d/reducer.cpp), are fp32: AMP does not
  halve DDP's traffic unless a bf16/fp16 comm hook compresses the buckets on the wire.
- Autocast keeps the 16-bit copy of each weight for the whole forward (its cast cache) and
  the matmuls save it for backward; layer norms, softmax/log_softmax and the losses run in
  fp32 (CUDA autocast's fp32 op list), so the residual stream stays fp32.
- AdamW's exp_avg and exp_avg_sq take the parameter's dtype (torch.optim.AdamW): 8 bytes per
  fp32 parameter, 4 per bf16 one. Pure bf16 keeps no fp32 master copy.
- FSDP's mixed precision (FSDP2's MixedPrecisionPolicy, FSDP1's MixedPrecision, with
  param_dtype the compute dtype and reduce_dtype fp32: torchtitan's default, Composer's
  "DEFAULT") allgathers the compute dtype and reduce-scatters the gradient dtype (sim/fsdp.py).
  The module then holds 16-bit parameters, so no op casts a weight and the embedding's output,
  and with it the residual stream, is 16-bit; the fp32 master weights and AdamW's state stay in
  the shards (``sharded``, which training.mode fsdp and hsdp apply).
"""

from typing import NamedTuple

PRECISIONS = ("fp32", "tf32", "bf16-amp", "bf16", "fp16-amp", "fp8")
# What the simulator predicts but `ddplab train` does not run: FP8 matmuls need Transformer
# Engine (or torchao) on an FP8-capable GPU, which realrun does not use.
SIMULATED_ONLY = ("fp8",)
DROPOUT_MASK_BYTES = 1  # torch's dropout keeps a bool mask, one byte an element


class Precision(NamedTuple):
    name: str
    param_bytes: int
    """Stored weights, what the optimizer updates (and the residual stream's dtype: the embedding
    output, kept in it by autocast's fp32 layer norms)."""
    compute_bytes: int
    """Matmul operands and the activations they save."""
    grad_bytes: int
    """Gradients and DDP's buckets: the parameters' dtype."""
    optimizer_state_bytes: int
    """AdamW's two moments per parameter, in the parameters' dtype."""
    autocast: bool
    """16-bit weight copies for the forward; log_softmax and the loss in fp32."""
    peak: str
    """Which tensor peak the matmuls run at: bf16 | tf32 | fp32 (compute.peak_*_tflop_s)."""
    residual_bytes: int
    """The residual stream's dtype: the embedding output's, kept by autocast's fp32 layer norms."""
    weight_casts: bool
    """Each op casts its weight to 16 bits (autocast over fp32 parameters), and keeps the copy."""

    @property
    def loss_bytes(self) -> int:
        """log_softmax's output and the loss gradients: fp32 under autocast."""
        return 4 if self.autocast else self.compute_bytes


_TABLE = {
    "fp32": Precision("fp32", 4, 4, 4, 8, False, "fp32", 4, False),
    "tf32": Precision("tf32", 4, 4, 4, 8, False, "tf32", 4, False),
    "bf16-amp": Precision("bf16-amp", 4, 2, 4, 8, True, "bf16", 4, True),
    "fp16-amp": Precision("fp16-amp", 4, 2, 4, 8, True, "bf16", 4, True),
    "bf16": Precision("bf16", 2, 2, 2, 4, False, "bf16", 2, False),
    # Transformer Engine's FP8 recipe over bf16-amp: the linear layers' matmuls at the FP8 peak
    # with fp32 master weights, bf16 activations and gradients' communication unchanged; the
    # scaling's cast kernels are sim/roofline.py's (fp8_casts).
    "fp8": Precision("fp8", 4, 2, 4, 8, True, "fp8", 4, True),
}


def sharded(p: Precision) -> Precision:
    """The same precision under FSDP's mixed precision (module docstring): 16-bit parameters in
    the module, so a 16-bit residual stream and no weight casts; the rest unchanged."""
    return p._replace(residual_bytes=p.compute_bytes, weight_casts=False)


def precision_dtypes(name: str) -> Precision:
    if name not in _TABLE:
        raise ValueError(f"training.precision: must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return _TABLE[name]
