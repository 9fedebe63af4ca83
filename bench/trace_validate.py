"""How often `validate` predicts a run from its own trace within the home-lab tier, on this box.

    .venv/bin/python bench/trace_validate.py [--runs 5] [--report measurements/trace_validate.txt]

Each run is tests/test_traces_realrun.py's: `ddplab train --profile 200` (CPU, 2 ranks, gloo,
gpt2-tiny, 202 steps), `ddplab calibrate` on its two traces, `ddplab validate` of the run from
that calibration. Per run: validate's p50, p95 and mean step errors, its mean wait's error (the
wait after backward, mean over ranks), its KS distance and p-value, and the lag-1
autocorrelation of the measured steps (how much the box wandered under them). The headline is
how many runs have their p50 within the 5 % tier, which issue 24 asks of every run; the tail
line counts the runs whose distribution passes KS at p >= 0.05 and whose p95 is within 10 %.

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


def one_run(out: Path, extra: list[str], paired: bool) -> dict[str, dict]:
    """validate's row of one profiled run from its trace calibration; with ``paired`` also from the
    same traces calibrated with every all-reduce at one rate (no call-to-call jitter, as before
    2026-12-07, twenty-first session), keyed "spans" and "one rate"."""
    ddplab("train", "--nproc", "2", "--out", out, *ARGS, *extra)
    traces = sorted(out.glob("trace-rank*.json.gz"))
    calib = out.parent / f"{out.name}-calib.json"
    ddplab("calibrate", *traces, "-o", calib)
    rows = {"spans": calib}
    if paired:
        import calibrate.trace_calib as trace_calib  # in this process: the one switch the pair differs by

        one = out.parent / f"{out.name}-calib-one-rate.json"
        spans, trace_calib._span_jitter = trace_calib._span_jitter, lambda fit: None
        try:
            one.write_text(json.dumps(trace_calib.calibrate_traces(traces).to_json()))
        finally:
            trace_calib._span_jitter = spans
        rows["one rate"] = one
    return {k: json.loads(ddplab("validate", out, "--calib", c, "--json"))["rows"][0] for k, c in rows.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="profiled runs, each calibrated and validated")
    ap.add_argument("--report", type=Path, help="also write the table here")
    ap.add_argument(
        "--loader-straggler",
        metavar="RANK:MS",
        help="passed to every run's `ddplab train`: one rank's batches late (its host delay, docs/traces.md)",
    )
    ap.add_argument(
        "--paired",
        action="store_true",
        help="also calibrate each run with every all-reduce at one rate (no call-to-call jitter) and validate"
        " that, on the same steps: a second line per run, counted apart",
    )
    a = ap.parse_args()
    lines = ["$ " + shlex.join([Path(sys.executable).name, *sys.argv])]
    head = (
        f"{'run':>3} {'p50 err':>8} {'p95 err':>8} {'mean err':>9} {'wait err':>9} {'KS':>5} {'KS p':>6} {'lag1':>5}"
        f" {'p50 ms':>7}"
    )
    lines.append(f"{head}  within {TIER:.0%}")
    print("\n".join(lines), flush=True)
    counts = {"spans": [0, 0, 0], "one rate": [0, 0, 0]}  # p50 within the tier, KS p >= 0.05, p95 within 10 %
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            extra = ["--loader-straggler", a.loader_straggler] if a.loader_straggler else []
            for kind, row in one_run(Path(tmp) / f"run{i}", extra, a.paired).items():
                ok = abs(row["error_p50"]) < TIER
                for k, hit in enumerate((ok, row["ks_p"] >= 0.05, abs(row["error_p95"]) < 0.10)):
                    counts[kind][k] += hit
                wait = row["predicted_wait_s"] / row["measured_wait_s"] - 1
                line = (
                    f"{i:>3} {row['error_p50']:>+8.1%} {row['error_p95']:>+8.1%} {row['error_mean']:>+9.1%}"
                    f" {wait:>+9.1%} {row['ks']:>5.2f} {row['ks_p']:>6.3f} {row['lag1']:>+5.2f}"
                    f" {row['measured_p50_s'] * 1e3:>7.2f}  {'yes' if ok else 'MISS'}"
                    + (f"  {kind}" if a.paired else "")
                )
                print(line, flush=True)
                lines.append(line)
    for kind, (within, ks_pass, p95_within) in counts.items():
        if kind == "one rate" and not a.paired:
            continue
        name = f" ({kind})" if a.paired else ""
        tail = f"{within} of {a.runs} runs within the {TIER:.0%} tier on their p50{name}"
        tails = (
            f"tails{name}: {ks_pass} of {a.runs} pass KS at p >= 0.05; {p95_within} of {a.runs} have their p95"
            " within 10 %"
        )
        print(tail, tails, sep="\n")
        lines += [tail, tails]
    lines.append(f"({time.time() - started:.0f} s)")
    print(lines[-1])
    if a.report:
        a.report.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
