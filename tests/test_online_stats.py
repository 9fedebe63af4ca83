"""Statistics kept online (sim/online.py) and ready times as lines (sim/ready.py): the same
numbers as the whole (steps x ranks) tables and (ranks x buckets) ready tables, and memory that
does not grow with steps. tests/test_engine_golden.py holds the engine's numbers as they were."""

import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sim.busy import Busy
from sim.engine import simulate
from sim.online import RANK_FIELDS, P2Median
from sim.ready import ReadyBent, ReadyLines, Scratch
from sim.scenario_file import load_scenario

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "jitter+straggler": ("h100-1024", ["noise.sigma=0.05", "stragglers=17:1.4"]),
    "no overlap": ("h100-1024", ["training.overlap=false"]),
    "interference": ("h100-1024", ["compute.interference_gamma=0.3"]),
    "accumulation, no noise": ("h100-1024", ["training.grad_accum=3", "noise.sigma=0"]),
    "identical ranks": ("a100-8", ["noise.sigma=0", "noise.speed_spread_sd=0"]),
    "home lab": ("homelab-1gbe", []),
    "pauses": ("straggler-gc", []),
    "fail-slow episodes": ("straggler-failslow", []),
    "slow loader": ("straggler-dataloader", []),
}


@pytest.mark.parametrize("case", ["jitter+straggler", "interference", "pauses"])
def test_online_statistics_equal_the_tables(case):
    """Without records the per-rank and per-step means are the tables' means: per rank
    bit-identical (rows are added in np.mean's order), per step too (one row's mean)."""
    preset, sets = CASES[case]
    sc = load_scenario(preset, sets, ranks=64, steps=25)
    online, full = simulate(sc), simulate(sc, records=True)
    assert online.records is None
    with pytest.raises(ValueError, match="records=True"):
        online.compute_s  # noqa: B018
    np.testing.assert_array_equal(online.step_time_s, full.step_time_s)
    for k in RANK_FIELDS:
        np.testing.assert_array_equal(online.rank_mean[k], full.record(k).mean(axis=0), err_msg=k)
        np.testing.assert_array_equal(online.step_mean[k], full.record(k).mean(axis=1), err_msg=k)
    assert replace(online.summary(), wall_s=0) == replace(full.summary(), wall_s=0)


def _lines(rng, n, nb, *, straggler=None, ties=False):
    start = 1.0 + rng.lognormal(0, 0.05, n) * 0.06
    bwd = rng.lognormal(0, 0.05, n) * 0.12
    if ties:  # many identical ranks, the envelope's worst case for near-ties
        start[: n // 2], bwd[: n // 2] = start[0], bwd[0]
    if straggler is not None:
        start[straggler] = 1.0 + 0.06 * 1.4
        bwd[straggler] *= 1.4
    frac = np.sort(rng.uniform(0.0, 1.0, nb))
    frac[-1] = 1.0
    return start, bwd, frac


@pytest.mark.parametrize("seed", range(6))
def test_ready_lines_equal_the_whole_table(seed):
    """The envelope and the collective wait of sim/ready.py, from O(ranks) work, against the
    (ranks x buckets) table computed directly."""
    rng = np.random.default_rng(seed)
    start, bwd, frac = _lines(rng, 4096, 40, straggler=7 if seed % 2 else None, ties=seed >= 4)
    table = start[:, None] + bwd[:, None] * frac[None, :]
    lines = ReadyLines(start, bwd, frac, Scratch(len(start)))
    latest = lines.latest()
    np.testing.assert_array_equal(latest, table.max(axis=0))
    # A stream that runs each bucket from max(latest launch, previous end) for 1-4 ms.
    starts, ends, end = np.zeros(len(frac)), np.zeros(len(frac)), -np.inf
    for b, d in enumerate(rng.uniform(1e-3, 4e-3, len(frac))):
        starts[b] = max(latest[b], end)
        ends[b] = end = starts[b] + d
    np.testing.assert_allclose(lines.collective_wait(starts, ends), _wait(table, starts, ends), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(lines.end_s, table[:, -1])


def _wait(table, starts, ends):
    """The collective wait from the whole table: per bucket, from max(ready, stream free) to start."""
    free = np.concatenate(([-np.inf], ends[:-1]))
    return (starts[None, :] - np.maximum(table, free[None, :])).sum(axis=1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_bent_lines_equal_the_whole_table(seed, gamma):
    """With interference the engine forms no (ranks x buckets) table either: the stream's
    recurrence on the lines' envelope (sim/engine.py stream) gives the collectives the table gave,
    bucket by bucket (each ready time bent by the collectives before it, sim/busy.py), and
    ReadyBent's end of backward, rows and collective wait are the table's."""
    from sim.engine import stream

    rng = np.random.default_rng(seed)
    start, bwd, frac = _lines(rng, 4096, 40, straggler=7 if seed % 2 else None, ties=seed >= 4)
    durations = rng.uniform(1e-3, 4e-3 if seed < 3 else 1e-2, len(frac))
    table = np.empty((len(start), len(frac)))
    starts, ends, end = np.zeros(len(frac)), np.zeros(len(frac)), -np.inf
    for b, d in enumerate(durations):  # the engine as it was: a column at a time
        table[:, b] = Busy(starts[:b], ends[:b]).finish(start, bwd * frac[b], gamma)
        starts[b] = max(table[:, b].max(), end)
        ends[b] = end = starts[b] + d
    lines = ReadyLines(start, bwd, frac, Scratch(len(start)))
    got_starts, got_ends = stream(lines.latest(), durations, gamma)
    np.testing.assert_array_equal(got_starts, starts)
    np.testing.assert_array_equal(got_ends, ends)
    ready = ReadyBent(lines, Busy(starts, ends), gamma)
    np.testing.assert_array_equal(ready.end_s, table[:, -1])
    np.testing.assert_array_equal(ready.rows(np.arange(0, 4096, 97)), table[::97])
    np.testing.assert_allclose(ready.collective_wait(starts, ends), _wait(table, starts, ends), rtol=1e-12, atol=1e-15)


def test_p_square_median_tracks_the_exact_median():
    """Jain and Chlamtac's estimate against np.median: exact below five observations; for 400
    lognormal(sigma 0.05) draws per rank within 0.15 sigma of the median at worst (the sample
    median's own sd is ~0.06 sigma) and 0.02 sigma on average."""
    rng = np.random.default_rng(3)
    draws = rng.lognormal(0.0, 0.05, (400, 2000)) * np.linspace(1.0, 2.0, 2000)
    est = P2Median(2000)
    for i, row in enumerate(draws):
        est.add(row)
        if i == 2:
            np.testing.assert_array_equal(est.median(), np.median(draws[:3], axis=0))
    rel = np.abs(est.median() / np.median(draws, axis=0) - 1.0)
    assert rel.max() < 0.15 * 0.05 and rel.mean() < 0.02 * 0.05, (rel.max(), rel.mean())


def _peak_bytes(steps: int, **kw) -> int:
    sc = load_scenario("h100-1024", ["stragglers=3:1.4"], ranks=4096, steps=steps)
    tracemalloc.start()
    try:
        simulate(sc, **kw)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_ranks_times_steps():
    """4096 ranks: 20 x the steps adds only the (steps,) arrays (~64 B a step), where the
    tables would add 4 x 8 B per rank-step (10 MB); with records they do."""
    short, long = _peak_bytes(50), _peak_bytes(1000)
    assert long - short < 950 * 200, (short, long)
    with_records = _peak_bytes(1000, records=True)
    assert with_records - long > 950 * 4096 * 32, (long, with_records)


def _ddplab(*argv):
    return subprocess.run([sys.executable, "-m", "ddplab", *argv], capture_output=True, text=True, cwd=ROOT)


def test_out_writes_tables_and_records_only_when_asked(tmp_path):
    argv = ["simulate", "straggler-lemon", "--ranks", "32", "--steps", "60"]
    p = _ddplab(*argv, "--out", str(tmp_path / "plain"))
    assert p.returncode == 0, p.stderr
    plain = tmp_path / "plain" / "ranks-0032"
    assert not (plain / "records.npz").exists()
    p = _ddplab(*argv, "--records", "--out", str(tmp_path / "rec"))
    assert p.returncode == 0, p.stderr
    rec = np.load(tmp_path / "rec" / "ranks-0032" / "records.npz")
    exact = np.median(rec["compute_s"], axis=0)
    rows = np.genfromtxt(plain / "ranks.csv", delimiter=",", names=True)
    np.testing.assert_allclose(rows["compute_s_mean"], rec["compute_s"].mean(axis=0), rtol=1e-8)
    np.testing.assert_allclose(rows["collective_wait_s_mean"], rec["collective_wait_s"].mean(axis=0), rtol=1e-8)
    np.testing.assert_allclose(rows["compute_s_p50"], exact, rtol=0.01)  # P-square, 60 steps
    steps = np.genfromtxt(plain / "steps.csv", delimiter=",", names=True)
    np.testing.assert_allclose(steps["step_time_s"], rec["step_time_s"], rtol=1e-8)
    np.testing.assert_allclose(steps["straggler_wait_s_mean"], rec["straggler_wait_s"].mean(axis=1), rtol=1e-8)


def test_records_without_out_is_one_line():
    p = _ddplab("simulate", "homelab-1gbe", "--steps", "3", "--records")
    assert p.returncode == 2
    assert p.stderr.splitlines() == ["ddplab simulate: error: --records: needs --out DIR to write them to"]


@pytest.mark.parametrize("seed", range(40))
def test_interp_is_numpys_to_the_bit(seed):
    """sim/busy.py's interp, a table lookup in place of np.interp's binary search, gives
    np.interp's floats: x inside, outside and on the breakpoints, repeated breakpoints (touching
    intervals), every x the same."""
    from sim.busy import interp

    rng = np.random.default_rng(seed)
    m = int(rng.integers(8, 200))
    xp = np.sort(rng.uniform(0.0, 10.0, m))
    if seed % 3 == 0:
        k = rng.integers(1, m - 1, 5)
        xp[k] = xp[k - 1]
        xp = np.sort(xp)
    fp = np.cumsum(rng.uniform(0.0, 1.0, m))
    lo, hi = (xp[0] - 1.0, xp[-1] + 1.0) if seed % 2 else (xp[m // 3], xp[m // 2])
    x = rng.uniform(lo, hi, 10000)  # above the size where the lookup takes over from np.interp
    x[:50] = xp[rng.integers(0, m, 50)]
    if seed % 5 == 0:
        x[:] = xp[3]
    np.testing.assert_array_equal(interp(x, xp, fp), np.interp(x, xp, fp))
