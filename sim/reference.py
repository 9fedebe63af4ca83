"""The DDP step as SimPy processes: the reference model sim/engine.py is held to
(tests/test_reference.py), and `ddplab simulate --engine simpy` for small jobs.

Each thing that acts is a process, and each thing that waits waits on an event:

- a process per rank: dataloader and host delay, any pause, K micro-steps of forward and backward; in the
  last backward (the earlier ones run under no_sync) it marks each bucket ready as its
  gradients are done, computing 1 + gamma times slower while a collective runs on its GPU
  (docs/design.md "Overlap interference"): it waits for its work or for the stream to change;
- a process per bucket collective: it queues on the comm stream, a FIFO ``simpy.Resource``
  of capacity 1 (NCCL runs a communicator's collectives in issue order), then waits with
  ``AllOf`` for every rank to have launched it, and runs for its time x the step's jitter;
- a process for the job: it draws the step's noise and jitter (and episodes and pauses) in
  sim/engine.py's order, opens the step, waits with ``AllOf`` for the collectives, runs the
  optimizer and opens the next one.

Each rank's share of the step is measured as it happens: its compute up to the end of its
backward, the stream's busy time while it then idles (exposed communication), the rest of the
idle time (straggler wait), and per bucket the time from its launch, or the stream coming free,
to the collective's start (collective wait). The numbers are sim/engine.py's, which computes
them in closed form, to rounding (1e-12).

A rank-bucket is a handful of events, ~10-20 us each: use sim/engine.py beyond
sim/limits.py's REFERENCE_MAX_RANKS.
"""

import time

import numpy as np
import simpy

from sim.config import SHARDED_MODES, Scenario
from sim.episodes import Effects, Held
from sim.limits import REFERENCE_MAX_RANKS
from sim.noise import SizePools, comm_multipliers, multipliers
from sim.online import OnlineStats
from sim.results import SimResult
from sim.workload import Workload, build_workload


class _Stream:
    """The comm stream all ranks share: a FIFO resource, whether a collective is running (and
    an event that fires when that changes), and the busy time it has run this step."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.fifo = simpy.Resource(env, capacity=1)
        self.running = False
        self.changed = env.event()
        self.busy_s = 0.0  # this step's collective time before ``since``
        self.since = 0.0

    def set_running(self, running: bool) -> None:
        now = self.env.now
        if self.running:
            self.busy_s += now - self.since
        self.running, self.since = running, now
        changed, self.changed = self.changed, self.env.event()
        changed.succeed()

    def busy_at(self, t: float) -> float:
        """Collective time run this step up to ``t`` (now or later)."""
        return self.busy_s + (t - self.since if self.running else 0.0)


class _Clock:
    """A rank's virtual clock in its last backward: full-speed seconds of work done, counted
    from the time the backward began (so it reads that time then)."""

    def __init__(self, began_s: float):
        self.began_s = self.v = began_s


class _Step:
    """One step's draws, its per-rank per-bucket launch events, and what ranks report."""

    def __init__(self, env, wl: Workload, t0: float, noise, jitter, pause_s):
        n, nb = wl.ranks, len(wl.buckets)
        self.t0, self.noise, self.jitter, self.pause_s = t0, noise, jitter, pause_s
        self.launched = [[env.event() for _ in range(nb)] for _ in range(n)]
        self.ready_s = np.zeros((n, nb))
        self.backward_end_s = np.zeros(n)
        self.busy_at_backward_end_s = np.zeros(n)
        self.collective_wait_s = np.zeros(n)
        self.starts, self.ends = np.zeros(nb), np.zeros(nb)


class _Model:
    def __init__(self, sc: Scenario, wl: Workload, rng: np.random.Generator, held: Held | None, progress):
        self.sc, self.wl, self.rng, self.progress = sc, wl, rng, progress
        self.env = simpy.Environment()
        self.stream = _Stream(self.env)
        self.gamma = wl.interference_gamma if wl.overlap and wl.collective_s.any() else 0.0
        # Without overlap every bucket is ready when backward ends (fraction 1 for all).
        self.fraction = wl.ready_fraction if wl.overlap else np.ones(len(wl.buckets))
        net = sc.network
        self.pools = SizePools.of(net.jitter_samples, net.jitter_samples_bytes, wl.wire_bytes)
        needed = Effects.needed(sc.episodes, sc.pauses, held)
        self.effects = Effects(sc.episodes, sc.pauses, wl.ranks, sc.seed, held) if needed else None
        self.opened = [self.env.event() for _ in range(sc.steps)]
        self.stats = None
        self.step_time = np.zeros(sc.steps)
        self.step_end = np.zeros(sc.steps)
        self.comm_busy = np.zeros(sc.steps)

    def rank(self, r: int):
        env, wl = self.env, self.wl
        # Buckets in the order backward produces them (fractions rise with the bucket index).
        order = np.argsort(self.fraction, kind="stable")
        for opened in self.opened:
            st = yield opened
            yield env.timeout(wl.dataloader_s[r] + wl.host_delay_s[r])  # one sum, as sim/engine.py adds it
            if st.pause_s is not None:
                yield env.timeout(st.pause_s[r])
            k_last = wl.grad_accum - 1
            for k in range(wl.grad_accum):
                yield env.timeout(wl.forward_s[r] * st.noise[r, k])
                if k < k_last:
                    yield env.timeout(wl.backward_s[r] * st.noise[r, k])
            backward_s = wl.backward_s[r] * st.noise[r, k_last]
            # Bucket b is ready once the backward has done backward_s x fraction_b of full-speed
            # work: when the rank's virtual clock (full-speed seconds since it began) reaches it.
            clock = _Clock(env.now)
            for b in order:
                yield from self.compute(clock, clock.began_s + backward_s * self.fraction[b])
                st.ready_s[r, b] = env.now
                st.launched[r][b].succeed()
            st.backward_end_s[r] = env.now
            st.busy_at_backward_end_s[r] = self.stream.busy_at(env.now)

    def compute(self, clock: "_Clock", until_v: float):
        """Compute until the rank's virtual clock reads ``until_v``, at 1 / (1 + gamma) speed
        while the stream runs a collective."""
        env, stream = self.env, self.stream
        while clock.v < until_v:
            slow = 1.0 + self.gamma if stream.running else 1.0
            began, worked = env.now, env.timeout((until_v - clock.v) * slow)
            fired = yield (worked | stream.changed) if self.gamma else worked
            if not self.gamma or worked in fired:
                clock.v = until_v
                return
            clock.v += (env.now - began) / slow  # the stream started or stopped: go on at the new speed

    def collective(self, st: _Step, b: int):
        env, stream = self.env, self.stream
        with stream.fifo.request() as turn:
            yield turn
            free = env.now  # the stream is ours: every earlier collective has ended
            yield simpy.AllOf(env, [launched[b] for launched in st.launched])
            start = env.now
            st.collective_wait_s += start - np.maximum(st.ready_s[:, b], free if b else -np.inf)
            stream.set_running(True)
            yield env.timeout(self.wl.collective_s[b] * st.jitter[b])
            stream.set_running(False)
            st.starts[b], st.ends[b] = start, env.now

    def job(self):
        env, wl, sc, rng = self.env, self.wl, self.sc, self.rng
        nb, n = len(wl.buckets), wl.ranks
        for step, opened in enumerate(self.opened):
            t0 = env.now
            # Draw order as sim/engine.py: noise, then jitter, then episodes and pauses.
            noise = multipliers(
                rng,
                sc.noise.distribution,
                sc.noise.sigma,
                (n, wl.grad_accum),
                sc.noise.samples,
                sc.noise.samples_by_rank,
            )
            jitter = comm_multipliers(rng, sc.network.jitter_sigma, sc.network.jitter_samples, nb, self.pools)
            pause = None
            if self.effects:
                fx = self.effects.at(step, t0)
                (noise, jitter), pause = fx.apply(noise, jitter), fx.pause_s
            st = _Step(env, wl, t0, noise, jitter, pause)
            self.stream.busy_s = 0.0
            collectives = [env.process(self.collective(st, b)) for b in range(nb)]  # queued in bucket order
            opened.succeed(st)
            yield simpy.AllOf(env, collectives)
            comm_end = env.now
            yield env.timeout(wl.optimizer_s)
            self.record(step, st, comm_end)
            if self.progress:
                self.progress(step + 1, sc.steps)

    def record(self, step: int, st: _Step, comm_end: float) -> None:
        wl = self.wl
        self.step_time[step] = self.env.now - st.t0
        self.step_end[step] = self.env.now
        self.comm_busy[step] = float((st.ends - st.starts).sum())
        exposed = self.stream.busy_s - st.busy_at_backward_end_s
        idle = comm_end - st.backward_end_s
        self.stats.add(
            step,
            compute_s=st.backward_end_s - st.t0 - wl.dataloader_s - wl.host_delay_s,
            exposed_comm_s=exposed,
            straggler_wait_s=np.maximum(idle - exposed, 0.0),
            collective_wait_s=st.collective_wait_s,
        )


def check_reference(sc: Scenario) -> None:
    """ValueError, one line naming the limit, for a job this model does not run."""
    if sc.training.mode in SHARDED_MODES:
        raise ValueError(f"--engine simpy: models DDP steps; training.mode={sc.training.mode} runs on --engine fast")
    if sc.ranks > REFERENCE_MAX_RANKS:
        raise ValueError(
            f"--engine simpy: {sc.ranks} ranks is over its limit of {REFERENCE_MAX_RANKS}"
            " (sim/limits.py REFERENCE_MAX_RANKS: a process per rank and per bucket); use --engine fast"
        )


def simulate_reference(
    sc: Scenario, *, progress=None, records: bool = False, medians: bool = False, held: Held | None = None
) -> SimResult:
    """sim/engine.py's simulate() as SimPy processes, for DDP jobs of up to REFERENCE_MAX_RANKS
    ranks; no Chrome trace window. Arguments as simulate()'s."""
    check_reference(sc)
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    model = _Model(sc, build_workload(sc, rng), rng, held, progress)
    model.stats = OnlineStats(sc.steps, sc.ranks, records=records, medians=medians)
    model.env.process(model.job())
    for r in range(sc.ranks):
        model.env.process(model.rank(r))
    model.env.run()
    stats = model.stats
    return SimResult(
        scenario=sc,
        workload=model.wl,
        step_time_s=model.step_time,
        step_end_s=model.step_end,
        comm_busy_s=model.comm_busy,
        rank_mean=stats.rank_mean(),
        step_mean=stats.step_mean,
        wall_s=time.perf_counter() - wall0,
        compute_p50_s=stats.compute_p50(),
        records=stats.records,
        trace={"comm": {}, "ranks": {}},
    )
