"""Results do not depend on how ranks are grouped into SimPy processes, and a seed
fixes the output (docs/design.md "Scale"; Ciw's explicit RNGs)."""

import numpy as np
import pytest
from conftest import tiny

from sim.config import ComputeConfig, NetworkConfig, NoiseConfig, TrainingConfig
from sim.engine import simulate
from sim.scenario_file import load_scenario

FIELDS = ("step_time_s", "compute_s", "exposed_comm_s", "straggler_wait_s", "collective_wait_s")


def assert_identical(a, b):
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_1024_ranks_as_1024_128_or_1_groups():
    sc = load_scenario(
        "h100-1024",
        ["noise.distribution=lognormal", "noise.sigma=0.05", "stragglers=17:1.4"],
        steps=10,
        seed=3,
    )
    whole = simulate(sc, records=True)
    assert_identical(whole, simulate(sc, group_size=8, records=True))
    assert_identical(whole, simulate(sc, group_size=1, records=True))


@pytest.mark.parametrize("group_size", [1, 5, 8])
def test_grouping_with_interference_and_accumulation(group_size):
    sc = tiny(
        ranks=16,
        steps=8,
        stragglers="5:1.5",
        training=TrainingConfig(micro_batch_size=2, seq_len=64, grad_accum=3, first_bucket_mb=0.02, bucket_cap_mb=0.05),
        compute=ComputeConfig(step_compute_s=0.05, interference_gamma=0.4, dataloader_batch_s=0.001, optimizer_s=0.0),
        network=NetworkConfig(backend="gloo", gpus_per_node=1, nic_gbit_s=0.1, jitter_sigma=0.2),
        noise=NoiseConfig(distribution="lognormal", sigma=0.1, speed_spread_sd=0.05),
    )
    assert_identical(simulate(sc, records=True), simulate(sc, group_size=group_size, records=True))


def test_same_seed_same_output_other_seed_differs():
    def run(seed):
        sc = load_scenario("homelab-1gbe", ["noise.sigma=0.05"], steps=20, seed=seed)
        return simulate(sc, records=True)

    assert_identical(run(1), run(1))
    assert not np.array_equal(run(1).step_time_s, run(2).step_time_s)
