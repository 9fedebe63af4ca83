"""The discrete-event model of DDP steps (docs/design.md "The simulation model").

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

import numpy as np
import simpy

from sim.busy import Busy
from sim.config import SHARDED_MODES, Scenario
from sim.episodes import Effects, Held
from sim.fsdp import simulate_fsdp
from sim.noise import comm_multipliers, multipliers
from sim.ready import ReadyLines, ReadyTable, Scratch
from sim.results import Recorder, SimResult
from sim.workload import Workload, build_workload


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

    def __init__(
        self, env, wl: Workload, n_groups: int, rng: np.random.Generator, sc: Scenario, progress=None, held=None
    ):
        self.env, self.wl, self.n_groups, self.rng, self.sc = env, wl, n_groups, rng, sc
        self.progress = progress  # called (steps done, steps) after each step; it only observes
        # Each step's two events, made when first waited on and dropped once the next step
        # opens: the step's state (its noise, its per-bucket events) never outlives it.
        self._events: dict[tuple[str, int], simpy.Event] = {}
        needed = Effects.needed(sc.episodes, sc.pauses, held)
        self.effects = Effects(sc.episodes, sc.pauses, wl.ranks, sc.seed, held) if needed else None

    def _event(self, kind: str, step: int) -> simpy.Event:
        key = (kind, step)
        if key not in self._events:
            self._events[key] = self.env.event()
        return self._events[key]

    def opened(self, step: int) -> simpy.Event:
        """Succeeds with the step's _Step when the comm stream opens it."""
        return self._event("opened", step)

    def done(self, step: int) -> simpy.Event:
        return self._event("done", step)

    def run(self, rec: Recorder):
        env, wl, nb = self.env, self.wl, len(self.wl.buckets)
        noise_cfg, net = self.sc.noise, self.sc.network
        t0 = 0.0
        for step in range(self.sc.steps):
            # Draw order is fixed (noise then jitter), whatever the grouping.
            shape = (wl.ranks, wl.grad_accum)
            noise = multipliers(self.rng, noise_cfg.distribution, noise_cfg.sigma, shape, noise_cfg.samples)
            jitter = comm_multipliers(self.rng, net.jitter_sigma, net.jitter_samples, nb)
            pause = None
            if self.effects:  # episodes and pauses: their own generators (sim/episodes.py)
                fx = self.effects.at(step, t0)
                noise, jitter, pause = noise * fx.compute_factor[:, None], jitter * fx.comm_factor, fx.pause_s
            st = _Step(env, t0, noise, nb, self.n_groups, pause)
            self._events.pop(("opened", step - 1), None)
            self._events.pop(("done", step - 1), None)
            self.opened(step).succeed(st)
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
            self.done(step).succeed()
            if self.progress:
                self.progress(step + 1, self.sc.steps)


def _group(env, wl: Workload, comm: _CommStream, ranks: slice, rec: Recorder, steps: int):
    """One SimPy process for a group of ranks, their state as arrays."""
    gamma = wl.interference_gamma if wl.overlap and wl.collective_s.any() else 0.0
    frac = wl.ready_fraction
    nb = len(frac)
    # Without overlap every bucket is ready when backward ends (fraction 1 for all).
    line_frac = frac if wl.overlap else np.ones(nb)
    n = len(range(wl.ranks)[ranks])
    scratch = Scratch(n)
    forward_s, backward_s, dataloader_s = wl.forward_s[ranks, None], wl.backward_s[ranks, None], wl.dataloader_s[ranks]
    fwd, bwd = np.empty((n, wl.grad_accum)), np.empty((n, wl.grad_accum))
    for step in range(steps):
        st = yield comm.opened(step)
        noise = st.noise[ranks]
        np.multiply(forward_s, noise, out=fwd)
        np.multiply(backward_s, noise, out=bwd)
        # Dataloader, then K micro-steps; only the last backward launches buckets (no_sync).
        last_bwd_start = np.add(dataloader_s, st.t0, out=scratch("last_backward_start"))
        if wl.grad_accum == 1:  # the sums below are the forward itself and 0: the same floats
            last_bwd_start += fwd[:, 0]
        else:
            last_bwd_start += fwd.sum(axis=1)
            last_bwd_start += bwd[:, :-1].sum(axis=1)
        if st.pause_s is not None:
            last_bwd_start += st.pause_s[ranks]
        last_bwd = bwd[:, -1]
        if gamma == 0.0:
            ready = ReadyLines(last_bwd_start, last_bwd, line_frac, scratch)
            st.post(0, ready.latest())
        else:
            table = np.empty((len(last_bwd), nb))
            for b in range(nb):
                if b:
                    yield st.published[b - 1]
                table[:, b] = st.busy(b).finish(last_bwd_start, last_bwd * frac[b], gamma)
                st.post(b, table[:, b : b + 1].max(axis=0))
            ready = ReadyTable(table)
        yield comm.done(step)
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
            scratch=scratch,
        )


def simulate(
    sc: Scenario,
    *,
    group_size: int | None = None,
    trace_steps: int = 3,
    trace_ranks=None,
    progress: Callable[[int, int], None] | None = None,
    records: bool = False,
    medians: bool = False,
    held: Held | None = None,
) -> SimResult:
    """Simulate ``sc.steps`` optimizer steps of ``sc.ranks`` ranks.

    ``group_size``: ranks per SimPy process (default: all in one, the fastest);
    results do not depend on it. ``trace_steps``/``trace_ranks``: the window kept
    for the Chrome trace (default: the first 3 steps, up to 8 ranks incl. stragglers).
    ``training.mode = "fsdp"`` or ``"hsdp"`` runs sim/fsdp.py's per-unit model instead. ``progress``:
    called with (steps done, steps) after each step, for the caller's progress line (sim does
    no I/O); it draws nothing, so results are identical with and without it. ``records``: keep
    the (steps, ranks) tables too (memory grows with steps); ``medians``: estimate each rank's
    median compute as it runs (sim/online.py). Neither changes a number. ``held``: one
    episode state for the whole run instead of the scenario's episodes as they come
    (sim/episode_cost.py).
    """
    if sc.training.mode in SHARDED_MODES:
        return simulate_fsdp(
            sc,
            trace_steps=trace_steps,
            trace_ranks=trace_ranks,
            progress=progress,
            records=records,
            medians=medians,
            held=held,
        )
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    wl = build_workload(sc, rng)
    n = sc.ranks
    group_size = group_size or n
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    groups = [slice(a, min(a + group_size, n)) for a in range(0, n, group_size)]
    env = simpy.Environment()
    comm = _CommStream(env, wl, len(groups), rng, sc, progress, held)
    rec = Recorder(sc, wl, trace_steps=trace_steps, trace_ranks=trace_ranks, records=records, medians=medians)
    env.process(comm.run(rec))
    for g in groups:
        env.process(_group(env, wl, comm, g, rec, sc.steps))
    env.run()
    return rec.result(wall_s=time.perf_counter() - wall0)
