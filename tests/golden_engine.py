"""Freeze the engine's numbers as golden arrays (tests/data/engine-golden.npz), the oracle
tests/test_engine_golden.py holds sim/engine.py and sim/fsdp.py to; ``run`` is what a case is
held to, for both.

    .venv/bin/python tests/golden_engine.py

Run once, at the commit whose numbers are to be kept (issue 26 ran it at a1db606, before the
engine lost SimPy: the arrays are that engine's, which bench/engine_v1.py's frozen copy matched).

    .venv/bin/python tests/golden_engine.py --refreeze fsdp hsdp

re-runs only the stored cases named with one of those words, on their stored data, and keeps
every other array: for an intended change to what those cases compute, named in its commit.
Done once: the FSDP and HSDP cases when FSDP's units took their shares of the step from the
roofline's kernel times instead of FLOPs (2026-12-06, sim/workload.py forward_shares); every
DDP case is still a1db606's.
Each case stores its scenario as data (sim/scenario_file.py scenario_from_dict), so the test
does not depend on presets or calibrate/ staying as they are.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from calibrate.calibration import Calibration  # noqa: E402
from sim.engine import simulate  # noqa: E402
from sim.online import RANK_FIELDS  # noqa: E402
from sim.patches import flag_patches  # noqa: E402
from sim.scenario_file import scenario_data, scenario_from_dict  # noqa: E402
from workflow.simulation import calibrated  # noqa: E402

OUT = ROOT / "tests" / "data" / "engine-golden.npz"
RANKS, STEPS = 64, 10
PRESETS = [
    "a100-8", "h100-1024", "h100-16k", "h100-64k", "homelab-10gbe", "homelab-1gbe", "llama3-8b-1024",
    "mi300x-1024", "straggler-dataloader", "straggler-failslow", "straggler-gc", "straggler-jitter",
    "straggler-lemon", "straggler-throttle",
]  # fmt: skip
SHARDED = ["h100-1024", "mi300x-1024", "straggler-gc", "straggler-failslow", "straggler-lemon", "straggler-dataloader"]
CALIBS = ["tests/calib-2026-11-29.json", "measurements/validation/calib.json"]


def _size(preset: str) -> dict:
    """64 ranks where the preset has at least as many; small presets keep theirs."""
    ranks = scenario_data(preset).get("ranks", 1)
    return {"ranks": min(ranks, RANKS), "steps": STEPS}


def cases() -> dict[str, dict]:
    """name -> scenario data."""
    out = {}
    for p in PRESETS:
        out[p] = scenario_data(p, [], **_size(p))
        out[f"{p} gamma=0.1"] = scenario_data(p, ["compute.interference_gamma=0.1"], **_size(p))
    for p in SHARDED:
        for mode in ("fsdp", "hsdp"):
            out[f"{p} {mode}"] = scenario_data(p, [f"training.mode={mode}"], **_size(p))
            out[f"{p} {mode} gamma=0.1"] = scenario_data(
                p, [f"training.mode={mode}", "compute.interference_gamma=0.1"], **_size(p)
            )
    extra = {
        "h100-1024 accum=3 gamma=0.3": ("h100-1024", ["training.grad_accum=3", "compute.interference_gamma=0.3"]),
        "h100-1024 no overlap gamma=0.3": ("h100-1024", ["training.overlap=false", "compute.interference_gamma=0.3"]),
        "h100-1024 straggler gamma=0.5": ("h100-1024", ["stragglers=17:1.4", "compute.interference_gamma=0.5"]),
        "h100-1024 fsdp accum=2 prefetch=2 gamma=0.2": (
            "h100-1024",
            ["training.mode=fsdp", "training.grad_accum=2", "training.fsdp_prefetch=2"]
            + ["compute.interference_gamma=0.2"],
        ),
        "homelab-1gbe accum=4 gamma=0.6": ("homelab-1gbe", ["training.grad_accum=4", "compute.interference_gamma=0.6"]),
        "straggler-gc accum=2 gamma=0.1": ("straggler-gc", ["training.grad_accum=2", "compute.interference_gamma=0.1"]),
    }
    for name, (p, sets) in extra.items():
        out[name] = scenario_data(p, sets, **_size(p))
    for path in CALIBS:
        calib = Calibration.from_json(json.loads((ROOT / path).read_text()), path)
        for net in sorted(calib.networks) or [None]:
            # The calibrated runs with interference (the measured gamma transfers in these modes).
            for p, mode in (("h100-1024", "all"), ("homelab-1gbe", "auto"), ("straggler-gc", "all")):
                got, _ = calibrated(p, calib, path, flags=flag_patches(**_size(p)), network=net, mode=mode)
                out[f"{p} calib {path} {net} {mode}"] = got.data
    return out


def run(data: dict) -> dict[str, np.ndarray]:
    """The arrays a case is held to."""
    res = simulate(scenario_from_dict(data), medians=True)
    got = {"step_time_s": res.step_time_s, "step_end_s": res.step_end_s, "comm_busy_s": res.comm_busy_s}
    for k in RANK_FIELDS:
        got[f"rank_mean.{k}"] = res.rank_mean[k]
        got[f"step_mean.{k}"] = res.step_mean[k]
    got["compute_p50_s"] = res.compute_p50_s
    return got


def main() -> int:
    arrays: dict[str, np.ndarray] = {}
    all_cases = cases()
    for i, (name, data) in enumerate(all_cases.items()):
        for k, v in run(data).items():
            arrays[f"{i}/{k}"] = v
        print(f"{i:3d} {name}", flush=True)
    arrays["cases"] = np.array(json.dumps([[name, data] for name, data in all_cases.items()]))
    OUT.parent.mkdir(exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(all_cases)} cases, {OUT.stat().st_size / 1024:.0f} KiB")
    return 0


def refreeze(words: list[str]) -> int:
    """Re-run the stored cases named with one of ``words``, on their stored data."""
    old = np.load(OUT)
    arrays = {k: old[k] for k in old.files}
    for i, (name, data) in enumerate(json.loads(str(old["cases"]))):
        if set(words) & set(name.split()):
            for k, v in run(data).items():
                arrays[f"{i}/{k}"] = v
            print(f"{i:3d} {name}", flush=True)
    np.savez_compressed(OUT, **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(refreeze(sys.argv[2:]) if sys.argv[1:2] == ["--refreeze"] else main())
