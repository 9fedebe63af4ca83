"""`ddplab report RUN_DIR`: one self-contained HTML page over a demo directory.

The page has inline CSS, no scripts from anywhere and no fonts or styles fetched at
view time; its pictures are the PNGs beside it (relative links), so the directory can
be copied or opened offline. A section whose inputs are missing says so instead of
failing, so a partial run still gets a report. One inline script counts the images
that loaded and shows a banner if any did not (tests/test_report_browser.py reads
the count in a real browser).
"""

import html
import json
import time
from pathlib import Path

from ddplab.calcmds import write_text_atomic
from ddplab.demo import MICRO_BATCH
from sim.cost import SEED_LINKS, link_costs
from sim.gpt2 import model_shape, param_count
from sim.units import fmt_bytes, fmt_seconds

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1180px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2.2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #555; } .missing { color: #a00; }
#banner { display: none; background: #fdd; padding: 0.6em; border: 1px solid #a00; }
code { background: #f4f4f4; padding: 0 3px; }
"""

# Counts loaded images into <body data-images="ok/total"> and warns when some failed.
CHECK = """
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images", ok + "/" + imgs.length);
  if (ok < imgs.length) {
    var b = document.getElementById("banner");
    b.textContent = (imgs.length - ok) + " of " + imgs.length + " pictures did not load: rerun ddplab report";
    b.style.display = "block";
  }
});
"""


def _e(x) -> str:
    return html.escape(str(x))


def _table(header: list[str], rows: list[list], left: int = 1) -> str:
    def cell(tag, i, v):
        return f"<{tag}{' class=l' if i < left else ''}>{_e(v)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(run_dir: Path, rel: str, alt: str) -> str:
    if not (run_dir / rel).exists():
        return f"<p class=missing>missing: {_e(rel)}</p>"
    return f'<img src="{_e(rel)}" alt="{_e(alt)}">'


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _missing(what: str, how: str) -> str:
    return f"<p class=missing>{_e(what)} not found: {_e(how)}</p>"


def _cost(calib) -> str:
    link = None
    if calib:
        (label, net), *_ = sorted(calib["networks"].items())
        link = (f"measured ({label})", net["link_gbit_s"]["value"])
    links = ([link] if link else []) + list(SEED_LINKS)
    out = []
    models = [("gpt2-760m", 2, "the seed's 760M, bf16 gradients")]
    if calib:
        models.insert(0, (calib["compute"]["model"], 4, "the demo's model, fp32 gradients"))
    for name, bpp, what in models:
        params = param_count(model_shape(name))
        compute_s = None
        if calib and name == calib["compute"]["model"]:
            k = calib["compute"]["step_s"]
            compute_s = k["intercept_s"] + k["per_token_s"] * MICRO_BATCH * calib["compute"]["seq_len"]
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
        out.append(f"<h3>{_e(name)}: {params:,} parameters, {_e(what)}{_e(note)}</h3>" + _table(header, rows))
    return (
        "<p>The seed's arithmetic: a ring allreduce moves 2(N-1)/N x S bytes per rank per step;"
        " at 85 % of line rate (the seed's assumption; the measured stack efficiency is below).</p>" + "".join(out)
    )


def _probe(run_dir: Path, calib) -> str:
    if not calib:
        return _missing("calib.json", "run ddplab calibrate (the demo's stage 3)")
    parts = []
    for label, net in sorted(calib["networks"].items()):
        link = net["link_gbit_s"]["value"]
        ar = net["collectives"].get("allreduce")
        rows = []
        for s, times in sorted(ar["times_s"].items(), key=lambda kv: int(kv[0])):
            med = sorted(times)[len(times) // 2]
            busbw = int(s) / med / 1e9  # 2 ranks: busbw = algbw
            rows.append([fmt_bytes(int(s)), fmt_seconds(med), f"{busbw:.4f}", f"{busbw * 8 / link:.2f}"])
        parts.append(
            f"<p>{_e(label)}: raw TCP {link:.4g} Gbit/s, RTT {net.get('rtt_p50_us', {}).get('value', 0):.0f} us;"
            f" allreduce fit busbw {ar['busbw_gb_s']:.4g} GB/s = stack efficiency"
            f" {net['stack_efficiency']['value']:.2f} of the wire; per-hop latency {ar['hop_latency_us']:.0f} us.</p>"
            + _table(["size", "median time", "busbw GB/s", "busbw / raw link"], rows)
        )
    return "".join(parts) + _img(run_dir, "calib-collectives.png", "collective fits")


def _params(run_dir: Path, calib) -> str:
    if not calib:
        return _missing("calib.json", "run ddplab calibrate")
    k, nz = calib["compute"], calib["noise"]
    net_rows = []
    for label, n in sorted(calib["networks"].items()):
        for op, f in n["collectives"].items():
            lo, hi = f["alpha_ci_s"]
            blo, bhi = f["busbw_ci_gb_s"]
            net_rows.append(
                [
                    f"{label} {op}",
                    f"{fmt_seconds(f['alpha_s'])} [{fmt_seconds(lo)}, {fmt_seconds(hi)}]",
                    f"{f['busbw_gb_s']:.4g} [{blo:.4g}, {bhi:.4g}]",
                    f"{f['r2_log']:.3f}",
                    f"{f['samples']} iterations, {f['sizes']} sizes, {n.get('collectives_sched', 'other')}",
                    f"{n['interference_gamma']['raw']:.3f}",
                ]
            )
    s = k["step_s"]
    rows = [
        ["compute per micro-step", f"{fmt_seconds(s['intercept_s'])} + {s['per_token_s'] * 1e6:.3f} us/token",
         f"R² {s['r2']:.4f}, {k['samples']} iterations ({k['model']}, seq {k['seq_len']})"],
        ["achieved FLOP/s", f"{k['achieved_tflop_s']['value'] * 1e3:.3g} GFLOP/s", k["achieved_tflop_s"]["source"]],
        ["optimizer step", fmt_seconds(k["optimizer_s"]["value"]), f"{k['optimizer_s']['samples']} steps"],
        ["bucket-ready profile", f"{len(k['ready_fractions']['value'])} gradients", k["ready_fractions"]["source"]],
        ["jitter", f"{nz['distribution']}, sd {nz['sigma']:.4f}",
         f"best fit {nz['best_fit']} KS {nz['ks']:.3f} (rejected above {nz['ks_critical_1pct']:.3f}),"
         f" {nz['samples']} samples"],
    ]  # fmt: skip
    for r, v in sorted(calib["ranks"].items(), key=lambda kv: int(kv[0])):
        flag = " FLAGGED as a straggler" if v["flagged"] else ""
        rows.append([f"rank {r} speed", f"x{v['speed_factor']:.3f} (score {v['score']:.3f}){flag}", "median compute"])
    return (
        f"<p class=note>From {_e(', '.join(calib['runs']))} ({_e(calib['command'])}).</p>"
        + _table(
            ["collective", "alpha [95 % CI]", "busbw GB/s [95 % CI]", "R² (log)", "samples, scheduler", "gamma"],
            net_rows,
        )
        + _table(["parameter", "value", "source"], rows, left=3)
        + _img(run_dir, "calib-compute.png", "compute fit")
        + _img(run_dir, "calib-noise.png", "jitter")
        + _img(run_dir, "calib-ranks.png", "per-rank speed")
    )


def _validation(run_dir: Path) -> str:
    v = _load(run_dir / "validation.json")
    if not v:
        return _missing("validation.json", "run ddplab validate")
    rows = [
        [r["name"], fmt_seconds(r["predicted_p50_s"]), fmt_seconds(r["measured_p50_s"]), f"{r['error_p50']:+.1%}",
         fmt_seconds(r["predicted_p95_s"]), fmt_seconds(r["measured_p95_s"]),
         fmt_seconds(r["predicted_wait_s"]), fmt_seconds(r["measured_wait_s"])]
        for r in v["rows"]
    ]  # fmt: skip
    return (
        f"<p>The simulator, given only the calibration, predicted the real training run: median step time"
        f" mean absolute percentage error <b>{v['mape']:.1%}</b> (p95: {v['mape_p95']:.1%}).</p>"
        + _table(
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
        + _img(run_dir, "validation.png", "predicted vs measured")
    )


def _scaling(run_dir: Path, sim) -> str:
    if not sim:
        return _missing("sim/summary.json", "run the demo's simulate stage")
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
            f"<h3>{_e(name)} <span class=note>(calibration applied: {_e(mode)})</span></h3>"
            + _img(run_dir, f"sim/{name}/scaling.png", f"{name} scaling")
            + _table(
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
        return _missing("sim/summary.json", "run the demo's simulate stage")
    rows = [
        [r["platform"], r["variant"], fmt_seconds(r["step_time_s"]["p50"]), fmt_seconds(r["straggler_wait_s"]),
         f"{r['scaling_efficiency']:.1%}", f"{r['tokens_per_s']:,.0f}"]
        for r in sim["stragglers"]
    ]  # fmt: skip
    return _img(run_dir, "sim/stragglers.png", "stragglers at 1024") + _table(
        ["platform", "variant", "step p50", "straggler wait", "efficiency", "tokens/s"], rows, left=2
    )


def _fixes(sim) -> str:
    if not sim or "fixes" not in sim:
        return _missing("sim/summary.json fixes", "rerun the demo's simulate stage (--fresh)")
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
        "<p>The lemon GPU above (x1.4, rank 17 of 1024 H100s, measured jitter), with each fix on the same"
        " jitter draws (<code>ddplab whatif</code>):</p>"
        + _table(["fix", "ranks", "step", "tokens/s", "vs nothing", "efficiency", "GPU-h / B tokens", "note"], rows)
        + f"<p>And failures over a campaign (<code>ddplab goodput</code>): at 6.5 failures per 1000 node-days"
        f" the 128 nodes fail every {g['mtbf_h']:.1f} h ({g['failures_per_week']:.1f} a week); with 10 min"
        f" restarts and 2 min checkpoints every {g['interval_min']:.0f} min (Daly's interval) a job takes"
        f" {w['simulated']:.4f} x its work in wall time (analytic {w['analytic']:.4f}).</p>"
    )


def _timelines(run_dir: Path, sim) -> str:
    if not sim:
        return _missing("sim/summary.json", "run the demo's simulate stage")
    parts = []
    for name, summaries in sim["platforms"].items():
        parts.append(_img(run_dir, f"sim/{name}/timeline.png", f"{name} timeline"))
        traces = [
            f'<a href="sim/{_e(name)}/ranks-{s["ranks"]:04d}/trace.json">{s["ranks"]}</a>'
            for s in summaries
            if (run_dir / "sim" / name / f"ranks-{s['ranks']:04d}" / "trace.json").exists()
        ]
        parts.append(f"<p>{_e(name)} Chrome traces by rank count: {' '.join(traces)}</p>")
    return (
        "<p>Each picture is the first simulated steps, drawn from the same spans as the Chrome traces. Open a"
        " trace at <code>ui.perfetto.dev</code> (Open trace file) or <code>chrome://tracing</code> to zoom.</p>"
        + "".join(parts)
    )


def render(run_dir: Path) -> str:
    run_dir = Path(run_dir)
    demo = _load(run_dir / "demo.json") or {}
    calib = _load(run_dir / "calib.json")
    sim = _load(run_dir / "sim" / "summary.json")
    stages = demo.get("stages", {})
    timing = ", ".join(f"{k} {v['seconds']} s" for k, v in stages.items())
    sections = [
        ("The arithmetic first (the seed's cost table)", _cost(calib)),
        ("The probe against the wire", _probe(run_dir, calib)),
        ("The fitted model, and where each value came from", _params(run_dir, calib)),
        ("The prediction checked against a real run", _validation(run_dir)),
        ("Scaling to 1024 GPUs: home lab, H100, MI300X", _scaling(run_dir, sim)),
        ("Stragglers at 1024 ranks", _stragglers(run_dir, sim)),
        ("Which fix pays, and what failures cost", _fixes(sim)),
        ("A few steps, rank by rank", _timelines(run_dir, sim)),
    ]
    body = "".join(f"<h2>{_e(title)}</h2>{content}" for title, content in sections)
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>ddplab report</title>"
        f"<style>{CSS}</style></head><body><div id=banner></div>"
        f"<h1>ddplab report</h1><p class=note>{_e(run_dir)}: {_e(demo.get('where', 'measured elsewhere'))}."
        f" Written {_e(time.strftime('%Y-%m-%d %H:%M'))}. {_e(timing)}</p>"
        f"{body}<script>{CHECK}</script></body></html>"
    )


def write_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"RUN_DIR: {run_dir}: not a directory")
    path = run_dir / "report.html"
    write_text_atomic(path, render(run_dir))
    return path
