"""`ddplab validate --public --plot FILE`: the published record in one picture. Each row's signed
error is drawn against its tier's bound (the grey bar: set before the row was added,
calibrate/public.py TIERS), held-out rows filled and in-sample ones hollow, misses ringed in red;
collectives by message size, where the protocol changes show, and step times and throughputs by
source. Rendered on the Agg canvas without pyplot's global state (as output/plot.py)."""

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from output.plot import save_png

_SIZES = [(1, "1 B"), (1 << 10, "1 KiB"), (1 << 20, "1 MiB"), (1 << 30, "1 GiB")]


def plot_public(rows: list[dict], headline: dict, path) -> dict:
    """Draw every row of ``rows`` (workflow/calibration.py public_validation) to ``path``; returns
    how many points each panel holds and how many misses were ringed, so a row lost on the way
    shows in a count."""
    fig = Figure(figsize=(13, 9), layout="constrained")
    sizes_ax, steps_ax = fig.subplots(2, 1, height_ratios=[3, 2])
    sources = sorted({r["source"] for r in rows})
    colour = {s: f"C{i % 10}" for i, s in enumerate(sources)}
    marker = {s: "os^Dv<>ph*"[i // 10 % 10] for i, s in enumerate(sources)}
    by_size = [r for r in rows if r["bytes"]]
    others = sorted((r for r in rows if not r["bytes"]), key=lambda r: (r["source"], r["error"]))
    drawn = {"collectives": 0, "steps": 0, "misses": 0}

    def draw(ax, x, r, panel: str) -> None:
        err, bound = 100 * r["error"], 100 * r["bound"]
        ax.vlines(x, -bound, bound, color="0.88", lw=3, zorder=0)
        filled = colour[r["source"]] if r["held_out"] else "none"
        ax.scatter(x, err, s=22, marker=marker[r["source"]], facecolors=filled, edgecolors=colour[r["source"]], lw=0.9)
        if not r["within"]:
            ax.scatter(x, err, s=90, facecolors="none", edgecolors="red", lw=1.0)
            drawn["misses"] += 1
        drawn[panel] += 1

    for r in by_size:
        draw(sizes_ax, r["bytes"], r, "collectives")
    ticks, labels, group_at = [], [], {}
    for i, r in enumerate(others):
        draw(steps_ax, i, r, "steps")
        group_at.setdefault(r["source"], []).append(i)
    for source, xs in group_at.items():
        ticks.append(sum(xs) / len(xs))
        labels.append(source)
        steps_ax.axvline(xs[-1] + 0.5, color="0.92", lw=0.8, zorder=0)
    # One legend for both panels: a proxy point per source, then what filled and ringed mean.
    for s in sources:
        sizes_ax.scatter([], [], marker=marker[s], color=colour[s], s=22, label=s)
    sizes_ax.scatter(
        [], [], marker="o", facecolors="none", edgecolors="0.3", s=22, label="in-sample (a constant fitted on it)"
    )
    sizes_ax.scatter([], [], marker="o", facecolors="none", edgecolors="red", s=90, label="outside its tier")
    sizes_ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    sizes_ax.set_xscale("log", base=2)
    sizes_ax.set_xticks([s for s, _ in _SIZES], [t for _, t in _SIZES])
    sizes_ax.set(xlabel="message size", ylabel="error (%), predicted / measured - 1",
                 title="collectives (time below 1 MiB, busbw from 1 MiB): grey, the row's tier")  # fmt: skip
    steps_ax.set_xticks(ticks, labels, rotation=30, ha="right", fontsize=8)
    steps_ax.set(ylabel="error (%)", title="step times and throughputs, by source (minus: the prediction is faster)")
    for ax in (sizes_ax, steps_ax):
        ax.axhline(0, color="0.5", lw=0.8)
        ax.grid(axis="y", alpha=0.3)
    held = headline["held_out"]
    fig.suptitle(
        f"public record: {held['within']} of {held['rows']} held-out rows within their tier"
        f" ({held['within'] / held['rows']:.1%}), median |error| {held['median_abs_error']:.1%};"
        f" {len(rows)} rows from {headline['sources']} sources (docs/validation-public.md)"
    )
    FigureCanvasAgg(fig)
    save_png(fig, Path(path), dpi=110)
    return drawn
