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

With interference (gamma > 0) the lines bend where collectives run (sim/busy.py), the same bend
for every rank, so the same bounds hold in virtual time (``ReadyBent``).
"""

import numpy as np

from sim.busy import Busy

# Bounds are widened by this much of the largest time, far above float64 rounding (~1e-16):
# a dropped rank is provably below the kept ones, never a near-tie.
_SLACK = 1e-9


class Scratch:
    """Named (ranks,) float arrays the engine reuses from step to step.

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
        self.backward_max = float(backward_s.max())
        self.slack = _SLACK * (abs(float(start_s.max())) + abs(self.backward_max) + 1.0)

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
        slack = self.slack
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
        threshold = float((free - self.backward_max * self.fraction[1:]).min())
        late = np.flatnonzero(self.start_s > threshold - self.slack)
        out += shared
        if len(late):
            over = np.maximum(self.rows(late)[:, 1:] - free[None, :], 0.0).sum(axis=1)
            out[late] -= over
        return out


class ReadyBent:
    """Ready times bent by interference (gamma > 0): compute slows by 1 + gamma while a
    collective runs, so bucket b is ready at g_b(line[r, b]), g_b the inverse of the virtual
    time V(t) = t - gamma / (1 + gamma) x busy(t) over collectives 0..b-1 (sim/busy.py; the
    later ones start after bucket b is ready everywhere). Every collective starts after every
    rank's backward has begun (collective 0 waits for the latest rank's bucket 0), so V = t at
    each rank's start and the line is already the virtual time. g_b is one increasing function
    for all ranks: the latest rank's ready time is g_b of the lines' envelope, the stream needs
    no table, and a rank passes the stream's free time exactly where its line passes V_b of it,
    so ReadyLines' bounds carry over with V in place of t."""

    def __init__(self, lines: ReadyLines, busy: Busy, gamma: float):
        self.lines, self.busy, self.gamma = lines, busy, gamma
        nb = len(lines.fraction)
        # V(start) = start, so the line's value is the virtual time finish() would compute.
        self.end_s = busy.prefix(nb - 1).bend(lines.end_s, gamma)

    def rows(self, idx) -> np.ndarray:
        """The table's rows ``idx``: bucket b bent by collectives 0..b-1, as the table was."""
        a, c, f = self.lines.start_s[idx], self.lines.backward_s[idx], self.lines.fraction
        return self.busy.finish_prefixes(a[:, None], c[:, None] * f[None, :], self.gamma)

    def collective_wait(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """As ReadyLines.collective_wait. Bucket b's free time ends[b - 1] is V_b(ends[b - 1])
        in virtual time, the (2b - 1)-th breakpoint of V (sim/busy.py); a rank whose line stays
        below it at every bucket waits from the stream's free time, as in ReadyLines."""
        lines = self.lines
        out = np.subtract(starts[0], lines.first_s, out=lines.scratch("collective_wait"))
        if len(starts) == 1:
            return out
        free = ends[:-1]
        c = self.gamma / (1.0 + self.gamma)
        free_v = self.busy.t[1:-1:2] - c * self.busy.busy[1:-1:2]
        threshold = float((free_v - lines.backward_max * lines.fraction[1:]).min())
        late = np.flatnonzero(lines.start_s > threshold - lines.slack)
        out += float((starts[1:] - free).sum())
        if len(late):
            out[late] -= np.maximum(self.rows(late)[:, 1:] - free[None, :], 0.0).sum(axis=1)
        return out
