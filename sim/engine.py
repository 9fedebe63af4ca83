"""The fast DDP engine: the step as a vectorised recurrence (docs/design.md "The simulation
model"; which engine runs when: docs/design.md "Engines").

Per step, for all ranks at once as arrays:
  1. draw the step's noise, then its jitter (then episodes and pauses, their own generators);
  2. each rank's last backward starts after its dataloader, host delay, pause and K - 1
     micro-steps, and its bucket b is ready on the line start + backward x fraction_b
     (sim/ready.py);
  3. the one FIFO comm stream runs bucket b from the latest rank's ready time or the end of
     collective b - 1, whichever is later:
         start_b = max(launch_b, end_{b-1}),  end_b = start_b + collective_b x jitter_b
     a scalar loop over buckets. With interference (gamma > 0) launch_b is the lines'
     envelope bent by collectives 0..b-1 (sim/ready.py ReadyBent, sim/busy.py bent), so the
     loop needs no (ranks x buckets) table either.

sim/reference.py is the same model written as SimPy processes (a process per rank and per
bucket collective, the stream a Resource); tests/test_reference.py holds the two equal.
"""

import math
import time
from collections.abc import Callable

import numpy as np

from sim.busy import Busy, bent
from sim.config import SHARDED_MODES, Scenario
from sim.episodes import Effects, Held
from sim.fsdp import simulate_fsdp
from sim.noise import SizePools, comm_multipliers, multipliers
from sim.ready import ReadyBent, ReadyLines, Scratch
from sim.results import Recorder, SimResult
from sim.workload import build_workload


def stream(launch_s: np.ndarray, duration_s: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of one step's collectives on the FIFO stream. ``launch_s``: per bucket the
    latest rank's ready time as if nothing slowed it (the lines' envelope); with ``gamma`` > 0
    each is bent by the collectives before it, in Busy.finish's arithmetic (sim/busy.py)."""
    nb = len(launch_s)
    starts, ends = np.empty(nb), np.empty(nb)
    c = gamma / (1.0 + gamma)
    t_pts: list[float] = []  # Busy's breakpoints so far, and their virtual times V(t)
    v_pts: list[float] = []
    cum, end = 0.0, -math.inf
    for b, (launch, duration) in enumerate(zip(launch_s.tolist(), duration_s.tolist(), strict=True)):
        start = max(bent(t_pts, v_pts, launch) if gamma else launch, end)
        end = start + duration
        starts[b], ends[b] = start, end
        if gamma:  # Busy's cumulative busy time, as np.cumsum adds it
            took = end - start
            cum += took
            t_pts += (start, end)
            v_pts += (start - c * (cum - took), end - c * cum)
    return starts, ends


def simulate(
    sc: Scenario,
    *,
    trace_steps: int = 3,
    trace_ranks=None,
    progress: Callable[[int, int], None] | None = None,
    records: bool = False,
    medians: bool = False,
    held: Held | None = None,
) -> SimResult:
    """Simulate ``sc.steps`` optimizer steps of ``sc.ranks`` ranks.

    ``trace_steps``/``trace_ranks``: the window kept for the Chrome trace (default: the first 3
    steps, up to 8 ranks incl. stragglers). ``training.mode = "fsdp"`` or ``"hsdp"`` runs
    sim/fsdp.py's per-unit model instead. ``progress``: called with (steps done, steps) after each
    step, for the caller's progress line (sim does no I/O); it draws nothing, so results are
    identical with and without it. ``records``: keep the (steps, ranks) tables too (memory grows
    with steps); ``medians``: estimate each rank's median compute as it runs (sim/online.py).
    Neither changes a number. ``held``: one episode state for the whole run instead of the
    scenario's episodes as they come (sim/episode_cost.py).
    """
    if sc.parallel3d:  # `ddplab simulate` runs these through sim/steps3d.py; here tp, cp and pp would be ignored
        raise ValueError(
            "training.tp/cp/pp or mode=zero1: a 3D-parallel job is simulated by sim/steps3d.py, not sim/engine.py"
        )
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
    rec = Recorder(sc, wl, trace_steps=trace_steps, trace_ranks=trace_ranks, records=records, medians=medians)
    effects = (
        Effects(sc.episodes, sc.pauses, wl.ranks, sc.seed, held)
        if Effects.needed(sc.episodes, sc.pauses, held)
        else None
    )
    gamma = wl.interference_gamma if wl.overlap and wl.collective_s.any() else 0.0
    nb, k_micro, n = len(wl.buckets), wl.grad_accum, wl.ranks
    # Without overlap every bucket is ready when backward ends (fraction 1 for all).
    line_frac = wl.ready_fraction if wl.overlap else np.ones(nb)
    scratch = Scratch(n)
    forward_s, backward_s = wl.forward_s[:, None], wl.backward_s[:, None]
    fwd, bwd = np.empty((n, k_micro)), np.empty((n, k_micro))
    noise_cfg, net = sc.noise, sc.network
    pools = SizePools.of(net.jitter_samples, net.jitter_samples_bytes, wl.wire_bytes)
    before_s = wl.dataloader_s + wl.host_delay_s  # each rank's time before its first forward
    t0 = 0.0
    for step in range(sc.steps):
        # Draw order is fixed: noise, then jitter.
        noise = multipliers(
            rng, noise_cfg.distribution, noise_cfg.sigma, (n, k_micro), noise_cfg.samples, noise_cfg.samples_by_rank
        )
        jitter = comm_multipliers(rng, net.jitter_sigma, net.jitter_samples, nb, pools)
        pause = None
        if effects:  # episodes and pauses: their own generators (sim/episodes.py)
            fx = effects.at(step, t0)
            (noise, jitter), pause = fx.apply(noise, jitter), fx.pause_s
        np.multiply(forward_s, noise, out=fwd)
        np.multiply(backward_s, noise, out=bwd)
        # Dataloader and host delay, then K micro-steps; only the last backward launches buckets
        # (no_sync).
        last_bwd_start = np.add(before_s, t0, out=scratch("last_backward_start"))
        if k_micro == 1:  # the sums below are the forward itself and 0: the same floats
            last_bwd_start += fwd[:, 0]
        else:
            last_bwd_start += fwd.sum(axis=1)
            last_bwd_start += bwd[:, :-1].sum(axis=1)
        if pause is not None:
            last_bwd_start += pause
        lines = ReadyLines(last_bwd_start, bwd[:, -1], line_frac, scratch)
        starts, ends = stream(lines.latest(), wl.collective_s * jitter, gamma)
        busy = Busy(starts, ends)
        end = ends[-1] + wl.optimizer_s
        rec.step(step, t0=t0, end_s=end, starts=starts, ends=ends)
        rec.ranks(
            step,
            t0=t0,
            last_bwd_start=last_bwd_start,
            ready=ReadyBent(lines, busy, gamma) if gamma else lines,
            fwd=fwd,
            bwd=bwd,
            busy=busy,
            pause_s=pause,
            scratch=scratch,
        )
        t0 = end
        if progress:
            progress(step + 1, sc.steps)
    return rec.result(wall_s=time.perf_counter() - wall0)
