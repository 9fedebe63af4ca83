"""Issue 25, the input and output half: ddplab writes only new files or its own, never reuses a
folder of an earlier run silently, reads only regular files of a sane size, keeps every result
finite, refuses impossible calibrations, and prints one line (naming the field and the value,
exit 2, no traceback) for every bad input below. docs/reliability.md lists each case.

Each case runs the real CLI in-process (`ddplab.cli.main`, as `python -m ddplab` does)."""

import json

import pytest
from conftest import in_process as ddplab


def refused(capsys, *argv: str) -> str:
    """The one stderr line of a refused command (exit 2, nothing printed, no traceback)."""
    code, out, err = ddplab(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert out == "", out
    return lines[0]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """A small simulation with records, for `stragglers` to read."""
    out = tmp_path_factory.mktemp("sim") / "run"
    from ddplab import cli

    assert cli.main(["simulate", "h100-1024", "--ranks", "8", "--steps", "20", "--records", "--out", str(out)]) == 0
    return out


# ---------------------------------------------------------------------------------------------------------------
# D2: output files are new or ddplab's own


def test_plot_never_replaces_a_file_ddplab_did_not_write(capsys, tmp_path, sim_run):
    theirs = tmp_path / "notes.png"
    theirs.write_text("a user's file")
    line = refused(capsys, "stragglers", str(sim_run), "--plot", str(theirs))
    assert f"--plot {theirs}" in line and "did not write" in line, line
    assert theirs.read_text() == "a user's file"


def test_plot_never_creates_missing_folders(capsys, tmp_path, sim_run):
    target = tmp_path / "no" / "such" / "s.png"
    line = refused(capsys, "stragglers", str(sim_run), "--plot", str(target))
    assert "--plot" in line and "no such directory" in line, line
    assert not (tmp_path / "no").exists()


def test_plot_refuses_what_is_not_a_regular_file(capsys, tmp_path, sim_run):
    line = refused(capsys, "stragglers", str(sim_run), "--plot", str(tmp_path))
    assert "not a regular file" in line, line


def test_a_rerun_replaces_its_own_picture(capsys, tmp_path, sim_run):
    png = tmp_path / "s.png"
    for _ in range(2):  # the second run finds ddplab's own PNG (its Software chunk) and replaces it
        code, out, err = ddplab(capsys, "stragglers", str(sim_run), "--plot", str(png))
        assert code == 0, err
    assert b"Software\x00ddplab" in png.read_bytes()[:4096]


def test_every_output_flag_refuses_someone_elses_file(capsys, tmp_path):
    """The shared writer (sim/atomic.py) holds the rule for every flag: --slurm, calibrate's -o,
    validate's --plot, and any write into a folder ddplab did not make."""
    theirs = tmp_path / "job.sbatch"
    theirs.write_text("#!/bin/sh\necho mine\n")
    line = refused(capsys, "launch", "--nodes", "2", "--master", "10.0.0.1:29500", "--slurm", str(theirs))
    assert "--slurm" in line and "did not write" in line, line
    assert theirs.read_text() == "#!/bin/sh\necho mine\n"
    calib = tmp_path / "calib.json"
    calib.write_text("{}")
    line = refused(capsys, "calibrate", str(tmp_path), "-o", str(calib))
    assert f"-o {calib}" in line and "did not write" in line, line
    from sim.atomic import write_atomic

    (tmp_path / "notes.png").write_text("mine")
    with pytest.raises(ValueError, match="did not write"):
        write_atomic(tmp_path / "notes.png", lambda tmp: tmp.write_text("x"))
    # A Slurm script ddplab wrote is its own: a rerun replaces it.
    job = tmp_path / "ours.sbatch"
    for _ in range(2):
        code, _, err = ddplab(capsys, "launch", "--nodes", "2", "--master", "10.0.0.1:29500", "--slurm", str(job))
        assert code == 0, err


# ---------------------------------------------------------------------------------------------------------------
# D7: simulate --out never mixes two runs


def test_simulate_out_refuses_an_earlier_run_and_force_moves_it_aside(capsys, tmp_path):
    out = tmp_path / "run"
    base = ("simulate", "h100-1024", "--ranks", "8", "--steps", "10", "--out", str(out))
    assert ddplab(capsys, *base, "--records")[0] == 0
    line = refused(capsys, *base)
    assert f"--out {out}" in line and "earlier run" in line and "--force" in line, line
    code, _, err = ddplab(capsys, *base, "--force")
    assert code == 0, err
    assert "moved the earlier run" in err, err
    # The stale records are gone from the folder (a reader would take them for this run's) ...
    assert not (out / "ranks-0008" / "records.npz").exists()
    # ... and kept, whole, beside it.
    (aside,) = tmp_path.glob("run.old-*")
    assert (aside / "ranks-0008" / "records.npz").is_file()


def test_simulate_out_never_moves_a_folder_ddplab_did_not_make(capsys, tmp_path):
    (tmp_path / "thesis.tex").write_text("mine")
    line = refused(capsys, "simulate", "h100-1024", "--ranks", "8", "--steps", "10", "--out", str(tmp_path), "--force")
    assert "did not write" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.tex"]


# ---------------------------------------------------------------------------------------------------------------
# D9: only regular files of a sane size are read


@pytest.fixture
def deadline():
    """A hang fails the test after 20 s instead of holding the suite (SIGALRM interrupts open())."""
    import signal

    def expired(*_):
        raise TimeoutError("hung: still reading after 20 s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def fifo(tmp_path):
    """A FIFO nobody writes to: opening it for reading blocked forever before."""
    import os

    path = tmp_path / "x.toml"
    os.mkfifo(path)
    return path


def test_a_fifo_as_scenario_is_one_line_not_a_hang(capsys, fifo, deadline):
    line = refused(capsys, "simulate", str(fifo))
    assert str(fifo) in line and "not a regular file" in line, line


def test_a_fifo_as_calib_is_one_line_not_a_hang(capsys, fifo, deadline):
    line = refused(capsys, "simulate", "h100-1024", "--calib", str(fifo))
    assert f"--calib: {fifo}" in line and "not a regular file" in line, line


def test_dev_zero_is_refused_before_it_is_read(capsys, deadline):
    assert "not a regular file" in refused(capsys, "simulate", "/dev/zero")
    assert "not a regular file" in refused(capsys, "simulate", "h100-1024", "--calib", "/dev/zero")


def test_a_file_past_the_cap_is_refused_by_size(tmp_path, monkeypatch):
    from sim import readfile

    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * 100 + b"\n")
    with pytest.raises(ValueError, match="larger than"):
        readfile.read_text(big, cap=64)
    assert readfile.read_text(big, cap=200).startswith("# x")


# ---------------------------------------------------------------------------------------------------------------
# D6: every result is finite, or refused where the value enters


@pytest.mark.parametrize(
    "setting",
    [
        "network.pod_oversubscription=1e308",
        "network.nic_gbit_s=1e-308",
        "compute.step_compute_s=1e308",
        "network.tier_hop_us=1e300",
    ],
)
def test_a_huge_or_tiny_scenario_value_is_refused_naming_the_key(capsys, setting):
    key, value = setting.split("=")
    line = refused(capsys, "simulate", "h100-1024", "--set", setting, "--steps", "5", "--json")
    assert f"{key}: must be 0 or between 1e-12 and 1e+12" in line and repr(float(value)) in line, line


def test_noise_too_wide_to_mean_anything_is_refused(capsys):
    # sigma 100 once drew every multiplier as 0: no compute, a ZeroDivisionError traceback.
    line = refused(capsys, "simulate", "h100-1024", "--set", "noise.sigma=100", "--set", "noise.distribution=lognormal")
    assert "noise.sigma: must be 0 to 3, got 100" in line, line


def test_a_calibration_value_of_1e308_is_refused_where_read(capsys, tmp_path):
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "calib-2026-11-29.json").read_text())
    data["compute"]["step_s"]["intercept_s"] = 1e308
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps(data))
    line = refused(capsys, "simulate", "h100-1024", "--calib", str(calib), "--calib-mode", "shape")
    assert "compute.step_s.intercept_s: must be a finite number" in line and "1e+308" in line, line


def test_a_result_that_is_not_finite_is_refused_in_one_line(tiny_result):
    """The last guard: whatever combination slips past the ranges, no inf or NaN step time is
    printed with exit 0."""
    import numpy as np

    tiny_result.step_time_s = np.full_like(tiny_result.step_time_s, np.inf)
    with pytest.raises(ValueError, match="mean_step inf"):
        tiny_result.summary()


@pytest.fixture
def tiny_result():
    from conftest import tiny

    from sim.engine import simulate

    return simulate(tiny(ranks=2, steps=3))
