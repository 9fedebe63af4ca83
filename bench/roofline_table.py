"""What the compute roofline (sim/roofline.py) predicts per micro-step of GPT-2 760M at seq
2048, on the H100 and MI300X presets and on an H200, for each stack (compute.stack eager |
compiled), against the steps measured on an H200.

    .venv/bin/python bench/roofline_table.py

MFU = (6N + 12 L d T) FLOPs per token x tokens / time / the preset's dense bf16 peak.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.roofline import micro_step_time, rates  # noqa: E402
from sim.scenario_file import load_scenario  # noqa: E402
from sim.transformer import flops_per_token  # noqa: E402

MICRO_BATCHES = (1, 2, 4, 8, 16)
SEQ = 2048
# Measured on one H200 (docs/gpu.md): forward + backward per micro-step at micro-batch 8, eager.
H200_MEASURED_S = {"bf16-amp": 0.238, "fp32": 1.79, "tf32": 0.62}
H200_COMPILED_S = 0.167


def predict(preset: str, precision: str, micro_batch: int, sets=(), stack="eager"):
    sets = [
        f"training.precision={precision}",
        f"training.micro_batch_size={micro_batch}",
        f"compute.stack={stack}",
        *sets,
    ]
    sc = load_scenario(preset, sets)
    shape = sc.model.shape
    r = micro_step_time(shape, SEQ, micro_batch, sc.training.dtypes, rates(sc.compute, sc.training.dtypes))
    mfu = flops_per_token(shape, SEQ) * micro_batch * SEQ / r.step_s / (sc.compute.peak_tflop_s * 1e12)
    return r, mfu


def main() -> None:
    print(f"GPT-2 760M, seq {SEQ}, bf16 autocast: forward + backward per micro-step")
    print(f"{'preset':<12} {'stack':<9} {'micro-batch':>11} {'fwd (ms)':>9} {'bwd (ms)':>9} {'total (ms)':>10}"
          f" {'MFU':>6} {'memory-bound':>12} {'at launch floor':>15}")  # fmt: skip
    for preset in ("h100-1024", "mi300x-1024"):
        for stack in ("eager", "compiled"):
            for mb in MICRO_BATCHES:
                r, mfu = predict(preset, "bf16-amp", mb, stack=stack)
                print(
                    f"{preset:<12} {stack:<9} {mb:>11} {r.forward_s * 1e3:>9.1f} {r.backward_s * 1e3:>9.1f}"
                    f" {r.step_s * 1e3:>10.1f} {mfu:>6.1%} {r.memory_s / r.step_s:>12.0%}"
                    f" {f'{r.launch_bound} of {r.kernels}':>15}"
                )
    print()
    print("H200 (h100-1024 with compute.hbm_tb_s=4.8), micro-batch 8, against the measured steps")
    print(f"{'precision':<10} {'stack':<9} {'roofline (s)':>12} {'measured (s)':>12} {'error':>7}")
    for precision, measured in H200_MEASURED_S.items():
        why = "fitted: eager_memory_efficiency" if precision == "bf16-amp" else "held out"
        for stack in ("eager", "compiled"):
            r, _ = predict("h100-1024", precision, 8, ["compute.hbm_tb_s=4.8"], stack)
            note = f"  ({why})" if stack == "eager" else ""
            print(
                f"{precision:<10} {stack:<9} {r.step_s:>12.3f} {measured:>12.3f} {r.step_s / measured - 1:>+7.1%}{note}"
            )
    r, _ = predict("h100-1024", "bf16-amp", 8, ["compute.hbm_tb_s=4.8"], "compiled")
    print(f"{'bf16-amp':<10} {'compiled':<9} {r.step_s:>12.3f} {H200_COMPILED_S:>12.3f}"
          f" {r.step_s / H200_COMPILED_S - 1:>+7.1%}  (measured torch.compile'd, no DDP)")  # fmt: skip


if __name__ == "__main__":
    main()
