"""Which class of GPU a probe ran on, from the name the driver reports.

A class groups devices with the same compute units and kernels, so a measurement on one
member describes the others' compute: the H100 and H200 share Hopper's SMs and peak (989.4
bf16 TFLOP/s dense; the H200 has more and faster HBM), the MI325X is an MI300X with more HBM.
Presets name their class as ``compute.device_class``; `ddplab simulate --calib` carries a GPU
calibration into a preset of the same class (calibrate/apply.py, mode ``device``).
"""

import re

# (class, pattern on torch.cuda.get_device_name()), first match wins.
CLASSES = (
    ("h100", re.compile(r"\b(GH200|H100|H200|H800)\b", re.IGNORECASE)),
    ("mi300x", re.compile(r"\bMI3(00X|25X)\b", re.IGNORECASE)),
    ("a100", re.compile(r"\b(A100|A800)\b", re.IGNORECASE)),
)

# The preset that describes each class (its compute section holds the class's peaks).
CLASS_PRESET = {"h100": "h100-1024", "mi300x": "mi300x-1024", "a100": "a100-8"}


def device_class(name: str | None) -> str | None:
    """``"NVIDIA H200"`` -> ``"h100"``; None for devices no preset describes (a CPU, an RTX 4090)."""
    for cls, pattern in CLASSES:
        if name and pattern.search(name):
            return cls
    return None


def class_peak_tflop_s(cls: str | None, precision: str) -> tuple[float, str] | None:
    """(the dense tensor peak a ``precision`` step's matmuls can reach on this class, TFLOP/s; the
    preset it is read from), None for no class. The class's fastest member bounds it (H100 SXM for
    h100). An fp32 run is bounded by TF32's peak: PyTorch runs fp32 matmuls on TF32 tensor cores
    once ``torch.set_float32_matmul_precision("high")`` is set, and a trace does not say whether."""
    if cls not in CLASS_PRESET:
        return None
    from sim.precision import precision_dtypes
    from sim.scenario_file import load_scenario

    c = load_scenario(CLASS_PRESET[cls]).compute
    dtypes = precision_dtypes(precision)
    return (c.peak_tf32_tflop_s if dtypes.peak == "fp32" else c.peak_for(dtypes)), CLASS_PRESET[cls]
