"""A deliberately naive SimPy model of the DDP step, kept ONLY as the benchmark
baseline and correctness cross-check for ``sim.engine`` (see bench/sim_speed.py).

It does what docs/design.md ("Scale") warns against: one SimPy process per rank, and
per step one more per rank per bucket, with one event per rank per bucket. A
comm-stream process waits for each bucket with ``AllOf`` over all ranks, then
holds the stream for the collective's duration. Same workload
(``sim.workload.build_workload``), same random draws in the same order as
``sim.engine`` (per step: noise (ranks, grad_accum), then jitter (buckets)), so
the step times must agree with the engine's to rounding. Interference gamma = 0
only. Do not use it for anything else.
"""

import numpy as np
import simpy

from sim.config import Scenario
from sim.noise import multipliers
from sim.workload import Workload, build_workload


class _Step:
    """What every rank needs for one step: its start time, the noise, and one
    'bucket ready' event per rank per bucket."""

    def __init__(self, env: simpy.Environment, t0: float, noise: np.ndarray, n_buckets: int):
        self.t0, self.noise = t0, noise
        self.ready = [[env.event() for _ in range(n_buckets)] for _ in range(noise.shape[0])]
        self.done = env.event()


def _bucket(env, delay_s: float, ready: simpy.Event):
    """One rank's one bucket: ready ``delay_s`` after its last backward starts."""
    yield env.timeout(delay_s)
    ready.succeed()


def _rank(env, wl: Workload, r: int, opened: list[simpy.Event]):
    """One rank: dataloader, K micro-steps of forward/backward; the buckets of the
    last backward (no_sync before it) each get a process of their own."""
    frac = wl.ready_fraction if wl.overlap else np.ones(len(wl.buckets))
    for open_ev in opened:
        st = yield open_ev
        yield env.timeout(wl.dataloader_s[r])
        k_last = wl.grad_accum - 1
        for k in range(wl.grad_accum):
            yield env.timeout(wl.forward_s[r] * st.noise[r, k])
            if k < k_last:
                yield env.timeout(wl.backward_s[r] * st.noise[r, k])
        last_bwd = wl.backward_s[r] * st.noise[r, k_last]
        for b, ready in enumerate(st.ready[r]):
            env.process(_bucket(env, last_bwd * frac[b], ready))
        yield st.done


def _comm(env, wl: Workload, sc: Scenario, rng, opened: list[simpy.Event], out: np.ndarray):
    """The one FIFO collective stream: bucket b starts when every rank has it
    ready and collective b-1 has ended."""
    nb = len(wl.buckets)
    for step, open_ev in enumerate(opened):
        t0 = env.now
        noise = multipliers(rng, sc.noise.distribution, sc.noise.sigma, (wl.ranks, wl.grad_accum))
        jitter = multipliers(rng, "lognormal", sc.network.jitter_sigma, nb)
        st = _Step(env, t0, noise, nb)
        open_ev.succeed(st)
        for b in range(nb):
            yield simpy.AllOf(env, [st.ready[r][b] for r in range(wl.ranks)])
            yield env.timeout(wl.collective_s[b] * jitter[b])
        yield env.timeout(wl.optimizer_s)
        out[step] = env.now - t0
        st.done.succeed()


def naive_step_times(sc: Scenario) -> np.ndarray:
    """Per-step step times (seconds) of ``sc``, the slow way."""
    rng = np.random.default_rng(sc.seed)
    wl = build_workload(sc, rng)
    if wl.interference_gamma != 0.0 and wl.overlap and wl.collective_s.any():
        raise ValueError("naive model: interference_gamma must be 0")
    env = simpy.Environment()
    opened = [env.event() for _ in range(sc.steps)]
    out = np.zeros(sc.steps)
    env.process(_comm(env, wl, sc, rng, opened, out))
    for r in range(wl.ranks):
        env.process(_rank(env, wl, r, opened))
    env.run()
    return out
