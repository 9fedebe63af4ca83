"""What a simulation records, and the summary every command prints.

Per step and rank (arrays of shape (steps, ranks)), a rank's step splits exactly:
  step_time = dataloader + compute + optimizer + exposed_comm + straggler_wait
(compute includes any stop-the-world pause before the first forward, sim/episodes.py)
where, in the idle time between the end of its backward and the end of the
step's last collective, ``exposed_comm`` is the part during which a collective
is running and ``straggler_wait`` the part during which none is (the stream is
waiting for a slower rank to launch). ``collective_wait`` is what a profiler
shows per rank: the sum over buckets of the time from the rank's own launch (or
the stream becoming free) to the collective's start; the straggler has the least.
"""

from dataclasses import dataclass, field

import numpy as np

from sim.config import Scenario
from sim.workload import Workload


@dataclass
class SimResult:
    scenario: Scenario
    workload: Workload
    step_time_s: np.ndarray  # (steps,)
    step_end_s: np.ndarray  # (steps,) simulated clock at the end of each step
    comm_busy_s: np.ndarray  # (steps,) sum of collective durations
    compute_s: np.ndarray  # (steps, ranks) forward + backward, as slowed by interference
    exposed_comm_s: np.ndarray  # (steps, ranks)
    straggler_wait_s: np.ndarray  # (steps, ranks)
    collective_wait_s: np.ndarray  # (steps, ranks)
    wall_s: float
    trace: dict = field(default_factory=dict)  # {"comm": {step: (t0, starts, ends)}, "ranks": {(step, rank): {...}}}

    @property
    def dataloader_s(self) -> np.ndarray:
        return self.workload.dataloader_s

    def summary(self) -> dict:
        """The numbers `ddplab simulate --json` prints (units in the names)."""
        sc, wl = self.scenario, self.workload
        st = self.step_time_s
        mean_step = float(st.mean())
        compute = float(self.compute_s.mean())
        dataloader = float(wl.dataloader_s.mean())
        busy = compute + dataloader + wl.optimizer_s
        comm = float(self.comm_busy_s.mean())
        per_rank = self.compute_s.mean(axis=0)
        slowest = int(per_rank.argmax())
        return {
            "scenario": sc.name,
            "model": sc.model.preset,
            "mode": sc.training.mode,
            "ranks": sc.ranks,
            "nodes": -(-sc.ranks // sc.network.gpus_per_node),
            "steps": sc.steps,
            "seed": sc.seed,
            "step_time_s": {
                "mean": mean_step,
                "p5": float(np.percentile(st, 5)),
                "p50": float(np.percentile(st, 50)),
                "p95": float(np.percentile(st, 95)),
                "p99": float(np.percentile(st, 99)),
            },
            "compute_s": compute,
            "slowest_rank": slowest,
            "slowest_rank_compute_s": float(per_rank[slowest]),
            "dataloader_s": dataloader,
            "optimizer_s": wl.optimizer_s,
            "exposed_comm_s": float(self.exposed_comm_s.mean()),
            "straggler_wait_s": float(self.straggler_wait_s.mean()),
            "comm_s": comm,
            "comm_compute_ratio": comm / compute,
            "scaling_efficiency": busy / mean_step,
            "tokens_per_s": wl.tokens_per_step / mean_step,
            "buckets": len(wl.buckets),
            "traffic_bytes_per_step": wl.traffic_bytes_per_step,
            "algorithms": sorted(set(wl.algorithms)),
            "wall_s": self.wall_s,
        }


def pick_trace_ranks(sc: Scenario, wl: Workload, limit: int = 8) -> list[int]:
    """The first ranks, the explicit stragglers and the slowest rank, up to ``limit``."""
    picks = list(sc.straggler_map) + [int(np.argmax(wl.speed_factor))]
    picks += list(range(sc.ranks))
    out: list[int] = []
    for r in picks:
        if r not in out:
            out.append(r)
        if len(out) == min(limit, sc.ranks):
            break
    return sorted(out)


class Recorder:
    """Collects per-step and per-rank records while the engine runs."""

    def __init__(self, sc: Scenario, wl: Workload, *, trace_steps: int, trace_ranks):
        self.sc, self.wl = sc, wl
        steps, n = sc.steps, sc.ranks
        self.step_time = np.zeros(steps)
        self.step_end = np.zeros(steps)
        self.comm_busy = np.zeros(steps)
        self.compute = np.zeros((steps, n))
        self.exposed = np.zeros((steps, n))
        self.wait = np.zeros((steps, n))
        self.coll_wait = np.zeros((steps, n))
        self.trace_steps = min(trace_steps, steps)
        self.trace_ranks = sorted(trace_ranks) if trace_ranks is not None else pick_trace_ranks(sc, wl)
        self.trace = {"comm": {}, "ranks": {}}

    def step(self, step: int, *, t0: float, end_s: float, starts: np.ndarray, ends: np.ndarray):
        self.step_time[step] = end_s - t0
        self.step_end[step] = end_s
        self.comm_busy[step] = float((ends - starts).sum())
        if step < self.trace_steps:
            self.trace["comm"][step] = (t0, starts.copy(), ends.copy())

    def ranks(self, step: int, ranks: slice, *, t0, last_bwd_start, ready, fwd, bwd, busy, pause_s=None):
        starts, ends = busy.t[0::2], busy.t[1::2]
        bwd_end = ready[:, -1]  # the last bucket is ready when backward ends (fraction 1)
        compute = bwd_end - t0 - self.wl.dataloader_s[ranks]
        idle = ends[-1] - bwd_end
        exposed = busy.busy[-1] - busy.busy_before(bwd_end)
        self.compute[step, ranks] = compute
        self.exposed[step, ranks] = exposed
        self.wait[step, ranks] = np.maximum(idle - exposed, 0.0)
        stream_free = np.concatenate(([-np.inf], ends[:-1]))
        self.coll_wait[step, ranks] = (starts[None, :] - np.maximum(ready, stream_free[None, :])).sum(axis=1)
        if step < self.trace_steps:
            lo = ranks.start
            for r in self.trace_ranks:
                if lo <= r < ranks.stop:
                    i = r - lo
                    self.trace["ranks"][(step, r)] = {
                        "t0": t0,
                        "dataloader_s": float(self.wl.dataloader_s[r]),
                        "pause_s": 0.0 if pause_s is None else float(pause_s[i]),
                        "forward_s": fwd[i].copy(),
                        "backward_s": bwd[i].copy(),
                        "last_backward_start": float(last_bwd_start[i]),
                        "backward_end": float(bwd_end[i]),
                        "ready": ready[i].copy(),
                    }

    def result(self, *, wall_s: float) -> SimResult:
        return SimResult(
            scenario=self.sc,
            workload=self.wl,
            step_time_s=self.step_time,
            step_end_s=self.step_end,
            comm_busy_s=self.comm_busy,
            compute_s=self.compute,
            exposed_comm_s=self.exposed,
            straggler_wait_s=self.wait,
            collective_wait_s=self.coll_wait,
            wall_s=wall_s,
            trace=self.trace,
        )
