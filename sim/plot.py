"""Scaling plots from ``SimResult.summary()`` dicts. matplotlib is imported inside the
functions, so ``import sim`` stays light; figures render with the Agg backend and never
touch pyplot's global state."""

from pathlib import Path


def plot_scaling(summaries: list[dict], path, title: str) -> Path:
    """Step time and its breakdown vs rank count, saved as a PNG at ``path``.

    Left: p50 step time with a p5-p95 band, log-2 rank axis. Right: per rank count, the
    mean step time stacked as busy (dataloader + compute + optimizer), exposed comm and
    straggler wait (these add up to the mean step time, see sim/results.py), with the
    scaling efficiency on a twin axis.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not summaries:
        raise ValueError("plot_scaling: no summaries to plot")
    rows = sorted(summaries, key=lambda s: s["ranks"])
    ranks = [s["ranks"] for s in rows]
    # Milliseconds for cluster steps, seconds for the home lab's tens of seconds.
    slowest = max(s["step_time_s"]["p95"] for s in rows)
    unit, ms = ("s", 1.0) if slowest >= 10 else ("ms", 1e3)

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)

    p50 = [s["step_time_s"]["p50"] * ms for s in rows]
    p5 = [s["step_time_s"]["p5"] * ms for s in rows]
    p95 = [s["step_time_s"]["p95"] * ms for s in rows]
    left.fill_between(ranks, p5, p95, alpha=0.25, color="C0", label="p5-p95")
    left.plot(ranks, p50, "o-", color="C0", label="p50")
    left.set_xscale("log", base=2)
    left.set_xticks(ranks, [str(r) for r in ranks])
    left.minorticks_off()
    left.set_xlabel("ranks (GPUs)")
    left.set_ylabel(f"step time ({unit})")
    left.set_ylim(0, max(p95) * 1.15)
    left.grid(alpha=0.3)
    left.legend(loc="lower right")
    left.set_title("step time")

    x = list(range(len(rows)))
    busy = [(s["dataloader_s"] + s["compute_s"] + s["optimizer_s"]) * ms for s in rows]
    exposed = [s["exposed_comm_s"] * ms for s in rows]
    wait = [s["straggler_wait_s"] * ms for s in rows]
    right.bar(x, busy, color="C2", label="dataloader + compute + optimizer")
    right.bar(x, exposed, bottom=busy, color="C3", label="exposed comm")
    top = [b + e for b, e in zip(busy, exposed, strict=True)]
    right.bar(x, wait, bottom=top, color="C7", label="straggler wait")
    right.set_ylim(0, max(t + w for t, w in zip(top, wait, strict=True)) * 1.08)
    right.set_xticks(x, [str(r) for r in ranks])
    right.set_xlabel("ranks (GPUs)")
    right.set_ylabel(f"mean step time ({unit})")
    right.set_title("step time breakdown")

    eff = right.twinx()
    eff.plot(x, [s["scaling_efficiency"] * 100 for s in rows], "ko-", label="scaling efficiency")
    eff.set_ylabel("scaling efficiency (%)")
    eff.set_ylim(0, 105)
    handles = right.get_legend_handles_labels()
    extra = eff.get_legend_handles_labels()
    right.legend(
        handles[0] + extra[0],
        handles[1] + extra[1],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncols=2,
        fontsize="small",
    )

    fig.suptitle(title)
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path


_TIMELINE_COLORS = {
    "forward": "C0",
    "backward": "C1",
    "optimizer": "C2",
    "dataloader": "0.6",
    "pause": "C4",
    "allreduce": "C3",
    "allgather": "C5",
    "reduce_scatter": "C6",
    "wait": "0.8",
}


def plot_timeline(result, path, title: str) -> Path:
    """The traced window of a simulation (the Chrome trace's spans, sim/trace.py) as a
    picture: per traced rank a compute lane and a comm lane, time across."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from sim.trace import COMM, COMPUTE, chrome_trace

    spans = [e for e in chrome_trace(result)["traceEvents"] if e["ph"] == "X" and e["tid"] in (COMPUTE, COMM)]
    if not spans:
        raise ValueError("plot_timeline: the result has no traced steps")
    ranks = sorted({e["pid"] for e in spans})
    t0 = min(e["ts"] for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    unit, scale = ("s", 1e-6) if (end - t0) * 1e-6 >= 10 else ("ms", 1e-3)
    stragglers = result.scenario.straggler_map
    fig = Figure(figsize=(12, 0.55 * 2 * len(ranks) + 1.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    labels, ticks = [], []
    for i, r in enumerate(ranks):
        for lane, tid in enumerate((COMPUTE, COMM)):
            y = (len(ranks) - 1 - i) * 2.4 + (1 - lane) * 1.1
            for e in spans:
                if e["pid"] == r and e["tid"] == tid:
                    kind = e["name"].split()[0]
                    start = (e["ts"] - t0) * scale
                    ax.broken_barh([(start, e["dur"] * scale)], (y, 0.9), color=_TIMELINE_COLORS.get(kind, "k"))
            ticks.append(y + 0.45)
            slow = f" x{stragglers[r]:g}" if r in stragglers else ""
            labels.append(f"rank {r}{slow} {'compute' if tid == COMPUTE else 'comm'}")
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, (end - t0) * scale)
    handles = [Patch(color=c, label=k) for k, c in _TIMELINE_COLORS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=6, fontsize="small")
    ax.set_title(title)
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path
