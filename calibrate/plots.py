"""The pictures beside calib.json and the validation table: fits drawn over their
data, so a bad fit is seen rather than read from an R^2. Figures render with the Agg
canvas and never touch pyplot's global state (as sim/plot.py)."""

import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

from calibrate import noise_fit
from calibrate.collective_fit import CollectiveFit, predict_s


def _subplots(*args, figsize, **kw):
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kw)


def save(fig, path: Path) -> None:
    """Write next to the target, then rename: a reader never sees half a PNG."""
    tmp = path.with_name(f".{path.name}.tmp")
    FigureCanvasAgg(fig)
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def collectives(calib: dict, path: Path) -> None:
    """Per network: measured times (every iteration, and the per-size median) with the
    fitted alpha-beta line, and the medians' relative residuals underneath."""
    nets = calib["networks"]
    fig, axes = _subplots(2, len(nets), figsize=(5.2 * len(nets), 6.4), squeeze=False, height_ratios=[3, 1.3])
    for col, (label, net) in enumerate(sorted(nets.items())):
        top, bottom = axes[0, col], axes[1, col]
        for op, c in sorted(net["collectives"].items()):
            fit = CollectiveFit(**{k: c[k] for k in CollectiveFit._fields})
            sizes = np.array(sorted(int(s) for s in c["times_s"]))
            med = np.array([np.median(c["times_s"][str(s)]) for s in sizes])
            for s in sizes:
                t = c["times_s"][str(s)]
                top.scatter(np.full(len(t), s), t, s=4, alpha=0.25, color="0.5")
            line = top.plot(sizes, [predict_s(fit, s) for s in sizes], lw=1.2)[0]
            top.scatter(sizes, med, s=14, color=line.get_color(), label=f"{op}: {fit.busbw_gb_s:.3g} GB/s busbw")
            bottom.plot(sizes, [med[i] / predict_s(fit, s) - 1 for i, s in enumerate(sizes)], "o-", ms=3)
        top.set(
            xscale="log",
            yscale="log",
            ylabel="time (s)",
            title=f"{label}: link {net['link_gbit_s']['value']:.3g} Gbit/s",
        )
        top.legend(fontsize=8)
        bottom.axhline(0, color="k", lw=0.6)
        bottom.set(xscale="log", xlabel="size (bytes)", ylabel="median / fit - 1")
    fig.tight_layout()
    save(fig, path)


def compute(calib: dict, path: Path) -> None:
    """Step time per micro-step against tokens with the affine fit; the measured
    bucket-ready profile as gradient bytes ready against backward progress."""
    c = calib["compute"]
    memory = c.get("memory")
    fig, axes = _subplots(1, 3 if memory else 2, figsize=(15.5 if memory else 10.5, 4))
    left, right = axes[0], axes[1]
    for key, name in (("step_s", "forward + backward"), ("forward_s", "forward"), ("backward_s", "backward")):
        fit = c[key]
        x = np.array([p[0] for p in fit["points"]])
        xs = np.linspace(0, x.max() * 1.05, 50)
        line = left.plot(xs, fit["intercept_s"] + fit["per_token_s"] * xs, lw=1)[0]
        left.scatter(
            x, [p[1] for p in fit["points"]], s=16, color=line.get_color(), label=f"{name} (R² {fit['r2']:.3f})"
        )
    left.set(
        xlabel="tokens per micro-step", ylabel="seconds (speed-1 rank, mean)", title=f"{c['model']}, seq {c['seq_len']}"
    )
    left.legend(fontsize=8)
    fractions = np.sort(np.array(list(c["ready_fractions"]["value"].values())))
    right.step(fractions / fractions.max(), np.arange(1, len(fractions) + 1) / len(fractions), where="post")
    for b in c["buckets_default_cap"]:
        right.axvline(b["ready_fraction"], color="0.7", lw=0.8)
    right.set(
        xlabel="fraction of backward done",
        ylabel="share of parameter tensors ready",
        title="measured gradient-ready profile (grey: default-cap buckets)",
    )
    if memory:
        _memory(axes[2], memory)
    fig.tight_layout()
    save(fig, path)


def _memory(ax, memory: dict) -> None:
    """Peak allocated device memory against tokens: the compute probe's sizes with their line,
    and the DDP training step (DDP's buckets on top)."""
    gib = float(1 << 30)
    fit = memory["compute_peak_bytes"]
    x = np.array([p[0] for p in fit["points"]])
    ax.scatter(x, [p[1] / gib for p in fit["points"]], s=16, label="no DDP, AdamW state held")
    xs = np.linspace(0, x.max() * 1.05, 50)
    ax.plot(xs, (fit["intercept_bytes"] + fit["per_token_bytes"] * xs) / gib, lw=1)
    ddp = memory["ddp_peak_bytes"]
    ax.scatter([ddp["tokens"]], [ddp["value"] / gib], marker="^", s=40, color="tab:red", label="DDP training step")
    ax.set(xlabel="tokens per micro-step", ylabel="peak allocated (GiB)", title="device memory (max_memory_allocated)")
    ax.legend(fontsize=8)


def noise(calib: dict, multipliers: np.ndarray, path: Path) -> None:
    """The jitter histogram with every candidate's fitted density."""
    fig, ax = _subplots(figsize=(6.5, 4))
    ax.hist(multipliers, bins=min(60, max(10, len(multipliers) // 5)), density=True, color="0.8", label="measured")
    xs = np.linspace(multipliers.min() * 0.98, multipliers.max() * 1.02, 300)
    for cand in calib["noise"]["candidates"]:
        c = noise_fit.NoiseCandidate(**{**cand, "params": tuple(cand["params"])})
        ax.plot(
            xs, noise_fit.pdf(c, xs), lw=1.2, label=f"{c.distribution} σ={c.sigma:.3g} AIC={c.aic:.0f} KS={c.ks:.2f}"
        )
    ax.set(xlabel="compute time / its mean", ylabel="density", title=f"jitter ({len(multipliers)} iterations)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)


def ranks(calib: dict, path: Path) -> None:
    """Per-rank straggler score (fastest median / this median), the 0.75 flag line."""
    rows = sorted(calib["ranks"].items(), key=lambda kv: int(kv[0]))
    fig, ax = _subplots(figsize=(max(4, 0.5 * len(rows) + 2), 3.2))
    scores = [v["score"] for _, v in rows]
    colors = ["tab:red" if v["flagged"] else "tab:blue" for _, v in rows]
    ax.bar([int(r) for r, _ in rows], scores, color=colors)
    ax.axhline(noise_fit.STRAGGLER_SCORE_FLAG, color="k", ls="--", lw=0.8, label="flag below 0.75")
    ax.set(xlabel="rank", ylabel="speed score", ylim=(0, 1.05), title="per-rank compute speed (1 = fastest)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)


def write_calibration_plots(calib: dict, stem: Path) -> list[Path]:
    """Every calibration picture as ``<stem>-<what>.png``; returns the paths."""
    what = ("collectives", "compute", "noise", "ranks") if calib["networks"] else ("compute", "noise", "ranks")
    out = {w: stem.with_name(f"{stem.name}-{w}.png") for w in what}
    if "collectives" in out:  # a one-rank (one-GPU) probe measured no network
        collectives(calib, out["collectives"])
    compute(calib, out["compute"])
    noise(calib, np.array(calib["noise"]["multipliers"]), out["noise"])
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
    for r in rows:
        ax.annotate(r["name"], (r["measured_p50_s"], r["predicted_p50_s"]), fontsize=6, alpha=0.7)
    if hi / lo > 5:  # a wide range reads best on log axes, in plain numbers
        ax.set(xscale="log", yscale="log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (s)")
    ax.set(ylabel="predicted step time (s)", title="validation: prediction vs real DDP runs")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save(fig, path)
