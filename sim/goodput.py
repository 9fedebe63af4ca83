"""Fail-stop failures, checkpoints and goodput over a training campaign.

A campaign is W minutes of useful training. Work is cut into segments of tau minutes; each ends with a checkpoint
of delta wall minutes, and the segment's work is safe only once its checkpoint completes. Fail-stop failures
arrive as a Poisson process (mean time between failures M, the whole job's). A failure loses everything since the
last completed checkpoint and costs a restart of R minutes; a failure during a restart starts the restart again,
and a failure during a checkpoint loses that checkpoint and its segment. This is Daly's model (J. T. Daly, "A
higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22, 2006), which gives

    wall / work = M e^(R/M) (e^((tau + delta)/M) - 1) / tau

Optionally work advances at a rate < 1 during slow episodes (fail-slow: Alibaba's Falcon sees them last tens
of seconds to ~10 h); checkpoints and restarts take their wall time regardless of the rate.

The SimPy model has events only for failures, restarts and episode boundaries, never for training steps or
checkpoints: between two events the rate is constant, so where the segments and checkpoints fall is arithmetic
(`_Progress.advance`). A campaign of ~1000 failures simulates in tens of milliseconds.

Minutes throughout; numpy and simpy only. The closed forms are sim/checkpointing.py's; estimates over
replicated campaigns and the simulated best interval, sim/goodput_estimate.py's.
"""

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import simpy

from sim.checkpointing import check_minutes
from sim.episodes import DURATION_RANGE_S, DURATION_SIGMA

STALL_SIGMA = DURATION_SIGMA  # log-sd of stall durations: sim/episodes.py's fail-slows
TIMEOUT_MIN = 10.0  # torch's NCCL process-group timeout (Stalls below)


# ---------------------------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True, kw_only=True)
class Campaign:
    """What is simulated: ``mtbf_min`` may be ``math.inf`` (no failures)."""

    work_min: float
    mtbf_min: float
    restart_min: float
    checkpoint_min: float
    interval_min: float

    def __post_init__(self):
        check_minutes("work_min", self.work_min, positive=True)
        check_minutes("mtbf_min", self.mtbf_min, positive=True, allow_inf=True)
        check_minutes("restart_min", self.restart_min)
        check_minutes("checkpoint_min", self.checkpoint_min)
        check_minutes("interval_min", self.interval_min, positive=True)


class Stalls(NamedTuple):
    """Hangs: a rank stops answering in a collective (a dead NIC, a wedged kernel). The whole job waits in
    that collective; one that outlasts the collective timeout becomes a failure (torch's process-group
    timeout: 10 min for NCCL by default, docs/references.md "Interfaces, rendezvous and timeouts"), paid as
    the timeout plus a restart. Starts are Poisson over training time; durations lognormal (log-sd 1.2)
    around ``mean_min``, as fail-slows."""

    per_h: float  # stalls starting per hour of wall time (whole job)
    mean_min: float  # their mean duration
    timeout_min: float = TIMEOUT_MIN  # the collective timeout


class _Stall(NamedTuple):
    duration_min: float


class SlowEpisode(NamedTuple):
    """Wall-clock minutes [start_min, end_min) during which work advances at ``rate`` (0 < rate)."""

    start_min: float
    end_min: float
    rate: float


# Slow episodes: a list (sorted, not overlapping) or a callable that, given its own random generator, yields
# episodes in start order, lazily and possibly without end (e.g. `fail_slow_episodes`).
SlowEpisodes = Sequence[SlowEpisode] | Callable[[np.random.Generator], Iterable[SlowEpisode]]


def check_episodes(episodes: Sequence[SlowEpisode]) -> list[SlowEpisode]:
    """Sorted, non-overlapping episodes with 0 <= start < end and rate > 0, else ValueError naming the first bad one."""
    out, prev_end = [], 0.0
    for i, e in enumerate(episodes):
        start, end, rate = (float(x) for x in e)
        if not (math.isfinite(start) and math.isfinite(end) and prev_end <= start < end):
            raise ValueError(f"slow episode {i}: need {prev_end:g} <= start < end (sorted, not overlapping), got {e}")
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"slow episode {i}: rate must be > 0, got {rate!r}")
        out.append(SlowEpisode(start, end, rate))
        prev_end = end
    return out


# ---------------------------------------------------------------------------------------------------------------
# The simulation


class CampaignResult(NamedTuple):
    """One simulated campaign. The wall splits exactly:
    wall = work + slow_extra + checkpoint + lost_wall + restart + stalled."""

    wall_min: float
    work_min: float
    wall_per_work: float
    goodput: float  # work / wall
    failures: int
    failures_in_restart: int
    failures_in_checkpoint: int
    checkpoints: int
    checkpoint_min: float  # completed checkpoints
    lost_work_min: float  # work done and then lost to failures
    lost_wall_min: float  # wall spent on that work and on checkpoints cut short
    restart_min: float  # restarts, interrupted ones included
    slow_extra_min: float  # wall beyond the kept work's minutes because slow episodes ran it below rate 1
    slow_episodes: int  # episodes that started before the campaign ended
    stalled_min: float = 0.0  # wall spent waiting in stalled collectives (up to the timeout)
    stalls: int = 0  # stalls that struck while training
    timeouts: int = 0  # stalls that outlasted the timeout and so became failures (counted in failures too)


_FAIL = object()  # interrupt cause; a rate change's cause is the new rate


class _Progress:
    """Where a campaign stands: segment i (of n), in its work phase (p minutes of work done) or its checkpoint
    (q wall minutes written). Segment i holds min(tau, W - i tau) minutes of work; indices, not a running sum,
    so W = n tau ends exactly after n checkpoints."""

    def __init__(self, c: Campaign):
        self.c = c
        ratio = c.work_min / c.interval_min
        self.n = max(1, round(ratio) if abs(ratio - round(ratio)) < 1e-9 * ratio else math.ceil(ratio))
        self.i, self.in_checkpoint, self.p, self.q = 0, False, 0.0, 0.0
        self.rate = 1.0
        self.seg_wall = 0.0  # wall spent on the current segment's work so far
        self.done = False
        # accounting
        self.kept_work_wall = self.checkpoint_min = self.lost_work = self.lost_wall = 0.0

    def seg_work(self, i: int) -> float:
        return self.c.interval_min if i < self.n - 1 else self.c.work_min - (self.n - 1) * self.c.interval_min

    def wall_to_finish(self) -> float:
        """Wall minutes to the end at the current rate, if nothing happens."""
        c = self.c
        after = self.n - 1 - self.i  # segments after this one
        work_after = c.work_min - (self.i + 1) * c.interval_min if after else 0.0
        if self.in_checkpoint:
            return (c.checkpoint_min - self.q) + work_after / self.rate + after * c.checkpoint_min
        return (self.seg_work(self.i) - self.p + work_after) / self.rate + (after + 1) * c.checkpoint_min

    def advance(self, dt: float) -> None:
        """Move dt wall minutes on at the current rate (dt = inf: to the end)."""
        c = self.c
        while not self.done:
            if not self.in_checkpoint:
                w = self.seg_work(self.i)
                need = (w - self.p) / self.rate
                if dt < need:
                    self.p += dt * self.rate
                    self.seg_wall += dt
                    return
                dt -= need
                self.seg_wall += need
                self.p, self.in_checkpoint, self.q = w, True, 0.0
            need = c.checkpoint_min - self.q
            if dt < need:
                self.q += dt
                return
            dt -= need
            self._commit(1, self.seg_wall)
            if self.i == self.n:
                self.done = True
                return
            # Whole segments (tau/rate of work plus a checkpoint) fit in the rest of dt: jump over them at once.
            # The last segment, maybe shorter than tau, is left to the loop.
            full = c.interval_min / self.rate + c.checkpoint_min
            k = self.n - 1 - self.i if math.isinf(dt) else min(int(dt // full), self.n - 1 - self.i)
            if k > 0:
                self._commit(k, k * c.interval_min / self.rate)
                dt -= k * full

    def _commit(self, k: int, work_wall: float) -> None:
        self.kept_work_wall += work_wall
        self.checkpoint_min += k * self.c.checkpoint_min
        self.i += k
        self.in_checkpoint, self.p, self.q, self.seg_wall = False, 0.0, 0.0, 0.0

    def fail(self) -> bool:
        """Lose the segment in progress; True if the failure struck a checkpoint."""
        in_checkpoint = self.in_checkpoint
        self.lost_work += self.p
        self.lost_wall += self.seg_wall + self.q
        self.in_checkpoint, self.p, self.q, self.seg_wall = False, 0.0, 0.0, 0.0
        return in_checkpoint


def simulate_campaign(
    campaign: Campaign, *, seed: int, slow: SlowEpisodes | None = None, stalls: Stalls | None = None
) -> CampaignResult:
    """Simulate one campaign. Failures, slow episodes and stalls draw from separate streams of ``seed``, so
    campaigns that differ only in interval, checkpoint or restart cost see the same failure times (common
    random numbers)."""
    fail_rng, slow_rng, stall_rng = (
        np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(3)
    )
    episodes: Iterable[SlowEpisode] = ()
    if callable(slow):
        episodes = slow(slow_rng)
    elif slow is not None:
        episodes = check_episodes(slow)

    env = simpy.Environment()
    prog = _Progress(campaign)
    counts = {"failures": 0, "in_restart": 0, "in_checkpoint": 0, "episodes": 0, "restart_min": 0.0}
    counts |= {"stalled_min": 0.0, "stalls": 0, "timeouts": 0}

    def restart():
        # Daly's model: a failure during a restart starts it again from the beginning.
        left = campaign.restart_min
        while left > 0:
            t0 = env.now
            try:
                yield env.timeout(left)
                left = 0.0
            except simpy.Interrupt as irq:
                if irq.cause is _FAIL:
                    counts["failures"] += 1
                    counts["in_restart"] += 1
                    left = campaign.restart_min
                else:  # a stall cannot strike a job that is not running; a rate change waits for training
                    if not isinstance(irq.cause, _Stall):
                        prog.rate = irq.cause
                    left -= env.now - t0
            counts["restart_min"] += env.now - t0

    def train():
        while not prog.done:
            t0 = env.now
            try:
                yield env.timeout(prog.wall_to_finish())
                prog.advance(math.inf)  # the timeout was exactly the rest: no float residue can leave it unfinished
            except simpy.Interrupt as irq:
                prog.advance(env.now - t0)  # at the rate that held until now
                if prog.done:
                    break
                if irq.cause is _FAIL:
                    counts["failures"] += 1
                    counts["in_checkpoint"] += prog.fail()
                    yield from restart()
                elif isinstance(irq.cause, _Stall):
                    counts["stalls"] += 1
                    failed = yield from stalled(min(irq.cause.duration_min, stalls.timeout_min))
                    if not failed and irq.cause.duration_min >= stalls.timeout_min:
                        # The collective timed out: the process group aborts, as a failure does.
                        counts["failures"] += 1
                        counts["timeouts"] += 1
                        counts["in_checkpoint"] += prog.fail()
                        yield from restart()
                else:
                    prog.rate = irq.cause

    def stalled(wait_min: float):
        """Sit in a stalled collective, no progress; True if a failure ended it (and was handled)."""
        end = env.now + wait_min
        while env.now < end:
            t0 = env.now
            try:
                yield env.timeout(end - env.now)
            except simpy.Interrupt as irq:
                if irq.cause is _FAIL:
                    counts["stalled_min"] += env.now - t0
                    counts["failures"] += 1
                    counts["in_checkpoint"] += prog.fail()
                    yield from restart()
                    return True
                if not isinstance(irq.cause, _Stall):  # already stalled; a new rate holds afterwards
                    prog.rate = irq.cause
            counts["stalled_min"] += env.now - t0
        return False

    trainer = env.process(train())

    def failures():
        # Exponential gaps drawn in blocks of 1024 (one numpy call each); the stream is the same whatever
        # the other parameters, which is what makes grids of intervals comparable.
        while True:
            for gap in fail_rng.standard_exponential(1024) * campaign.mtbf_min:
                yield env.timeout(float(gap))
                if trainer.is_alive:
                    trainer.interrupt(_FAIL)

    def slowdowns():
        for start, end, rate in episodes:
            if end <= env.now:  # a generated episode that starts inside the previous one: take its rest only
                continue
            if start > env.now:
                yield env.timeout(start - env.now)
            if not trainer.is_alive:
                return
            counts["episodes"] += 1
            trainer.interrupt(rate)
            yield env.timeout(end - env.now)
            if not trainer.is_alive:
                return
            trainer.interrupt(1.0)

    def stall_arrivals():
        mu = math.log(stalls.mean_min) - STALL_SIGMA**2 / 2  # lognormal with this mean
        while True:
            yield env.timeout(float(stall_rng.exponential(60.0 / stalls.per_h)))
            if not trainer.is_alive:
                return
            trainer.interrupt(_Stall(float(stall_rng.lognormal(mu, STALL_SIGMA))))

    if math.isfinite(campaign.mtbf_min):
        env.process(failures())
    env.process(slowdowns())
    if stalls is not None and stalls.per_h > 0:
        env.process(stall_arrivals())
    env.run(until=trainer)

    wall = float(env.now)
    return CampaignResult(
        wall_min=wall,
        work_min=float(campaign.work_min),
        wall_per_work=wall / campaign.work_min,
        goodput=campaign.work_min / wall,
        failures=counts["failures"],
        failures_in_restart=counts["in_restart"],
        failures_in_checkpoint=counts["in_checkpoint"],
        checkpoints=prog.n,
        checkpoint_min=float(prog.checkpoint_min),
        lost_work_min=float(prog.lost_work),
        lost_wall_min=float(prog.lost_wall),
        restart_min=float(counts["restart_min"]),
        slow_extra_min=float(prog.kept_work_wall - campaign.work_min),
        slow_episodes=counts["episodes"],
        stalled_min=float(counts["stalled_min"]),
        stalls=counts["stalls"],
        timeouts=counts["timeouts"],
    )


def fail_slow_episodes(
    *,
    mean_gap_min: float,
    mean_duration_min: float = 24.0,
    min_duration_min: float = DURATION_RANGE_S[0] / 60.0,
    max_duration_min: float = DURATION_RANGE_S[1] / 60.0,
    sigma: float = DURATION_SIGMA,
    rate_range: tuple[float, float] = (0.5, 0.8),
) -> Callable[[np.random.Generator], Iterator[SlowEpisode]]:
    """Fail-slow episodes as docs/references.md "Stragglers and failures" describes them (Alibaba Falcon):
    durations from 30 s to ~10 h, mean ~24 min, long-tailed: lognormal(sigma) with that mean, clipped to the
    range (clipping moves the mean a little). Gaps between one episode's end and the next start are
    exponential (Poisson starts outside episodes). Work runs at a uniform rate in ``rate_range`` during each."""
    check_minutes("mean_gap_min", mean_gap_min, positive=True)
    check_minutes("mean_duration_min", mean_duration_min, positive=True)
    if not 0 < min_duration_min <= max_duration_min:
        raise ValueError(f"min/max_duration_min: need 0 < min <= max, got {min_duration_min}, {max_duration_min}")
    lo, hi = rate_range
    if not 0 < lo <= hi:
        raise ValueError(f"rate_range: need 0 < low <= high, got {rate_range}")
    mu = math.log(mean_duration_min) - sigma**2 / 2.0  # lognormal mean = exp(mu + sigma^2/2)

    def episodes(rng: np.random.Generator) -> Iterator[SlowEpisode]:
        t = 0.0
        while True:
            gaps = rng.exponential(mean_gap_min, 256)
            durations = np.clip(rng.lognormal(mu, sigma, 256), min_duration_min, max_duration_min)
            rates = rng.uniform(lo, hi, 256)
            for gap, duration, rate in zip(gaps, durations, rates, strict=True):
                start = t + float(gap)
                t = start + float(duration)
                yield SlowEpisode(start, t, float(rate))

    return episodes
