"""sweep.png: each grid point's mean step time and scaling efficiency with their 95 % intervals
over the seeds, against the first varied key (a line per scenario and value of the other keys),
or one point per scenario when nothing is varied. Written through output/plot.py's save_png."""

from pathlib import Path


def _line_label(row: dict, first_key: str | None) -> str:
    rest = [f"{k}={v}" for k, v in row["vary"].items() if k != first_key]
    return ", ".join([row["scenario"], *rest])


def plot_sweep(rows: list[dict], vary_keys: list[str], path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from output.plot import run_title, save_png

    first = vary_keys[0] if vary_keys else None
    # Categorical positions: the values as typed (numbers, names, straggler lists alike).
    xs = (
        list(dict.fromkeys(r["vary"][first] for r in rows))
        if first
        else list(dict.fromkeys(r["scenario"] for r in rows))
    )
    lines: dict[str, list[dict]] = {}
    for r in rows:
        lines.setdefault(_line_label(r, first) if first else "", []).append(r)

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    panels = (
        ("step_time_mean_s", "mean step time (s, axis from 0)", 1.0),
        ("scaling_efficiency", "scaling efficiency (%, axis from 0)", 100.0),
    )
    axes = fig.subplots(1, 2)
    for ax, (metric, ylabel, scale) in zip(axes, panels, strict=True):
        for label, group in lines.items():
            pos = [xs.index(r["vary"][first] if first else r["scenario"]) for r in group]
            mean = [r[metric]["mean"] * scale for r in group]
            # One seed: no interval to draw (it is undefined, not zero).
            err = [
                [
                    (m - r[metric]["ci95_low"] * scale) if r[metric]["ci95_low"] is not None else 0.0
                    for m, r in zip(mean, group, strict=True)
                ],
                [
                    (r[metric]["ci95_high"] * scale - m) if r[metric]["ci95_high"] is not None else 0.0
                    for m, r in zip(mean, group, strict=True)
                ],
            ]
            # Points only across scenarios: a line between two presets would read as a trend.
            style = "-" if first else "none"
            ax.errorbar(pos, mean, yerr=err, marker="o", linestyle=style, capsize=4, label=label or None)
        # From 0: autoscale zooms onto the data, and a 0.3 % difference would fill the panel.
        ax.set_ylim(0, 105 if metric == "scaling_efficiency" else None)
        ax.set_xticks(range(len(xs)), xs)
        ax.set_xlabel(first or "scenario")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if any(lines):
        axes[0].legend(fontsize=8)
    n = len(rows[0]["seeds"])
    bars = "bars: the 95 % Student-t interval" if n > 1 else "one seed: no interval"
    what = run_title([r["scenario"] for r in rows], [r["ranks"] for r in rows], [r["mode"] for r in rows])
    fig.suptitle(f"ddplab sweep {what}; mean over {n} seed{'s' * (n != 1)}; {bars}")
    return save_png(fig, path)
