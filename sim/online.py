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
        for i in range(1, 5):
            n[i] += x < q[i] if i < 4 else 1.0
        self.desired += self._STEP
        for i in (1, 2, 3):
            d = self.desired[i] - n[i]
            up = (d >= 1.0) & (n[i + 1] - n[i] > 1.0)
            down = (d <= -1.0) & (n[i - 1] - n[i] < -1.0)
            move = up | down
            if not move.any():
                continue
            s = np.where(up, 1.0, -1.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                parabolic = q[i] + s / (n[i + 1] - n[i - 1]) * (
                    (n[i] - n[i - 1] + s) * (q[i + 1] - q[i]) / (n[i + 1] - n[i])
                    + (n[i + 1] - n[i] - s) * (q[i] - q[i - 1]) / (n[i] - n[i - 1])
                )
            q_to, n_to = np.where(up, q[i + 1], q[i - 1]), np.where(up, n[i + 1], n[i - 1])
            with np.errstate(divide="ignore", invalid="ignore"):
                linear = q[i] + s * (q_to - q[i]) / (n_to - n[i])
            inside = (q[i - 1] < parabolic) & (parabolic < q[i + 1])
            q[i] = np.where(move, np.where(inside, parabolic, linear), q[i])
            n[i] = np.where(move, n[i] + s, n[i])

    def median(self) -> np.ndarray:
        if self.count < 5:
            return np.median(self.heights[: self.count], axis=0)
        return self.heights[2].copy()


class OnlineStats:
    """The RANK_FIELDS of every step, reduced as they arrive. A step may arrive in slices of
    ranks (one per engine group); it is reduced once all its ranks are in, so the results do
    not depend on the grouping."""

    def __init__(self, steps: int, ranks: int, *, records: bool = False, medians: bool = False):
        self.steps, self.ranks = steps, ranks
        self._sum = {k: np.zeros(ranks) for k in RANK_FIELDS}
        self._now = {k: np.zeros(ranks) for k in RANK_FIELDS}
        self._filled = 0
        self.step_mean = {k: np.zeros(steps) for k in RANK_FIELDS}
        self.records = {k: np.zeros((steps, ranks)) for k in RANK_FIELDS} if records else None
        self._median = P2Median(ranks) if medians and not records else None

    def add(self, step: int, ranks: slice, **values: np.ndarray) -> None:
        """One step's values for the ranks in ``ranks``, a keyword per RANK_FIELDS entry."""
        count = len(range(self.ranks)[ranks])
        if count == self.ranks:  # the whole step at once: nothing to gather
            self._reduce(step, values)
            return
        for k in RANK_FIELDS:
            self._now[k][ranks] = values[k]
        self._filled += count
        if self._filled == self.ranks:
            self._filled = 0
            self._reduce(step, self._now)

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
