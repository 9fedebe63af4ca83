"""What the device is (for the meta record) and how much memory a span of work took.

Memory statistics are the CUDA caching allocator's (torch.cuda.max_memory_allocated /
max_memory_reserved; the same calls on ROCm): "allocated" is what live tensors
occupy, "reserved" what the allocator holds from the driver, the number that must
fit. On CPU tensors come from the C allocator, which keeps no such statistics, so
the peaks are None there (realrun/SCHEMA.md).
"""

import os
import platform

import torch


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(_index(device))


def native_bf16(device: torch.device) -> bool:
    """bfloat16 in hardware. The rule of torch.cuda.is_bf16_supported(including_emulation=False)
    (torch/cuda/__init__.py: every ROCm arch; on NVIDIA compute capability >= 8.0, Ampere),
    asked of this device index rather than of the current device, which is still device 0
    when the workers check their arguments."""
    if device.type != "cuda":
        return True  # CPU autocast has a bfloat16 path (torch.autocast("cpu")); no tensor cores needed
    return bool(torch.version.hip) or capability(device) >= (8, 0)


def native_tf32(device: torch.device) -> bool:
    """TF32 tensor cores. The rule of torch.cuda.is_tf32_supported (torch/cuda/__init__.py):
    on ROCm the CDNA3+ archs gfx94x/gfx95x (MI300, MI350), on NVIDIA those with native bf16."""
    if device.type != "cuda":
        return False
    if torch.version.hip:
        arch = getattr(torch.cuda.get_device_properties(_index(device)), "gcnArchName", "")
        return arch.startswith(("gfx94", "gfx95"))
    return capability(device) >= (8, 0)


def device_name(device: torch.device) -> str:
    if device.type == "mps":
        return f"Apple MPS ({_cpu_name()})"  # the GPU is part of the Apple chip the CPU name gives
    return torch.cuda.get_device_name(_index(device)) if device.type == "cuda" else _cpu_name()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine()


def device_info(device: torch.device) -> dict:
    """The device this rank computes on, for the meta record (realrun/SCHEMA.md, `device_info`)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(_index(device))
        return {
            "kind": "rocm" if torch.version.hip else "cuda",
            "name": props.name,
            "memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),  # SMs on NVIDIA, CUs on AMD
            "capability": f"{props.major}.{props.minor}",
            "bf16": native_bf16(device),
        }
    if device.type == "mps":  # unified memory: the GPU may use what Metal recommends of the host's
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        return {
            "kind": "mps",
            "name": device_name(device),
            "memory_bytes": int(recommended()) if recommended else host_bytes(),
            "multiprocessors": None,
            "capability": None,
            "bf16": True,  # autocast on MPS has a bfloat16 path (macOS 14+)
        }
    return {
        "kind": "cpu",
        "name": _cpu_name(),
        "memory_bytes": host_bytes(),
        "multiprocessors": os.cpu_count(),
        "capability": None,
        "bf16": True,
    }


def host_bytes() -> int:
    """This machine's physical memory, bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def reset_peak(device: torch.device) -> None:
    """Start a new peak (torch.cuda.reset_peak_memory_stats); nothing to reset on CPU."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict:
    """Peak bytes since the last reset_peak; None on CPU (no allocator statistics)."""
    if device.type != "cuda":
        return {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
    return {
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
    }
