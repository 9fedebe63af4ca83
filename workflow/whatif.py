"""Which fix pays for what slows a job: the scenario as it is beside each mitigation tried
(sim/whatif.py), one row each with its speedup and, given a price, dollars per billion tokens:
what `ddplab whatif` prints.

    found = study("straggler-failslow", tries=["rebalance", "exclude-slowest"])
    [(r["mitigation"], r["speedup"]) for r in found.rows]
"""

from pathlib import Path
from typing import NamedTuple

from calibrate.calibration import Calibration
from output.atomic import write_csv_atomic
from output.jsonfile import write_json_atomic
from output.outdir import ensure
from output.plot import plot_breakdown, run_title
from sim.episodes import HORIZON_H
from sim.patches import flag_patches, parse_sets
from sim.scenario_file import resolve
from sim.train_cost import RESTART_MIN
from sim.whatif import EXCLUDE, compare, plan, row_scenarios
from sim.whatif_defaults import default_tries
from workflow import limits
from workflow.simulation import check_options, laid


class WhatIf(NamedTuple):
    rows: list[dict]  # what `ddplab whatif --json` prints: the base row first
    scenario: object  # the base Scenario (sim/config.py)
    steps: int | None  # steps per row (per episode state)
    seed: int
    chosen: str | None  # why these tries, when none was given
    horizon_h: float = HORIZON_H  # what a restart and the episodes are stated over
    calibration: str | None = None  # with --calib: the file, its mode and why (calibrate/apply.py)
    warning: str | None = None  # with --calib: its compute carried to another model (calibrate/apply.py)


def study(
    scenario: str,
    sets=(),
    *,
    ranks: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    tries: list[str] | None = None,
    horizon_h: float | None = None,
    restart_min: float | None = None,
    ignore_memory: bool = False,
    usd_per_gpu_hour: float | None = None,
    yes: bool = False,
    out: Path | None = None,
    calib: str | None = None,
    calib_network: str | None = None,
    calib_mode: str | None = None,
) -> WhatIf:
    """Each of ``tries`` (default: the mitigations that fit what the scenario models,
    sim/whatif_defaults.py) simulated with the same jitter draws as the scenario itself; with
    ``out``, whatif.json, whatif.csv and whatif.png are written there. Bad inputs, and rows this
    machine cannot hold or finish (unless ``yes``), are one ValueError line before any runs.
    ``calib``: a calib.json laid under the --set texts as `simulate --calib` lays it (``calib_mode``
    auto by default: a trace calibration of the same job, at its ranks, in mode all; of several
    networks, ``calib_network``), so each row is a fix tried on the measured job; the rows'
    patches go over it."""
    if usd_per_gpu_hour is not None and usd_per_gpu_hour < 0:
        raise ValueError(f"--usd-per-gpu-hour: must be >= 0, got {usd_per_gpu_hour}")
    # The scenario resolved once (sim/scenario_file.py): its file, the --set texts parsed once,
    # the flags; each row is then its data with the row's typed patches (sim/whatif.py).
    check_options(out=out, force=False, calib=calib, calib_network=calib_network, calib_mode=calib_mode)
    user, flags = parse_sets(sets), flag_patches(ranks=ranks, steps=steps, seed=seed)
    applied = warning = None
    if calib:
        resolved, layer, _, warning = laid(
            scenario, Calibration.read(Path(calib)), str(calib), sets=user, flags=flags, network=calib_network,
            mode=calib_mode or "auto",
        )  # fmt: skip
        applied = f"calibration {calib} applied in mode {layer.mode!r} ({layer.why})"
    else:
        resolved = resolve(scenario, user, flags)
    sc, data = resolved.scenario, resolved.data
    chosen = None
    if not tries:  # the mitigations that fit what the scenario models (sim/whatif_defaults.py)
        tries, why = default_tries(sc, ignore_memory)
        chosen = f"no --try given: trying {', '.join(tries)} ({why})" if tries else f"no --try given: {why}"
    planned = plan(data, tries, sc)
    horizon_h, restart_min = _used(planned, horizon_h, restart_min)
    # The rows run one after another, each result dropped before the next (workflow/limits.py).
    limits.check_in_turn(row_scenarios(planned), "simulations", yes=yes)
    if out:  # fail before simulating, not after
        ensure(out)  # marked as ours: a rerun may replace what it wrote, nothing else
    rows = compare(planned, horizon_h=horizon_h, restart_min=restart_min, ignore_memory=ignore_memory)
    base = rows[0]
    found = []
    for r in rows:
        # A row not simulated (out of memory) has no throughput, and with the base one none has a ratio.
        ran = r.tokens_per_s is not None and base.tokens_per_s is not None
        row = r._asdict() | {"speedup": r.tokens_per_s / base.tokens_per_s if ran else None}
        if usd_per_gpu_hour is not None:
            row["usd_per_btok"] = r.gpu_h_per_btok * usd_per_gpu_hour if r.gpu_h_per_btok is not None else None
        found.append(row)
    if out:
        write(found, out, run_title([sc.name], [r["ranks"] for r in found], [sc.training.mode]))
    return WhatIf(found, sc, data.get("steps"), data.get("seed", 0), chosen, horizon_h, applied, warning)


def _used(planned, horizon_h: float | None, restart_min: float | None) -> tuple[float, float]:
    """--horizon-h and --restart-min with their defaults, each refused where no row would use it:
    only exclude-slowest pays a restart, and the horizon is what it and episodes are spread over."""
    restarts = any(part.named == EXCLUDE for _, parts in planned.tries for part in parts)
    episodic = any(sc.episodes.active for sc in (planned.base, *planned.sized))
    if restart_min is not None and not restarts:
        raise ValueError(f"--restart-min {restart_min:g}: no row restarts (only exclude-slowest pays one)")
    if horizon_h is not None and not (restarts or episodic):
        raise ValueError(
            f"--horizon-h {horizon_h:g}: no row restarts or has episodes, the two things it sets the hours of"
        )
    return (HORIZON_H if horizon_h is None else horizon_h), (RESTART_MIN if restart_min is None else restart_min)


def write(rows: list[dict], out: Path, title: str) -> None:
    """What --json prints, as whatif.json and (a column per key) whatif.csv; whatif.png: each
    row's mean step split into its parts, with its throughput against doing nothing."""
    write_json_atomic(out / "whatif.json", rows)
    header = list(rows[0])
    write_csv_atomic(out / "whatif.csv", header, [["" if r[k] is None else r[k] for k in header] for r in rows])
    ran = [r for r in rows if r["step_time_s"] is not None]  # an OOM row has no step to draw
    if not ran:
        return
    notes = [f"{r['speedup']:.3f}x tokens/s" if r["speedup"] is not None else "" for r in ran]
    oom = [r["mitigation"] for r in rows if r["step_time_s"] is None]
    labels = [f"{r['mitigation']}\n{r['ranks']} ranks" for r in ran]
    title = f"ddplab whatif {title}" + (f" (out of memory, not drawn: {', '.join(oom)})" if oom else "")
    plot_breakdown(ran, labels, out / "whatif.png", title=title, notes=notes)
