"""The loader model (sim/loader.py) against real `ddplab train` runs with a slowed DataLoader.

    .venv/bin/python bench/loader_check.py [--steps 16] [--out measurements/loader-check.txt]

Per case (workers W, prefetch_factor P, micro-steps K, batch build time b): first a run with
the same W, P and K and no delay, the baseline, then the same run with every batch
``--loader-delay-ms`` slower. From the baseline, per rank: the compute of one micro-step c
(forward + backward over K) and the rest of the step (its wall time less K c): the gap in which
the workers keep building. The prediction is the baseline step plus the slowest rank's steady
wait from sim/loader.py with batches taking b; the measurement is the slowed run's step (per
step the slowest rank's wall time, the mean after the warm-up). The delays are chosen from the
baseline's c so that each case lands where it is meant to: blocking (W = 0), hidden (b < W c),
loader-bound (b > W c), and a queue too short for K back-to-back micro-steps (P = 1).

The bound, set before the first run: every case's predicted step within 15 % of the measured
one (a CPU box's step times move by a few % from run to run). A miss is printed as one and the
script exits 1. Only the delay is ours; each batch's own build time (a few ms of random
tokens) is in both the baseline and the slowed run.
"""

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from realrun.records import read_run  # noqa: E402
from sim.loader import loader_wait_s  # noqa: E402

BOUND = 0.15
WARMUP_STEPS = 4
CONFIG = ["--model", "gpt2-tiny", "--seq-len", "64", "--micro-batch", "32", "--nproc", "2"]  # ~45 ms micro-steps here
# (workers, prefetch_factor, micro-steps, what b is): b = load x W x c with workers, a fixed
# delay of ``load`` x c without (blocking: every batch costs b).
CASES = [
    (0, 2, 1, 0.5, "blocking"),
    (0, 2, 3, 0.5, "blocking, K = 3"),
    (2, 2, 1, 0.6, "hidden"),
    (2, 2, 1, 1.5, "loader-bound"),
    (2, 2, 4, 1.5, "loader-bound, K = 4"),
    (4, 2, 2, 1.3, "loader-bound, 4 workers"),
    (1, 2, 2, 2.0, "one worker"),
    (2, 1, 6, 0.95, "short queue, K = 6"),
]


def run(out: Path, steps: int, workers: int, prefetch: int, k: int, delay_ms: float) -> list[list[dict]]:
    cmd = [sys.executable, "-m", "ddplab", "train", *CONFIG, "--steps", str(steps), "--grad-accum", str(k)]
    cmd += ["--loader-workers", str(workers), "--loader-prefetch", str(prefetch)]
    cmd += ["--loader-delay-ms", f"{delay_ms:.3f}", "--out", str(out)]
    print("$", shlex.join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return [r.of_type("step")[WARMUP_STEPS:] for r in read_run(out, "train")]


def step_s(ranks: list[list[dict]]) -> float:
    """Mean over steps of the slowest rank's wall time: what the job experiences."""
    return statistics.mean(max(r[i]["step_wall_s"] for r in ranks) for i in range(len(ranks[0])))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--out", type=Path, default=ROOT / "measurements" / "loader-check.txt")
    args = ap.parse_args()
    lines = [
        "# " + shlex.join([".venv/bin/python", "bench/loader_check.py", *sys.argv[1:]]),
        f"# train config: {shlex.join(CONFIG)}, {args.steps} steps, the first {WARMUP_STEPS} dropped",
        f"# bound (set before the first run): predicted step within {BOUND:.0%} of measured",
        f"{'case':<26}{'W':>3}{'P':>3}{'K':>3}{'c ms':>8}{'b ms':>8}{'base ms':>9}{'pred ms':>9}{'meas ms':>9}"
        f"{'err':>8}  verdict",
    ]
    misses = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, (workers, prefetch, k, load, what) in enumerate(CASES):
            base = run(Path(tmp) / f"{n}-base", args.steps, workers, prefetch, k, 0.0)
            c = np.array([statistics.mean((s["forward_s"] + s["backward_s"]) / k for s in r) for r in base])
            base_s = step_s(base)
            gap = np.maximum(base_s - k * c, 0.0)
            batch_s = load * max(workers, 1) * float(c.max())
            slowed = run(Path(tmp) / f"{n}-slow", args.steps, workers, prefetch, k, batch_s * 1e3)
            wait = loader_wait_s(
                np.full(len(c), batch_s), workers=workers, prefetch_factor=prefetch, micro_s=c, micro_steps=k, gap_s=gap
            )
            predicted, measured = base_s + float(wait.steady_s.max()), step_s(slowed)
            err = predicted / measured - 1
            ok = abs(err) <= BOUND
            misses += not ok
            lines.append(
                f"{what:<26}{workers:>3}{prefetch:>3}{k:>3}{c.max() * 1e3:>8.1f}{batch_s * 1e3:>8.1f}"
                f"{base_s * 1e3:>9.1f}{predicted * 1e3:>9.1f}{measured * 1e3:>9.1f}{err:>+8.1%}"
                f"  {'within' if ok else 'MISS'}"
            )
            print(lines[-1], flush=True)
    lines.append(f"# {len(CASES) - misses} of {len(CASES)} within {BOUND:.0%}")
    args.out.write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
