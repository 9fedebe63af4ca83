"""The training recipe `train` and the probes share: precision, torch.compile, AdamW.

One place, so the probe times the same kernels the training run executes.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn

from realrun.device import device_info
from realrun.precision import Precision, resolve


@dataclass(frozen=True)
class Recipe:
    precision: Precision
    compile: bool
    device: torch.device

    @classmethod
    def for_run(cls, args, device: torch.device) -> "Recipe":
        precision = resolve(args.precision, device)
        precision.apply_matmul_precision()
        return cls(precision, bool(args.compile), device)

    def prepare(self, model: nn.Module) -> nn.Module:
        """Cast for pure bf16, then compile in place. nn.Module.compile() keeps the module and
        its parameter names; torch.compile(model) would wrap it and prefix every name with
        `_orig_mod.`, and calibration matches gradients by realrun/model.py's names. Compiled
        before DDP wraps it: DDP's forward marks itself active and dynamo then splits the
        graph at bucket boundaries (DDPOptimizer, torch/_dynamo/convert_frame.py), so the
        allreduces still overlap backward."""
        if self.precision.param_dtype != torch.float32:
            model.to(self.precision.param_dtype)
        if self.compile:
            model.compile()
        return model

    @property
    def fused(self) -> bool:
        return self.device.type == "cuda"

    @property
    def optimizer_name(self) -> str:
        # Without fused/foreach arguments torch picks foreach only on devices with foreach
        # kernels (cuda, xpu, ...; torch/utils/_foreach_utils.py), so on CPU the default is
        # the per-parameter for-loop (torch/optim/optimizer.py _default_to_fused_or_foreach).
        return "adamw-fused" if self.fused else "adamw-for-loop"

    def optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        """Fused AdamW on GPUs (one kernel for all parameters, torch.optim.AdamW docs);
        torch's default implementation on CPU."""
        return torch.optim.AdamW(params, lr=lr, fused=True) if self.fused else torch.optim.AdamW(params, lr=lr)

    def autocast(self):
        return self.precision.autocast(self.device)

    def scaler(self):
        return self.precision.make_scaler(self.device)

    def meta(self) -> dict:
        """What the meta record adds (realrun/SCHEMA.md)."""
        return {
            "precision": self.precision.describe(),
            "compile": self.compile,
            "optimizer": self.optimizer_name,
            "device_info": device_info(self.device),
        }


def backward(loss: torch.Tensor, scaler) -> None:
    """Outside autocast, as the AMP recipe says; scaled under fp16-amp."""
    (loss if scaler is None else scaler.scale(loss)).backward()


def optimizer_step(opt: torch.optim.Optimizer, scaler) -> None:
    """With a scaler: unscale, skip the step if a gradient overflowed, adapt the scale."""
    if scaler is None:
        opt.step()
        return
    scaler.step(opt)
    scaler.update()
