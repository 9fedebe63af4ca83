"""How fast sim.engine simulates, and whether it agrees with a naive SimPy model.

    .venv/bin/python bench/sim_speed.py [--quick]

a) headline: h100-1024 (lognormal noise sigma 0.05, straggler 17:1.4, 25 MiB
   buckets), 1024 ranks x 1000 steps, best of N wall seconds vs the 5 s target;
b) linearity: wall seconds per (rank x step) over a grid of ranks and steps;
c) the naive model (bench/naive_model.py: a process per rank and per rank per
   bucket) at small N, timed in the same run: naive wall / engine wall, and the two
   must agree on the mean step time to 1e-9 relative, else exit 1.
"""

import argparse
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import simpy  # noqa: E402

from bench.naive_model import naive_step_times  # noqa: E402
from sim.config import Scenario  # noqa: E402
from sim.engine import simulate  # noqa: E402
from sim.scenario_file import load_scenario  # noqa: E402

PRESET = "h100-1024"
OVERRIDES = ["noise.distribution=lognormal", "noise.sigma=0.05", "training.bucket_cap_mb=25"]
STRAGGLER = (17, 1.4)
TARGET_S = 5.0
AGREE_REL = 1e-9


def scenario(ranks: int, steps: int) -> Scenario:
    """The headline scenario at any size. Below 18 ranks the straggler (rank 17)
    does not exist, so the last rank is the straggler instead."""
    rank = STRAGGLER[0] if ranks > STRAGGLER[0] else ranks - 1
    stragglers = f"stragglers={rank}:{STRAGGLER[1]}"
    return load_scenario(PRESET, [*OVERRIDES, stragglers], ranks=ranks, steps=steps)


def best_of(n: int, fn):
    """(best wall seconds over n calls, the last call's result)."""
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def table(title: str, headers: list[str], rows: list[list]) -> None:
    cells = [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 repeats (naive: 1), a smaller grid")
    args = p.parse_args(argv)
    if args.quick:
        repeats, naive_repeats = 2, 1
        lin_ranks, lin_steps, lin_at = (128, 512, 1024), (100, 300), (100, 1024)
        naive_ranks, naive_steps = (8, 16), 20
    else:
        repeats, naive_repeats = 3, 3
        lin_ranks, lin_steps, lin_at = (128, 256, 512, 1024), (250, 500, 1000), (250, 1024)
        naive_ranks, naive_steps = (8, 16, 32), 50

    print("$", shlex.join([sys.executable, *sys.argv]))
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, simpy {simpy.__version__}; "
        f"scenario {PRESET} + {' '.join(OVERRIDES)} stragglers={STRAGGLER[0]}:{STRAGGLER[1]}"
    )

    # a) headline
    sc = scenario(1024, 1000)
    wall, res = best_of(repeats, lambda: simulate(sc))
    ok = wall <= TARGET_S
    table(
        f"a) headline: {sc.ranks} ranks x {sc.steps} steps, best of {repeats}",
        ["ranks", "steps", "buckets", "mean_step_s", "wall_s", "target_s", "within_target"],
        [[sc.ranks, sc.steps, len(res.workload.buckets), float(res.step_time_s.mean()), wall,
          TARGET_S, "yes" if ok else "NO"]],
    )  # fmt: skip

    # b) linearity: fit wall = steps x (a + ranks x b); a is the per-step cost
    # (SimPy events, per-bucket loop), b the per-rank-step cost (numpy element-wise).
    at_steps, at_ranks = lin_at
    grid = list(dict.fromkeys([(r, at_steps) for r in lin_ranks] + [(at_ranks, s) for s in lin_steps]))
    walls = []
    for ranks, steps in grid:
        s = scenario(ranks, steps)
        walls.append(best_of(repeats, lambda s=s: simulate(s))[0])
    x = np.array([[st, r * st] for r, st in grid], dtype=float)
    (a, b), *_ = np.linalg.lstsq(x, np.array(walls), rcond=None)
    rows = [[r, st, r * st, w, w / (r * st) * 1e6, w / st * 1e3, float(fit), f"{w / fit - 1:+.1%}"]
            for (r, st), w, fit in zip(grid, walls, x @ [a, b], strict=True)]  # fmt: skip
    table(
        f"b) linearity: best of {repeats}",
        ["ranks", "steps", "rank_steps", "wall_s", "us_per_rank_step", "ms_per_step", "fit_wall_s",
         "measured/fit-1"],
        rows,
    )  # fmt: skip
    print(
        f"fit: wall_s = steps x ({a * 1e3:.3g} ms + ranks x {b * 1e6:.3g} us); "
        f"per rank-step cost approaches {b * 1e6:.3g} us as ranks grow"
    )

    # c) naive model: speed ratio and agreement
    rows, bad = [], []
    for ranks in naive_ranks:
        s = scenario(ranks, naive_steps)
        eng_wall, eng = best_of(repeats, lambda s=s: simulate(s))
        nai_wall, nai = best_of(naive_repeats, lambda s=s: naive_step_times(s))
        e_mean, n_mean = float(eng.step_time_s.mean()), float(nai.mean())
        rel = abs(n_mean - e_mean) / abs(e_mean)
        rel_max = float(np.max(np.abs(nai - eng.step_time_s) / np.abs(eng.step_time_s)))
        if not rel <= AGREE_REL:
            bad.append((ranks, e_mean, n_mean, rel))
        rows.append([ranks, naive_steps, eng_wall, nai_wall, nai_wall / eng_wall,
                     e_mean, n_mean, f"{rel:.1e}", f"{rel_max:.1e}"])  # fmt: skip
    table(
        f"c) naive model vs engine: best of {repeats} (engine) / {naive_repeats} (naive)",
        ["ranks", "steps", "engine_wall_s", "naive_wall_s", "naive/engine_x", "engine_mean_step_s",
         "naive_mean_step_s", "mean_rel_diff", "max_step_rel_diff"],
        rows,
    )  # fmt: skip
    if bad:
        print(f"\n!!! MISMATCH: naive model and engine disagree beyond {AGREE_REL:g} relative:")
        for ranks, e, n, rel in bad:
            print(f"!!!   {ranks} ranks: engine {e!r} s, naive {n!r} s, rel diff {rel:.3e}")
        return 1
    print(f"\nnaive model and engine agree on the mean step time to {AGREE_REL:g} relative")
    return 0


if __name__ == "__main__":
    sys.exit(main())
