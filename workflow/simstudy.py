"""The demo's simulations: the measured home lab and two 1024-GPU clusters swept over
rank counts with the calibration applied, what one lemon GPU costs at 1024 and which fix
pays for it, and what failures cost over a campaign.

Writes under ``RUN_DIR/sim/``: ``<platform>/`` (output/export.py's records, traces and
``scaling.png`` per platform), ``<platform>/timeline.png``, ``stragglers.png`` and
``summary.json`` ({"platforms": {name: [summary per rank count]}, "stragglers": [...],
"fixes": [sim/whatif.py rows for the lemon GPU], "goodput": {...}}).
"""

from pathlib import Path

from calibrate.calibration import Calibration
from output.export import write_result, write_summaries
from output.jsonfile import write_json_atomic
from output.outdir import ensure
from output.plot import plot_timeline
from sim.engine import simulate
from sim.patches import Patch, flag_patches, parse_sets
from workflow.plan import (
    CHECKPOINT_MIN,
    FAILURES_PER_1000_NODE_DAYS,
    HOMELAB_SET,
    LEMON,
    LEMON_RANK,
    PLATFORMS,
    RESTART_MIN,
)
from workflow.simulation import calibrated


def _scenario(name: str, calib: Calibration, calib_path: str, ranks: int, steps: int, extra=()):
    """(scenario, calibration mode, where its jitter comes from)."""
    preset = "homelab-1gbe" if name == "homelab" else name
    sets = parse_sets((HOMELAB_SET if name == "homelab" else []) + list(extra))
    r, layer = calibrated(preset, calib, calib_path, sets=sets, flags=flag_patches(ranks=ranks, steps=steps))
    measured = r.source("noise.distribution") == "calibration"
    return r.scenario, layer.mode, _jitter_source(r.scenario, preset, calib, measured)


def _jitter_source(sc, preset: str, calib: Calibration, measured: bool) -> str:
    """Whose jitter a row carries, so no number presents one machine's jitter as another's
    (calibrate/apply.py: a CPU's does not transfer to a GPU cluster)."""
    if measured:
        return f"measured on {calib.probed_on}"
    n = sc.noise
    return f"{preset}.toml's: {n.distribution} sigma {n.sigma:g}, speed spread sd {n.speed_spread_sd:g}"


def run_study(run_dir: Path, *, sweep, steps: int) -> dict:
    calib_path = run_dir / "calib.json"
    calib = Calibration.read(calib_path, "demo")
    out = run_dir / "sim"
    ensure(out)
    platforms = {}
    for name in PLATFORMS:
        summaries, extras = [], []
        for n in sweep:
            sc, mode, jitter = _scenario(name, calib, str(calib_path), n, steps)
            result = simulate(sc)
            summaries.append(result.summary())
            extras.append({"calibration_mode": mode, "jitter": jitter})
            write_result(result, out / name)
            if n == sweep[0] and name == "homelab":
                plot_timeline(result, out / name / "timeline.png", f"home lab as measured, {n} ranks: first 3 steps")
        write_summaries(summaries, out / name, sweep=True, extra=extras)
        platforms[name] = [s.to_json_dict() | e for s, e in zip(summaries, extras, strict=True)]
    stragglers = []
    for name in PLATFORMS[1:]:
        variants = (
            ("no jitter", ["noise.distribution=none", "noise.speed_spread_sd=0.0"]),
            ("with jitter", []),
            (f"+ one lemon GPU x{LEMON:g}", [f"stragglers={LEMON_RANK}:{LEMON}"]),
        )
        for label, extra in variants:
            sc, _, jitter = _scenario(name, calib, str(calib_path), 1024, steps, extra)
            result = simulate(sc, trace_ranks=[0, 1, 2, LEMON_RANK])
            jitter = "none" if label == "no jitter" else jitter
            stragglers.append({"platform": name, "variant": label, "jitter": jitter} | result.summary().to_json_dict())
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


def _fixes(calib: Calibration, calib_path: str, steps: int) -> list[dict]:
    """Which fix pays for the lemon GPU on 1024 H100s (sim/whatif.py), with the study's jitter."""
    from sim.whatif import compare, plan

    lemon = (Patch("stragglers", f"{LEMON_RANK}:{LEMON}", "--set"),)
    r, _ = calibrated("h100-1024", calib, calib_path, sets=lemon, flags=flag_patches(ranks=1024, steps=steps))
    tries = plan(r.data, ["rebalance", "exclude-slowest", "accum=4"], r.scenario)
    rows = compare(tries, horizon_h=24.0, restart_min=10.0)
    return [r._asdict() for r in rows]


def _goodput() -> dict:
    """Failures on the same 1024 GPUs (128 nodes), restarts and checkpoints at Daly's interval
    (workflow/goodput.py, as `ddplab goodput` runs them), at the rates of workflow/plan.py."""
    from sim.checkpointing import daly_interval_min, job_mtbf_min
    from workflow.goodput import simulate_campaign

    mtbf = job_mtbf_min(failures_per_1000_node_days=FAILURES_PER_1000_NODE_DAYS, nodes=128)
    tau = daly_interval_min(checkpoint_min=CHECKPOINT_MIN, mtbf_min=mtbf)
    sim, analytic = simulate_campaign(
        mtbf_min=mtbf, restart_min=RESTART_MIN, checkpoint_min=CHECKPOINT_MIN, interval_min=tau, work_min=1000 * mtbf
    )
    return {
        "mtbf_h": mtbf / 60.0,
        "interval_min": tau,
        "wall_per_work": {"simulated": sim.wall_per_work, "analytic": analytic},
        "failures_per_week": 7 * 24 * 60 / mtbf,
    }


def _plot_stragglers(rows: list[dict], path: Path) -> None:
    """Mean step time at 1024 ranks per platform and variant, split into own work,
    exposed communication and straggler wait (they add up, sim/results.py)."""
    from matplotlib.figure import Figure

    from output.calib_plots import save

    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    labels = [f"{r['platform']}\n{r['variant']}" for r in rows]
    x = range(len(rows))
    busy = [(r["compute_s"] + r["dataloader_s"] + r["host_delay_s"] + r["optimizer_s"]) * 1e3 for r in rows]
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
    save(fig, path)  # whole or not at all, like every other picture of the demo
