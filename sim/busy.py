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
    """np.interp(x, xp, fp) for sorted ``xp``: the same floats, faster for many x.

    np.interp binary-searches each x with branches the CPU cannot predict (~60-250 ns an x at
    65,536 ranks over ~150 breakpoints: the largest cost of a step with interference). Here the
    search is a table lookup: x is clipped to the breakpoints' range (np.interp's end values are
    the ends' own), the span is cut into cells much finer than the breakpoints, each cell knows
    the last breakpoint at or below its start, and a few vectorised steps move each x to the last
    breakpoint at or below it, the segment np.interp finds. The value is np.interp's,
    slope x (x - xp[j]) + fp[j] with the slope computed as it does (numpy
    core/src/multiarray/compiled_base.c arr_interp), which is fp[j] when x == xp[j]; past the
    last breakpoint a slope of 0 gives fp[-1]."""
    if x.ndim != 1 or len(xp) < 8 or len(x) < 8192:  # below, its ~20 calls cost more than a search
        return np.interp(x, xp, fp)
    x = np.clip(x, xp[0], xp[-1])
    x_lo, x_hi = float(x.min()), float(x.max())
    # Only the breakpoints x spans: the last at or below min(x) up to the first above max(x).
    lo = max(int(np.searchsorted(xp, x_lo, side="right")) - 1, 0)
    hi = int(np.searchsorted(xp, x_hi, side="right")) + 1
    xp, fp = xp[lo:hi], fp[lo:hi]
    m = len(xp)
    cells = 64 * m  # fine enough that a few cells rarely hold more than one breakpoint
    width = (x_hi - x_lo) / cells
    if m < 3 or not width > 0.0:
        return np.interp(x, xp, fp)
    first = np.searchsorted(xp, x_lo + width * np.arange(cells + 1), side="right") - 1
    np.maximum(first, 0, out=first)  # x >= xp[0]: breakpoint 0 is at or below every x
    # Start a cell early (the cell index may round up by one), then step forward: at most the
    # breakpoints in three cells.
    cell = ((x - x_lo) / width).astype(np.intp)
    np.clip(cell - 1, 0, cells, out=cell)
    j = first.take(cell)
    xp_next = np.append(xp[1:], np.inf)  # no step past the last breakpoint
    for _ in range(int((first[3:] - first[:-3]).max()) + 1):
        j += xp_next.take(j) <= x
    with np.errstate(divide="ignore", invalid="ignore"):  # zero-length segments are never chosen
        slopes = np.append((fp[1:] - fp[:-1]) / (xp[1:] - xp[:-1]), 0.0)
    out = slopes.take(j)
    out *= x - xp.take(j)
    out += fp.take(j)
    return out


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
