"""What a simulation records, and the summary every command prints.

Per step and rank, a rank's step splits exactly:
  step_time = dataloader + host_delay + compute + optimizer + exposed_comm + straggler_wait
(compute includes any stop-the-world pause before the first forward, sim/episodes.py)
where, in the idle time between the end of its backward and the end of the
step's last collective, ``exposed_comm`` is the part during which a collective
is running and ``straggler_wait`` the part during which none is (the stream is
waiting for a slower rank to launch). ``collective_wait`` is what a profiler
shows per rank: the sum over buckets of the time from the rank's own launch (or
the stream becoming free) to the collective's start; the straggler has the least.
They are kept as per-rank and per-step statistics (sim/online.py); the whole
(steps, ranks) tables only when asked.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from sim.config import Scenario
from sim.mfu import mfu_fields
from sim.model_source import shape_keys_of
from sim.online import OnlineStats
from sim.summary import StepTimeS, Summary, own_time_s
from sim.transformer import param_count
from sim.workload import Workload

# The records.npz schema: output/export.py writes it, calibrate/stragglers.py reads it.
SCHEMA = "ddplab.sim/1"


@dataclass
class SimResult:
    scenario: Scenario
    workload: Workload
    step_time_s: np.ndarray  # (steps,)
    step_end_s: np.ndarray  # (steps,) simulated clock at the end of each step
    comm_busy_s: np.ndarray  # (steps,) sum of collective durations
    # Per rank (ranks,) and per step (steps,): the mean of each sim/online.py RANK_FIELDS quantity
    # (compute is forward + backward, as slowed by interference) over steps, and over ranks.
    rank_mean: dict[str, np.ndarray]
    step_mean: dict[str, np.ndarray]
    wall_s: float
    compute_p50_s: np.ndarray | None = None  # (ranks,) median compute, when asked (OnlineStats)
    records: dict[str, np.ndarray] | None = None  # (steps, ranks) per quantity, with records=True
    trace: dict = field(default_factory=dict)  # {"comm": {step: (t0, starts, ends)}, "ranks": {(step, rank): {...}}}

    def record(self, name: str) -> np.ndarray:
        """The (steps, ranks) table of one RANK_FIELDS quantity, kept only with records=True."""
        if self.records is None:
            raise ValueError(f"{name}: per-step per-rank records were not kept (simulate(..., records=True))")
        return self.records[name]

    @property
    def compute_s(self) -> np.ndarray:
        return self.record("compute_s")

    @property
    def exposed_comm_s(self) -> np.ndarray:
        return self.record("exposed_comm_s")

    @property
    def straggler_wait_s(self) -> np.ndarray:
        return self.record("straggler_wait_s")

    @property
    def collective_wait_s(self) -> np.ndarray:
        return self.record("collective_wait_s")

    @property
    def dataloader_s(self) -> np.ndarray:
        return self.workload.dataloader_s

    def summary(self) -> Summary:
        """The numbers `ddplab simulate --json` prints (sim/summary.py; units in the names)."""
        sc, wl = self.scenario, self.workload
        st = self.step_time_s
        mean_step = float(st.mean())
        per_rank = self.rank_mean["compute_s"]
        compute = float(per_rank.mean())
        own = {
            "compute_s": compute,
            "dataloader_s": float(wl.dataloader_s.mean()),
            "host_delay_s": float(wl.host_delay_s.mean()),
            "optimizer_s": wl.optimizer_s,
        }
        comm = float(self.comm_busy_s.mean())
        _check_computable(sc, mean_step=mean_step, compute=compute, comm=comm)
        slowest = int(per_rank.argmax())
        return Summary(
            scenario=sc.name,
            model=sc.model.shape.name,
            model_shape=shape_keys_of(sc.model.shape),
            params=param_count(sc.model.shape),
            mode=sc.training.mode,
            ranks=sc.ranks,
            nodes=-(-sc.ranks // sc.network.gpus_per_node),
            steps=sc.steps,
            seed=sc.seed,
            step_time_s=StepTimeS(
                mean=mean_step,
                p5=float(np.percentile(st, 5)),
                p50=float(np.percentile(st, 50)),
                p95=float(np.percentile(st, 95)),
                p99=float(np.percentile(st, 99)),
            ),
            slowest_rank=slowest,
            slowest_rank_compute_s=float(per_rank[slowest]),
            fastest_rank_compute_s=float(per_rank.min()),
            **own,
            exposed_comm_s=float(self.rank_mean["exposed_comm_s"].mean()),
            straggler_wait_s=float(self.rank_mean["straggler_wait_s"].mean()),
            comm_s=comm,
            comm_compute_ratio=comm / compute,
            scaling_efficiency=own_time_s(own) / mean_step,
            tokens_per_s=wl.tokens_per_step / mean_step,
            **mfu_fields(sc, tokens_per_s=wl.tokens_per_step / mean_step, compute_s=compute),
            buckets=len(wl.buckets),
            traffic_bytes_per_step=wl.traffic_bytes_per_step,
            algorithms=sorted(set(wl.algorithms)),
            wall_s=self.wall_s,
        )


def _check_computable(sc: Scenario, **parts: float) -> None:
    """The last guard of issue 25, D6: the inputs are range-checked where they enter, but a
    combination of them can still overflow (a huge time times a huge count) or leave no compute
    to divide by; a step time of inf or NaN, printed with exit 0, would be a wrong answer, so it
    is one line instead."""
    bad = {k: v for k, v in parts.items() if not math.isfinite(v) or (k != "comm" and v <= 0)}
    if bad:
        found = ", ".join(f"{k} {v:g}" for k, v in bad.items())
        raise ValueError(
            f"{sc.name}: the simulation's mean step came out as {found}: some scenario value is too large"
            " or too small to compute with; bring the extreme values into a realistic range"
        )


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
    """Collects what a simulation reports while the engine runs: the per-step times, the
    per-rank quantities as online statistics (sim/online.py), and the trace window."""

    def __init__(self, sc: Scenario, wl: Workload, *, trace_steps: int, trace_ranks, records=False, medians=False):
        self.sc, self.wl = sc, wl
        steps = sc.steps
        self.step_time = np.zeros(steps)
        self.step_end = np.zeros(steps)
        self.comm_busy = np.zeros(steps)
        self.stats = OnlineStats(steps, sc.ranks, records=records, medians=medians)
        self.trace_steps = min(trace_steps, steps)
        self.trace_ranks = sorted(trace_ranks) if trace_ranks is not None else pick_trace_ranks(sc, wl)
        self.trace = {"comm": {}, "ranks": {}}

    def step(self, step: int, *, t0: float, end_s: float, starts: np.ndarray, ends: np.ndarray):
        self.step_time[step] = end_s - t0
        self.step_end[step] = end_s
        self.comm_busy[step] = float((ends - starts).sum())
        if step < self.trace_steps:
            self.trace["comm"][step] = (t0, starts.copy(), ends.copy())

    def ranks(self, step: int, *, t0, last_bwd_start, ready, fwd, bwd, busy, pause_s=None, scratch):
        """Every rank's share of one step. ``ready``: the ranks' bucket-ready times, a sim/ready.py
        ReadyLines or ReadyBent; ``scratch``: the engine's sim/ready.py Scratch, which the step's
        arrays are written to."""
        starts, ends = busy.t[0::2], busy.t[1::2]
        bwd_end = ready.end_s
        compute = np.subtract(bwd_end, t0, out=scratch("compute"))
        compute -= self.wl.dataloader_s
        compute -= self.wl.host_delay_s
        idle = np.subtract(ends[-1], bwd_end, out=scratch("idle"))
        exposed = np.subtract(busy.busy[-1], busy.busy_before(bwd_end), out=scratch("exposed"))
        wait = np.maximum(np.subtract(idle, exposed, out=idle), 0.0, out=idle)
        self.stats.add(
            step,
            compute_s=compute,
            exposed_comm_s=exposed,
            straggler_wait_s=wait,
            collective_wait_s=ready.collective_wait(starts, ends),
        )
        if step < self.trace_steps:
            for r in self.trace_ranks:
                self.trace["ranks"][(step, r)] = {
                    "t0": t0,
                    "dataloader_s": float(self.wl.dataloader_s[r]),
                    "host_delay_s": float(self.wl.host_delay_s[r]),
                    "pause_s": 0.0 if pause_s is None else float(pause_s[r]),
                    "forward_s": fwd[r].copy(),
                    "backward_s": bwd[r].copy(),
                    "last_backward_start": float(last_bwd_start[r]),
                    "backward_end": float(bwd_end[r]),
                    "ready": ready.rows(np.array([r]))[0],
                }

    def result(self, *, wall_s: float) -> SimResult:
        return SimResult(
            scenario=self.sc,
            workload=self.wl,
            step_time_s=self.step_time,
            step_end_s=self.step_end,
            comm_busy_s=self.comm_busy,
            rank_mean=self.stats.rank_mean(),
            step_mean=self.stats.step_mean,
            wall_s=wall_s,
            compute_p50_s=self.stats.compute_p50(),
            records=self.stats.records,
            trace=self.trace,
        )
