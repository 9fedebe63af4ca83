"""The DDP engine as it was before the online statistics (issue 17), frozen as the baseline
bench/sim_speed.py times the current engine against. Not used by ddplab.

The original docstring follows (docs/design.md "The simulation model").

SimPy orders what happens in time: steps and collectives. Per-rank state lives in
numpy arrays, one SimPy process per *group* of ranks (a node, say), so 1024 ranks
cost a few array operations per bucket rather than 1024 processes. Results are
identical for any grouping: every random draw is made once per step for all
ranks (``_CommStream``), and per-rank arithmetic is element-wise.

Protocol, per step:
  1. the comm stream draws the step's noise and opens the step;
  2. each group computes its ranks' bucket-ready times in the last backward and
     posts, per bucket, the latest of them;
  3. the comm stream runs bucket b when every group has posted it:
     start_b = max(latest launch_b, end_{b-1}) (FIFO stream, all ranks together);
  4. with interference (gamma > 0) a group computes bucket b+1 only once
     collective b's interval is known, since compute slows while it runs.
     Collective j >= b+1 cannot start before bucket b+1 is ready everywhere, so
     intervals 0..b are all that can overlap it.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.busy import Busy
from sim.config import Scenario
from sim.episodes import Effects
from sim.noise import multipliers
from sim.workload import Workload, build_workload


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
            "model": sc.model.shape.name,
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


class _Step:
    """One step's shared state, handed to every group with the step's open event."""

    def __init__(self, env, t0: float, noise: np.ndarray, n_buckets: int, n_groups: int, pause_s=None):
        self.t0, self.noise, self.n_groups = t0, noise, n_groups
        self.pause_s = pause_s  # (ranks,) stop-the-world time before the first forward, or None
        self.launch = np.full(n_buckets, -math.inf)
        self.posted = np.zeros(n_buckets, dtype=int)
        self.gates = [env.event() for _ in range(n_buckets)]
        self.published = [env.event() for _ in range(n_buckets)]
        self.starts = np.zeros(n_buckets)
        self.ends = np.zeros(n_buckets)

    def post(self, first: int, launch_s: np.ndarray) -> None:
        """A group launches buckets first..first+len-1 at these (latest-rank) times."""
        last = first + len(launch_s)
        np.maximum(self.launch[first:last], launch_s, out=self.launch[first:last])
        self.posted[first:last] += 1
        for b in range(first, last):
            if self.posted[b] == self.n_groups:
                self.gates[b].succeed()

    def busy(self, upto: int) -> Busy:
        return Busy(self.starts[:upto], self.ends[:upto])


class _CommStream:
    """The one FIFO collective stream all ranks share (every collective starts on
    all ranks together, so the per-rank streams move in lockstep)."""

    def __init__(self, env, wl: Workload, n_groups: int, rng: np.random.Generator, sc: Scenario, progress=None):
        self.env, self.wl, self.n_groups, self.rng, self.sc = env, wl, n_groups, rng, sc
        self.progress = progress  # called (steps done, steps) after each step; it only observes
        self.opened = [env.event() for _ in range(sc.steps)]
        self.done = [env.event() for _ in range(sc.steps)]
        needed = Effects.needed(sc.episodes, sc.pauses)
        self.effects = Effects(sc.episodes, sc.pauses, wl.ranks, sc.seed) if needed else None

    def run(self, rec: Recorder):
        env, wl, nb = self.env, self.wl, len(self.wl.buckets)
        noise_cfg, jitter_sigma = self.sc.noise, self.sc.network.jitter_sigma
        t0 = 0.0
        for step in range(self.sc.steps):
            # Draw order is fixed (noise then jitter), whatever the grouping.
            shape = (wl.ranks, wl.grad_accum)
            noise = multipliers(self.rng, noise_cfg.distribution, noise_cfg.sigma, shape, noise_cfg.samples)
            jitter = multipliers(self.rng, "lognormal", jitter_sigma, nb)
            pause = None
            if self.effects:  # episodes and pauses: their own generators (sim/episodes.py)
                fx = self.effects.at(step, t0)
                noise, jitter, pause = noise * fx.compute_factor[:, None], jitter * fx.comm_factor, fx.pause_s
            st = _Step(env, t0, noise, nb, self.n_groups, pause)
            self.opened[step].succeed(st)
            end = -math.inf
            for b in range(nb):
                if not st.gates[b].triggered:
                    yield st.gates[b]
                start = max(st.launch[b], end)
                end = start + wl.collective_s[b] * jitter[b]
                st.starts[b], st.ends[b] = start, end
                st.published[b].succeed()
                # end >= now by construction (every post happens no later than the start it
                # feeds); max() only absorbs the last-ulp drift of SimPy's clock additions.
                yield env.timeout(max(0.0, end - env.now))
            t0 = end + wl.optimizer_s
            rec.step(step, t0=st.t0, end_s=t0, starts=st.starts, ends=st.ends)
            self.done[step].succeed()
            if self.progress:
                self.progress(step + 1, self.sc.steps)


def _group(env, wl: Workload, comm: _CommStream, ranks: slice, rec: Recorder, steps: int):
    """One SimPy process for a group of ranks, their state as arrays."""
    gamma = wl.interference_gamma if wl.overlap and wl.collective_s.any() else 0.0
    frac = wl.ready_fraction
    nb = len(frac)
    for step in range(steps):
        st = yield comm.opened[step]
        noise = st.noise[ranks]
        fwd = wl.forward_s[ranks, None] * noise
        bwd = wl.backward_s[ranks, None] * noise
        # Dataloader, then K micro-steps; only the last backward launches buckets (no_sync).
        last_bwd_start = st.t0 + wl.dataloader_s[ranks] + fwd.sum(axis=1) + bwd[:, :-1].sum(axis=1)
        if st.pause_s is not None:
            last_bwd_start = last_bwd_start + st.pause_s[ranks]
        last_bwd = bwd[:, -1]
        if gamma == 0.0:
            if wl.overlap:
                ready = last_bwd_start[:, None] + last_bwd[:, None] * frac[None, :]
            else:
                ready = np.repeat((last_bwd_start + last_bwd)[:, None], nb, axis=1)
            st.post(0, ready.max(axis=0))
        else:
            ready = np.empty((len(last_bwd), nb))
            for b in range(nb):
                if b:
                    yield st.published[b - 1]
                ready[:, b] = st.busy(b).finish(last_bwd_start, last_bwd * frac[b], gamma)
                st.post(b, ready[:, b : b + 1].max(axis=0))
        yield comm.done[step]
        rec.ranks(
            step,
            ranks,
            t0=st.t0,
            last_bwd_start=last_bwd_start,
            ready=ready,
            fwd=fwd,
            bwd=bwd,
            busy=st.busy(nb),
            pause_s=None if st.pause_s is None else st.pause_s[ranks],
        )


def simulate(
    sc: Scenario,
    *,
    group_size: int | None = None,
    trace_steps: int = 3,
    trace_ranks=None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate ``sc.steps`` optimizer steps of ``sc.ranks`` ranks.

    ``group_size``: ranks per SimPy process (default: all in one, the fastest);
    results do not depend on it. ``trace_steps``/``trace_ranks``: the window kept
    for the Chrome trace (default: the first 3 steps, up to 8 ranks incl. stragglers).
    ``training.mode = "fsdp"`` runs sim/fsdp.py's per-unit model instead. ``progress``:
    called with (steps done, steps) after each step, for the caller's progress line (sim does
    no I/O); it draws nothing, so results are identical with and without it.
    """
    if sc.training.mode == "fsdp":
        raise ValueError("the frozen baseline engine models DDP only")
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    wl = build_workload(sc, rng)
    n = sc.ranks
    group_size = group_size or n
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    groups = [slice(a, min(a + group_size, n)) for a in range(0, n, group_size)]
    env = simpy.Environment()
    comm = _CommStream(env, wl, len(groups), rng, sc, progress)
    rec = Recorder(sc, wl, trace_steps=trace_steps, trace_ranks=trace_ranks)
    env.process(comm.run(rec))
    for g in groups:
        env.process(_group(env, wl, comm, g, rec, sc.steps))
    env.run()
    return rec.result(wall_s=time.perf_counter() - wall0)
