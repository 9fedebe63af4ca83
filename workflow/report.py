"""The report: one self-contained HTML page over a demo directory (`ddplab report RUN_DIR`).

The page has inline CSS, no scripts from anywhere and no fonts or styles fetched at
view time; its pictures are the PNGs beside it (relative links), so the directory can
be copied or opened offline. A section whose inputs are missing says so instead of
failing, so a partial run still gets a report. One inline script counts the images
that loaded and shows a banner if any did not (tests/test_report_browser.py reads
the count in a real browser).
"""

import json
import time
from pathlib import Path

from calibrate.calibration import Calibration
from output.atomic import write_text_atomic
from sim.cost import SEED_LINKS, link_costs
from sim.readfile import read_text
from sim.transformer import model_shape, param_count
from sim.units import fmt_bytes, fmt_seconds
from workflow.html import CHECK, CSS, esc, img, missing, table
from workflow.plan import CHECKPOINT_MIN, FAILURES_PER_1000_NODE_DAYS, MICRO_BATCH, RESTART_MIN


def _load(path: Path):
    try:
        return json.loads(read_text(path, what="report"))
    except (ValueError, RecursionError):  # missing, not a regular file, not JSON: its sections say so
        return None


# What a hand-edited or truncated-then-mended JSON file raises when a section reads a field it
# lacks or of another type (issue 25, D14: a traceback before).
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError)


def _section(source: str, render, *args, problems: list[str]) -> str:
    """One section's HTML; a malformed input file costs that section alone, which says so."""
    try:
        return render(*args)
    except MALFORMED as e:
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        problems.append(f"{source}: malformed ({what})")
        return f"<p class=missing>{esc(source)}: malformed ({esc(what)}): rerun the stage that writes it</p>"


def _load_calib(path: Path) -> Calibration | None:
    try:
        return Calibration.read(path, "report")
    except ValueError:  # missing or not a calibration: its sections say so
        return None


def _cost(calib: Calibration | None) -> str:
    link = None
    if calib and calib.networks:
        label, net = sorted(calib.networks.items())[0]
        link = (f"measured ({label})", net.link_gbit_s.value)
    links = ([link] if link else []) + list(SEED_LINKS)
    out = []
    models = [("gpt2-760m", 2, "the seed's 760M, bf16 gradients")]
    if calib:
        models.insert(0, (calib.compute.model, 4, "the demo's model, fp32 gradients"))
    for name, bpp, what in models:
        params = param_count(model_shape(name))
        compute_s = None
        if calib and name == calib.compute.model:
            compute_s = calib.compute.step_s.seconds(MICRO_BATCH * calib.compute.seq_len)
        costs = link_costs(
            params=params,
            bytes_per_param=bpp,
            ranks=2,
            efficiency=0.85,
            links=links,
            compute_s=compute_s,
        )
        rows = [
            [c.link, f"{c.link_gbit_s:.4g}", fmt_seconds(c.seconds_per_step)]
            + ([f"{c.comm_compute_ratio:.2f}"] if compute_s else [])
            for c in costs
        ]
        header = ["link", "Gbit/s", "allreduce per step"] + (["T_comm / T_compute"] if compute_s else [])
        note = f" (compute per micro-step measured: {fmt_seconds(compute_s)})" if compute_s else ""
        out.append(f"<h3>{esc(name)}: {params:,} parameters, {esc(what)}{esc(note)}</h3>" + table(header, rows))
    return (
        "<p>The seed's arithmetic: a ring allreduce moves 2(N-1)/N x S bytes per rank per step;"
        " at 85 % of line rate (the seed's assumption; the measured stack efficiency is below).</p>" + "".join(out)
    )


def _probe(run_dir: Path, calib: Calibration | None) -> str:
    if not calib:
        return missing("calib.json", "run ddplab calibrate (the demo's stage 3)")
    parts = []
    for label, net in sorted(calib.networks.items()):
        link = net.link_gbit_s.value
        allreduce = net.collectives["allreduce"]
        rows = []
        for s, times in sorted(allreduce.times_s.items()):
            med = sorted(times)[len(times) // 2]
            busbw = s / med / 1e9  # 2 ranks: busbw = algbw
            rows.append([fmt_bytes(s), fmt_seconds(med), f"{busbw:.4f}", f"{busbw * 8 / link:.2f}"])
        rtt_us = net.rtt_p50_us.value if net.rtt_p50_us else 0.0
        ar = allreduce.fit
        parts.append(
            f"<p>{esc(label)}: raw TCP {link:.4g} Gbit/s, RTT {rtt_us:.0f} us;"
            f" allreduce fit busbw {ar.busbw_gb_s:.4g} GB/s = stack efficiency"
            f" {net.stack_efficiency.value:.2f} of the wire; per-hop latency {ar.hop_latency_us:.0f} us.</p>"
            + table(["size", "median time", "busbw GB/s", "busbw / raw link"], rows)
        )
    return "".join(parts) + img(run_dir, "calib-collectives.png", "collective fits")


def _params(run_dir: Path, calib: Calibration | None) -> str:
    if not calib:
        return missing("calib.json", "run ddplab calibrate")
    k, nz = calib.compute, calib.noise
    net_rows = []
    for label, n in sorted(calib.networks.items()):
        for op, c in n.collectives.items():
            f = c.fit
            (lo, hi), (blo, bhi) = f.alpha_ci_s, f.busbw_ci_gb_s
            net_rows.append(
                [
                    f"{label} {op}",
                    f"{fmt_seconds(f.alpha_s)} [{fmt_seconds(lo)}, {fmt_seconds(hi)}]",
                    f"{f.busbw_gb_s:.4g} [{blo:.4g}, {'unbounded' if bhi is None else f'{bhi:.4g}'}]",
                    f"{f.r2_log:.3f}",
                    f"{f.samples} iterations, {f.sizes} sizes, {n.collectives_sched}",
                    f"{n.interference_gamma.raw:.3f}",
                ]
            )
    s = k.step_s
    rows = [
        ["compute per micro-step", f"{fmt_seconds(s.intercept_s)} + {s.per_token_s * 1e6:.3f} us/token",
         f"R² {s.r2:.4f}, {k.samples} iterations ({k.model}, seq {k.seq_len})"],
        ["achieved FLOP/s", f"{k.achieved_tflop_s.value * 1e3:.3g} GFLOP/s", k.achieved_tflop_s.source],
        ["optimizer step", fmt_seconds(k.optimizer_s.value), f"{k.optimizer_s.samples} steps"],
        ["bucket-ready profile", f"{len(k.ready_fractions.value)} gradients", k.ready_fractions.source],
        ["jitter", f"{nz.distribution}, sd {nz.sigma:.4f}",
         f"best fit {nz.best_fit} KS {nz.ks:.3f} (rejected above {nz.ks_critical_1pct:.3f}), {nz.samples} samples"
         + (f"; {nz.chosen_because}" if nz.chosen_because else "")],
    ]  # fmt: skip
    for r, v in sorted(calib.ranks.items()):
        flag = " FLAGGED as a straggler" if v.flagged else ""
        rows.append([f"rank {r} speed", f"x{v.speed_factor:.3f} (score {v.score:.3f}){flag}", "median compute"])
    return (
        f"<p class=note>From {esc(', '.join(calib.runs))} ({esc(calib.command)}).</p>"
        + table(
            ["collective", "alpha [95 % CI]", "busbw GB/s [95 % CI]", "R² (log)", "samples, scheduler", "gamma"],
            net_rows,
        )
        + table(["parameter", "value", "source"], rows, left=3)
        + img(run_dir, "calib-compute.png", "compute fit")
        + (img(run_dir, "calib-noise.png", "jitter") if nz.candidates else "")  # none fitted: no picture
        + img(run_dir, "calib-ranks.png", "per-rank speed")
    )


def _validation(run_dir: Path) -> str:
    v = _load(run_dir / "validation.json")
    if not v:
        return missing("validation.json", "run ddplab validate")
    rows = [
        [r["name"], fmt_seconds(r["predicted_p50_s"]), fmt_seconds(r["measured_p50_s"]), f"{r['error_p50']:+.1%}",
         fmt_seconds(r["predicted_p95_s"]), fmt_seconds(r["measured_p95_s"]),
         fmt_seconds(r["predicted_wait_s"]), fmt_seconds(r["measured_wait_s"])]
        for r in v["rows"]
    ]  # fmt: skip
    return (
        f"<p>The simulator, given only the calibration, predicted the real training run: median step time"
        f" mean absolute percentage error <b>{v['mape']:.1%}</b> (p95: {v['mape_p95']:.1%}).</p>"
        + table(
            [
                "run",
                "p50 predicted",
                "p50 measured",
                "error",
                "p95 predicted",
                "p95 measured",
                "wait predicted",
                "wait measured",
            ],
            rows,
        )  # fmt: skip
        + img(run_dir, "validation.png", "predicted vs measured")
    )


def _scaling(run_dir: Path, sim) -> str:
    if not sim:
        return missing("sim/summary.json", "run the demo's simulate stage")
    parts = []
    for name, summaries in sim["platforms"].items():
        rows = [
            [s["ranks"], fmt_seconds(s["step_time_s"]["p50"]),
             f"{fmt_seconds(s['step_time_s']['p5'])} - {fmt_seconds(s['step_time_s']['p95'])}",
             fmt_seconds(s["compute_s"]), fmt_seconds(s["exposed_comm_s"]), fmt_seconds(s["straggler_wait_s"]),
             f"{s['scaling_efficiency']:.1%}", f"{s['tokens_per_s']:,.0f}"]
            for s in summaries
        ]  # fmt: skip
        mode = summaries[0].get("calibration_mode", "?")
        parts.append(
            f"<h3>{esc(name)} <span class=note>(calibration applied: {esc(mode)})</span></h3>"
            + img(run_dir, f"sim/{name}/scaling.png", f"{name} scaling")
            + table(
                [
                    "ranks",
                    "step p50",
                    "p5 - p95",
                    "compute",
                    "exposed comm",
                    "straggler wait",
                    "efficiency",
                    "tokens/s",
                ],
                rows,
            )  # fmt: skip
        )
    return "".join(parts)


def _stragglers(run_dir: Path, sim) -> str:
    if not sim:
        return missing("sim/summary.json", "run the demo's simulate stage")
    rows = [
        [r["platform"], r["variant"], r.get("jitter", "?"), fmt_seconds(r["step_time_s"]["p50"]),
         fmt_seconds(r["straggler_wait_s"]), f"{r['scaling_efficiency']:.1%}", f"{r['tokens_per_s']:,.0f}"]
        for r in sim["stragglers"]
    ]  # fmt: skip
    return img(run_dir, "sim/stragglers.png", "stragglers at 1024") + table(
        ["platform", "variant", "whose jitter", "step p50", "straggler wait", "efficiency", "tokens/s"], rows, left=3
    )


def _fixes(sim) -> str:
    if not sim or "fixes" not in sim:
        return missing("sim/summary.json fixes", "rerun the demo's simulate stage (--fresh)")
    base = sim["fixes"][0]["tokens_per_s"]
    rows = [
        [r["mitigation"], r["ranks"], fmt_seconds(r["step_time_s"]), f"{r['tokens_per_s']:,.0f}",
         f"{r['tokens_per_s'] / base:.3f}x", f"{r['scaling_efficiency']:.1%}", f"{r['gpu_h_per_btok']:.2f}",
         r["note"] + (f" (restart {r['restart_s'] / 60:g} min over 24 h)" if r["restart_s"] else "")]
        for r in sim["fixes"]
    ]  # fmt: skip
    g = sim["goodput"]
    w = g["wall_per_work"]
    return (
        "<p>The lemon GPU above (x1.4, rank 17 of 1024 H100s, with the jitter above), with each fix on the same"
        " jitter draws (<code>ddplab whatif</code>):</p>"
        + table(["fix", "ranks", "step", "tokens/s", "vs nothing", "efficiency", "GPU-h / B tokens", "note"], rows)
        + f"<p>And failures over a campaign (<code>ddplab goodput</code>): at {FAILURES_PER_1000_NODE_DAYS:g}"
        f" failures per 1000 node-days the 128 nodes fail every {g['mtbf_h']:.1f} h"
        f" ({g['failures_per_week']:.1f} a week); with {RESTART_MIN:g} min restarts and {CHECKPOINT_MIN:g} min"
        f" checkpoints every {g['interval_min']:.0f} min (Daly's interval) a job takes"
        f" {w['simulated']:.4f} x its work in wall time (analytic {w['analytic']:.4f}).</p>"
    )


def _timelines(run_dir: Path, sim) -> str:
    if not sim:
        return missing("sim/summary.json", "run the demo's simulate stage")
    parts = []
    for name, summaries in sim["platforms"].items():
        parts.append(img(run_dir, f"sim/{name}/timeline.png", f"{name} timeline"))
        traces = [
            f'<a href="sim/{esc(name)}/ranks-{s["ranks"]:04d}/trace.json">{s["ranks"]}</a>'
            for s in summaries
            if (run_dir / "sim" / name / f"ranks-{s['ranks']:04d}" / "trace.json").exists()
        ]
        parts.append(f"<p>{esc(name)} Chrome traces by rank count: {' '.join(traces)}</p>")
    return (
        "<p>Each picture is the first simulated steps, drawn from the same spans as the Chrome traces. Open a"
        " trace at <code>ui.perfetto.dev</code> (Open trace file) or <code>chrome://tracing</code> to zoom.</p>"
        + "".join(parts)
    )


def render(run_dir: Path, problems: list[str] | None = None) -> str:
    """The page; ``problems`` gets a line per input file too malformed for its section."""
    run_dir = Path(run_dir)
    problems = [] if problems is None else problems
    demo = _load(run_dir / "demo.json")
    demo = demo if isinstance(demo, dict) else {}
    calib = _load_calib(run_dir / "calib.json")
    sim = _load(run_dir / "sim" / "summary.json")
    stages = demo.get("stages", {})
    timing = _section(
        "demo.json", lambda: ", ".join(f"{k} {v['seconds']} s" for k, v in stages.items()), problems=problems
    )
    summary = "sim/summary.json"
    sections = [
        ("The arithmetic first (the seed's cost table)", _section("calib.json", _cost, calib, problems=problems)),
        ("The probe against the wire", _section("calib.json", _probe, run_dir, calib, problems=problems)),
        (
            "The fitted model, and where each value came from",
            _section("calib.json", _params, run_dir, calib, problems=problems),
        ),
        (
            "The prediction checked against a real run",
            _section("validation.json", _validation, run_dir, problems=problems),
        ),
        (
            "Scaling to 1024 GPUs: home lab, H100, MI300X",
            _section(summary, _scaling, run_dir, sim, problems=problems),
        ),
        ("Stragglers at 1024 ranks", _section(summary, _stragglers, run_dir, sim, problems=problems)),
        ("Which fix pays, and what failures cost", _section(summary, _fixes, sim, problems=problems)),
        ("A few steps, rank by rank", _section(summary, _timelines, run_dir, sim, problems=problems)),
    ]
    body = "".join(f"<h2>{esc(title)}</h2>{content}" for title, content in sections)
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>ddplab report</title>"
        f"<style>{CSS}</style></head><body><div id=banner></div>"
        f"<h1>ddplab report</h1><p class=note>{esc(run_dir)}: {esc(demo.get('where', 'measured elsewhere'))}."
        f" Written {esc(time.strftime('%Y-%m-%d %H:%M'))}. {esc(timing)}</p>"
        f"{body}<script>{CHECK}</script></body></html>"
    )


# What a demo directory holds at all: a report over none of them would be a page of "missing".
INPUTS = ("demo.json", "calib.json", "validation.json", "sim/summary.json")


def write_report(run_dir: Path, problems: list[str] | None = None) -> Path:
    """report.html in ``run_dir``; a directory with none of a demo's INPUTS is refused, nothing
    written in it (a partial demo, with any one of them, still gets its page)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"RUN_DIR: {run_dir}: not a directory")
    if not any((run_dir / name).exists() for name in INPUTS):
        raise ValueError(
            f"RUN_DIR: {run_dir}: not a demo directory (none of {', '.join(INPUTS)}):"
            " `ddplab demo --out DIR` writes one"
        )
    path = run_dir / "report.html"
    write_text_atomic(path, render(run_dir, problems))
    return path
