"""The engines give the numbers frozen in tests/data/engine-golden.npz (bench/golden_engine.py
wrote them with the engine of a1db606, which bench/engine_v1.py's frozen copy matched): every
preset, with and without interference, FSDP and HSDP, and the calibrated runs of
tests/calib-2026-11-29.json and measurements/validation/calib.json, to 1e-12 relative."""

import json

import numpy as np
import pytest
from conftest import ROOT

from sim.engine import simulate
from sim.online import RANK_FIELDS
from sim.scenario_file import scenario_from_dict

GOLDEN = np.load(ROOT / "tests" / "data" / "engine-golden.npz")
CASES = json.loads(str(GOLDEN["cases"]))
RTOL = 1e-12
# Absolute floor for quantities that are zero or sums of terms that cancel (a rank's wait):
# 1e-12 of a step time.
ATOL_S = 1e-12


@pytest.mark.parametrize("index", range(len(CASES)), ids=[name for name, _ in CASES])
def test_engine_gives_the_golden_numbers(index):
    name, data = CASES[index]
    res = simulate(scenario_from_dict(data), medians=True)
    got = {"step_time_s": res.step_time_s, "step_end_s": res.step_end_s, "comm_busy_s": res.comm_busy_s}
    for k in RANK_FIELDS:
        got[f"rank_mean.{k}"] = res.rank_mean[k]
        got[f"step_mean.{k}"] = res.step_mean[k]
    got["compute_p50_s"] = res.compute_p50_s
    scale = float(res.step_time_s.max())
    for k, v in got.items():
        np.testing.assert_allclose(v, GOLDEN[f"{index}/{k}"], rtol=RTOL, atol=ATOL_S * scale, err_msg=f"{name}: {k}")
