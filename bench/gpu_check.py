"""The GPU check: probe, train, calibrate and validate GPT-2 760M on one GPU in fp32,
bf16-amp and bf16-amp + torch.compile, in about five minutes on an H100-class GPU, and
write what it measured to measurements/gpu-<device>.txt.

    bash bench/gpu_check.sh              # one NVIDIA or AMD GPU (torch with CUDA or ROCm)
    bash bench/gpu_check.sh --cpu        # the same steps on CPU with gpt2-tiny: checks the
                                         # script and the plumbing, measures no GPU

Per configuration, each a real `ddplab` command (printed as it runs):
- `probe --nproc 1`: forward and backward per micro-batch size, the optimizer step, peak
  memory, the bucket-ready profile (one rank: no collectives, link or overlap);
- `train --nproc 1` at micro-batch 8;
- `calibrate` of the probe, and `validate` of the train run from that calibration alone;
and for bf16-amp the same train run with --no-instrument (what the timing hooks cost), and
once more with `--profile`: its Kineto traces calibrated (`calibrate TRACE...`, docs/traces.md)
and applied to the preset of the GPU's class (`simulate PRESET --calib`, mode device), whose
compute must cite the trace.

Reported: forward + backward per micro-step and its MFU (6N + 12 L d T FLOPs per token
against the GPU class's dense bf16 peak, from the preset naming that class), the whole
step's, the peak memory measured against sim/memory.py's estimate, the step predicted from
the probe against the one measured (and their MAPE), and the instrumentation overhead.
"""

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibrate.devices import device_class  # noqa: E402
from calibrate.records import read_run  # noqa: E402
from scenarios import scenario_names  # noqa: E402
from sim.memory import GIB, estimate_memory  # noqa: E402
from sim.scenario_file import load_scenario  # noqa: E402
from sim.transformer import flops_per_token, model_shape  # noqa: E402

WARMUP_STEPS = 2  # as calibrate/validate.py: step 0 allocates (and compiles), step 1 rebuilds the buckets


class Setup:
    """What to run: the GPU check proper, or its CPU stand-in."""

    def __init__(self, cpu: bool):
        self.cpu = cpu
        self.backend = "gloo" if cpu else "nccl"
        self.model = "gpt2-tiny" if cpu else "gpt2-760m"
        self.seq = 64 if cpu else 2048
        self.micro_batch = 8
        # (label, precision, compile, probe micro-batches, probe warmup, probe iters, train steps)
        # fp32 steps take ~1.8 s at micro-batch 8 on an H200: fewer sizes and iterations. A compiled
        # probe compiles once per shape: one size.
        self.configs = (
            ("fp32", "fp32", False, "2,8", 1, 4, 5),  # 8 iterations: the jitter fit needs 8
            ("bf16-amp", "bf16-amp", False, "1,2,4,8", 3, 10, 20),
            ("bf16-amp+compile", "bf16-amp", True, "8", 3, 10, 20),
        )

    def common(self) -> list[str]:
        return ["--backend", self.backend, "--nproc", "1", "--model", self.model, "--seq-len", str(self.seq)]


def run(cmd: list[str], log: list[str], timeout_s: float) -> str:
    """Run one ddplab command, log it, stop the check if it fails; its stdout."""
    shown = [str(Path(c).relative_to(ROOT)) if c.startswith(f"{ROOT}/") else c for c in cmd]
    line = "$ " + shlex.join(["ddplab", *shown])
    print(line, flush=True)
    log.append(line)
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "ddplab", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
    )
    took = time.perf_counter() - t
    log.append(f"  ({took:.0f} s, exit {p.returncode})")
    if p.returncode != 0:
        sys.exit(f"gpu_check: `{line[2:]}` failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def steps(run_dir: Path) -> list[dict]:
    """Rank 0's step records after the warm-up."""
    return [r for r in read_run(run_dir, "train").records[0]["step"] if r["step"] >= WARMUP_STEPS]


def median(rows: list[dict], key) -> float | None:
    values = [key(r) for r in rows]
    return statistics.median(values) if values and None not in values else None


def peak_tflop_s(device_class: str | None) -> tuple[float, str] | None:
    """The dense bf16 peak of the preset that names this GPU class, and that preset's name."""
    for name in scenario_names():
        sc = load_scenario(name)
        if device_class and sc.compute.device_class == device_class:
            return sc.compute.peak_tflop_s, name
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="run on CPU with gpt2-tiny (checks the script, no GPU)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu_check", help="run directories")
    ap.add_argument("--report", type=Path, help="report file (default measurements/gpu-<device>.txt)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="limit for each command")
    args = ap.parse_args()
    s = Setup(args.cpu)
    args.out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    rows = []
    started = time.perf_counter()
    for label, precision, compiled, sizes, warmup, iters, train_steps in s.configs:
        d = args.out / label
        flags = ["--precision", precision, *(["--compile"] if compiled else [])]
        probe, train = d / "probe", d / "train"
        run(
            ["probe", *s.common(), *flags, "--micro-batches", sizes, "--warmup", str(warmup), "--iters", str(iters)]
            + ["--parts", "compute", "--out", str(probe), "--force"],  # a rerun moves the last one aside
            log,
            args.timeout_s,
        )
        run(
            ["train", *s.common(), *flags, "--micro-batch", str(s.micro_batch), "--steps", str(train_steps)]
            + ["--out", str(train), "--force"],
            log,
            args.timeout_s,
        )
        calib = d / "calib.json"
        run(["calibrate", str(probe), "-o", str(calib)], log, args.timeout_s)
        validation = json.loads(run(["validate", "--calib", str(calib), "--json", str(train)], log, args.timeout_s))
        rows.append((label, precision, compiled, train, validation["rows"][0]))
    # Instrumentation overhead: bf16-amp again without the timing hooks.
    plain = args.out / "bf16-amp-plain"
    bf16_flags = ["--precision", "bf16-amp", "--micro-batch", str(s.micro_batch), "--steps", "20"]
    run(["train", *s.common(), *bf16_flags, "--no-instrument", "--out", str(plain), "--force"], log, args.timeout_s)
    traced = trace_check(s, args.out, log, args.timeout_s)
    report = write_report(s, rows, plain, log, time.perf_counter() - started, args.report, traced)
    print(report.read_text())
    return 0


def trace_check(s: Setup, out: Path, log: list[str], timeout_s: float) -> list[str]:
    """bf16-amp with --profile; its traces calibrated, and the calibration applied to the preset
    of this GPU's class in device mode. Report lines: the mode and where compute came from."""
    traced = out / "bf16-amp-trace"
    # One rank: 8 profiled steps, the jitter fit's minimum of rank-steps.
    flags = ["--precision", "bf16-amp", "--micro-batch", str(s.micro_batch), "--steps", "12", "--profile", "8"]
    run(["train", *s.common(), *flags, "--out", str(traced), "--force"], log, timeout_s)
    calib = out / "calib-trace.json"
    run(["calibrate", *map(str, sorted(traced.glob("trace-rank*.json*"))), "-o", str(calib)], log, timeout_s)
    name = (read_run(traced, "train").device_info or {}).get("name") or "cpu"
    preset = peak_tflop_s(device_class(name))
    if preset is None:
        return [f"# trace calibration: {calib} (no preset of {name}'s class to apply it to)"]
    cmd = ["simulate", preset[1], "--ranks", "64", "--steps", "5", "--calib", str(calib), "--json"]
    summary = json.loads(run(cmd, log, timeout_s))
    sources = {p["key"]: p["source"] for p in summary["parameters"] if p["key"].startswith("compute.")}
    lines = [f"# trace calibration applied to {preset[1]}: mode {summary['calibration']['mode']}"]
    lines += [f"#   {k}: {v}" for k, v in sorted(sources.items())]
    return lines


def write_report(
    s: Setup, rows, plain: Path, log: list[str], wall_s: float, path: Path | None, traced: list[str]
) -> Path:
    meta = read_run(rows[0][3], "train")
    info = meta.device_info or {}
    name = info.get("name") or "cpu"
    slug = "cpu" if s.cpu else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    path = path or ROOT / "measurements" / f"gpu-{slug}.txt"
    peak = peak_tflop_s(device_class(name))
    shape = model_shape(s.model)
    flops = flops_per_token(shape, s.seq) * s.micro_batch * s.seq  # one micro-step, forward + backward
    lines = [
        "# GPU check (bench/gpu_check.py): "
        + ("CPU DRY RUN, gpt2-tiny: checks the script, measures no GPU" if s.cpu else name),
        f"# command: bash bench/gpu_check.sh{' --cpu' if s.cpu else ''}   ({wall_s:.0f} s in all)",
        f"# device: {name}, {info.get('memory_bytes', 0) / GIB:.1f} GiB,"
        f" {info.get('multiprocessors')} {'logical CPUs' if s.cpu else 'SMs/CUs'},"
        f" capability {info.get('capability')}; {s.model}, seq {s.seq}, micro-batch {s.micro_batch}, DDP on 1 rank",
        f"# MFU: {flops / (s.micro_batch * s.seq):.4g} FLOPs per token (6N + 12 L d T) against"
        + (
            f" {peak[0]:g} TFLOP/s dense bf16 ({peak[1]}'s class)"
            if peak
            else " no known peak (no preset of this class)"
        ),
        "#",
        f"# {'config':<17} {'fwd+bwd(s)':>10} {'MFU':>6} {'step(s)':>8} {'step MFU':>8} {'peak(GiB)':>9}"
        f" {'sim(GiB)':>8} {'pred(s)':>8} {'error':>7}",
    ]
    errors = []
    for label, precision, _compiled, train, v in rows:
        st = steps(train)
        fwd_bwd = median(st, lambda r: r["forward_s"] + r["backward_s"] + r["wait_s"])
        step = median(st, lambda r: r["step_wall_s"])
        mem = median(st, lambda r: r.get("mem_peak_allocated_bytes"))
        sets = [f"model.preset={s.model}", f"training.seq_len={s.seq}", f"training.micro_batch_size={s.micro_batch}"]
        est = estimate_memory(load_scenario("h100-1024", [*sets, f"training.precision={precision}"], ranks=1))
        mfu = f"{flops / fwd_bwd / (peak[0] * 1e12):>6.1%}" if peak else f"{'-':>6}"
        step_mfu = f"{flops / step / (peak[0] * 1e12):>8.1%}" if peak else f"{'-':>8}"
        measured_gib = f"{mem / GIB:>9.2f}" if mem is not None else f"{'-':>9}"
        errors.append(abs(v["error_p50"]))
        lines.append(
            f"  {label:<17} {fwd_bwd:>10.4f} {mfu} {step:>8.4f} {step_mfu} {measured_gib}"
            f" {est.peak_allocated_gib:>8.2f} {v['predicted_p50_s']:>8.4f} {v['error_p50']:>+7.1%}"
        )
    instrumented = median(steps(rows[1][3]), lambda r: r["step_wall_s"])
    bare = median(steps(plain), lambda r: r["step_wall_s"])
    lines += [
        "#",
        f"# step time predicted from the probe alone (ddplab validate): MAPE {statistics.fmean(errors):.1%}"
        f" over {len(errors)} configurations",
        f"# instrumentation overhead, bf16-amp: {instrumented / bare - 1:+.2%}"
        f" (median step {instrumented:.4f} s instrumented, {bare:.4f} s with --no-instrument; budget 3 %)",
        "# fwd+bwd: forward + backward + DDP's wait per micro-step (median over steps after the warm-up);",
        "# peak: torch.cuda.max_memory_allocated of a training step; sim: sim/memory.py's estimate of it",
        "#",
        *traced,
        "#",
        *log,
    ]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


if __name__ == "__main__":
    sys.exit(main())
