"""A collective's jitter from the measured calls of its own size (sim/noise.py SizePools,
network.jitter_samples_bytes): which size each call takes, that its draws are that size's
multipliers and no other's, that without sizes nothing changes, and that calibrate writes
the sizes and simulate uses them."""

import numpy as np
import pytest
from fake_runs import SIZES, probe_run

from calibrate.apply import apply_calibration
from calibrate.calib import JITTER_FROM_BYTES, calibrate
from sim.engine import simulate
from sim.noise import SizePools, comm_multipliers
from sim.scenario_file import load_scenario, scenario_data, scenario_from_dict

MIB = 1 << 20


def test_each_call_takes_the_measured_size_nearest_its_own_in_log_bytes():
    pools = SizePools([1.0, 2.0, 3.0], [4 * MIB, 16 * MIB, 64 * MIB], [1, 4 * MIB, 7 * MIB, 8 * MIB, 9 * MIB, 40 * MIB])
    # 8 MiB is one doubling from 4 and from 16: a tie takes the larger; 7 MiB is nearer 4 (0.81
    # doublings against 1.19), 9 MiB nearer 16, 40 MiB nearer 64 (0.68 against 1.32).
    assert list(pools.pool) == [0, 0, 0, 1, 1, 2]
    out = pools.draw(np.random.default_rng(0), (5, 6))
    assert (out == np.array([1.0, 1.0, 1.0, 2.0, 2.0, 3.0])).all()


def test_draws_are_uniform_over_the_size_multipliers_only():
    samples = [0.9, 1.0, 1.1, 5.0, 6.0]
    sizes = [64 * MIB, 64 * MIB, 64 * MIB, 4 * MIB, 4 * MIB]  # unsorted, as a file may hold them
    pools = SizePools(samples, sizes, [60 * MIB, 5 * MIB])
    out = pools.draw(np.random.default_rng(1), (30000, 2))
    big, small = out[:, 0], out[:, 1]
    assert set(np.unique(big)) == {0.9, 1.0, 1.1} and set(np.unique(small)) == {5.0, 6.0}
    for v in (0.9, 1.0, 1.1):  # binomial sd of a third over 30,000: 0.0027
        assert np.mean(big == v) == pytest.approx(1 / 3, abs=0.012)
    assert np.mean(small == 5.0) == pytest.approx(0.5, abs=0.012)


def test_without_sizes_the_draw_is_the_pooled_one_as_before():
    samples = [0.8, 1.0, 1.25, 1.1, 0.95, 1.05, 0.9, 1.3]
    assert SizePools.of(samples, None, [MIB]) is None and SizePools.of(None, [MIB] * 8, [MIB]) is None
    got = comm_multipliers(np.random.default_rng(7), 0.0, samples, 12, None)
    want = np.random.default_rng(7).choice(np.asarray(samples), size=12)
    assert (got == want).all()


QUIET = ["noise.distribution=none", "noise.speed_spread_sd=0"]
WIDE_SMALL_TIGHT_BIG = QUIET + ["network.jitter_samples=[3.0, 3.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0]"]
# Timed at 1 B and at 1 GiB: every call above 32 KiB (the two sizes' middle in log bytes)
# takes the 1 GiB multipliers, all 1.
SIZED = ["network.jitter_samples_bytes=[1, 1, 1, 1, 1073741824, 1073741824, 1073741824, 1073741824]"]


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_simulate_draws_each_collective_from_its_own_size(mode):
    """With the sizes every collective (DDP's buckets, FSDP's gathers and reductions, all
    above 32 KiB) draws from the 1 GiB multipliers, all 1, so every step is the jitter-free
    one; pooled, half the draws are 3x and the steps are slower and spread."""
    sets = [f"training.mode={mode}"]

    def run(extra):
        return simulate(load_scenario("homelab-1gbe", sets + extra, steps=20)).step_time_s

    plain, sized, pooled = run(QUIET), run(WIDE_SMALL_TIGHT_BIG + SIZED), run(WIDE_SMALL_TIGHT_BIG)
    np.testing.assert_allclose(sized, plain, rtol=1e-12)
    assert pooled.mean() > 1.01 * plain.mean() and np.std(pooled) > 10 * np.std(plain)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (SIZED, r"network.jitter_samples_bytes: needs one per network.jitter_samples \(0\), got 'a list of 8'"),
        (WIDE_SMALL_TIGHT_BIG + ["network.jitter_samples_bytes=[1, 2]"], r"needs one per network.jitter_samples \(8\)"),
        (WIDE_SMALL_TIGHT_BIG + ["network.jitter_samples_bytes=[0, 1, 1, 1, 1, 1, 1, 1]"], "every size must be > 0"),
    ],
)
def test_sizes_that_do_not_fit_the_samples_are_refused_by_name(sets, message):
    with pytest.raises(ValueError, match=message):
        load_scenario("homelab-1gbe", sets, steps=2)


def test_calibrate_writes_each_multipliers_size_and_simulate_takes_them(tmp_path):
    calib = calibrate([probe_run(tmp_path / "1gbit" / "probe", iters=12)], seed=0)
    j = calib.networks["1gbit"].allreduce_jitter
    timed = [s for s in SIZES if s >= JITTER_FROM_BYTES]
    assert j.sizes_bytes == [s for s in timed for _ in range(12)] and len(j.multipliers) == len(j.sizes_bytes)
    for s in timed:  # each size's multipliers are over that size's own median
        assert np.median([m for m, b in zip(j.multipliers, j.sizes_bytes, strict=True) if b == s]) == pytest.approx(
            1.0, abs=1e-6
        )
    data = scenario_data("homelab-1gbe")
    data["model"] = {"preset": "gpt2-tiny"}
    data["training"] |= {"micro_batch_size": 4, "seq_len": 64, "precision": "fp32"}
    net = scenario_from_dict(apply_calibration(data, calib, calib_path="c.json", mode="all").data).network
    assert net.jitter_samples_bytes == j.sizes_bytes and net.jitter_samples == j.multipliers
