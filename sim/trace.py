"""A simulation's traced window as a Chrome trace, to open in Perfetto (ui.perfetto.dev)
or chrome://tracing.

Format: the Trace Event Format's JSON object form, "Trace Event Format" (Google, 2016),
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
Complete events ("ph": "X") carry ``ts`` and ``dur`` in microseconds; instant events
("ph": "i", "s": "t") mark a moment on one thread; metadata events ("ph": "M") name
processes and threads.

Layout: one process per traced rank (pid = rank), with three threads:
  tid 0 "compute": dataloader, pause (GC/OS), forward k / backward k per micro-step, optimizer;
  tid 1 "comm":    "allreduce bucket b", the "wait bucket b" before it (the rank was
                   ready, the stream free, but a slower rank had not launched yet)
                   and an instant "ready b" when the rank launches bucket b;
  tid 2 "steps":   one "step N" span per step, from its start to the end of its optimizer.
"""

from sim.results import SimResult

COMPUTE, COMM, STEPS = 0, 1, 2
_THREADS = {COMPUTE: "compute", COMM: "comm", STEPS: "steps"}
REPLICA = 3  # hsdp's allreduces across the shard groups, on their own stream (sim/fsdp.py)


def _us(t_s: float) -> float:
    return float(t_s) * 1e6


def _span(name: str, cat: str, pid: int, tid: int, start_s: float, end_s: float, **args) -> dict:
    ev = {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(start_s),
        "dur": _us(end_s) - _us(start_s),
    }
    if args:
        ev["args"] = args
    return ev


def _metadata(result: SimResult, ranks: list[int], threads: dict = _THREADS) -> list[dict]:
    stragglers = result.scenario.straggler_map
    out = []
    for r in ranks:
        label = f"rank {r}" + (f" (straggler x{stragglers[r]:g})" if r in stragglers else "")
        out.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": label}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": r, "args": {"sort_index": r}})
        for tid, name in threads.items():
            meta = {"name": "thread_name", "ph": "M", "pid": r, "tid": tid, "args": {"name": name}}
            out.append(meta)
    return out


def _compute_events(rank: int, rec: dict, collectives_end_s: float, optimizer_s: float) -> list:
    """Back-to-back micro-steps from t0 + dataloader. The last backward is drawn from
    the engine's own start and end: interference with collectives may stretch it."""
    events = []
    t = rec["t0"]
    if rec["dataloader_s"] > 0:
        events.append(_span("dataloader", "compute", rank, COMPUTE, t, t + rec["dataloader_s"]))
        t += rec["dataloader_s"]
    if rec.get("host_delay_s", 0.0) > 0:  # Scenario.host_delays_s
        events.append(_span("host delay", "compute", rank, COMPUTE, t, t + rec["host_delay_s"]))
        t += rec["host_delay_s"]
    if rec.get("pause_s", 0.0) > 0:  # a GC/OS stop-the-world pause (sim/episodes.py)
        events.append(_span("pause", "compute", rank, COMPUTE, t, t + rec["pause_s"]))
        t += rec["pause_s"]
    fwd, bwd = rec["forward_s"], rec["backward_s"]
    last = len(fwd) - 1
    for k in range(len(fwd)):
        # The last forward ends where the engine says the last backward starts, so that
        # float rounding in the two sums cannot make the drawn spans overlap.
        f_end = rec["last_backward_start"] if k == last else t + fwd[k]
        events.append(_span(f"forward {k}", "compute", rank, COMPUTE, t, f_end))
        t = f_end
        b_end = rec["backward_end"] if k == last else t + bwd[k]
        events.append(_span(f"backward {k}", "compute", rank, COMPUTE, t, b_end))
        t = b_end
    if optimizer_s > 0:
        end = collectives_end_s + optimizer_s
        events.append(_span("optimizer", "compute", rank, COMPUTE, collectives_end_s, end))
    return events


def _comm_events(result: SimResult, rank: int, ready, starts, ends) -> list[dict]:
    wl = result.workload
    events = []
    stream_free = -float("inf")
    for b in range(len(starts)):
        launched = max(float(ready[b]), stream_free)
        if starts[b] - launched > 0:
            events.append(_span(f"wait bucket {b}", "wait", rank, COMM, launched, starts[b], bucket=b))
        events.append(
            _span(
                f"allreduce bucket {b}",
                "comm",
                rank,
                COMM,
                starts[b],
                ends[b],
                bucket=b,
                bytes=float(wl.wire_bytes[b]),
                algorithm=wl.algorithms[b],
            )
        )
        r = {"name": f"ready {b}", "cat": "comm", "ph": "i", "s": "t", "pid": rank, "tid": COMM}
        events.append(r | {"ts": _us(ready[b])})
        stream_free = float(ends[b])
    return events


def chrome_trace(result: SimResult) -> dict:
    """The traced steps and ranks of ``result`` (see ``simulate(trace_steps=, trace_ranks=)``)
    as a Trace Event Format object."""
    if "spans" in result.trace:  # models that record their spans directly (sim/fsdp.py)
        return _from_spans(result)
    comm, per_rank = result.trace.get("comm", {}), result.trace.get("ranks", {})
    ranks = sorted({r for _, r in per_rank})
    optimizer_s = result.workload.optimizer_s
    events = _metadata(result, ranks)
    for (step, rank), rec in sorted(per_rank.items()):
        t0, starts, ends = comm[step]
        end_s = float(ends[-1]) if len(ends) else rec["backward_end"]
        events += _compute_events(rank, rec, end_s, optimizer_s)
        events += _comm_events(result, rank, rec["ready"], starts, ends)
        events.append(_span(f"step {step}", "step", rank, STEPS, t0, end_s + optimizer_s))
    other = {"scenario": result.scenario.name, "ranks": result.scenario.ranks}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _from_spans(result: SimResult) -> dict:
    """(rank, lane, name, start_s, end_s) spans as complete events, lanes as the threads above."""
    spans = result.trace["spans"]
    threads = _THREADS | ({REPLICA: "replica comm"} if any(s[1] == REPLICA for s in spans) else {})
    events = _metadata(result, sorted({s[0] for s in spans}), threads)
    cats = {COMPUTE: "compute", COMM: "comm", STEPS: "step", REPLICA: "comm"}
    events += [_span(name, cats[lane], rank, lane, start, end) for rank, lane, name, start, end in spans]
    other = {"scenario": result.scenario.name, "ranks": result.scenario.ranks}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
