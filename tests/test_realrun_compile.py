"""`ddplab train --compile` on CPU: one rank each, so they run beside the serial real runs (not
in tests/conftest.py's SERIAL_MODULES: nothing here is timed, and inductor's C++ compiles are
most of their time). A compiled model trains with realrun/model.py's parameter names; a
compiler that fails is one fault record and one error line."""

import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from test_realrun_train import BASE, GRAD_BYTES

from realrun.records import read_run
from sim.transformer import model_shape, param_tensors


@pytest.mark.slow
def test_compiled_model_trains_with_its_parameter_names(tmp_path):
    """One rank, 3 steps: inductor compiles C++ for the CPU, ~80 s here with a cold cache
    (~20 s when an earlier run filled it). A cap of 1 MiB (torch's DDPOptimizer needs
    >= 1 MiB) gives gpt2-tiny's 471 KiB one bucket."""
    cmd = [sys.executable, "-m", "ddplab", "train", "--nproc", "1", "--out", str(tmp_path), *BASE]
    cmd[cmd.index("--bucket-cap-mb") + 1] = "1"
    p = subprocess.run(
        [*cmd, "--steps", "3", "--compile", "--save-grads"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (rank,) = read_run(tmp_path, "train")
    assert rank.complete and rank.meta["compile"] is True and rank.meta["config"]["compile"] is True
    assert rank.records[-1]["ddp_bucket_bytes"] == [GRAD_BYTES]
    steps = rank.of_type("step")
    assert [[b["bytes"] for b in s["buckets"]] for s in steps] == [[GRAD_BYTES]] * 3
    assert all(math.isfinite(s["loss"]) for s in steps)
    # nn.Module.compile() in place: realrun/model.py's names, which calibration matches gradients by.
    saved = torch.load(tmp_path / "grads-rank0000.pt")
    names = [t.name for t in param_tensors(model_shape("gpt2-tiny"))]
    assert list(saved["grads"]) == list(saved["params"]) == names


@pytest.mark.slow
def test_a_failed_compile_is_one_error_line(tmp_path):
    """A C++ compiler that answers --version (so the launcher's check passes) but compiles
    nothing: inductor fails inside the first forward, which must end as one fault record
    and one error line with the compiler's words, like any other failure (~20 s)."""
    cxx = tmp_path / "cxx"
    cxx.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo fake 1.0; exit 0; }\necho "fake: cannot compile" >&2\nexit 1\n'
    )
    cxx.chmod(0o755)
    # A fresh inductor cache, so nothing compiled by an earlier run is reused.
    env = {**os.environ, "CXX": str(cxx), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ddplab", "train", "--nproc", "1", "--out", str(out), "--steps", "2", "--compile"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode != 0
    (rank,) = read_run(out, "train")
    assert not rank.complete and rank.records[-2] == {
        "type": "fault",
        "step": 0,
        "phase": "forward",
        "collective": None,
        "terminated": False,
    }
    assert rank.error.startswith("step 0: forward failed: ") and "(fake: cannot compile)" in rank.error
    assert "\n" not in rank.error
    assert f"realrun train: rank 0: {rank.error}\n" in p.stderr
