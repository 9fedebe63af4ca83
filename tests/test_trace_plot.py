"""The Chrome trace (sim/trace.py) and the scaling plot (output/plot.py)."""

import json
from collections import defaultdict

import pytest

from output.export import write_chrome_trace
from output.plot import plot_scaling
from sim.config import ComputeConfig, ModelConfig, NetworkConfig, Scenario, TrainingConfig
from sim.engine import simulate
from sim.trace import chrome_trace

TOL_US = 1e-6  # float rounding in s -> us


def _scenario(ranks: int, stragglers: str = "", gamma: float = 0.0, host: str = "", **training) -> Scenario:
    return Scenario(
        ranks=ranks,
        steps=3,
        model=ModelConfig(preset="gpt2-tiny"),
        network=NetworkConfig(gpus_per_node=4),
        compute=ComputeConfig(
            step_compute_s=0.1,
            optimizer_s=0.01,
            dataloader_batch_s=0.005,
            interference_gamma=gamma,
        ),
        training=TrainingConfig(**training),
        stragglers=stragglers,
        host_delays_s=host,
    )


# One bucket, one micro-step; and 4 small buckets, 2 micro-steps, with interference.
SCENARIOS = {
    "one-bucket": _scenario(4, "2:1.5"),
    "four-buckets": _scenario(4, "2:1.5", gamma=0.3, bucket_cap_mb=0.05, first_bucket_mb=0.02, grad_accum=2),
    "host-delay": _scenario(4, "2:1.5", host="1:0.02", bucket_cap_mb=0.05, first_bucket_mb=0.02),
}


@pytest.fixture(params=list(SCENARIOS), scope="module")
def traced(request, tmp_path_factory):
    result = simulate(SCENARIOS[request.param], records=True)
    path = write_chrome_trace(result, tmp_path_factory.mktemp("trace") / "trace.json")
    with open(path) as f:
        trace = json.load(f)
    assert trace == json.loads(json.dumps(chrome_trace(result)))  # round-trips
    return result, trace


def _by(trace, ph, cat=None):
    """Events of one phase (and category), grouped by (pid, step), in ts order."""
    out = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == ph and (cat is None or ev.get("cat") == cat):
            out[ev["pid"]].append(ev)
    return {pid: sorted(evs, key=lambda e: e["ts"]) for pid, evs in out.items()}


def _in_step(events, result, step):
    t0, _, ends = result.trace["comm"][step]
    lo, hi = t0 * 1e6 - TOL_US, (ends[-1] + result.workload.optimizer_s) * 1e6 + TOL_US
    return [e for e in events if lo <= e["ts"] and e["ts"] + e.get("dur", 0) <= hi]


def test_trace_shape_and_names(traced):
    result, trace = traced
    assert trace["displayTimeUnit"] == "ms"
    ranks = sorted({r for _, r in result.trace["ranks"]})
    assert ranks == [0, 1, 2, 3]
    names = {ev["pid"]: ev["args"]["name"] for ev in trace["traceEvents"] if ev["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2 (straggler x1.5)", 3: "rank 3"}
    threads = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in trace["traceEvents"] if ev["name"] == "thread_name"}
    assert {threads[(0, t)] for t in range(3)} == {"compute", "comm", "steps"}
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X":
            assert ev["dur"] >= 0, ev
        if ev["ph"] == "i":
            assert ev["s"] == "t"


def test_compute_thread_is_sequential_from_t0(traced):
    result, trace = traced
    k = result.scenario.training.grad_accum
    compute = {p: [e for e in evs if e["tid"] == 0] for p, evs in _by(trace, "X").items()}
    for (step, rank), rec in result.trace["ranks"].items():
        evs = _in_step(compute[rank], result, step)
        host = ["host delay"] if rec["host_delay_s"] > 0 else []
        expected = ["dataloader", *host] + [f"{p} {i}" for i in range(k) for p in ("forward", "backward")]
        assert [e["name"] for e in evs] == expected + ["optimizer"]
        assert evs[0]["ts"] == pytest.approx(rec["t0"] * 1e6, abs=TOL_US)
        for a, b in zip(evs, evs[1:], strict=False):
            assert a["ts"] + a["dur"] <= b["ts"] + TOL_US, (a, b)
        # The optimizer starts when the step's last collective ends.
        ends = result.trace["comm"][step][2]
        assert evs[-1]["ts"] == pytest.approx(ends[-1] * 1e6, abs=TOL_US)
        assert evs[-1]["dur"] == pytest.approx(result.workload.optimizer_s * 1e6)


def test_collectives_start_together_on_every_rank(traced):
    result, trace = traced
    nb = len(result.workload.buckets)
    allreduce = _by(trace, "X", "comm")
    for step in result.trace["comm"]:
        _, starts, _ = result.trace["comm"][step]
        ts_by_bucket = defaultdict(set)
        for rank, evs in allreduce.items():
            evs = _in_step(evs, result, step)
            assert len(evs) == nb, (rank, step)
            for ev in evs:
                b = ev["args"]["bucket"]
                assert ev["name"] == f"allreduce bucket {b}"
                assert ev["args"]["bytes"] == result.workload.wire_bytes[b]
                assert ev["args"]["algorithm"] == result.workload.algorithms[b]
                ts_by_bucket[b].add(ev["ts"])
        assert sorted(ts_by_bucket) == list(range(nb))
        for b, ts in ts_by_bucket.items():
            assert ts == {starts[b] * 1e6}, (step, b)


def test_straggler_waits_least_and_waits_match_the_engine(traced):
    result, trace = traced
    waits = _by(trace, "X", "wait")
    for step in result.trace["comm"]:
        total = {r: sum(e["dur"] for e in _in_step(waits.get(r, []), result, step)) for r in range(4)}
        assert all(total[2] <= total[r] for r in total), (step, total)
        assert total[0] > 0, "a fast rank should wait for the straggler"
        for r, us in total.items():
            assert us == pytest.approx(result.collective_wait_s[step, r] * 1e6, abs=1e-3)


def test_ready_instants_and_step_markers(traced):
    result, trace = traced
    nb = len(result.workload.buckets)
    instants = _by(trace, "i")
    steps = {p: [e for e in evs if e["tid"] == 2] for p, evs in _by(trace, "X").items()}
    for (step, rank), rec in result.trace["ranks"].items():
        ready = _in_step(instants[rank], result, step)
        assert len(ready) == nb
        assert [e["ts"] for e in ready] == pytest.approx([t * 1e6 for t in rec["ready"]])
        (marker,) = [e for e in steps[rank] if e["name"] == f"step {step}"]
        assert marker["ts"] + marker["dur"] == pytest.approx(result.step_end_s[step] * 1e6)


def test_scaling_plot_png(tmp_path):
    summaries = [simulate(_scenario(n, "1:1.5"), records=True).summary() for n in (4, 2)]
    path = plot_scaling(summaries, tmp_path / "scaling.png", "gpt2-tiny, straggler x1.5")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
    with pytest.raises(ValueError):
        plot_scaling([], tmp_path / "empty.png", "nothing")
