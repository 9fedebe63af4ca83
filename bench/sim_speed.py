"""How fast sim.engine simulates, and whether it agrees with a naive SimPy model.

    .venv/bin/python bench/sim_speed.py [--quick]

a) headline: h100-1024 (lognormal noise sigma 0.05, straggler 17:1.4, 25 MiB
   buckets), 1024 ranks x 1000 steps, best of N wall seconds vs the 5 s target,
   and the same against bench/engine_v1.py (the engine before online statistics,
   frozen), timed in the same run (v1/current >= 1: no slower);
b) past 1024: the same scenario at 65,536 ranks x 1000 steps, each engine in a
   fresh process (wall seconds and peak RSS) vs the 10 s and 1 GiB targets;
c) linearity: wall seconds per (rank x step) over a grid of 1024-65,536 ranks and steps;
d) the naive model (bench/naive_model.py: a process per rank and per rank per
   bucket) at small N, timed in the same run: naive wall / engine wall, and the two
   must agree on the mean step time to 1e-9 relative, else exit 1.
"""

import argparse
import json
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import simpy  # noqa: E402

from bench.engine_v1 import simulate as simulate_v1  # noqa: E402
from bench.naive_model import naive_step_times  # noqa: E402
from sim.config import Scenario  # noqa: E402
from sim.engine import simulate  # noqa: E402
from sim.scenario_file import load_scenario  # noqa: E402

PRESET = "h100-1024"
OVERRIDES = ["noise.distribution=lognormal", "noise.sigma=0.05", "training.bucket_cap_mb=25"]
STRAGGLER = (17, 1.4)
TARGET_S = 5.0
AGREE_REL = 1e-9
BIG_RANKS, BIG_STEPS = 65536, 1000
BIG_TARGET_S, BIG_TARGET_MIB = 10.0, 1024.0
ENGINES = {"current": simulate, "v1": simulate_v1}


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


def child(engine: str, ranks: int, steps: int) -> None:
    """One simulation in this (fresh) process: its wall seconds and the process's peak RSS."""
    sc = scenario(ranks, steps)
    t = time.perf_counter()
    res = ENGINES[engine](sc)
    wall = time.perf_counter() - t
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"wall_s": wall, "peak_rss_mib": rss_mib, "mean_step_s": float(res.step_time_s.mean())}))


def in_child(engine: str, ranks: int, steps: int) -> dict:
    argv = [sys.executable, __file__, "--child", engine, str(ranks), str(steps)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 repeats (naive: 1), a smaller grid, b) at 200 steps")
    p.add_argument("--child", nargs=3, metavar=("ENGINE", "RANKS", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    big_steps = 200 if args.quick else BIG_STEPS
    if args.quick:
        repeats, naive_repeats = 2, 1
        lin_ranks, lin_steps, lin_at = (1024, 16384), (100, 300), (100, 16384)
        naive_ranks, naive_steps = (8, 16), 20
    else:
        repeats, naive_repeats = 3, 3
        lin_ranks, lin_steps, lin_at = (1024, 4096, 16384, 65536), (250, 500, 1000), (250, 16384)
        naive_ranks, naive_steps = (8, 16, 32), 50

    print("$", shlex.join([sys.executable, *sys.argv]))
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, simpy {simpy.__version__}; "
        f"scenario {PRESET} + {' '.join(OVERRIDES)} stragglers={STRAGGLER[0]}:{STRAGGLER[1]}"
    )

    # a) headline, and the frozen engine run the same way in the same run
    sc = scenario(1024, 1000)
    wall, res = best_of(repeats, lambda: simulate(sc))
    wall_v1, res_v1 = best_of(repeats, lambda: simulate_v1(sc))
    ok = wall <= TARGET_S
    same = np.array_equal(res.step_time_s, res_v1.step_time_s)
    table(
        f"a) headline: {sc.ranks} ranks x {sc.steps} steps, best of {repeats}",
        ["ranks", "steps", "buckets", "mean_step_s", "wall_s", "target_s", "within_target", "v1_wall_s",
         "v1/current_x", "same_step_times"],
        [[sc.ranks, sc.steps, len(res.workload.buckets), float(res.step_time_s.mean()), wall,
          TARGET_S, "yes" if ok else "NO", wall_v1, wall_v1 / wall, "yes" if same else "NO"]],
    )  # fmt: skip

    # b) past 1024: each engine in its own process, so each peak RSS is its own
    rows = []
    for engine in ("current", "v1"):
        m = in_child(engine, BIG_RANKS, big_steps)
        within = m["wall_s"] <= BIG_TARGET_S and m["peak_rss_mib"] <= BIG_TARGET_MIB
        rows.append([engine, BIG_RANKS, big_steps, m["mean_step_s"], m["wall_s"], m["peak_rss_mib"],
                     "yes" if within else "NO"])  # fmt: skip
    cur, v1 = rows
    table(
        f"b) {BIG_RANKS} ranks x {big_steps} steps, one process each (targets: {BIG_TARGET_S:g} s, "
        f"{BIG_TARGET_MIB:g} MiB at {BIG_STEPS} steps)",
        ["engine", "ranks", "steps", "mean_step_s", "wall_s", "peak_rss_mib", "within_targets"],
        rows,
    )
    print(f"v1/current: wall {v1[4] / cur[4]:.2f}x, peak RSS {v1[5] / cur[5]:.2f}x; same mean step: {v1[3] == cur[3]}")

    # c) linearity: fit wall = steps x (a + ranks x b); a is the per-step cost
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
        f"c) linearity: best of {repeats}",
        ["ranks", "steps", "rank_steps", "wall_s", "us_per_rank_step", "ms_per_step", "fit_wall_s",
         "measured/fit-1"],
        rows,
    )  # fmt: skip
    print(
        f"fit: wall_s = steps x ({a * 1e3:.3g} ms + ranks x {b * 1e6:.3g} us); "
        f"per rank-step cost approaches {b * 1e6:.3g} us as ranks grow"
    )

    # d) naive model: speed ratio and agreement
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
        f"d) naive model vs engine: best of {repeats} (engine) / {naive_repeats} (naive)",
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
