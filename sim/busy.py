"""A collective stream's busy intervals as a piecewise-linear cumulative busy time, and
compute that slows while they run (the interference model, docs/design.md "Overlap interference").
Shared by the DDP engine (sim/engine.py) and the FSDP model (sim/fsdp.py).
"""

import bisect

import numpy as np


class Busy:
    """The comm stream's busy intervals within one step, as a piecewise-linear
    cumulative busy time I(t). Intervals are FIFO, so sorted and disjoint."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.t = np.empty(2 * len(starts))
        self.t[0::2], self.t[1::2] = starts, ends
        cum = np.cumsum(ends - starts)
        self.busy = np.empty_like(self.t)
        self.busy[0::2] = cum - (ends - starts)
        self.busy[1::2] = cum

    def prefix(self, count: int) -> "Busy":
        """The first ``count`` intervals (views: a cumulative sum's prefix is the prefix's
        cumulative sum, so these are the floats Busy(starts[:count], ends[:count]) holds)."""
        out = Busy.__new__(Busy)
        out.t, out.busy = self.t[: 2 * count], self.busy[: 2 * count]
        return out

    def busy_before(self, t: np.ndarray) -> np.ndarray:
        if not len(self.t):
            return np.zeros_like(t)
        return interp(t, self.t, self.busy)

    def finish(self, t0: np.ndarray, work_s: np.ndarray, gamma: float) -> np.ndarray:
        """When compute of ``work_s`` full-speed seconds started at ``t0`` ends, running
        at 1/(1+gamma) speed while a collective is busy: solve V(t) = V(t0) + work with
        V(t) = t - c I(t), c = gamma/(1+gamma), V increasing."""
        if not len(self.t) or gamma == 0.0:
            return t0 + work_s
        c = gamma / (1.0 + gamma)
        v_pts = self.t - c * self.busy
        v = t0 - c * self.busy_before(t0) + work_s
        inside = np.interp(v, v_pts, self.t)
        before = v  # V(t) = t before the first interval
        after = self.t[-1] + (v - v_pts[-1])  # slope 1 after the last
        return np.where(v < v_pts[0], before, np.where(v > v_pts[-1], after, inside))

    def bend(self, v: np.ndarray, gamma: float) -> np.ndarray:
        """finish() for compute that began before the first interval (where V(t0) = t0), given
        ``v`` = t0 + work: the same floats without interpolating t0 (it is 0 busy time)."""
        if not len(self.t) or gamma == 0.0:
            return v.copy()
        c = gamma / (1.0 + gamma)
        v_pts = self.t - c * self.busy
        inside = interp(v, v_pts, self.t)
        after = self.t[-1] + (v - v_pts[-1])
        return np.where(v < v_pts[0], v, np.where(v > v_pts[-1], after, inside))

    def finish_prefixes(self, t0: np.ndarray, work_s: np.ndarray, gamma: float) -> np.ndarray:
        """finish() of column b of ``work_s`` (k, m) against the first b intervals only, for
        every b at once: ``self.prefix(b).finish(t0, work_s[:, b], gamma)``'s floats, provided
        every t0 (k, 1) precedes the first interval. Below the prefix's last breakpoint the
        whole curve's np.interp finds the prefix's segment (the breakpoints are sorted); past it
        the prefix continues at slope 1 from its last breakpoint."""
        if not len(self.t) or gamma == 0.0:
            return t0 + work_s
        c = gamma / (1.0 + gamma)
        v_pts = self.t - c * self.busy
        v = t0 - c * self.busy_before(t0) + work_s
        count = np.arange(work_s.shape[1])
        last = np.maximum(2 * count - 1, 0)
        last_v, last_t = v_pts[last], self.t[last]
        out = np.where(v < v_pts[0], v, np.where(v > last_v, last_t + (v - last_v), np.interp(v, v_pts, self.t)))
        out[:, count == 0] = (t0 + work_s)[:, count == 0]  # no interval before bucket 0
        return out


def interp(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """np.interp(x, xp, fp) for sorted ``xp``, searching only the breakpoints between min(x) and
    max(x). np.interp binary-searches each x (~60 ns at 65,536 ranks over 160 breakpoints, the
    step's largest cost); the ranks' times usually fall within a few of them. The slice keeps
    the breakpoint at or below min(x) and every one up to the first above max(x), so each x
    finds the segment it would find in the whole array, and the same floats come out."""
    if x.ndim != 1 or len(xp) < 8:
        return np.interp(x, xp, fp)
    lo = max(int(np.searchsorted(xp, x.min(), side="right")) - 1, 0)
    hi = int(np.searchsorted(xp, x.max(), side="right")) + 1
    return np.interp(x, xp[lo:hi], fp[lo:hi])


def bent(t_s: list[float], v_s: list[float], v: float) -> float:
    """Busy.finish for one value already in virtual time (``v`` = V(t0) + work), on the
    breakpoints ``t_s`` and their virtual times ``v_s``, with np.interp's arithmetic (numpy
    core/src/multiarray/compiled_base.c arr_interp: slope x (x - xp[j]) + fp[j], fp[j] where
    x == xp[j]), so a scalar recurrence gives Busy.finish's floats without numpy's per-call cost."""
    if not t_s or v < v_s[0]:
        return v
    if v > v_s[-1]:
        return t_s[-1] + (v - v_s[-1])
    j = bisect.bisect_right(v_s, v) - 1
    if v_s[j] == v:
        return t_s[j]
    return (t_s[j + 1] - t_s[j]) / (v_s[j + 1] - v_s[j]) * (v - v_s[j]) + t_s[j]
