"""The optimizer step's time: fused AdamW is memory-bound, so it follows the bytes it moves.

``torch.optim.AdamW(fused=True)`` (``_fused_adamw_``) reads each parameter, its gradient and
the two moments, and writes the parameter and both moments back: per parameter

    2 x param_bytes + grad_bytes + 2 x optimizer_state_bytes

in the precision's dtypes (sim/precision.py: 28 B under fp32/tf32/bf16-amp, 14 B under pure
bf16). Its few FLOPs per element hide under that traffic, so the step takes

    params x bytes per parameter / (hbm_tb_s x ADAMW_HBM_EFFICIENCY)

over the parameters the rank updates (all of them under DDP; its shard under FSDP, which
sim/fsdp.py divides by). The efficiency is derived from the one measurement there is, not
assumed: a fused AdamW step over GPT-2 760M (760.3M fp32 parameters, bf16 autocast) took
6.2 ms on one H200 at 4.8 TB/s (docs/gpu.md), 21.3 GB at 3.43 TB/s = 0.715 of the HBM. Every
other model, precision and device follows from it; ``compute.optimizer_s`` set in a scenario
(or by a calibration, which measured it) overrides the derivation.
"""

from functools import cache

from sim.config import Scenario
from sim.precision import Precision, precision_dtypes
from sim.transformer import model_shape, param_count

# The H200 measurement the efficiency is derived from (docs/gpu.md "Reference measurements").
H200_ADAMW_S = 6.2e-3
H200_HBM_TB_S = 4.8
H200_MODEL, H200_PRECISION = "gpt2-760m", "bf16-amp"


def adamw_bytes_per_param(p: Precision) -> int:
    """Bytes fused AdamW moves per parameter: the weight and both moments read and written,
    the gradient read."""
    return 2 * p.param_bytes + p.grad_bytes + 2 * p.optimizer_state_bytes


@cache
def _h200_efficiency() -> float:
    """0.715. Computed when first asked, not at import: it reads models.toml, and a broken
    entry there must be one line from the command that reads it, not an import traceback."""
    moved = param_count(model_shape(H200_MODEL)) * adamw_bytes_per_param(precision_dtypes(H200_PRECISION))
    return moved / H200_ADAMW_S / (H200_HBM_TB_S * 1e12)


def __getattr__(name: str):
    if name == "ADAMW_HBM_EFFICIENCY":  # the constant's name, kept for its readers (PEP 562)
        return _h200_efficiency()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def adamw_step_s(params: float, p: Precision, hbm_tb_s: float) -> float:
    """Seconds of one fused AdamW step over ``params`` parameters at ``hbm_tb_s``."""
    return params * adamw_bytes_per_param(p) / (hbm_tb_s * 1e12 * _h200_efficiency())


def optimizer_step_s(sc: Scenario) -> float:
    """The whole model's optimizer step: ``compute.optimizer_s`` when given, else derived."""
    if sc.compute.optimizer_s is not None:
        return sc.compute.optimizer_s
    return adamw_step_s(param_count(sc.model.shape), sc.training.dtypes, sc.compute.hbm_tb_s)


def optimizer_basis(sc: Scenario) -> str:
    """How the optimizer time was reached, as printed beside it."""
    if sc.compute.optimizer_s is not None:
        return "given (compute.optimizer_s)"
    return (
        f"derived: fused AdamW, {adamw_bytes_per_param(sc.training.dtypes)} B/param at"
        f" {sc.compute.hbm_tb_s:g} TB/s x {_h200_efficiency():.3f}"
    )
