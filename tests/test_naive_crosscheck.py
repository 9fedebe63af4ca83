"""The array engine agrees with the naive one-process-per-rank-per-bucket model
(bench/naive_model.py), an independent implementation of the same protocol."""

import importlib.util

import numpy as np
import pytest
from conftest import ROOT

from sim.engine import simulate
from sim.scenario_file import load_scenario

_spec = importlib.util.spec_from_file_location("naive_model", ROOT / "bench" / "naive_model.py")
naive = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naive)


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("h100-1024", ["noise.sigma=0.05", "stragglers=3:1.4"]),
        ("homelab-1gbe", ["training.grad_accum=3", "compute.dataloader_batch_s=0.2", "noise.distribution=gamma"]),
        ("mi300x-1024", ["training.overlap=false", "network.jitter_sigma=0.2", "noise.speed_spread_sd=0.05"]),
    ],
)
def test_engine_matches_naive_model(name, overrides):
    sc = load_scenario(name, overrides, ranks=16 if "homelab" not in name else 2, steps=8, seed=11)
    np.testing.assert_allclose(simulate(sc).step_time_s, naive.naive_step_times(sc), rtol=1e-12)
