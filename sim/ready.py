"""When each rank's gradient buckets are ready in the last backward, and the two reductions
the engine needs of them, without forming the (ranks x buckets) table when it can be avoided.

Without interference every rank's backward runs at one speed, so rank r's bucket b is ready at
    ready[r, b] = start[r] + backward[r] * fraction[b]
a line in ``fraction`` per rank. The stream launches bucket b at the latest of them (the upper
envelope of the lines) and a rank waits for bucket b's collective from max(ready[r, b], the
stream being free) to its start. Both only depend on the few ranks near the top: the rest are
dropped by bounds that hold for every bucket at once, so 65,536 ranks cost O(ranks) a step, not
O(ranks x buckets). The values kept are computed by the same expression as the full table, so
the envelope is bit-identical to the table's column maxima.

With interference (gamma > 0) the ready times are not lines (sim/busy.py); ``ReadyTable``
holds them whole and gives the same answers.
"""

import numpy as np

# Bounds are widened by this much of the largest time, far above float64 rounding (~1e-16):
# a dropped rank is provably below the kept ones, never a near-tie.
_SLACK = 1e-9


class Scratch:
    """Named (ranks,) float arrays reused from step to step by one engine group.

    At 65,536 ranks an array is 512 KB, and the C allocator hands memory that large back to the
    system when it is freed, so a fresh array per operation pays ~128 page faults: more than
    the arithmetic. Whatever outlives a step is copied out of these."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self._arrays: dict[str, np.ndarray] = {}

    def __call__(self, name: str) -> np.ndarray:
        a = self._arrays.get(name)
        if a is None:
            a = self._arrays[name] = np.empty(self.ranks)
        return a


def _line(start_s, backward_s, fraction: float, out: np.ndarray) -> np.ndarray:
    """start_s + backward_s * fraction into ``out``: the same floats as the expression."""
    np.multiply(backward_s, fraction, out=out)
    return np.add(start_s, out, out=out)


class ReadyLines:
    """ready[r, b] = start_s[r] + backward_s[r] * fraction[b] (fraction in [0, 1]), for one
    step: its arrays live in ``scratch`` until the group's next step."""

    def __init__(self, start_s: np.ndarray, backward_s: np.ndarray, fraction: np.ndarray, scratch: Scratch):
        self.start_s, self.backward_s, self.fraction, self.scratch = start_s, backward_s, fraction, scratch
        self.first_s = _line(start_s, backward_s, fraction[0], scratch("ready_first"))  # bucket 0
        self.end_s = _line(start_s, backward_s, fraction[-1], scratch("ready_end"))  # backward ends
        self._backward_max = float(backward_s.max())
        self._slack = _SLACK * (abs(float(start_s.max())) + abs(self._backward_max) + 1.0)

    def rows(self, idx) -> np.ndarray:
        """The table's rows ``idx`` (an index array), computed as the full table would be."""
        return self.start_s[idx, None] + self.backward_s[idx, None] * self.fraction[None, :]

    def latest(self) -> np.ndarray:
        """(buckets,) the latest rank's ready time of every bucket: the table's column maxima.

        Two lines bound the envelope from below: those of the latest rank at the smallest and
        at the largest fraction. A rank's line minus that bound is concave in the fraction, so
        if it is below the bound at both ends and where the two lines cross, it is below it at
        every fraction and never the latest."""
        a, c, f = self.start_s, self.backward_s, self.fraction
        lo, hi = float(f.min()), float(f.max())
        at_lo = self.first_s if lo == f[0] else _line(a, c, lo, self.scratch("ready_lo"))
        at_hi = self.end_s if hi == f[-1] else _line(a, c, hi, self.scratch("ready_hi"))
        r0, r1 = int(at_lo.argmax()), int(at_hi.argmax())
        slack = self._slack
        keep = (at_lo >= at_lo[r0] - slack) | (at_hi >= at_hi[r1] - slack)
        if c[r0] != c[r1]:
            cross = (a[r0] - a[r1]) / (c[r1] - c[r0])
            if lo < cross < hi:
                at_cross = _line(a, c, cross, self.scratch("ready_cross"))
                keep |= at_cross >= max(a[r0] + c[r0] * cross, a[r1] + c[r1] * cross) - slack
        return self.rows(np.flatnonzero(keep)).max(axis=0)

    def collective_wait(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """(ranks,) sum over buckets of start[b] - max(ready[r, b], stream free), the stream
        free for bucket b when b - 1 ends (bucket 0: at once).

        For b >= 1 that is start[b] - ends[b - 1] for every rank whose bucket was ready by then,
        the same for all of them; only ranks whose ready time passes the stream's at some bucket
        (the slow ones) need their own terms. ready[r, b] <= start[r] + max(backward) * f[b], so
        a rank starting below min_b(ends[b - 1] - max(backward) * f[b]) is never one of them."""
        out = np.subtract(starts[0], self.first_s, out=self.scratch("collective_wait"))
        if len(starts) == 1:
            return out
        free = ends[:-1]
        shared = float((starts[1:] - free).sum())
        threshold = float((free - self._backward_max * self.fraction[1:]).min())
        late = np.flatnonzero(self.start_s > threshold - self._slack)
        out += shared
        if len(late):
            over = np.maximum(self.rows(late)[:, 1:] - free[None, :], 0.0).sum(axis=1)
            out[late] -= over
        return out


class ReadyTable:
    """The whole (ranks x buckets) table, for ready times that are not lines (interference)."""

    def __init__(self, ready: np.ndarray):
        self.ready = ready
        self.end_s = ready[:, -1]

    def rows(self, idx) -> np.ndarray:
        return self.ready[idx]

    def collective_wait(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        free = np.concatenate(([-np.inf], ends[:-1]))
        return (starts[None, :] - np.maximum(self.ready, free[None, :])).sum(axis=1)
