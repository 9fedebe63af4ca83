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


def device_class(name: str | None) -> str | None:
    """``"NVIDIA H200"`` -> ``"h100"``; None for devices no preset describes (a CPU, an RTX 4090)."""
    for cls, pattern in CLASSES:
        if name and pattern.search(name):
            return cls
    return None
