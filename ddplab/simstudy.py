"""The demo's simulations: the measured home lab and two 1024-GPU clusters swept over
rank counts with the calibration applied, what one lemon GPU costs at 1024 and which fix
pays for it, and what failures cost over a campaign.

Writes under ``RUN_DIR/sim/``: ``<platform>/`` (sim/export.py's records, traces and
``scaling.png`` per platform), ``<platform>/timeline.png``, ``stragglers.png`` and
``summary.json`` ({"platforms": {name: [summary per rank count]}, "stragglers": [...],
"fixes": [sim/whatif.py rows for the lemon GPU], "goodput": {...}}).
"""

from pathlib import Path

from calibrate.apply import load_for_simulation
from ddplab.demo import LEMON, MICRO_BATCH, MODEL, SEQ_LEN
from sim.config import scenario_from_dict
from sim.engine import simulate
from sim.export import write_result, write_summaries
from sim.plot import plot_timeline

# The home lab as measured: the demo's own model and batch on the calibrated machines.
HOMELAB_SET = [
    f"model.preset={MODEL}",
    f"training.seq_len={SEQ_LEN}",
    f"training.micro_batch_size={MICRO_BATCH}",
    "training.precision=fp32",  # as realrun trains on CPU: fp32 gradients
]
LEMON_RANK = 17


def _scenario(name: str, calib: dict, calib_path: str, ranks: int, steps: int, extra=()):
    preset = "homelab-1gbe" if name == "homelab" else name
    overrides = (HOMELAB_SET if name == "homelab" else []) + list(extra)
    cal = load_for_simulation(preset, overrides, calib, calib_path, None, "auto", ranks=ranks)
    data, mode = cal.data, cal.mode
    data["steps"] = steps
    return scenario_from_dict(data), mode


def run_study(run_dir: Path, *, sweep, steps: int) -> dict:
    from ddplab.calcmds import read_calib, write_json_atomic

    calib_path = run_dir / "calib.json"
    calib = read_calib(calib_path)
    out = run_dir / "sim"
    out.mkdir(parents=True, exist_ok=True)
    platforms = {}
    for name in ("homelab", "h100-1024", "mi300x-1024"):
        summaries = []
        for n in sweep:
            sc, mode = _scenario(name, calib, str(calib_path), n, steps)
            result = simulate(sc)
            s = result.summary() | {"calibration_mode": mode}
            summaries.append(s)
            write_result(result, out / name)
            if n == sweep[0] and name == "homelab":
                plot_timeline(result, out / name / "timeline.png", f"home lab as measured, {n} ranks: first 3 steps")
        write_summaries(summaries, out / name, sweep=True)
        platforms[name] = summaries
    stragglers = []
    for name in ("h100-1024", "mi300x-1024"):
        variants = (
            ("no jitter", ["noise.distribution=none", "noise.speed_spread_sd=0.0"]),
            ("measured jitter", []),
            (f"+ one lemon GPU x{LEMON:g}", [f"stragglers={LEMON_RANK}:{LEMON}"]),
        )
        for label, extra in variants:
            sc, _ = _scenario(name, calib, str(calib_path), 1024, steps, extra)
            result = simulate(sc, trace_ranks=[0, 1, 2, LEMON_RANK])
            stragglers.append({"platform": name, "variant": label} | result.summary())
            if extra and extra[0].startswith("stragglers"):
                title = f"{name}, 1024 ranks, one lemon GPU (rank {LEMON_RANK}) x{LEMON:g}: first 3 steps"
                plot_timeline(result, out / name / "timeline.png", title)
    _plot_stragglers(stragglers, out / "stragglers.png")
    summary = {
        "platforms": platforms,
        "stragglers": stragglers,
        "fixes": _fixes(calib, str(calib_path), steps),
        "goodput": _goodput(),
    }
    write_json_atomic(out / "summary.json", summary)
    return summary


def _fixes(calib: dict, calib_path: str, steps: int) -> list[dict]:
    """Which fix pays for the lemon GPU on 1024 H100s (sim/whatif.py), with the measured jitter."""
    from sim.whatif import compare

    data = load_for_simulation(
        "h100-1024", [f"stragglers={LEMON_RANK}:{LEMON}"], calib, calib_path, None, "auto", ranks=1024
    ).data
    data["steps"] = steps
    rows = compare(data, ["rebalance", "exclude-slowest", "accum=4"], horizon_h=24.0, restart_min=10.0)
    return [r._asdict() for r in rows]


def _goodput() -> dict:
    """Failures on the same 1024 GPUs (128 nodes) at REFERENCES.md's 6.5 failures per 1000
    node-days, 10 min restarts, 2 min checkpoints at Daly's interval (sim/goodput.py)."""
    from sim.goodput import Campaign, daly_interval_min, estimate, job_mtbf_min, wall_per_work_analytic

    mtbf = job_mtbf_min(failures_per_1000_node_days=6.5, nodes=128)
    costs = {"mtbf_min": mtbf, "restart_min": 10.0, "checkpoint_min": 2.0}
    tau = daly_interval_min(checkpoint_min=2.0, mtbf_min=mtbf)
    sim = estimate(Campaign(work_min=1000 * mtbf, interval_min=tau, **costs), seed=0)
    return {
        "mtbf_h": mtbf / 60.0,
        "interval_min": tau,
        "wall_per_work": {
            "simulated": sim.wall_per_work,
            "analytic": wall_per_work_analytic(interval_min=tau, **costs),
        },
        "failures_per_week": 7 * 24 * 60 / mtbf,
    }


def _plot_stragglers(rows: list[dict], path: Path) -> None:
    """Mean step time at 1024 ranks per platform and variant, split into own work,
    exposed communication and straggler wait (they add up, sim/results.py)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    labels = [f"{r['platform']}\n{r['variant']}" for r in rows]
    x = range(len(rows))
    busy = [(r["compute_s"] + r["dataloader_s"] + r["optimizer_s"]) * 1e3 for r in rows]
    exposed = [r["exposed_comm_s"] * 1e3 for r in rows]
    wait = [r["straggler_wait_s"] * 1e3 for r in rows]
    ax.bar(x, busy, color="C2", label="compute + optimizer")
    ax.bar(x, exposed, bottom=busy, color="C3", label="exposed comm")
    ax.bar(x, wait, bottom=[b + e for b, e in zip(busy, exposed, strict=True)], color="C7", label="straggler wait")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['scaling_efficiency']:.0%}", (i, r["step_time_s"]["mean"] * 1e3), ha="center", va="bottom")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("mean step time (ms)")
    ax.set_title("1024 ranks: what jitter and one slow GPU cost (labels: scaling efficiency)")
    ax.legend(fontsize="small", loc="lower right")
    fig.savefig(path, dpi=110)
