"""Plots of results: scaling from typed summaries (sim/summary.py), step-time breakdowns from
their JSON dicts and whatif's rows, goodput campaigns, the traced timeline. matplotlib is imported inside the
functions, so ``import sim`` stays light; figures render with the Agg backend and never
touch pyplot's global state."""

from pathlib import Path

from output.atomic import write_atomic
from output.ownfiles import SOFTWARE
from sim.summary import Summary


def plot_scaling(summaries: list[Summary], path, title: str) -> Path:
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
    rows = sorted(summaries, key=lambda s: s.ranks)
    ranks = [s.ranks for s in rows]
    # Milliseconds for cluster steps, seconds for the home lab's tens of seconds.
    slowest = max(s.step_time_s.p95 for s in rows)
    unit, ms = ("s", 1.0) if slowest >= 10 else ("ms", 1e3)

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)

    p50 = [s.step_time_s.p50 * ms for s in rows]
    p5 = [s.step_time_s.p5 * ms for s in rows]
    p95 = [s.step_time_s.p95 * ms for s in rows]
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
    busy = [(s.dataloader_s + s.host_delay_s + s.compute_s + s.optimizer_s) * ms for s in rows]
    exposed = [s.exposed_comm_s * ms for s in rows]
    wait = [s.straggler_wait_s * ms for s in rows]
    right.bar(x, busy, color="C2", label="dataloader + host delay + compute + optimizer")
    right.bar(x, exposed, bottom=busy, color="C3", label="exposed comm")
    top = [b + e for b, e in zip(busy, exposed, strict=True)]
    right.bar(x, wait, bottom=top, color="C7", label="straggler wait")
    right.set_ylim(0, max(t + w for t, w in zip(top, wait, strict=True)) * 1.08)
    right.set_xticks(x, [str(r) for r in ranks])
    right.set_xlabel("ranks (GPUs)")
    right.set_ylabel(f"mean step time ({unit})")
    right.set_title("step time breakdown")

    eff = right.twinx()
    eff.plot(x, [s.scaling_efficiency * 100 for s in rows], "ko-", label="scaling efficiency")
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
    return save_png(fig, path)


def run_title(scenarios, ranks, modes) -> str:
    """What a picture shows, for its title: "h100-1024: 64 ranks, DDP". Rows that differ list each
    value once, in order ("8/64/1024 ranks")."""

    def once(values) -> list[str]:
        return list(dict.fromkeys(str(v) for v in values))

    return f"{', '.join(once(scenarios))}: {'/'.join(once(ranks))} ranks, {'/'.join(once(m.upper() for m in modes))}"


def save_png(fig, path, dpi: int = 120) -> Path:
    """Written whole (output/atomic.py): a reader, or a rerun after Ctrl-C, never finds half a PNG.
    Every picture ddplab draws goes through here (output/calib_plots.py too)."""
    # The Software chunk marks the picture as ours: a rerun may replace it, nothing else (output/ownfiles.py).
    meta = {"Software": SOFTWARE}
    return write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png", metadata=meta))


# What a mean step splits into (sim/results.py: they add up to it), bottom to top as drawn.
_PARTS = (
    ("compute (fwd+bwd)", "compute_s", "C2"),
    ("optimizer", "optimizer_s", "C0"),
    ("dataloader", "dataloader_s", "0.6"),
    ("host delay", "host_delay_s", "0.8"),
    ("exposed comm", "exposed_comm_s", "C3"),
    ("straggler wait", "straggler_wait_s", "C7"),
)


def plot_breakdown(rows: list[dict], labels: list[str], path, title: str, notes: list[str] | None = None) -> Path:
    """One bar per row (a summary or a whatif row: the keys of _PARTS): its mean step stacked as
    compute / optimizer / dataloader / host delay / exposed comm / straggler wait, the total on
    top, and a row's note (throughput against the first, say) under the total."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not rows:
        raise ValueError("plot_breakdown: no rows to plot")
    totals = [sum(r[key] for _, key, _ in _PARTS) for r in rows]
    unit, scale = ("s", 1.0) if max(totals) >= 10 else ("ms", 1e3)
    one = len(rows) == 1
    fig = Figure(figsize=(7.5, 4.8) if one else (max(5.0, 1.4 * len(rows) + 2.5), 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for name, key, color in _PARTS:
        values = [r[key] * scale for r in rows]
        if any(v > 0 for v in values) or key in ("compute_s", "exposed_comm_s", "straggler_wait_s"):
            if one:  # a single bar: the legend carries each part's value
                name = f"{name}  {values[0]:.4g} {unit} ({values[0] / (totals[0] * scale):.1%})"
            ax.bar(x, values, bottom=bottom, color=color, label=name, width=0.6)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, total in enumerate(totals):
        text = f"{total * scale:.4g} {unit}" + (f"\n{notes[i]}" if notes else "")
        ax.annotate(text, (i, total * scale), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize="small")  # fmt: skip
    long = max(len(s) for s in labels) > 14
    ax.set_xticks(x, labels, rotation=20 if long else 0, ha="right" if long else "center", fontsize="small")
    ax.set_ylim(0, max(totals) * scale * 1.25)
    ax.set_ylabel(f"mean step time ({unit})")
    handles, names = ax.get_legend_handles_labels()
    if one:
        fig.legend(handles[::-1], names[::-1], loc="outside right center", fontsize="small")  # top first
    else:
        fig.legend(handles, names, loc="outside lower center", ncols=len(names), fontsize="small")
    ax.set_title(title)
    return save_png(fig, path)


def plot_goodput(o: dict, path) -> Path:
    """`ddplab goodput`'s result (its --json): left, the simulated wall beyond the useful work
    (lost to failures, restarts, checkpoints, stalls) in hours and as shares of the wall;
    right, the closed form's wall/work against the checkpoint interval, with the interval
    simulated (its standard error as the bar), Daly's and the best simulated."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    from sim.checkpointing import wall_per_work_analytic

    fig = Figure(figsize=(12, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.4])

    wall_h = o["wall_per_work"]["simulated"] * o["work_h"]
    named = {"restarts": o["restart_h"], "checkpoints": o["checkpoint_h"], "stalled": o["stalled_h"]}
    # What the wall holds beyond the kept work and the named parts: work lost to failures and
    # the checkpoints they cut short (sim/goodput.py's lost_wall).
    overhead = {"lost to failures": max(0.0, wall_h - o["work_h"] - sum(named.values())), **named}
    if not o["stalls"]["per_day"]:
        del overhead["stalled"]
    x = list(range(len(overhead)))
    left.bar(x, list(overhead.values()), color=["C3", "C1", "C0", "C7"][: len(overhead)], width=0.6)
    for i, hours in enumerate(overhead.values()):
        left.annotate(f"{hours:,.4g} h\n{hours / wall_h:.2%} of wall", (i, hours), xytext=(0, 3),
                      textcoords="offset points", ha="center", va="bottom", fontsize="small")  # fmt: skip
    left.set_xticks(x, list(overhead))
    left.set_ylim(0, max(overhead.values()) * 1.3 or 1.0)
    left.set_ylabel("hours (simulated, all replications)")
    left.set_title(f"wall beyond {o['work_h']:,.4g} h of work: goodput {o['goodput']['simulated']:.2%}")

    costs = {"mtbf_min": o["mtbf_h"] * 60.0, "restart_min": o["restart_min"], "checkpoint_min": o["checkpoint_min"]}
    best = o["best_interval_min"]["analytic"]
    lo, hi = min(best, o["interval_min"]) / 4, max(best, o["interval_min"]) * 4
    taus = np.geomspace(lo, hi, 200)
    curve = []
    for tau in taus:
        try:
            curve.append(wall_per_work_analytic(interval_min=float(tau), **costs))
        except OverflowError:  # e^((tau+delta)/M) past a float: off the chart anyway
            curve.append(np.nan)
    analytic = "analytic wall / work" + (" (failures only)" if o["stalls"]["per_day"] else "")
    right.plot(taus, curve, color="C0", label=analytic)
    right.errorbar([o["interval_min"]], [o["wall_per_work"]["simulated"]], yerr=[o["wall_per_work_stderr"]], fmt="o",
                   color="C3", label=f"simulated at {o['interval_min']:.4g} min")  # fmt: skip
    right.axvline(o["daly_interval_min"], color="0.4", ls="--", label=f"Daly {o['daly_interval_min']:.1f} min")
    sim_best = o["best_interval_min"]["simulated"]
    right.axvline(sim_best, color="C2", ls=":", label=f"best simulated {sim_best:.1f} min")
    right.set_xscale("log")
    right.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    right.xaxis.set_major_formatter(ScalarFormatter())
    right.xaxis.set_minor_formatter(NullFormatter())
    right.set_xlabel("checkpoint interval (min of work)")
    right.set_ylabel("wall / work")
    right.grid(alpha=0.3)
    right.legend(fontsize="small")
    right.set_title(
        f"MTBF {o['mtbf_h']:.4g} h, restart {o['restart_min']:g} min, checkpoint {o['checkpoint_min']:g} min"
    )
    return save_png(fig, path)


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
    return save_png(fig, path, dpi=110)
