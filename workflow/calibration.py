"""Fit probe runs or profiler traces to simulation parameters, and check the simulator against
real runs or the public record: what `ddplab calibrate` and `ddplab validate` compute and write.

    calib = calibrate_runs([Path("runs/probe")], Path("calib.json"))  # and calib-*.png beside it
    out = validate_runs([Path("runs/train")], Path("calib.json"))
    out["mape"], out["plot"]
    rows, h = public_validation()
"""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from calibrate import plausible
from calibrate.admit import check_admitted
from calibrate.calib import calibrate as fit
from calibrate.calibration import Calibration
from calibrate.public import SOURCES, headline, public_table
from calibrate.record import by_class, record_rows
from calibrate.trace_calib import JobShape, calibrate_traces
from calibrate.validate import validate as run_validation
from output.calib_plots import predicted_vs_measured, step_distributions, write_calibration_plots
from output.jsonfile import write_json_atomic
from output.ownfiles import check_target
from output.public_plot import plot_public


def check_output(path: Path) -> None:
    """``path`` may be a calibration's file: a new .json or ddplab's own, in a folder that exists."""
    if path.suffix != ".json":
        raise ValueError(f"-o: {path}: expected a .json file name")
    check_target(path, "-o")  # only a new file or ddplab's own, in a folder that exists (output/ownfiles.py)


def calibrate_runs(
    runs: list[Path],
    output: Path,
    *,
    seed: int = 0,
    command: str = "",
    model: str | None = None,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    precision: str | None = None,
    grad_accum: int | None = None,
    say: Callable[[str], None] | None = None,
    trace_progress: Callable[[], Callable] | None = None,
) -> Calibration:
    """The calibration of probe run directories, or of profiler traces (.json, .json.gz; the
    job's shape from ``model``... where the trace does not say), checked plausible and admitted
    before anything is written; then its plots beside ``output`` and ``output`` itself. ``say``
    gets progress lines; ``trace_progress()`` makes what is told the bytes of traces read."""
    check_output(output)
    traces = [p for p in runs if p.name.endswith((".json", ".json.gz")) and not p.is_dir()]
    if traces and len(traces) != len(runs):
        raise ValueError("calibrate: give probe run directories or profiler traces, not both in one call")
    if traces:
        if say:
            say(f"calibrate: reading {len(traces)} profiler trace(s)")
        given = JobShape(
            model=model, seq_len=seq_len, micro_batch=micro_batch, precision=precision, grad_accum=grad_accum
        )
        progress = trace_progress() if trace_progress else None
        calib = calibrate_traces(traces, given=given, seed=seed, command=command, progress=progress)
    else:
        shape = {
            "--model": model, "--seq-len": seq_len, "--micro-batch": micro_batch, "--precision": precision,
            "--grad-accum": grad_accum,
        }  # fmt: skip
        for flag, value in shape.items():  # a probe records the job it ran: taken, these changed nothing
            if value is not None:
                raise ValueError(f"{flag} {value}: only with profiler traces (a probe run records its own job)")
        calib = fit(runs, seed=seed, command=command, progress=say)
    # Impossible fits, before any file is written; a trace's job shape may be the caller's, not measured.
    fix = "pass the traced job's --model, --seq-len, --micro-batch and --precision" if traces else plausible.RERUN
    plausible.check(calib, f"{output}: not written", fix)
    check_admitted(calib, str(output))
    pngs = write_calibration_plots(calib, output.with_suffix(""))
    calib = replace(calib, plots=[p.name for p in pngs])
    write_json_atomic(output, calib.to_json())
    return calib


def validate_runs(runs: list[Path], calib_path: Path, *, plot: Path | None = None, seed: int = 0, say=None) -> dict:
    """Each real run simulated with the calibration and compared, step-time distribution and
    all (calibrate/validate.py); the predicted-vs-measured plot (default: validation.png beside
    the calibration) and its CDF companion written, their paths in ``plot`` and ``plot_cdf``."""
    calib = Calibration.read(calib_path)
    plot = plot or calib_path.with_name("validation.png")
    check_target(plot, "--plot")  # before the simulations: only a new file or ddplab's own
    out = run_validation(calib, str(calib_path), runs, seed=seed, progress=say)
    predicted_vs_measured(out["rows"], out["mape"], plot)
    cdf = plot.with_name(f"{plot.stem}-cdf.png")
    step_distributions(out["rows"], cdf)
    out["plot"], out["plot_cdf"] = str(plot), str(cdf)
    return out


def public_validation(*, plot: Path | None = None, seed: int | None = None) -> tuple[list[dict], dict]:
    """(the public-record table, its headline): each published measurement, the prediction,
    the error, its tier and whether it was held out (calibrate/public.py); with ``plot``, each
    row's error against its tier drawn there (output/public_plot.py). A ``seed`` is refused:
    each row is predicted with its scenario's own, as recorded."""
    if seed is not None:  # taken, it would change nothing
        raise ValueError("--seed: --public predicts each row with its scenario's own seed, as recorded")
    results = public_table()
    steps = {r["what"]: r for r in record_rows(results)}  # the step rows' classes (calibrate/record.py)
    rows = [
        {
            "what": r.row.what,
            "source": r.row.source,
            "citation": SOURCES[r.row.source][0],
            "conditions": SOURCES[r.row.source][1],
            "unit": r.row.unit,
            "bytes": r.row.job.size if r.row.job.kind == "collective" else None,  # the message size
            "measured": r.row.measured,
            "predicted": r.predicted,
            "error": r.error,
            "bound": r.row.bound,
            "tier": r.row.tier,
            "within": r.ok,
            "held_out": r.row.held_out,
            "fitted": r.row.fitted,
            "command": r.row.command,
        }
        | ({"regime": steps[r.row.what]["regime"]} if r.row.what in steps else {})
        for r in results
    ]
    h = headline(results) | {"step_classes": by_class(list(steps.values()))}
    if plot is not None:
        plot_public(rows, h, plot)
    return rows, h
