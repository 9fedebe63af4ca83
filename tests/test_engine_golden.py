"""The engines give the numbers frozen in tests/data/engine-golden.npz (tests/golden_engine.py
wrote them with the engine of a1db606, which bench/engine_v1.py's frozen copy matched): every
preset, with and without interference, FSDP and HSDP, and the calibrated runs of
tests/calib-2026-11-29.json and measurements/validation/calib.json, to 1e-12 relative."""

import json

import numpy as np
import pytest
from conftest import ROOT
from golden_engine import run

GOLDEN = np.load(ROOT / "tests" / "data" / "engine-golden.npz")
CASES = json.loads(str(GOLDEN["cases"]))
RTOL = 1e-12
# Absolute floor for quantities that are zero or sums of terms that cancel (a rank's wait):
# 1e-12 of a step time.
ATOL_S = 1e-12


@pytest.mark.parametrize("index", range(len(CASES)), ids=[name for name, _ in CASES])
def test_engine_gives_the_golden_numbers(index):
    name, data = CASES[index]
    got = run(data)
    scale = float(got["step_time_s"].max())
    for k, v in got.items():
        np.testing.assert_allclose(v, GOLDEN[f"{index}/{k}"], rtol=RTOL, atol=ATOL_S * scale, err_msg=f"{name}: {k}")
