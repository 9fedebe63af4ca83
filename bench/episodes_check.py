"""The expected cost of episodes (sim/episode_cost.py) against brute-force runs that contain them.

    .venv/bin/python bench/episodes_check.py [--hours 24] [--out measurements/episodes-check.txt]

For straggler-failslow and straggler-throttle at their defaults (1024 ranks, seed 0): one
simulation step by step over ``--hours`` of simulated time, with its episodes drawn as they
come, against (a) the expected cost over that horizon with its 95 % interval (what `simulate`
and `whatif` print) and (b) the states' steady throughput weighed by the shares of time the
run's own episodes held (sim/episode_check.py), which leaves out the horizon's luck.

Bounds, set before the first run: (a) the brute-force cost inside expected +- 1.96 sd;
(b) the realised-share prediction within 1 % of the brute-force throughput. A miss is printed
as one and the script exits 1.
"""

import argparse
import math
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.engine import simulate  # noqa: E402
from sim.episode_check import predicted_tokens_per_s, realised_shares  # noqa: E402
from sim.episode_cost import expected_cost  # noqa: E402
from sim.scenario_file import load_scenario  # noqa: E402

PRESETS = ("straggler-failslow", "straggler-throttle")
REALISED_BOUND = 0.01


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--out", type=Path, default=ROOT / "measurements" / "episodes-check.txt")
    args = ap.parse_args()
    lines = [
        "# " + shlex.join([".venv/bin/python", "bench/episodes_check.py", *sys.argv[1:]]),
        f"# each preset at its defaults, a brute-force run over {args.hours:g} simulated hours against the expected"
        " cost (sim/episode_cost.py, 300 steps per state)",
        f"# bounds (set before the first run): brute cost inside expected +- 1.96 sd; realised-share prediction within"
        f" {REALISED_BOUND:.0%}",
    ]
    misses = 0
    for name in PRESETS:
        sc = load_scenario(name, steps=300)
        e = expected_cost(sc, horizon_h=args.hours)
        steps = math.ceil(args.hours * 3600.0 / e.clear_step_time_s)
        t = time.perf_counter()
        brute = simulate(load_scenario(name, steps=steps), trace_steps=0)
        wall_s = time.perf_counter() - t
        end_s = float(brute.step_time_s.sum())
        tps = brute.workload.tokens_per_step * steps / end_s
        cost = 1.0 - tps / e.clear_tokens_per_s
        shares = realised_shares(sc, end_s)
        realised = predicted_tokens_per_s(e, shares)
        ok_a = abs(cost - e.cost) <= 1.96 * e.cost_sd
        err_b = realised / tps - 1
        ok_b = abs(err_b) <= REALISED_BOUND
        misses += (not ok_a) + (not ok_b)
        comm_seen = sum(p for h, p in shares.items() if h.comm)
        compute_seen = sum(p for h, p in shares.items() if h.compute_rank is not None)
        lines += [
            f"{name}: {steps:,} steps, {end_s / 3600:.2f} simulated h, {wall_s:.0f} s to simulate",
            f"  time with the network degraded: expected {e.comm_share:.1%}, this run {comm_seen:.1%};"
            f" with a rank throttled: expected {e.compute_share:.1%}, this run {compute_seen:.1%}",
            f"  (a) cost: brute force {cost:.2%}, expected {e.cost:.2%} +- {1.96 * e.cost_sd:.2%}"
            f"  {'within' if ok_a else 'MISS'}",
            f"  (b) tokens/s: brute force {tps:,.0f}, realised-share prediction {realised:,.0f} ({err_b:+.2%})"
            f"  {'within' if ok_b else 'MISS'}",
        ]
        print("\n".join(lines[-4:]), flush=True)
    lines.append(f"# {2 * len(PRESETS) - misses} of {2 * len(PRESETS)} within their bounds")
    args.out.write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
