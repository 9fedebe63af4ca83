"""Are a sitting's runs draws from one distribution? The check behind docs/validation.md's
"What the KS test can and cannot say here".

    .venv/bin/python docs/validation/stationarity.py [DIR] [--validate-json FILE]

1. Identical work, different runs: every training run at micro-batch 4 computes the same
   forward and backward on rank 0 (rank 1 burns extra in the straggler runs; rank 0 never
   does). Per run, rank 0's per-step compute (forward_s + backward_s after the 2 warm-up
   steps): its mean against the other runs', its sd, its lag-1 autocorrelation, and the
   two-sample KS test of it against the other runs' pooled. No model is involved: where this
   test rejects, the runs themselves disagree, and no stationary model of step time can pass
   KS on all of them.
2. With ``--validate-json`` (``ddplab validate ... --json``): per run, the plain ``ks_p`` next
   to the p-value the same distance would have with the measured sample counted at its
   effective size under lag-1 autocorrelation r, n (1 - r) / (1 + r) (an AR(1) process's
   variance inflation for the mean; Bartlett 1946), through the asymptotic Kolmogorov law. An
   illustration of how much autocorrelation weighs, not a replacement for ``ks_p``.
3. With ``--validate-json`` too: per run, how far its compute drifted from the probes' (the
   run's measured forward + backward to its last bucket over the calibration's at its size,
   less DDP's divide and copy back after the last bucket, which the probes time and training
   counts as wait), beside the step error. If the step errors follow the drift, the level of
   the box moved, not the model's structure.
"""

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import ks_2samp, kstwobign

WARMUP_STEPS = 2  # as calibrate/validate.py


def _lag1(x: np.ndarray) -> float:
    d = x - x.mean()
    return float((d[:-1] * d[1:]).sum() / (d * d).sum())


def _rank0_compute(run: Path) -> np.ndarray:
    recs = [json.loads(line) for line in (run / "train-rank0000.jsonl").read_text().splitlines()]
    steps = [r for r in recs if r.get("type") == "step"][WARMUP_STEPS:]
    return np.array([r["forward_s"] + r["backward_s"] for r in steps])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, nargs="?", default=Path("measurements/validation"))
    ap.add_argument("--validate-json", type=Path)
    a = ap.parse_args()
    runs = {}
    for run in sorted(a.dir.glob("*/train-*")):
        meta = json.loads((run / "train-rank0000.jsonl").read_text().splitlines()[0])
        if meta["config"]["micro_batch"] == 4 and meta["config"]["grad_accum"] == 1:
            runs[f"{run.parent.name}/{run.name}"] = _rank0_compute(run)
    pooled = np.concatenate(list(runs.values()))
    print(f"rank 0's compute per step at micro-batch 4, {len(runs)} runs: mean {pooled.mean():.3f} s,"
          f" sd {pooled.std() / pooled.mean():.1%}")  # fmt: skip
    print(f"{'run':<26} {'mean s':>7} {'vs others':>9} {'sd':>6} {'lag1':>6} {'KS':>5} {'KS p':>8}")
    rejected = 0
    for name, x in runs.items():
        others = np.concatenate([y for m, y in runs.items() if m != name])
        ks = ks_2samp(x, others)
        rejected += ks.pvalue < 0.05
        print(f"{name:<26} {x.mean():>7.3f} {x.mean() / others.mean() - 1:>+9.1%} {x.std() / x.mean():>6.1%}"
              f" {_lag1(x):>+6.2f} {ks.statistic:>5.2f} {ks.pvalue:>8.2g}")  # fmt: skip
    print(f"{rejected} of {len(runs)} runs' compute differs from the other runs' at p < 0.05")
    if a.validate_json:
        # Read once: the documented command passes validate's output as <(...), a pipe.
        report = json.loads(a.validate_json.read_text())
        rows = report["rows"]
        print(f"\n{'run':<26} {'steps':>5} {'lag1':>6} {'n_eff':>6} {'KS':>5} {'ks_p':>8} {'p at n_eff':>10}")
        for r in rows:
            n, m, lag = r["steps"], r["simulated_steps"], r["lag1"]
            n_eff = n * (1 - lag) / (1 + lag) if lag > 0 else n
            adjusted = float(kstwobign.sf(r["ks"] * np.sqrt(n_eff * m / (n_eff + m))))
            print(f"{r['name']:<26} {n:>5} {lag:>+6.2f} {n_eff:>6.1f} {r['ks']:>5.2f} {r['ks_p']:>8.2g}"
                  f" {adjusted:>10.2g}")  # fmt: skip
        passed = sum(r["ks_p"] >= 0.05 for r in rows)
        print(f"plain ks_p >= 0.05: {passed} of {len(rows)}")
        _drift(rows, report["calib"])


def _tail_s(calib_path: str) -> dict[int, float]:
    """Per micro-batch, the probes' mean of backward_s - backward_ready_s (DDP's work after the
    last bucket: the divide and the copy back)."""
    calib = json.loads(Path(calib_path).read_text())
    tails: dict[int, list[float]] = {}
    for run in calib["compute"]["runs"]:
        for f in sorted(Path(run).glob("probe-rank*.jsonl")):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                if r.get("type") == "compute" and "backward_ready_s" in r:
                    tails.setdefault(r["micro_batch"], []).append(r["backward_s"] - r["backward_ready_s"])
    return {b: float(np.mean(v)) for b, v in tails.items()}


def _drift(rows: list[dict], calib_path: str) -> None:
    tails = _tail_s(calib_path)
    print(f"\n{'run':<26} {'cmp drift':>9} {'step err (mean)':>15} {'compute share':>13} {'err + drift x share':>19}")
    for r in rows:
        meta = json.loads((Path(r["run"]) / "train-rank0000.jsonl").read_text().splitlines()[0])
        tail = tails.get(meta["config"]["micro_batch"], 0.0)
        drift = r["measured_compute_s"] / (r["predicted_compute_s"] - tail) - 1
        share = r["measured_compute_s"] / r["measured_mean_s"]
        print(f"{r['name']:<26} {drift:>+9.1%} {r['error_mean']:>+15.1%} {share:>13.2f}"
              f" {r['error_mean'] + drift * share:>+19.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
