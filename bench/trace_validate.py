"""How often `validate` predicts a run from its own trace within the home-lab tier, on this box.

    .venv/bin/python bench/trace_validate.py [--runs 5] [--report measurements/trace_validate.txt]

Each run is tests/test_traces_realrun.py's: `ddplab train --profile 200` (CPU, 2 ranks, gloo,
gpt2-tiny, 202 steps), `ddplab calibrate` on its two traces, `ddplab validate` of the run from
that calibration. Per run: validate's p50 and mean step errors, its mean wait's error (the wait
after backward, mean over ranks), its KS distance, and the lag-1 autocorrelation of the
measured steps (how much the box wandered under them). The headline is
how many runs have their p50 within the 5 % tier, which issue 24 asks of every run.

Why a benchmark and not a test: the measured median of 200 steps moves with this shared box's
load by several per cent from run to run (lag-1 0.6-0.9: slow and fast stretches), while the
model communicates at one tuned rate (docs/traces.md, Limits), so one run's p50 falls outside
5 % in some runs and not others. make test keeps what holds in every run (the mean, the wait);
this counts the p50 over several, as the speed targets are counted (bench/).
"""

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIER = 0.05  # the home-lab tier (docs/validation.md)
PROFILED = 200
ARGS = [
    *("--model", "gpt2-tiny", "--seq-len", "64", "--micro-batch", "8", "--bucket-cap-mb", "0.05"),
    *("--data", str(ROOT / "README.md"), "--steps", str(2 + PROFILED), "--profile", str(PROFILED)),
]


def ddplab(*args: str) -> str:
    cmd = [sys.executable, "-m", "ddplab", *map(str, args)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"$ {shlex.join(cmd)}\nfailed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def one_run(out: Path, extra: list[str]) -> dict:
    ddplab("train", "--nproc", "2", "--out", out, *ARGS, *extra)
    calib = out.parent / f"{out.name}-calib.json"
    ddplab("calibrate", *sorted(out.glob("trace-rank*.json.gz")), "-o", calib)
    (row,) = json.loads(ddplab("validate", out, "--calib", calib, "--json"))["rows"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="profiled runs, each calibrated and validated")
    ap.add_argument("--report", type=Path, help="also write the table here")
    ap.add_argument(
        "--loader-straggler",
        metavar="RANK:MS",
        help="passed to every run's `ddplab train`: one rank's batches late (its host delay, docs/traces.md)",
    )
    a = ap.parse_args()
    lines = ["$ " + shlex.join([Path(sys.executable).name, *sys.argv])]
    head = f"{'run':>3} {'p50 err':>8} {'mean err':>9} {'wait err':>9} {'KS':>5} {'lag1':>5} {'p50 ms':>7}"
    lines.append(f"{head}  within {TIER:.0%}")
    print("\n".join(lines), flush=True)
    within = 0
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            row = one_run(
                Path(tmp) / f"run{i}", ["--loader-straggler", a.loader_straggler] if a.loader_straggler else []
            )
            ok = abs(row["error_p50"]) < TIER
            within += ok
            wait = row["predicted_wait_s"] / row["measured_wait_s"] - 1
            line = (
                f"{i:>3} {row['error_p50']:>+8.1%} {row['error_mean']:>+9.1%} {wait:>+9.1%} {row['ks']:>5.2f}"
                f" {row['lag1']:>+5.2f} {row['measured_p50_s'] * 1e3:>7.2f}  {'yes' if ok else 'MISS'}"
            )
            print(line, flush=True)
            lines.append(line)
    tail = f"{within} of {a.runs} runs within the {TIER:.0%} tier on their p50 ({time.time() - started:.0f} s)"
    print(tail)
    lines.append(tail)
    if a.report:
        a.report.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
