"""`ddplab simulate`'s journey: a scenario at one scale or a sweep of rank counts, optionally
calibrated, each scale simulated (sim/engine.py, or sim/reference.py's SimPy engine), its
summary given the memory estimate, rare episodes' expected cost and the days and dollars to
train, and with ``out`` its tables, trace and plots written (output/export.py).

    scenarios, provenance, warning = build_scenarios("h100-1024", counts=[256, 1024])
    summaries = simulate_scales(scenarios)
    summaries[0].tokens_per_s, summaries[0].memory_gib["total_gib"]  # sim/summary.py

What the printed summary reads besides the summary (a scenario's optimizer basis, a sweep's
description over its rank counts, a model's parameter count) is here too, from sim/.
"""

import time
from collections.abc import Callable
from pathlib import Path

from calibrate.apply import Layer, calibration_layer, calibration_summary, transfer_warning
from calibrate.calibration import Calibration
from calibrate.record import track_record
from calibrate.refusal import refusal
from output.export import write_result, write_summaries
from output.outdir import claim
from sim.describe import description_over
from sim.episodes import HORIZON_H
from sim.limits import simulation_cost, sweep_cost
from sim.memory import estimate_memory
from sim.memory_fit import fit, verdict
from sim.optimizer import optimizer_basis
from sim.patches import Patch, flag_patches, parse_sets
from sim.scenario_file import Refused, Resolved, resolve
from sim.summary import Summary
from sim.transformer import param_count
from sim.units import parse_int_list
from workflow import limits, train_cost

__all__ = [
    "build_scenarios",
    "check_sizes",
    "claim_out",
    "description_over",
    "optimizer_basis",
    "out_of_memory",
    "param_count",
    "rank_counts",
    "run_scale",
    "simulate_scales",
    "simulated",
]


def rank_counts(ranks: int | None, sweep_ranks: str | None) -> list[int | None]:
    """The scales to simulate: ``sweep_ranks`` ("64,256,1024") or the one ``ranks`` (None: the
    scenario's own)."""
    if sweep_ranks and ranks:
        raise ValueError("--ranks and --sweep-ranks: give one of them")
    return parse_int_list(sweep_ranks, "--sweep-ranks") if sweep_ranks else [ranks]


def device_memory_patch(device_gib: float | None) -> tuple[Patch, ...]:
    """--device-gib as compute.device_memory_gib: a flag, so above the file and --set."""
    if device_gib is None:
        return ()
    if not device_gib > 0:
        raise ValueError(f"--device-gib: must be > 0, got {device_gib}")
    return (Patch("compute.device_memory_gib", device_gib, "--device-gib"),)


def build_scenarios(
    scenario: str,
    sets=(),
    counts=(None,),
    *,
    steps: int | None = None,
    seed: int | None = None,
    device_gib: float | None = None,
    calib: Path | None = None,
    calib_network: str | None = None,
    calib_mode: str = "auto",
) -> tuple[list, list[dict] | None, str | None]:
    """(each scale's Scenario, each one's {calibration, parameters} or None, a warning or None).
    Each scale is resolved once (sim/scenario_file.py): the file, then the calibration (with
    ``calib``, a calib.json: calibrate/apply.py), then ``sets`` (the --set texts, parsed once),
    then the flags; every scale is built before any is simulated, so a bad count fails fast. The
    warning says when the calibration is carried to a machine unlike the one measured."""
    user = parse_sets(sets)
    flags = [(*flag_patches(ranks=n, steps=steps, seed=seed), *device_memory_patch(device_gib)) for n in counts]
    if not calib:
        return [resolve(scenario, user, f).scenario for f in flags], None, None
    calibration = Calibration.read(calib)
    # The calibration is decided on the scenario as the user set it (model, sequence...), before
    # the flags: a sweep keeps one mode at every scale, and what the user types wins over it.
    as_set = resolve(scenario, user).scenario
    scales, extras = [], []
    for f in flags:
        r, _, extra, warning = laid(
            scenario, calibration, str(calib), sets=user, flags=f, network=calib_network, mode=calib_mode, as_set=as_set
        )
        scales.append(r.scenario)
        extras.append(extra)
    return scales, extras, warning  # the same at every scale: per-rank compute, which no flag changes


def laid(scenario: str, calibration: Calibration, calib_path: str, **how) -> tuple[Resolved, Layer, dict, str | None]:
    """``calibrated``'s (Resolved, Layer) with what every command that lays a calibration reports
    beside it: its {calibration, parameters} summary and the one-line warning when its compute
    reached another model through FLOP counts (calibrate/apply.py transfer_warning), or None."""
    r, layer = calibrated(scenario, calibration, calib_path, **how)
    extra = calibration_summary(r, layer, calib_path)
    return r, layer, extra, transfer_warning(r.scenario, calibration, extra["parameters"])


def calibrated(
    scenario: str,
    calibration: Calibration,
    calib_path: str,
    *,
    sets=(),
    flags=(),
    network: str | None = None,
    mode: str = "auto",
    as_set=None,
) -> tuple[Resolved, Layer]:
    """``scenario`` resolved as file < calibration < ``sets`` (patches) < ``flags`` (patches),
    and the calibration's layer (its mode, why, what it left out). The calibration is decided on
    ``as_set`` (default: the scenario with ``sets`` alone); at the scale the flags run, only the
    measured slow ranks that exist there. A refused value the calibration set names its file."""
    as_set = as_set or resolve(scenario, sets).scenario
    ranks = next((p.value for p in flags if p.key == "ranks"), as_set.ranks)
    layer = calibration_layer(as_set, calibration, calib_path=calib_path, network=network, mode=mode, ranks=ranks)
    try:
        return resolve(scenario, layer.patches, sets, flags), layer
    except Refused as e:
        if e.patch is None or e.patch.source != "calibration":
            raise
        raise refusal(e, calibration, calib_path, can_set=True) from None


def check_sizes(scenarios, what: str, *, engine: str = "fast", out: bool = False, records: bool = False, yes=False):
    """Refuse, before any array exists, what the engine cannot run or this machine cannot hold or
    finish (workflow/limits.py); ``what`` names the scales in the refusal."""
    if engine == "simpy":
        from sim.reference import check_reference

        for sc in scenarios:
            check_reference(sc)
    cost = sweep_cost([simulation_cost(sc, export=out, records=records) for sc in scenarios])
    limits.check_simulation(cost, what, yes=yes)


def claim_out(out: Path, *, force: bool = False) -> Path | None:
    """Make ``out`` this run's folder before simulating (a reused one would mix two runs'
    records); with ``force`` an earlier run there is moved aside: where to, or None."""
    return claim(out, force=force)[1]


def run_scale(sc, *, records: bool = False, medians: bool = False, engine: str = "fast", progress=None):
    """(result, Summary) of one scale as `simulate` prints it: the engine's summary with the
    memory estimate. `ddplab compare` runs each set-up through here, so its rows are these.
    ``engine``: "fast" (sim/engine.py) or "simpy" (sim/reference.py, small DDP jobs);
    ``progress(sc)``: what the engine calls as steps complete, closed at the end (workflow/progress.py's
    StepProgress)."""
    if engine == "simpy":
        from sim.reference import simulate_reference as run
    else:
        from sim.engine import simulate as run

    bar = progress(sc) if progress else None
    try:
        result = run(sc, progress=bar, records=records, medians=medians)
    finally:
        if bar is not None:
            bar.close()
    summary = result.summary()
    summary.memory_gib = _memory(sc)
    return result, summary


def refuse_3d(sc) -> None:
    """Refused where only the DDP/FSDP engine runs (compare, sweep): it would simulate a
    tensor-, context- or pipeline-parallel or zero1 job as if it had none of them."""
    if sc.parallel3d:
        t = sc.training
        raise ValueError(
            "training.tp/cp/pp/mode: a tensor-, context- or pipeline-parallel or zero1 job runs in `ddplab"
            " simulate` (--sweep-ranks for several scales), `plan` and `whatif`, not here,"
            f" got tp {t.tp}, cp {t.cp}, pp {t.pp}, mode {t.mode}"
        )


def simulated(summary: Summary | dict) -> bool:
    """Whether simulate_scales simulated this scale (a Summary), rather than reporting it out of memory."""
    return isinstance(summary, Summary)


def out_of_memory(sc, *, ignore: bool = False) -> dict | None:
    """None when ``sc`` fits its device (or ``ignore``); else what is reported in place of its
    summary: the scenario, then sim/memory_fit.py's verdict with what would fit."""
    f = fit(sc)
    if f.fits or ignore:
        return None
    t = sc.training
    return {
        "scenario": sc.name,
        "model": sc.model.shape.name,
        "mode": t.mode,
        "ranks": sc.ranks,
        "nodes": -(-sc.ranks // sc.network.gpus_per_node),
        "steps": sc.steps,
        "seed": sc.seed,
        "memory_gib": _memory(sc),
    } | verdict(sc, f)


def check_options(*, out, force: bool, calib, calib_network: str | None, calib_mode: str | None) -> None:
    """`simulate`'s options that would change nothing, refused rather than taken without a word."""
    if force and not out:
        raise ValueError("--force: only with --out DIR (it moves an earlier run there aside)")
    for flag, value in (("--calib-network", calib_network), ("--calib-mode", calib_mode)):
        if value is not None and calib is None:
            raise ValueError(f"{flag} {value}: only with --calib calib.json")


def horizon_for(scenarios, horizon_h: float | None) -> float:
    """--horizon-h, or its default; refused where no scenario has episodes, the one thing it sets."""
    if horizon_h is not None and not any(sc.episodes.active for sc in scenarios):
        raise ValueError(
            f"--horizon-h {horizon_h:g}: {scenarios[0].name} has no fail-slow, throttling or diurnal"
            " episodes, whose expected cost is all it sets the hours of"
        )
    return HORIZON_H if horizon_h is None else horizon_h


def simulate_scales(
    scenarios,
    provenance: list[dict] | None = None,
    *,
    engine: str = "fast",
    records: bool = False,
    out: Path | None = None,
    sweep: bool = False,
    horizon_h: float = HORIZON_H,
    tokens: float | None = None,
    price: float | None = None,
    ignore_memory: bool = False,
    progress: Callable | None = None,
    say: Callable[[str], None] | None = None,
) -> list[Summary | dict]:
    """Each scale's Summary (sim/summary.py), in order: an out-of-memory scale's verdict (a dict,
    out_of_memory) in its place (not simulated). ``progress(sc)`` makes the engine's step
    progress (an object with close()); ``say`` gets one line per scale of a ``sweep`` and, with
    ``records``, the writer's progress. With ``out`` (claimed: claim_out) each scale's tables and
    trace are written as it ends, and the summaries (and a sweep's scaling plot) at the end."""
    summaries = []
    for i, sc in enumerate(scenarios, 1):
        t = time.perf_counter()
        oom = out_of_memory(sc, ignore=ignore_memory)
        if oom:  # its step time would be an OOM error's: not simulated (sim/memory_fit.py)
            summaries.append(oom)
            continue
        # With out, ranks.csv carries each rank's median compute, estimated as it runs.
        result, summary = run_scale(sc, records=records, medians=out is not None, engine=engine, progress=progress)
        if sc.episodes.active:
            summary.episodes = episodes(sc, summary, horizon_h)
        if provenance:
            summary.calibration = provenance[i - 1]["calibration"]
            summary.parameters = provenance[i - 1]["parameters"]
            _mark_measured(summary)
        else:  # a calibration's compute is the user's own measurement, not the presets' the record judges
            summary.record = track_record(sc, step_s=summary.step_time_s.mean)
        train_cost.attach(summary, sc, tokens, price)
        summaries.append(summary)
        if sweep and say:
            say(f"[{i}/{len(scenarios)}] {sc.ranks} ranks x {sc.steps} steps: {time.perf_counter() - t:.2f} s")
        if out:
            write_result(result, out, progress=say if records else None)
    simulated = [s for s in summaries if isinstance(s, Summary)]
    if out and simulated:
        write_summaries(simulated, out, sweep=sweep)
    return summaries


def episodes(sc, summary: Summary, horizon_h: float) -> dict:
    """Rare episodes: their expected cost over the horizon (sim/episode_cost.py), and a warning
    when this run was too short to contain them."""
    from sim.episode_cost import expected_cost, horizon_warning  # scipy.stats: only with episodes

    if not (horizon_h > 0 and horizon_h < float("inf")):
        raise ValueError(f"--horizon-h: must be > 0 and finite, got {horizon_h}")
    e = expected_cost(sc, horizon_h=horizon_h)
    return {
        "horizon_h": horizon_h,
        "expected_tokens_per_s": e.tokens_per_s,
        "clear_tokens_per_s": e.clear_tokens_per_s,
        "cost": e.cost,
        "cost_sd": e.cost_sd,
        "comm_share": e.comm_share,
        "compute_share": e.compute_share,
        "warning": horizon_warning(sc, summary.step_time_s.mean * sc.steps),
    }


def _memory(sc) -> dict:
    est = estimate_memory(sc)
    out = {k: v for k, v in est._asdict().items() if k.endswith("_gib")} | {"peak_phase": est.peak_phase}
    measured = sc.compute.memory_peak_gib
    if measured is not None:  # a GPU calibration's own peak decides; the estimate stays beside it
        out["measured_peak_allocated_gib"] = measured
    f = fit(sc)
    out["total_gib"] = f.total_gib
    if f.checked:  # compute.device_memory_gib = 0: a CPU rank, nothing to check against
        out["device_gib"], out["fits"] = f.device_gib, f.fits
        out["nccl_communicators"], out["tight"] = f.communicators, f.tight
    return out


def _mark_measured(summary: Summary) -> None:
    """A calibration that set the compute time (or its MFU) makes the stack "measured"."""
    keys = {"compute.step_compute_s", "compute.mfu"}
    if any(p["key"] in keys and not p["source"].startswith("assumed") for p in summary.parameters):
        summary.stack = "measured"
