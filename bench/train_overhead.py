"""What realrun's instrumentation costs: instrumented vs plain DDP step time.

    .venv/bin/python bench/train_overhead.py [--config 124m|tiny] [--pairs 3] [--steps 12] [-- more train args]

Both arms are `ddplab train` with the same config; the plain arm adds
`--no-instrument` (no comm hook: DDP's own C++ allreduce; two clock reads per
step). Runs alternate A B A B ... so drift on a shared machine (other jobs,
thermal state) falls on both arms alike. Per run: the median `step_wall_s` over its
steps after the warm-up; per pair, overhead = instrumented / plain - 1; the
headline is the median over pairs, against the 3 % budget (exit 1 above it).

The default config is a real model (GPT-2 124M, default buckets); `--config tiny`
is the worst case per second of step, gpt2-tiny's ~15 ms CPU step cut into 7
buckets. The cost is per bucket (DDP calling a Python comm hook and its future
callback instead of its C++ allreduce, ~0.4 ms each on this CPU; the timing
itself adds little), so it matters only when steps are a few milliseconds.
"""

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from realrun.records import read_run  # noqa: E402

BUDGET = 0.03
CONFIGS = {
    # A real model as a user would calibrate with it: GPT-2 124M, DDP's default 25 MiB
    # buckets (13 per step), ~3 s CPU steps here.
    "124m": [*("--model", "gpt2-124m", "--seq-len", "128", "--micro-batch", "2"), *("--data", str(ROOT / "README.md"))],
    # The worst case per second of step: gpt2-tiny's ~15 ms CPU step cut into 7 buckets.
    "tiny": [
        *("--model", "gpt2-tiny", "--seq-len", "64", "--micro-batch", "8", "--bucket-cap-mb", "0.05"),
        *("--data", str(ROOT / "README.md")),
    ],
}


def one_run(out: Path, nproc: int, steps: int, config: list[str], plain: bool) -> tuple[list[float], int]:
    """(per-step time of the slowest rank, DDP buckets per step; 0 for a plain run)."""
    cmd = [sys.executable, "-m", "ddplab", "train", "--nproc", str(nproc), "--steps", str(steps)]
    cmd += [*config, "--out", str(out), *(["--no-instrument"] if plain else [])]
    print("$", shlex.join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    # A step ends for everyone at its last allreduce, so every rank's step_wall_s is the step
    # time; pool them (per step, the slowest rank: what the job experiences).
    ranks = [r.of_type("step") for r in read_run(out, "train")]
    times = [max(r[i]["step_wall_s"] for r in ranks) for i in range(len(ranks[0]))]
    return times, ranks[0][-1].get("bucket_count", 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="124m", help="model and buckets (see CONFIGS)")
    ap.add_argument("--pairs", type=int, default=3, help="instrumented/plain run pairs")
    ap.add_argument("--steps", type=int, default=12, help="steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="steps dropped at the start of each run")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("extra", nargs="*", help="more `ddplab train` arguments (after --)")
    a = ap.parse_args()
    if a.steps <= a.warmup:
        raise SystemExit(f"--steps {a.steps} must exceed --warmup {a.warmup}")
    print("$", shlex.join([sys.executable, *sys.argv]))
    arms: dict[str, list[float]] = {"instrumented": [], "plain": []}
    rows, buckets = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(a.pairs):
            for arm in ("instrumented", "plain") if pair % 2 == 0 else ("plain", "instrumented"):
                out = Path(tmp) / f"{arm}-{pair}"
                times, n = one_run(out, a.nproc, a.steps, CONFIGS[a.config] + a.extra, plain=arm == "plain")
                times = times[a.warmup :]
                buckets = max(buckets, n)
                arms[arm] += times
                rows.append((pair, arm, statistics.median(times), len(times)))
    print(f"\n{'pair':>4}  {'arm':<12}  {'median step_s':>13}  {'steps':>5}")
    for pair, arm, med_s, n in rows:
        print(f"{pair:>4}  {arm:<12}  {med_s:>13.5f}  {n:>5}")
    instrumented, plain = (statistics.median(arms[k]) for k in ("instrumented", "plain"))
    pooled = instrumented / plain - 1
    by_pair = {(pair, arm): med_s for pair, arm, med_s, _ in rows}
    pair_overheads = [by_pair[p, "instrumented"] / by_pair[p, "plain"] - 1 for p in range(a.pairs)]
    # The headline is the median over pairs: each pair's two runs ran back to back, so load
    # from other jobs that comes and goes between pairs cancels within a pair.
    overhead = statistics.median(pair_overheads)
    print(
        f"\nmedian step over all runs: instrumented {instrumented * 1e3:.3f} ms, plain {plain * 1e3:.3f} ms"
        f" ({pooled:+.2%})\nper pair: {', '.join(f'{r:+.2%}' for r in pair_overheads)}"
        f"\noverhead (median over pairs): {overhead:+.2%} (budget {BUDGET:.0%})"
        f"\nper bucket: {overhead * plain / buckets * 1e3:+.3f} ms ({buckets} buckets per step): the cost"
        " scales with buckets per step, not with their size"
    )
    return 0 if overhead <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
