"""Per-rank and per-step statistics kept while a simulation runs, so that memory does not grow
with steps: a (steps x ranks) table of 65,536 ranks x 1000 steps is 0.5 GB per quantity.

Exact where it is cheap: per-rank means over steps (summed a step at a time, in the order
``np.mean(table, axis=0)`` adds rows, so they are bit-identical to the table's) and per-step
means over ranks. A quantile per rank is not cheap exactly (it needs every step), so the
median is the P-square estimate (Jain and Chlamtac, CACM 1985: five markers per rank, moved
by a parabolic interpolation), and only when asked. The whole table is kept only when asked
(``records``).
"""

import numpy as np

# The (steps, ranks) quantities of a simulation (sim/results.py explains the split of a step).
RANK_FIELDS = ("compute_s", "exposed_comm_s", "straggler_wait_s", "collective_wait_s")


class P2Median:
    """The running median of one observation per rank per step, for every rank at once.

    Every rank sees its n-th observation at the same step, so the markers' desired positions
    are the same for all ranks; only the markers' heights and actual positions are per rank.
    Until five observations have arrived the exact median of those seen is returned."""

    _STEP = np.array([0.0, 0.25, 0.5, 0.75, 1.0])  # desired-position increments for p = 0.5

    def __init__(self, ranks: int):
        self.count = 0
        self.heights = np.zeros((5, ranks))
        self.positions = np.tile(np.arange(1.0, 6.0)[:, None], (1, ranks))
        self.desired = np.array([1.0, 2.0, 3.0, 4.0, 5.0])

    def add(self, x: np.ndarray) -> None:
        if self.count < 5:
            self.heights[self.count] = x
            self.count += 1
            if self.count == 5:
                self.heights.sort(axis=0)
            return
        self.count += 1
        q, n = self.heights, self.positions
        np.minimum(q[0], x, out=q[0])
        np.maximum(q[4], x, out=q[4])
        # Markers above the observation move up one position.
        for i in (1, 2, 3):
            n[i] += x < q[i]
        n[4] += 1.0
        self.desired += self._STEP
        for i in (1, 2, 3):
            # A marker more than one position from where it should be moves by one, if its
            # neighbour leaves room; only those ranks are computed (a few per step).
            up = (n[i] <= self.desired[i] - 1.0) & (n[i + 1] - n[i] > 1.0)
            down = (n[i] >= self.desired[i] + 1.0) & (n[i - 1] - n[i] < -1.0)
            idx = np.flatnonzero(up | down)
            if len(idx):
                self._move(i, idx, np.where(up[idx], 1.0, -1.0))

    def _move(self, i: int, idx: np.ndarray, s: np.ndarray) -> None:
        """Marker i of ranks ``idx`` one position in direction ``s``: to the parabolic (P-square)
        prediction of its height, or the linear one where the parabola leaves its neighbours."""
        q, n = self.heights, self.positions
        below, here, above = q[i - 1].take(idx), q[i].take(idx), q[i + 1].take(idx)
        n_below, n_here, n_above = n[i - 1].take(idx), n[i].take(idx), n[i + 1].take(idx)
        parabolic = here + s / (n_above - n_below) * (
            (n_here - n_below + s) * (above - here) / (n_above - n_here)
            + (n_above - n_here - s) * (here - below) / (n_here - n_below)
        )
        up = s > 0
        q_to, n_to = np.where(up, above, below), np.where(up, n_above, n_below)
        linear = here + s * (q_to - here) / (n_to - n_here)
        inside = (below < parabolic) & (parabolic < above)
        self.heights[i, idx] = np.where(inside, parabolic, linear)
        self.positions[i, idx] = n_here + s

    def median(self) -> np.ndarray:
        if self.count < 5:
            return np.median(self.heights[: self.count], axis=0)
        return self.heights[2].copy()


class OnlineStats:
    """The RANK_FIELDS of every step, reduced as they arrive, every rank's at once."""

    def __init__(self, steps: int, ranks: int, *, records: bool = False, medians: bool = False):
        self.steps, self.ranks = steps, ranks
        self._sum = {k: np.zeros(ranks) for k in RANK_FIELDS}
        self.step_mean = {k: np.zeros(steps) for k in RANK_FIELDS}
        self.records = {k: np.zeros((steps, ranks)) for k in RANK_FIELDS} if records else None
        self._median = P2Median(ranks) if medians and not records else None

    def add(self, step: int, **values: np.ndarray) -> None:
        """One step's (ranks,) values, a keyword per RANK_FIELDS entry."""
        self._reduce(step, values)

    def _reduce(self, step: int, values: dict[str, np.ndarray]) -> None:
        for k in RANK_FIELDS:
            now = values[k]
            self._sum[k] += now
            self.step_mean[k][step] = now.mean()
            if self.records is not None:
                self.records[k][step] = now
        if self._median is not None:
            self._median.add(values["compute_s"])

    def rank_mean(self) -> dict[str, np.ndarray]:
        return {k: v / self.steps for k, v in self._sum.items()}

    def compute_p50(self) -> np.ndarray | None:
        """Per-rank median compute: exact with records, P-square if asked, else None."""
        if self.records is not None:
            return np.median(self.records["compute_s"], axis=0)
        return None if self._median is None else self._median.median()
