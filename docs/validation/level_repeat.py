"""How well does this box repeat a compute level from one process to the next? The floor under
docs/validation.md's plain KS bar.

    .venv/bin/python docs/validation/level_repeat.py [--processes 16] [--steps 30] [--core 0]
        [--validate-json FILE...] [--level-sd SD]

A validation run's level (its compute against the calibration's) comes from another process:
the probe ran minutes before. Here the same forward and backward (gpt2-mini, micro-batch 4 x
128 tokens, one thread pinned to one core, the heap kept and prefaulted as the runs'
realrun/cpu_alloc.py keeps it) runs in ``--processes`` fresh processes one after the other, each
timing ``--steps`` steps after 6 warm-up steps. No network, no second rank, no model: only the
box. Printed: each process's median step, the medians' sd, the sd of the step between adjacent
processes (the differences' sd over sqrt 2: slow drift across the whole sitting left out), the
drift from the first half to the second, a step's own spread within a process (IQR / 1.349), and
the hypervisor's steal time during each process (/proc/stat).

With ``--validate-json`` (``ddplab validate ... --json``, one file per sitting): calibrate/stepdist.py
ks_reach at the adjacent-process sd: how many of that sitting's runs a model right in everything but
each run's level would pass the plain KS test, if the level moved by no more than this box moves it
between two processes a minute apart. ``--level-sd`` gives that sd instead of measuring it (a
fraction: 0.0086 for 0.86 %).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
WARMUP_STEPS = 6


def child(steps: int) -> None:
    """One process's timed steps, as JSON on stdout."""
    os.environ.setdefault("DDPLAB_CPU_PREFAULT_GIB", "2")  # as docs/validation/lab.sh sets for the runs
    sys.path.insert(0, str(ROOT))
    from realrun.cpu_alloc import keep_freed_memory

    keep_freed_memory(1)
    import torch

    from realrun.model import build

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build("gpt2-mini")
    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, model.cfg.vocab_size, (4, 128), generator=gen) for _ in range(2))
    times = []
    for _ in range(WARMUP_STEPS + steps):
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.mean().backward()
        model.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - t0)
    print(json.dumps(times[WARMUP_STEPS:]))


def steal_s() -> float:
    """The hypervisor's steal time so far, all CPUs (proc(5): /proc/stat's eighth cpu field)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--validate-json", type=Path, nargs="+", default=[])
    ap.add_argument("--level-sd", type=float, help="use this sd between processes instead of measuring it")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.steps)
        return
    if a.level_sd is not None:
        if not 0 <= a.level_sd < 1:
            ap.error(f"--level-sd must be a fraction from 0 to 1, got {a.level_sd}")
        reach(a.validate_json, a.level_sd)
        return
    if a.processes < 3 or a.steps < 5:
        ap.error(
            f"--processes must be at least 3 and --steps at least 5 (an sd between processes),"
            f" got {a.processes} and {a.steps}"
        )
    reach(a.validate_json, measure(a.processes, a.steps, a.core))


def measure(processes: int, steps: int, core: int) -> float:
    """Run the processes, print what they timed; the sd between adjacent processes."""
    medians, spreads = [], []
    print(f"{'process':>7} {'median':>9} {'IQR/1.349':>9} {'steal':>7}")
    for i in range(processes):
        before = steal_s()
        out = subprocess.run(
            ["taskset", "-c", str(core), sys.executable, __file__, "--child", "--steps", str(steps)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        x = np.array(json.loads(out))
        medians.append(float(np.median(x)))
        spreads.append(float(np.subtract(*np.percentile(x, [75, 25])) / 1.349 / np.median(x)))
        print(f"{i:>7} {medians[-1] * 1e3:>7.1f} ms {spreads[-1]:>9.2%} {steal_s() - before:>6.2f}s")
    m = np.array(medians)
    adjacent = float(np.std(np.diff(m) / m[:-1], ddof=1) / np.sqrt(2))
    half = len(m) // 2
    print(
        f"medians: sd {np.std(m, ddof=1) / m.mean():.2%} of their mean; between adjacent processes sd {adjacent:.2%};"
        f" second half against first {m[half:].mean() / m[:half].mean() - 1:+.2%}; a step within a process"
        f" {np.median(spreads):.2%} (median of the processes' IQR / 1.349)"
    )
    return adjacent


def reach(paths: list[Path], level_sd: float) -> None:
    """Per validate JSON, calibrate/stepdist.py ks_reach at this level sd."""
    sys.path.insert(0, str(ROOT))
    from calibrate.stepdist import ks_reach

    for path in paths:
        r = ks_reach(json.loads(path.read_text())["rows"], np.random.default_rng(0), level_sd=level_sd)
        print(
            f"{path}: a model right in all but each run's level, off by sd {level_sd:.2%}, would pass the plain KS"
            f" test in {r['reach_expected']:.1f} of {r['reach_runs']} runs on average, {r['reach_need']} or more with"
            f" probability {r['reach_p_bar']:.3f}; per run {', '.join(f'{p:.2f}' for p in r['reach_rates'])}"
        )


if __name__ == "__main__":
    main()
