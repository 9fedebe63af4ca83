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
    """The shared writer (output/atomic.py) holds the rule for every flag: --slurm, calibrate's -o,
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
    from output.atomic import write_atomic

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


# ---------------------------------------------------------------------------------------------------------------
# D8: calibrate writes only possible fits, and corrupt records are one line


def _refused_after_progress(capsys, *argv: str) -> str:
    """calibrate prints one progress line once the records are read; the refusal is the next."""
    code, out, err = ddplab(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and len(lines) <= 2, (code, err)
    assert lines[-1].startswith("ddplab calibrate: error: "), err
    return lines[-1]


@pytest.mark.parametrize(
    "truth, field",
    [
        ({"busbw_gb_s": 1e9}, "collectives.allreduce.busbw_gb_s"),  # times that do not grow with size
        ({"per_token_s": -1e-6}, "compute.step_s.per_token_s"),  # compute that falls as tokens grow
    ],
)
def test_calibrate_refuses_an_impossible_fit_and_writes_nothing(capsys, tmp_path, truth, field):
    from fake_runs import probe_run

    run = probe_run(tmp_path / "probe", **truth)
    out = tmp_path / "calib.json"
    line = _refused_after_progress(capsys, "calibrate", str(run), "-o", str(out))
    assert f"{out}: not written: " in line and field in line, line
    assert not any(p.suffix in (".json", ".png") for p in tmp_path.iterdir())


def _corrupt(tmp_path, kind: str, key: str, value):
    from fake_runs import probe_run

    run = probe_run(tmp_path / "probe")
    f = run / "probe-rank0000.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    hit = next(i for i, r in enumerate(recs) if r.get("type") == kind)
    recs[hit] = [1, 2] if key is None else recs[hit] | {key: value}
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run, f"{f}:{hit + 1}"


@pytest.mark.parametrize(
    "kind, key, value, says",
    [
        ("compute", "forward_s", 0.0, "compute.forward_s: expected seconds > 0"),  # was: SVD did not converge
        ("compute", "backward_s", "x", "compute.backward_s: expected seconds > 0"),  # was: a numpy TypeError traceback
        ("compute", "backward_s", float("nan"), "got nan"),
        ("compute", "backward_s", 1e308, "got 1e+308"),  # was: overflow warnings, then SVD
        ("collective", "time_max_s", float("nan"), "collective.time_max_s"),  # was: exit 0
        ("link", "gbit_s", 0.0, "link.gbit_s: expected a number > 0"),  # was: ZeroDivisionError traceback
        ("grad_ready", "ready_fraction", "a", "grad_ready.ready_fraction"),  # was: a numpy TypeError traceback
        ("meta", "world_size", "two", "meta.world_size"),  # was: a TypeError traceback
        ("optimizer", None, None, "not a record"),  # a list where a record goes: an AttributeError traceback
    ],
)
def test_a_corrupt_probe_record_is_one_line_naming_file_line_and_field(capsys, tmp_path, kind, key, value, says):
    run, where = _corrupt(tmp_path, kind, key, value)
    line = refused(capsys, "calibrate", str(run), "-o", str(tmp_path / "calib.json"))
    assert where in line and says in line, line


def test_a_speed_factor_of_0_in_a_calibration_is_refused(capsys, tmp_path):
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "calib-2026-11-29.json").read_text())
    rank = next(iter(data["ranks"]))
    data["ranks"][rank]["speed_factor"] = 0.0
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps(data))
    line = refused(capsys, "simulate", "h100-1024", "--calib", str(calib), "--calib-mode", "shape")
    assert f"ranks.{rank}.speed_factor: must be > 0, got 0" in line, line


def test_a_tiny_probe_calibration_applies_to_the_model_it_measured(capsys, tmp_path):
    """gpt2-tiny's context is 64 and the home-lab preset trains at 1024: the refusal says which
    seq_len to set, and with it the calibration applies (was: a refusal with no way forward)."""
    from fake_runs import probe_run

    calib = tmp_path / "calib.json"
    assert ddplab(capsys, "calibrate", str(probe_run(tmp_path / "probe")), "-o", str(calib))[0] == 0
    base = ("simulate", "homelab-1gbe", "--set", "model.preset=gpt2-tiny", "--calib", str(calib), "--steps", "5")
    line = refused(capsys, *base)
    assert "set training.seq_len=64 or less" in line, line
    code, out, err = ddplab(capsys, *base, "--set", "training.seq_len=64", "--calib-mode", "all", "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "gpt2-tiny"


# ---------------------------------------------------------------------------------------------------------------
# D13: netlab up twice


@pytest.mark.skipif(
    __import__("os").geteuid() != 0 or __import__("shutil").which("tc") is None, reason="netlab needs root and tc"
)
@pytest.mark.serial  # makes network namespaces (tests/conftest.py)
def test_netlab_up_twice_is_idempotent_and_other_settings_are_one_line(capsys):
    import os

    from realrun import netlab

    name = f"io{os.getpid() % 10000}"
    try:
        assert ddplab(capsys, "netlab", "up", "--name", name)[0] == 0
        code, out, err = ddplab(capsys, "netlab", "up", "--name", name)  # was: a NetlabError traceback
        assert code == 0 and "already up as asked" in err, err
        line = refused(capsys, "netlab", "up", "--name", name, "--rate", "10gbit")
        assert f"--name {name}: a lab of that name is already up with other settings" in line, line
    finally:
        netlab.down(name)


# ---------------------------------------------------------------------------------------------------------------
# D14: report over malformed files


@pytest.mark.parametrize(
    "name, text",
    [
        ("validation.json", '{"rows": 5, "mape": "x"}'),
        ("validation.json", "[1, 2]"),
        ("sim/summary.json", '{"platforms": {"h100": [{"ranks": "x"}]}}'),
        ("sim/summary.json", '"a string"'),
        ("demo.json", '{"stages": {"probe": 3}}'),
    ],
)
def test_report_over_a_malformed_file_says_which_and_draws_the_rest(capsys, tmp_path, name, text):
    (tmp_path / "sim").mkdir()
    (tmp_path / name).write_text(text)
    code, out, err = ddplab(capsys, "report", str(tmp_path))  # was: a KeyError or TypeError traceback
    assert code == 0 and "Traceback" not in err, err
    assert f"ddplab report: warning: {tmp_path}/{name}: malformed" in err, err
    page = (tmp_path / "report.html").read_text()
    assert f"{name}: malformed" in page and "The arithmetic first" in page


def test_report_of_a_directory_no_demo_wrote_is_one_line_and_writes_nothing(capsys, tmp_path):
    """`ddplab report /tmp` wrote an empty page of "missing" sections into /tmp, exit 0."""
    (tmp_path / "notes.txt").write_text("mine")
    line = refused(capsys, "report", str(tmp_path))
    assert line == (
        f"ddplab report: error: RUN_DIR: {tmp_path}: not a demo directory (none of demo.json, calib.json,"
        " validation.json, sim/summary.json): `ddplab demo --out DIR` writes one"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# ---------------------------------------------------------------------------------------------------------------
# D15: models.toml entries are checked where read


@pytest.mark.parametrize(
    "line, says",
    [
        ("colour = 3", "colour: unknown key"),  # was: a TypeError traceback
        ("n_layer = 2.5", "n_layer: expected an integer 1 to 4,096, got 2.5"),  # was: a traceback
        ("n_layer = 0", "n_layer: expected an integer 1 to 4,096, got 0"),  # train built a 0-layer model
        ("n_embd = 1000000000000", "n_embd: expected an integer 1 to 262,144"),  # was: a traceback
    ],
)
def test_a_bad_models_toml_entry_is_one_line_naming_preset_and_key(capsys, tmp_path, monkeypatch, request, line, says):
    import scenarios

    text = scenarios.MODELS_FILE.read_text()
    models = tmp_path / "models.toml"
    key = line.split(" =")[0]
    body = [x for x in text.split("[gpt2-tiny]\n", 1)[1].splitlines() if not x.startswith(f"{key} =")]
    models.write_text(text.split("[gpt2-tiny]\n", 1)[0] + "[gpt2-tiny]\n" + line + "\n" + "\n".join(body) + "\n")
    monkeypatch.setattr(scenarios, "MODELS_FILE", models)
    from sim.transformer import model_shape

    model_shape.cache_clear()  # shapes read earlier in this process are of the real file
    request.addfinalizer(model_shape.cache_clear)
    for argv in (
        ("models",),
        ("train", "--model", "gpt2-tiny", "--steps", "1", "--out", str(tmp_path / "run")),
        ("simulate", "homelab-1gbe", "--set", "model.preset=gpt2-tiny", "--set", "training.seq_len=64"),
    ):
        got = refused(capsys, *argv)
        assert f"{models}: [gpt2-tiny] {says}" in got, got
    assert not (tmp_path / "run").exists()  # refused before a process started


# ---------------------------------------------------------------------------------------------------------------
# D16: a full disk names the file


def test_a_full_disk_names_the_file_simulate_could_not_write(capsys, tmp_path, monkeypatch):
    import errno

    from output import export

    def full(*_):  # numpy's writer on a full disk: an OSError that names no file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "_savez", full)
    out = tmp_path / "run"
    line = refused(capsys, "simulate", "h100-1024", "--ranks", "8", "--steps", "5", "--records", "--out", str(out))
    assert line == f"ddplab simulate: error: {out}/ranks-0008/records.npz: No space left on device", line
    assert not list(out.rglob("*.tmp"))  # no temporary left behind


def test_a_full_disk_in_a_rank_or_the_log_names_the_file():
    from realrun.launch import RunLog
    from realrun.records import RecordWriter

    with pytest.raises(OSError) as e:  # /dev/full: every write is ENOSPC
        RecordWriter("/dev/full", verb="train", config={}, dist_info={})
    assert e.value.filename == "/dev/full" and "No space" in e.value.strerror
    with RunLog("/dev/full") as log:  # torchrun's log: remembered, never a thread traceback
        log.write(b"a line\n")
        log.write(b"another\n")
    assert log.error == "No space left on device"


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.serial  # starts real ranks (tests/conftest.py)
def test_train_onto_a_full_disk_is_a_line_per_file_not_a_traceback(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        (disk / "fill").write_bytes(b"\0" * (60 << 10))
        argv = ["train", "--model", "gpt2-tiny", "--steps", "2", "--seq-len", "32", "--micro-batch", "2"]
        p = subprocess.run(
            [sys.executable, "-m", "ddplab", *argv, "--out", str(disk / "t")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert "Traceback" not in p.stderr and "None:" not in p.stderr, p.stderr
        # The first file that did not fit, named (the claim, the lifeline or a rank's records).
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith(f"ddplab train: error: {disk}/t/"), p.stderr
        assert last.endswith(": No space left on device") and p.returncode != 0, p.stderr
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ---------------------------------------------------------------------------------------------------------------
# D18, D19: probe buffers sized before launch; --force moves aside only an earlier run


def test_probe_sizes_past_memory_are_refused_before_launch(capsys, tmp_path, monkeypatch):
    from realrun import footprint

    monkeypatch.setattr(footprint, "available_bytes", lambda: 16 << 30)
    out = tmp_path / "probe"
    line = refused(capsys, "probe", "--sizes", "64G", "--out", str(out))  # was: torchrun started, then OOM
    assert "--sizes: the largest, 64 GiB" in line and "16 GiB free" in line, line
    line = refused(capsys, "probe", "--link-bytes", "64G", "--out", str(out))
    assert "--link-bytes: the largest, 64 GiB" in line, line
    assert not out.exists()


@pytest.mark.parametrize("verb", ["train", "probe"])
def test_force_never_moves_a_folder_that_is_not_a_run(capsys, tmp_path, verb):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("mine")
    line = refused(capsys, verb, "--out", str(home), "--force")
    assert f"--out {home}: holds files that are not a ddplab run (1 entries: thesis.tex)" in line, line
    assert sorted(p.name for p in home.iterdir()) == ["thesis.tex"]  # not even a lock file left
    assert not list(tmp_path.glob("home.old-*"))


# ---------------------------------------------------------------------------------------------------------------
# D22: text from a scenario never drives the terminal


def test_control_codes_in_a_scenario_are_printed_escaped(capsys, tmp_path):
    f = tmp_path / "evil.toml"
    f.write_text('base = "h100-1024"\nname = "a\\u001b[2Jb"\ndescription = "t\\u001b]0;owned\\u0007"\n')
    code, out, err = ddplab(capsys, "simulate", str(f), "--ranks", "8", "--steps", "3")
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err  # was: the screen cleared, the title set
    assert "a\\x1b[2Jb" in out and "\\x1b]0;owned\\x07" in out, out
    # A value echoed back in a refusal too, where it is not quoted by repr ("no such file: NAME").
    line = refused(capsys, "simulate", str(tmp_path / "no\x1b[2Jsuch.toml"))
    assert "\x1b" not in line and "no\\x1b[2Jsuch.toml" in line, line


def test_the_status_line_keeps_its_own_erase_sequence():
    import io

    from output.terminal import ERASE_LINE, EscapingStream

    sink = io.StringIO()
    s = EscapingStream(sink)
    s.write(ERASE_LINE + "[1/2] \x1b[2J 8 ranks")
    s.write("tab\tand newline\n")
    assert sink.getvalue() == ERASE_LINE + "[1/2] \\x1b[2J 8 ranks" + "tab\tand newline\n"
