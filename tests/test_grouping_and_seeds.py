"""A seed fixes the output (Ciw's explicit RNGs). That ranks as processes and ranks as arrays
give the same numbers is tests/test_reference.py."""

import numpy as np

from sim.engine import simulate
from sim.scenario_file import load_scenario

FIELDS = ("step_time_s", "compute_s", "exposed_comm_s", "straggler_wait_s", "collective_wait_s")


def assert_identical(a, b):
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_same_seed_same_output_other_seed_differs():
    def run(seed):
        sc = load_scenario("homelab-1gbe", ["noise.sigma=0.05"], steps=20, seed=seed)
        return simulate(sc, records=True)

    assert_identical(run(1), run(1))
    assert not np.array_equal(run(1).step_time_s, run(2).step_time_s)
