"""Numeric precision of a run (``--precision``) and the checks made before any process starts.

- fp32: float32 everywhere, TF32 off.
- tf32: float32 tensors, matmuls and convolutions on TF32 tensor cores (10-bit mantissa).
- bf16-amp: float32 parameters, gradients and optimizer; forward and loss under
  torch.autocast(bfloat16) (PyTorch's AMP recipe, docs "Automatic Mixed Precision").
- bf16: the parameters themselves in bfloat16, so are the gradients DDP reduces (half the bytes).
- fp16-amp: as bf16-amp in float16, with a GradScaler against underflow of the fp16 gradients.

Under autocast the parameters stay float32, so gradients and DDP's buckets do too.
"""

import contextlib
import os
import subprocess
from dataclasses import dataclass

import torch

from realrun.device import capability, device_name, native_bf16, native_tf32

PRECISIONS = ("fp32", "tf32", "bf16-amp", "bf16", "fp16-amp")
CHOICES = ("auto", *PRECISIONS)


@dataclass(frozen=True)
class Precision:
    name: str
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    grad_dtype: torch.dtype  # what DDP reduces: a gradient has its parameter's dtype
    grad_scaler: bool
    tf32: bool

    def autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype)

    def apply_matmul_precision(self) -> None:
        """Set both switches either way, so a setting made earlier in the process (a user's
        sitecustomize, an imported library) cannot leave TF32 on under a run that says fp32.
        torch.set_float32_matmul_precision docs: "high" = TF32 matmuls where available;
        cudnn.allow_tf32 covers convolutions (torch/backends/cudnn/__init__.py). The
        environment variable TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 is one thing these do not undo."""
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = self.tf32

    def make_scaler(self, device: torch.device):
        return torch.amp.GradScaler(device.type) if self.grad_scaler else None

    def describe(self) -> dict:
        def name(dtype):
            return None if dtype is None else str(dtype).removeprefix("torch.")

        return {
            "name": self.name,
            "param_dtype": name(self.param_dtype),
            "autocast_dtype": name(self.autocast_dtype),
            "grad_dtype": name(self.grad_dtype),
            "grad_scaler": self.grad_scaler,
            "tf32": self.tf32,
        }


_F32, _BF16, _F16 = torch.float32, torch.bfloat16, torch.float16
TABLE = {
    "fp32": Precision("fp32", _F32, None, _F32, grad_scaler=False, tf32=False),
    "tf32": Precision("tf32", _F32, None, _F32, grad_scaler=False, tf32=True),
    "bf16-amp": Precision("bf16-amp", _F32, _BF16, _F32, grad_scaler=False, tf32=False),
    "bf16": Precision("bf16", _BF16, None, _BF16, grad_scaler=False, tf32=False),
    "fp16-amp": Precision("fp16-amp", _F32, _F16, _F32, grad_scaler=True, tf32=False),
}


def resolve(name: str, device: torch.device) -> Precision:
    """ "auto": bf16-amp on a GPU with native bfloat16, else fp32 (CPU autocast exists but
    the CPU default stays fp32, so CPU numbers are comparable with older files)."""
    if name == "auto":
        name = "bf16-amp" if device.type == "cuda" and native_bf16(device) else "fp32"
    if name not in TABLE:
        raise ValueError(f"--precision: unknown {name!r} (choose from {', '.join(CHOICES)})")
    return TABLE[name]


def preflight(
    backend: str, precision: str, compile: bool, straggler=(), *, this_machine: bool = True, device: str = "auto"
) -> str:
    """The resolved precision name, or a ValueError naming the flag, before any process starts.

    The device is the one this rank would compute on (realrun/device_choice.py: ``--device
    auto`` = CUDA, then MPS, then CPU, whatever the backend), at LOCAL_RANK (0 in the
    launcher). ``this_machine`` False (the launcher of other machines, realrun/nodes.py):
    hardware is checked on each node by its workers, which run check_args again; then only
    what needs no hardware is checked here, and "auto" comes back unresolved.
    """
    from realrun.device_choice import compute_device, local_backend

    if precision not in CHOICES:
        raise ValueError(f"--precision: unknown {precision!r} (choose from {', '.join(CHOICES)})")
    if compile and straggler:
        rank, factor = straggler[0]
        raise ValueError(
            f"--compile with --straggler {rank}:{factor:g}: the straggler's per-module forward and backward"
            " hooks (realrun/throttle.py) would break the compiled graph; drop one of them"
        )
    if not this_machine:
        if device == "cpu" and precision == "tf32":
            raise ValueError(_NO_TF32_OFF_GPU.format(where="--device cpu computes on the CPU"))
        return precision
    rank_device = compute_device(device, int(os.environ.get("LOCAL_RANK", 0)))
    if backend == "nccl":
        local_backend("nccl", rank_device, 1)  # a ValueError without a CUDA device
    if rank_device.type != "cuda":
        if precision == "tf32":
            raise ValueError(_NO_TF32_OFF_GPU.format(where=f"this rank computes on {rank_device.type}"))
        if compile and rank_device.type == "cpu":
            _check_cpp_compiler()
        return "fp32" if precision == "auto" else precision
    what = f"{device_name(rank_device)} (compute capability {'.'.join(map(str, capability(rank_device)))})"
    if precision in ("bf16", "bf16-amp") and not native_bf16(rank_device):
        raise ValueError(f"--precision {precision}: {what} has no native bfloat16 (use fp16-amp or fp32)")
    if precision == "tf32" and not native_tf32(rank_device):
        raise ValueError(
            f"--precision tf32: {what} has no TF32 tensor cores (NVIDIA compute capability 8.0+ or AMD"
            " CDNA3; use fp32 or fp16-amp)"
        )
    if compile and not _has_triton():
        raise ValueError(
            "--compile: torch.compile generates Triton kernels on GPUs and Triton is not usable here"
            " (install the triton that matches this torch, or drop --compile)"
        )
    return resolve(precision, rank_device).name


_NO_TF32_OFF_GPU = (
    "--precision tf32: TF32 is a tensor-core mode of NVIDIA Ampere+ / AMD CDNA3 GPUs; {where} (use fp32 or bf16-amp)"
)


def _has_triton() -> bool:
    try:  # private (torch/utils/_triton.py), what inductor itself asks
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    return has_triton()


def _check_cpp_compiler() -> None:
    """Inductor compiles C++ for CPU with the first of torch._inductor.config.cpp.cxx that
    answers `--version` (torch/_inductor/cpp_builder.py cpp_compiler_search; None there
    means "download one from conda", only with TORCHINDUCTOR_INSTALL_GXX set)."""
    from torch._inductor import config  # ~2 s to import: only with --compile

    search = tuple(config.cpp.cxx) if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    if None in search and os.getenv("TORCHINDUCTOR_INSTALL_GXX"):
        return
    candidates = [c for c in search if c]
    for c in candidates:
        try:
            subprocess.run([c, "--version"], capture_output=True, check=True, timeout=30)
            return
        except (OSError, subprocess.SubprocessError):
            continue
    raise ValueError(
        f"--compile: torch.compile on CPU needs a C++ compiler and none of {', '.join(candidates)} runs here"
        " (install g++ or set CXX, or drop --compile)"
    )
