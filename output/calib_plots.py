"""The pictures beside calib.json, the validation table and the straggler report: fits
drawn over their data, so a bad fit is seen rather than read from an R^2. Figures render with the Agg
canvas and never touch pyplot's global state (as output/plot.py)."""

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

from calibrate import noise_fit
from calibrate.calibration import Calibration, Memory
from calibrate.collective_fit import predict_s
from calibrate.stragglers import Report as StragglerReport
from calibrate.stragglers import fmt_wait, verdict
from output.plot import save_png


def _subplots(*args, figsize, **kw):
    # Constrained layout keeps titles, labels and outside legends from overlapping.
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(*args, **kw)


def _measured(calib: Calibration) -> str:
    """What a calibration picture shows: the machines and the mode measured."""
    return f"calibration measured on {calib.probed_on} ({calib.backend}, DDP)"


def save(fig, path: Path) -> None:
    """Whole or not at all (output/plot.py save_png), on an Agg canvas, at this module's dpi."""
    FigureCanvasAgg(fig)
    save_png(fig, path, dpi=110)


def collectives(calib: Calibration, path: Path) -> None:
    """Per network: measured times (every iteration, and the per-size median) with the
    fitted alpha-beta line, and the medians' relative residuals underneath."""
    nets = calib.networks
    fig, axes = _subplots(2, len(nets), figsize=(5.2 * len(nets), 6.4), squeeze=False, height_ratios=[3, 1.3])
    for col, (label, net) in enumerate(sorted(nets.items())):
        top, bottom = axes[0, col], axes[1, col]
        for op, c in sorted(net.collectives.items()):
            fit = c.fit
            sizes = np.array(sorted(c.times_s))
            med = np.array([np.median(c.times_s[s]) for s in sizes])
            for s in sizes:
                t = c.times_s[s]
                top.scatter(np.full(len(t), s), t, s=4, alpha=0.25, color="0.5")
            line = top.plot(sizes, [predict_s(fit, s) for s in sizes], lw=1.2)[0]
            top.scatter(sizes, med, s=14, color=line.get_color(), label=f"{op}: {fit.busbw_gb_s:.3g} GB/s busbw")
            bottom.plot(sizes, [med[i] / predict_s(fit, s) - 1 for i, s in enumerate(sizes)], "o-", ms=3)
        top.set(
            xscale="log",
            yscale="log",
            ylabel="time (s)",
            title=f"{label}: link {net.link_gbit_s.value:.3g} Gbit/s",
        )
        top.legend(fontsize=8)
        bottom.axhline(0, color="k", lw=0.6)
        bottom.set(xscale="log", xlabel="size (bytes)", ylabel="median / fit - 1")
    fig.suptitle(_measured(calib))
    save(fig, path)


def compute(calib: Calibration, path: Path) -> None:
    """Step time per micro-step against tokens with the affine fit; the measured
    bucket-ready profile as gradient bytes ready against backward progress."""
    c = calib.compute
    memory = c.memory
    fig, axes = _subplots(1, 3 if memory else 2, figsize=(15.5 if memory else 10.5, 4))
    left, right = axes[0], axes[1]
    for fit, name in ((c.step_s, "forward + backward"), (c.forward_s, "forward"), (c.backward_s, "backward")):
        x = np.array([p[0] for p in fit.points])
        xs = np.linspace(0, x.max() * 1.05, 50)
        line = left.plot(xs, fit.seconds(xs), lw=1)[0]
        left.scatter(x, [p[1] for p in fit.points], s=16, color=line.get_color(), label=f"{name} (R² {fit.r2:.3f})")
    left.set(xlabel="tokens per micro-step", ylabel="seconds (speed-1 rank, mean)", title=f"{c.model}, seq {c.seq_len}")
    left.legend(fontsize=8)
    fractions = np.sort(np.array(list(c.ready_fractions.value.values())))
    if len(fractions):  # a trace whose buckets match no DDP layout of the model carries none
        right.step(fractions / fractions.max(), np.arange(1, len(fractions) + 1) / len(fractions), where="post")
    for b in c.buckets_default_cap:
        right.axvline(b.ready_fraction, color="0.7", lw=0.8)
    right.set(
        xlabel="fraction of backward done",
        ylabel="share of parameter tensors ready",
        title="measured gradient-ready profile\n(grey: default-cap buckets)",
    )
    if memory:
        _memory(axes[2], memory)
    fig.suptitle(_measured(calib))
    save(fig, path)


def _memory(ax, memory: Memory) -> None:
    """Peak allocated device memory against tokens: the compute probe's sizes with their line,
    and the DDP training step (DDP's buckets on top)."""
    gib = float(1 << 30)
    fit = memory.compute_peak_bytes
    x = np.array([p[0] for p in fit.points])
    ax.scatter(x, [p[1] / gib for p in fit.points], s=16, label="no DDP, AdamW state held")
    xs = np.linspace(0, x.max() * 1.05, 50)
    ax.plot(xs, (fit.intercept_bytes + fit.per_token_bytes * xs) / gib, lw=1)
    ddp = memory.ddp_peak_bytes
    ax.scatter([ddp.tokens], [ddp.value / gib], marker="^", s=40, color="tab:red", label="DDP training step")
    ax.set(xlabel="tokens per micro-step", ylabel="peak allocated (GiB)", title="device memory (max_memory_allocated)")
    ax.legend(fontsize=8)


def noise(calib: Calibration, path: Path) -> None:
    """The jitter histogram with every candidate's fitted density."""
    multipliers = np.array(calib.noise.multipliers)
    fig, ax = _subplots(figsize=(6.5, 4))
    ax.hist(multipliers, bins=min(60, max(10, len(multipliers) // 5)), density=True, color="0.8", label="measured")
    xs = np.linspace(multipliers.min() * 0.98, multipliers.max() * 1.02, 300)
    for c in calib.noise.candidates:
        ax.plot(
            xs, noise_fit.pdf(c, xs), lw=1.2, label=f"{c.distribution} σ={c.sigma:.3g} AIC={c.aic:.0f} KS={c.ks:.2f}"
        )
    ax.set(xlabel="compute time / its mean", ylabel="density", title=f"jitter ({len(multipliers)} iterations)")
    ax.legend(fontsize=8)
    fig.suptitle(_measured(calib), fontsize="medium")
    save(fig, path)


def sync_bars(calib: Calibration) -> tuple[list[int], np.ndarray, np.ndarray] | None:
    """(ranks, mean forward + backward, mean time before the sync outside them) per traced rank,
    in seconds: when each joins the gradient sync and why. None where the trace does not show it
    (a probe calibration, a trace without backward spans or gradient all-reduces)."""
    t = calib.trace
    if t is None or len(t.ranks) < 2 or any(r.ready_s is None or r.lead_s is None for r in t.ranks.values()):
        return None
    rows = sorted(t.ranks.items())
    n = min(len(r.ready_s) for _, r in rows)
    keep = [i for i in range(n) if all(r.ready_s[i] is not None and r.lead_s[i] is not None for _, r in rows)]
    if not keep:
        return None
    ready = np.array([[r.ready_s[i] for i in keep] for _, r in rows]).mean(axis=1)
    lead = np.array([[r.lead_s[i] for i in keep] for _, r in rows]).mean(axis=1)
    return [k for k, _ in rows], ready - lead, lead


def ranks(calib: Calibration, path: Path) -> None:
    """Per-rank straggler score (fastest median / this median), the 0.75 flag line; from a trace
    also when each rank joins the gradient sync, its compute and the time before it apart: a
    rank late by its data loader computes as fast as the rest, and only the second panel shows it."""
    rows = sorted(calib.ranks.items())
    bars = sync_bars(calib)
    width = max(4.5, 0.5 * len(rows) + 2)
    fig, axes = _subplots(1, 2 if bars else 1, figsize=(2 * width if bars else width, 3.6), squeeze=False)
    ax = axes[0][0]
    scores = [v.score for _, v in rows]
    colors = ["tab:red" if v.flagged else "tab:blue" for _, v in rows]
    ax.bar([r for r, _ in rows], scores, color=colors)
    ax.axhline(noise_fit.STRAGGLER_SCORE_FLAG, color="k", ls="--", lw=0.8, label="flag below 0.75")
    ax.set(xlabel="rank", ylabel="speed score", ylim=(0, 1.05), title="per-rank compute speed (1 = fastest)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if bars:
        who, comp, lead = bars
        ax = axes[0][1]
        ax.bar(who, comp * 1e3, color="tab:blue", label="forward + backward")
        ax.bar(who, lead * 1e3, bottom=comp * 1e3, color="tab:orange", label="before the sync, outside compute")
        late = calib.trace.late_rank
        if late is not None:
            top = (comp + lead)[who.index(late)] * 1e3
            ax.annotate("the others wait for it", (late, top), ha="center", va="bottom", fontsize=8)
        since = "the last sync" if any(r.gpu for r in calib.trace.ranks.values()) else "the step's start"
        ax.set(xlabel="rank", ylabel=f"ms from {since}", title="when each rank joins the gradient sync")
        if np.max(comp + lead) > 0:
            ax.set_ylim(0, 1.15 * float(np.max(comp + lead)) * 1e3)  # room for the note
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(fontsize=8, loc="outside lower center")  # below the bars, not over one
    fig.suptitle(_measured(calib), fontsize="small")
    save(fig, path)


def write_calibration_plots(calib: Calibration, stem: Path) -> list[Path]:
    """Every calibration picture as ``<stem>-<what>.png``; returns the paths."""
    # A one-rank (one-GPU) probe measured no network; too few steps to fit, no jitter to draw.
    what = [w for w, drawn in (("collectives", calib.networks), ("compute", True), ("noise", calib.noise.candidates),
                               ("ranks", True)) if drawn]  # fmt: skip
    out = {w: stem.with_name(f"{stem.name}-{w}.png") for w in what}
    if "collectives" in out:
        collectives(calib, out["collectives"])
    compute(calib, out["compute"])
    if "noise" in out:
        noise(calib, out["noise"])
    ranks(calib, out["ranks"])
    return list(out.values())


def predicted_vs_measured(rows: list[dict], mape: float, path: Path) -> None:
    """Validation: predicted against measured p50 (and p95) step time, with y = x."""
    fig, ax = _subplots(figsize=(5.6, 5.2))
    m50 = np.array([r["measured_p50_s"] for r in rows])
    p50 = np.array([r["predicted_p50_s"] for r in rows])
    m95 = np.array([r["measured_p95_s"] for r in rows])
    p95 = np.array([r["predicted_p95_s"] for r in rows])
    lo, hi = min(m50.min(), p50.min()) * 0.8, max(m95.max(), p95.max()) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="y = x")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.9", label="±10 %")
    ax.scatter(m95, p95, marker="^", s=18, color="tab:orange", label="p95")
    ax.scatter(m50, p50, s=22, color="tab:blue", label=f"p50 (MAPE {mape:.1%})")
    labels = [
        ax.annotate(r["name"], (r["measured_p50_s"], r["predicted_p50_s"]), xytext=(4, -3), textcoords="offset points",
                    fontsize=6, alpha=0.8)
        for r in rows
    ]  # fmt: skip
    if hi / lo > 5:  # a wide range reads best on log axes, in plain numbers
        ax.set(xscale="log", yscale="log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (s)")
    ax.set(ylabel="predicted step time (s)", title="validation: prediction vs real DDP runs")
    ax.legend(fontsize=8, loc="upper left")
    hidden = _drop_overlapping(fig, labels)
    if hidden:
        ax.set_xlabel(f"measured step time (s); {hidden} overlapping labels left out (the table has every run)")
    save(fig, path)


def step_distributions(rows: list[dict], path: Path) -> None:
    """Validation, per run: the measured steps' empirical CDF (a step line) over the simulated
    distribution's (its 100 percentile midpoints), with the KS distance and p-value, so a
    shifted middle and a wrong spread or tail are seen, not only read; dashed, the measured
    steps moved to the predicted median, which the shape test (ks_shape_p) compares."""
    n = len(rows)
    cols = min(4, n)
    nrows = -(-n // cols)
    fig, axes = _subplots(nrows, cols, figsize=(3.0 * cols, 2.5 * nrows), squeeze=False)
    for ax, r in zip(axes.flat, rows, strict=False):
        meas = np.sort(r["measured_step_s"])
        k = len(meas)  # the ECDF rises from 0 at the fastest step to 1 at the slowest
        ax.step(np.r_[meas[0], meas], np.arange(k + 1) / k, where="post", color="tab:blue", lw=1.2,
                label=f"measured ({k})")  # fmt: skip
        q = np.asarray(r["predicted_quantiles_s"])
        ax.plot(q, (np.arange(len(q)) + 0.5) / len(q), color="tab:orange", lw=1.2,
                label=f"simulated ({r['simulated_steps']})")  # fmt: skip
        # The shape test's sample: the measured steps times predicted p50 / measured p50, as it scales them.
        aligned = meas * (r["predicted_p50_s"] / r["measured_p50_s"])
        ax.step(np.r_[aligned[0], aligned], np.arange(k + 1) / k, where="post", color="tab:blue", lw=0.8,
                ls="--", label="measured, at the predicted median")  # fmt: skip
        alpha = r.get("ks_alpha", 0.05)
        ok, shape_ok = ("pass" if p >= alpha else "FAIL" for p in (r["ks_p"], r["ks_shape_p"]))
        ax.set_title(
            f"{r['name']}\nKS {r['ks']:.2f}, p {r['ks_p']:.2g} ({ok}); p50 {r['error_p50']:+.1%}"
            f"\nshape p {r['ks_shape_p']:.2g} ({shape_ok})",
            fontsize=7,
        )
        ax.tick_params(labelsize=6)
        ax.set_ylim(0, 1)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6, loc="lower right")
    fig.supxlabel("step time (s)", fontsize=8)
    fig.supylabel("fraction of steps at or below", fontsize=8)
    save(fig, path)


def _drop_overlapping(fig, texts) -> int:
    """Hide each label that would overlap one already kept (in order) or the legend; how many."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.axes[0].get_legend()
    kept = [legend.get_window_extent(renderer)] if legend is not None else []
    hidden = 0
    for t in texts:
        box = t.get_window_extent(renderer)
        if any(box.overlaps(k) for k in kept):
            t.set_visible(False)
            hidden += 1
        else:
            kept.append(box)
    return hidden


def stragglers(rep: StragglerReport, path: Path, *, annotate: int = 8) -> Path:
    """Score per rank with the flag line (top) and mean wait per rank (bottom), as a PNG.

    Up to 64 ranks as bars; beyond, as points over the rank index so 1024 ranks stay
    readable. Flagged ranks are red and the ``annotate`` lowest-scoring of them are
    labelled; the least-waiting rank is labelled on the wait panel. Written to a
    temporary name and renamed, so a failure leaves no half-written file.
    """
    path = Path(path)
    n = len(rep.ranks)
    x = np.arange(n)
    score = np.array([r.score for r in rep.ranks])
    wait_s = np.array([r.wait_s_mean for r in rep.ranks])
    unit, scale = ("s", 1.0) if wait_s.max() >= 10 else ("ms", 1e3)
    wait = wait_s * scale
    flagged = np.array([r.flagged for r in rep.ranks])
    late = np.array([r.late_flagged for r in rep.ranks])  # late outside compute (calibrate/stragglers.py)
    colors = np.where(flagged, "tab:red", np.where(late, "tab:orange", "tab:blue"))
    bars = n <= 64

    width_in = max(8.0, min(14.0, 4 + 0.2 * n))
    fig = Figure(figsize=(width_in, 6.4), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    if bars:
        top.bar(x, score, color=colors)
        bottom.bar(x, wait, color=colors)
    else:
        top.plot(x, score, color="tab:blue", lw=0.6, alpha=0.6)
        top.scatter(x[~flagged], score[~flagged], s=6, color="tab:blue", zorder=3)
        top.scatter(x[flagged], score[flagged], s=30, color="tab:red", zorder=4, label="flagged")
        bottom.plot(x, wait, color="tab:blue", lw=0.6, alpha=0.6)
        bottom.scatter(x, wait, s=6, c=list(colors), zorder=3)
    flag = noise_fit.STRAGGLER_SCORE_FLAG
    top.axhline(flag, color="k", ls="--", lw=0.8, label=f"flag below {flag}")
    for r in sorted(rep.flagged, key=lambda k: score[k])[:annotate]:
        top.annotate(
            f"rank {r}: {score[r]:.2f}",
            (r, score[r]),
            xytext=(0, 4) if bars else (6, -12),  # above its bar; beside a point
            textcoords="offset points",
            ha="center" if bars else "left",
            fontsize=8,
            color="tab:red",
            bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1},
        )
    top.set(ylabel="score (fastest / this)", ylim=(0, 1.08), title="straggler score: fastest median compute / rank's")
    top.legend(loc="upper right", fontsize=8, framealpha=1.0)
    top.grid(alpha=0.3, axis="y")

    least = rep.least_waiting_rank
    bottom.axhline(rep.wait_s_median * scale, color="k", ls=":", lw=0.8, label="median over ranks")
    bottom.scatter([least], [wait[least]], s=60, facecolors="none", edgecolors="k", zorder=5)
    bottom.annotate(
        f"rank {least} waits least: {fmt_wait(wait_s[least])}",
        (least, wait[least]),
        xytext=(6, 8),
        textcoords="offset points",
        fontsize=8,
    )
    for r in rep.late[:annotate]:
        bottom.annotate(
            f"rank {r} late: the others wait {fmt_wait(rep.ranks[r].late_s)} for it",
            (r, wait[r]),
            xytext=(0, 24),
            textcoords="offset points",
            ha="center",
            fontsize=8,
            color="tab:orange",
            bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1},
        )
    bottom.set(xlabel="rank", ylabel=f"mean wait per step ({unit})", ylim=(0, max(wait.max(), 1e-12) * 1.15))
    bottom.set_title("collective wait: the straggler waits least")
    bottom.legend(loc="upper right", fontsize=8)
    bottom.grid(alpha=0.3, axis="y")
    bottom.set_xlim(-0.5 if bars else -n * 0.01, n - 0.5 if bars else n * 1.01)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))  # ranks, not 0.25 of one
    said = "\n".join(textwrap.wrap(verdict(rep), int(width_in * 14)))  # 9 pt: about 14 characters an inch
    fig.suptitle(f"{rep.source} {rep.path.name}: {n} ranks, {rep.steps} steps, DDP\n{said}", fontsize=9)

    save(fig, path)
    return path
