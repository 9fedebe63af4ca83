"""What the study commands print for people, as lines: `ddplab compare`'s set-ups side by side,
`whatif`'s mitigations, `goodput`'s failures and checkpoints, and `sweep`'s grid of means with
their intervals. Each reads what its workflow/ function returned (what `--json` prints)."""

from sim.steps3d import ASSUMED as ASSUMED_3D
from workflow.compare import CompareRow
from workflow.render_sim import alternatives_lines, record_lines, train_cost_lines
from workflow.units import FLOP_COUNT, fmt_seconds


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}x"


# The table: header, width, value; units in the header.
_COLUMNS = (
    ("ranks", 5, lambda r: f"{r.result.ranks}"),
    ("steps", 5, lambda r: f"{r.result.steps}"),
    ("seed", 4, lambda r: f"{r.result.seed}"),
    ("step", 9, lambda r: fmt_seconds(r.result.step_time_s.mean)),
    ("p50", 9, lambda r: fmt_seconds(r.result.step_time_s.p50)),
    ("p95", 9, lambda r: fmt_seconds(r.result.step_time_s.p95)),
    ("exp comm", 9, lambda r: fmt_seconds(r.result.exposed_comm_s)),
    ("wait", 9, lambda r: fmt_seconds(r.result.straggler_wait_s)),
    ("eff", 6, lambda r: f"{r.result.scaling_efficiency:.1%}"),
    ("tokens/s", 12, lambda r: f"{r.result.tokens_per_s:,.0f}"),
    ("MFU", 6, lambda r: f"{r.result.mfu:.1%}"),
    ("stack", 9, lambda r: r.result.stack),
    ("GiB/GPU", 7, lambda r: f"{r.result.memory_gib['total_gib']:.2f}"),
    ("step vs 1st", 11, lambda r: _ratio(r.vs_first["step_time"])),
    ("tok/s vs 1st", 12, lambda r: _ratio(r.vs_first["tokens_per_s"])),
)


def _oom_row(v: dict) -> str:
    cells = [f"{v[k]:>{w}}" for k, w in (("ranks", 5), ("steps", 5), ("seed", 4))]
    return " ".join(cells) + f"  OOM: {v['peak_gib']:.2f} GiB per GPU > {v['device_memory_gib']:g} GiB, not simulated"


def compare_lines(rows: list[CompareRow]) -> list[str]:
    """`ddplab compare`'s table, then each row's days and dollars to train and its OOM alternatives."""
    out = []
    width = max(len("set-up"), *(len(r.name) for r in rows))
    out.append(
        f"compare: {len(rows)} set-up{'s' if len(rows) != 1 else ''}, each row as `ddplab simulate` gives it"
        " (step: the mean; exp comm, wait: per rank per step); vs 1st: against the first row;"
        f" MFU: {FLOP_COUNT} FLOPs per token x tokens/s per GPU / the precision's dense peak;"
        " stack: what compute rests on"
    )
    out.append(f"{'set-up':<{width}} " + " ".join(f"{h:>{w}}" for h, w, _ in _COLUMNS))
    for r in rows:
        if not r.simulated:
            out.append(f"{r.name:<{width}} " + _oom_row(r.result))
            continue
        out.append(f"{r.name:<{width}} " + " ".join(f"{f(r):>{w}}" for _, w, f in _COLUMNS))
    other = [r for r in rows if r.vs_first["tokens_per_step"] != 1.0]
    if other:  # its tokens/s is of another job, whose batch the tokens to train assume
        said = ", ".join(f"{r.name} {r.vs_first['tokens_per_step']:.3g}x" for r in other)
        out.append(f"global batch against the first row's: {said} the tokens a step (ranks, micro-batch, accumulation"
                   " or sequence differ)")  # fmt: skip
    for r in rows:
        out += train_cost_lines(r.result, indent=f"{r.name}: ")
    # The public record once per class of job the set-ups fall in (calibrate/record.py).
    classes = {}
    for r in rows:
        if r.simulated and r.result.record is not None:
            classes.setdefault(r.result.record["regime"], (r.result.record, []))[1].append(r.name)
    for record, names in classes.values():  # one line per class: each set-up's own step range is in its JSON
        out += record_lines(record, indent=f"{', '.join(names)}: ", step_range=False)
    for r in rows:
        if not r.simulated:
            out.append(f"{r.name}: out of memory, not simulated;")
            out += alternatives_lines(r.result["alternatives"])
    if any(not r.simulated for r in rows):
        out.append("--ignore-memory simulates OOM set-ups anyway")
    over = [r.name for r in rows if r.simulated and r.result.memory_gib.get("fits") is False]
    if over:
        out.append(f"over their device's memory, simulated anyway (--ignore-memory): {', '.join(over)}")
    return out


def whatif_lines(found, *, horizon_h: float, usd_per_gpu_hour: float | None) -> list[str]:
    """`ddplab whatif`'s table (workflow/whatif.py study): a row per mitigation against doing nothing."""
    out, sc, chosen = [], found.scenario, found.chosen
    rows = found.rows
    out.append(f"{sc.name}: {sc.description}")
    if found.calibration:
        out.append(f"  {found.calibration}")
    if chosen:
        out.append(f"  {chosen}")
    episodic = any(r.get("episode_cost") is not None for r in rows)
    if episodic:
        out.append(
            f"  {found.steps} steps per episode state, seed {found.seed}, same jitter draws in every"
            f" row; each row is expected over {horizon_h:g} h, the states (network degraded, a rank throttled,"
            " the diurnal phase) weighed by their share of time (docs/episodes.md)"
        )
    else:
        out.append(f"  {found.steps} steps per row, seed {found.seed}, same jitter draws in every row")
    if sc.parallel3d:
        out.append(f"  tensor/pipeline parallel or zero1: each row as `simulate` runs it; assumed: {ASSUMED_3D}")
        out.append("  efficiency: the kernels' share of the step, exposed TP/CP collectives and the bubble outside it")
    elif any("rebalance" in r["mitigation"] for r in rows):
        # Said because rebalancing can lower it while tokens/s rises: a slow rank given fewer
        # samples is busy for less of the step (homelab-1gbe's M2: 33.5 % -> 16.5 % at 1.18x).
        out.append(
            "  efficiency: each rank's busy share of the step (compute, optimizer, its loader and host delay), mean"
            " over ranks; a rank given fewer samples is busy for less of it"
        )
    usd = usd_per_gpu_hour is not None
    width = max(22, *(len(r["mitigation"]) for r in rows))  # a row of several keys is a long name
    out.append(
        f"{'mitigation':<{width}} {'ranks':>5} {'step':>9} {'p95':>9} {'tokens/s':>11} {'vs nothing':>10}"
        f" {'efficiency':>10} {'GPU-h/Btok':>10}" + (f" {'$/Btok':>9}" if usd else "") + "  note"
    )
    for r in rows:
        if r["step_time_s"] is None:
            out.append(
                f"{r['mitigation']:<{width}} {r['ranks']:>5}  OOM: {r['memory_gib']:.2f} GiB per GPU >"
                f" {r['device_memory_gib']:g} GiB (compute.device_memory_gib), not simulated  {r['note']}".rstrip()
            )
            continue
        speedup = f"{r['speedup']:>9.3f}x" if r["speedup"] is not None else f"{'n/a':>10}"
        line = (
            f"{r['mitigation']:<{width}} {r['ranks']:>5} {fmt_seconds(r['step_time_s']):>9}"
            f" {fmt_seconds(r['step_time_p95_s']):>9} {r['tokens_per_s']:>11,.0f} {speedup}"
            f" {r['scaling_efficiency']:>10.1%} {r['gpu_h_per_btok']:>10.1f}"
            + (f" {r['usd_per_btok']:>9,.2f}" if usd else "")
            + f"  {r['note']}"
            + (
                f"{'; ' if r['note'] else ''}episodes cost {r['episode_cost']:.1%} (+-{1.96 * r['episode_cost_sd']:.1%}"
                f" over {horizon_h:g} h, 95 %; {r['clear_tokens_per_s']:,.0f} tokens/s without)"
                if r.get("episode_cost") is not None
                else ""
            )
            + (f" (restart {r['restart_s'] / 60:g} min over {horizon_h:g} h)" if r["restart_s"] else "")
            + (f" (memory {r['memory_gib']:.2f} GiB exceeds the device: --ignore-memory)" if r["oom"] else "")
        )
        out.append(line.rstrip())  # a row with no note ends at its last number
    if any(r["step_time_s"] is None for r in rows):
        out.append(
            "OOM rows: the per-GPU memory estimate (sim/memory.py) exceeds the device's, so they are not"
            " simulated or ranked; --ignore-memory simulates them anyway"
        )
    return out


def goodput_lines(o: dict) -> list[str]:
    """`ddplab goodput`'s table: simulated against Daly's analytic column (workflow/goodput.py)."""
    out = []
    rule = "Daly's" if o["interval_rule"] == "daly" else "given"
    out.append(
        f"goodput: MTBF {o['mtbf_h']:.4g} h ({o['mtbf_from']}), restart {o['restart_min']:g} min,"
        f" checkpoint {o['checkpoint_min']:g} min every {o['interval_min']:.4g} min ({rule})"
    )
    w, g, b, f = o["wall_per_work"], o["goodput"], o["best_interval_min"], o["failures"]
    out.append(f"  {'':<16} {'simulated':>18} {'analytic':>10}")
    out.append(
        f"  {'wall / work':<16} {w['simulated']:>9.4f} +- {o['wall_per_work_stderr']:.4f} {w['analytic']:>10.4f}"
    )
    out.append(f"  {'goodput':<16} {g['simulated']:>18.2%} {g['analytic']:>10.2%}")
    out.append(f"  {'best interval':<16} {b['simulated']:>14.1f} min {b['analytic']:>6.1f} min")
    out.append(f"  {'failures':<16} {f['simulated']:>18,} {f['expected']:>10,.0f}")
    out.append(
        f"  intervals: Young {o['young_interval_min']:.1f} min, Daly {o['daly_interval_min']:.1f} min;"
        f" {o['work_h']:,.0f} h of work in {o['replications']} replications, seed {o['seed']}"
    )
    out.append(
        f"  lost work {o['lost_work_h']:,.1f} h, restarts {o['restart_h']:,.1f} h,"
        f" checkpoints {o['checkpoint_h']:,.1f} h"
    )
    st = o["stalls"]
    if st["per_day"]:
        out.append(
            f"  stalls: {st['per_day']:g}/day, mean {st['mean_min']:g} min, timeout {st['timeout_min']:g} min:"
            f" {o['timeouts']:,} timed out into failures, {o['stalled_h']:,.1f} h waiting in stalled collectives"
            " (simulated only; the analytic column has no stalls)"
        )
    return out


def _seeds(seeds: list[int]) -> str:
    if seeds == list(range(len(seeds))) and len(seeds) > 2:
        return f"seeds 0-{len(seeds) - 1}"
    return f"seed{'s' * (len(seeds) != 1)} {','.join(map(str, seeds))}"


def _cell(stat: dict, fmt, half_fmt, scale: float) -> str:
    mean = fmt(stat["mean"] * scale)
    if stat["ci95_low"] is None:
        return f"{mean} ±n/a"
    half = (stat["ci95_high"] - stat["mean"]) * scale
    # Seeds that agree to rounding (a collective's time with no jitter in it): 0, not 7e-16.
    return f"{mean} ±{'0' if half <= 1e-9 * abs(stat['mean'] * scale) else half_fmt(half)}"


def _g2(v: float) -> str:
    return f"{v:.2g}"


# The table's metrics: header (units in it), column, format of the mean and of the interval's
# half-width, scale. Every number at full precision is in runs.csv and sweep.csv.
_METRICS = (
    ("step (s)", "step_time_mean_s", lambda v: f"{v:.4g}", _g2, 1.0),
    ("exp comm (s)", "exposed_comm_s", lambda v: f"{v:.3g}", _g2, 1.0),
    ("wait (s)", "straggler_wait_s", lambda v: f"{v:.3g}", _g2, 1.0),
    ("eff (%)", "scaling_efficiency", lambda v: f"{v:.1f}", _g2, 100.0),
    ("tokens/s", "tokens_per_s", lambda v: f"{v:,.0f}", lambda v: f"{v:,.0f}", 1.0),
    ("MFU (%)", "mfu", lambda v: f"{v:.1f}", _g2, 100.0),
)


def sweep_table_lines(result: dict, engine_name: str) -> list[str]:
    """`ddplab sweep`'s table: per grid point each metric's mean over the seeds ±half its 95 % interval."""
    out = []
    grid, rows = result["grid"], result["rows"]
    keys = list(grid["vary"])
    where = "local processes" if engine_name == "local" else "a Dask cluster"
    out.append(
        f"sweep: {grid['runs']} runs ({grid['shape']}) on {where};"
        f" each cell the mean over {_seeds(grid['seeds'])} ±half its 95% t interval"
    )
    ranks = [] if "ranks" in keys else ["ranks"]  # --vary ranks: already a column
    ranks += [] if "compute.stack" in keys else ["stack"]  # what the compute time rests on (sim/mfu.py)
    head = ["scenario", *keys, *ranks, *(h for h, *_ in _METRICS)]
    body = [
        [
            r["scenario"],
            *(r["vary"][k] for k in keys),
            *(str(r[k]) for k in ranks),
            *(_cell(r[c], f, h, s) if r[c] is not None else "" for _, c, f, h, s in _METRICS),
        ]
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    labels = 1 + len(keys)  # left-aligned: the scenario and the varied values
    metrics = len(head) - len(_METRICS)  # the first metric's column
    for line, r in zip([head, *body], [None, *rows], strict=True):
        cells = [f"{x:<{w}}" if i < labels else f"{x:>{w}}" for i, (x, w) in enumerate(zip(line, widths, strict=True))]
        if r is not None and r[_METRICS[0][1]] is None:  # not run: out of memory
            cells[metrics:] = [f"OOM: {r['memory_gib']:.2f} GiB per GPU > {r['device_memory_gib']:g} GiB, not run"]
        out.append("  ".join(cells).rstrip())
    over = [r for r in rows if r["out_of_memory"] and r[_METRICS[0][1]] is not None]
    if over:
        out.append(
            f"{len(over)} grid point{'s' * (len(over) != 1)} over the device's memory, run anyway (--ignore-memory)"
        )
    oom = [r for r in rows if r[_METRICS[0][1]] is None]
    if oom:
        out.append(
            f"{len(oom)} grid point{'s' * (len(oom) != 1)} out of memory: the per-GPU estimate (sim/memory.py) exceeds"
            " the device's (compute.device_memory_gib), so not run or drawn; --ignore-memory runs them anyway"
        )
    if len(grid["seeds"]) == 1:
        out.append("one seed: no spread to measure, so no interval (n/a); give --seeds 2 or more")
    out.append(f"MFU: {FLOP_COUNT} FLOPs per token x tokens/s per GPU / the precision's dense peak")
    return out
