"""A collective stream's busy intervals as a piecewise-linear cumulative busy time, and
compute that slows while they run (the interference model, docs/design.md "Overlap interference").
Shared by the DDP engine (sim/engine.py) and the FSDP model (sim/fsdp.py).
"""

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

    def busy_before(self, t: np.ndarray) -> np.ndarray:
        if not len(self.t):
            return np.zeros_like(t)
        return np.interp(t, self.t, self.busy)

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
