"""The rough edges a first user hits (issue 16, item 5), each held fixed: the README's
commands run as written, `| head` is quiet, long simulations say how far they are, the
doctor's exit status, output folders, --params with suffixes, --version, help with
defaults, straggler waits within the idle time, and a calibration moved to another model."""

import argparse
import dataclasses
import io
import json
import os
import re
import socket
import subprocess
import sys
import tomllib
from functools import partial
from importlib import metadata

import numpy as np
import pytest
from conftest import ROOT, free_port
from fake_runs import probe_run, train_run

from calibrate import stragglers as st
from calibrate.calib import calibrate
from ddplab import cli, simcmds
from output.export import write_result
from sim.engine import simulate
from sim.patches import flag_patches
from sim.scenario_file import load_scenario
from sim.units import parse_count
from sim.workload import micro_step_compute_s, recompute_fraction
from workflow.progress import StepProgress
from workflow.simulation import calibrated

# --- 1. the README's first commands work as written ------------------------------------


def test_readme_and_make_demo_say_how_to_put_ddplab_on_the_path():
    readme = (ROOT / "README.md").read_text()
    two = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert "source .venv/bin/activate" in two and ".venv/bin/ddplab" in two
    recipe = (ROOT / "Makefile").read_text().split("\ndemo: ", 1)[1].split("\n\n", 1)[0].splitlines()
    # The hint is the recipe's last line, printed once, after the demo itself.
    assert recipe[-2].strip().startswith("$(VENV)/bin/ddplab demo")
    assert recipe[-1].strip().startswith("@echo") and "source $(VENV)/bin/activate" in recipe[-1]


# --- 2. `ddplab ... | head -1` ------------------------------------------------------------


def _into_closed_pipe(*argv: str) -> subprocess.CompletedProcess:
    """Run with stdout a pipe whose reader has already gone (head -1 after its line, made
    deterministic: every write fails, however small the output)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    finally:
        os.close(w)


@pytest.mark.parametrize(
    "argv",
    [
        ["collective", "h100-1024", "--sizes", "8:1T", "--json"],  # 25 kB: fails inside print()
        ["models"],  # a few lines: fails at the exit flush instead
        ["cost", "--json"],
    ],
    ids=lambda a: a[0],
)
def test_a_closed_pipe_is_exit_0_and_silent(argv):
    p = _into_closed_pipe(sys.executable, "-m", "ddplab", *argv)
    assert (p.returncode, p.stderr) == (0, "")


def test_a_closed_pipe_through_the_console_script():
    script = ROOT / ".venv" / "bin" / "ddplab"
    if not script.exists():
        pytest.skip("no .venv/bin/ddplab (make builds it)")
    p = _into_closed_pipe(str(script), "collective", "h100-1024", "--sizes", "8:1T", "--json")
    assert (p.returncode, p.stderr) == (0, "")


# --- 3. progress on long simulations -------------------------------------------------------

FIELDS = (
    "step_time_s",
    "step_end_s",
    "comm_busy_s",
    "compute_s",
    "exposed_comm_s",
    "straggler_wait_s",
    "collective_wait_s",
)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_progress_callback_sees_every_step_and_changes_nothing(mode):
    sc = load_scenario("straggler-failslow", ranks=32, steps=12, seed=3)
    if mode == "fsdp":
        sc = dataclasses.replace(sc, training=dataclasses.replace(sc.training, mode="fsdp"))
    calls = []
    with_cb = simulate(sc, progress=lambda done, total: calls.append((done, total)), records=True)
    without = simulate(sc, records=True)
    assert calls == [(i, 12) for i in range(1, 13)]
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(with_cb, f), getattr(without, f), err_msg=f)
    assert dataclasses.replace(with_cb.summary(), wall_s=0) == dataclasses.replace(without.summary(), wall_s=0)


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_step_progress_is_silent_for_short_runs():
    out = io.StringIO()
    p = StepProgress("simulating 8 ranks", stream=out)  # the default: nothing before 2 s
    for i in range(1, 1001):
        p(i, 1000)
    p.close()
    assert out.getvalue() == ""


def test_step_progress_in_a_log_is_at_most_four_lines():
    out = io.StringIO()
    p = StepProgress("simulating 8 ranks", after_s=0.0, stream=out)
    for i in range(1, 20_001):
        p(i, 20_000)
    p.close()
    lines = out.getvalue().splitlines()
    assert [re.sub(r", \d+ s$", "", x) for x in lines] == [
        f"simulating 8 ranks: step {n:,}/20,000 ({pct}%)"
        for n, pct in ((5000, 25), (10_000, 50), (15_000, 75), (20_000, 100))
    ]


def test_step_progress_on_a_terminal_rewrites_one_line_and_clears_it():
    out = _Tty()
    p = StepProgress("simulating 8 ranks", after_s=0.0, stream=out)
    for i in range(1, 101):
        p(i, 100)
    p.close()
    text = out.getvalue()
    assert "\n" not in text and text.startswith("\r\033[Ksimulating 8 ranks: step 1/100 (1%)")
    assert "step 100/100 (100%)" in text and text.endswith("\r\033[K")


def test_simulate_command_passes_the_progress_line(monkeypatch, capsys):
    monkeypatch.setattr(simcmds, "StepProgress", partial(StepProgress, after_s=0.0))
    assert cli.main(["simulate", "h100-1024", "--ranks", "8", "--steps", "8", "--json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [re.sub(r", \d+ s$", "", x) for x in err] == [
        f"simulating 8 ranks: step {n}/8 ({pct}%)" for n, pct in ((2, 25), (4, 50), (6, 75), (8, 100))
    ]


# --- 4. the doctor's exit status -----------------------------------------------------------


def _ddplab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddplab", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_doctor_exits_1_when_it_lists_problems():
    with socket.socket() as srv:  # a listener on the master's port: torchrun could not bind it
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        text = _ddplab("doctor", "--master", f"127.0.0.1:{port}", "--timeout-s", "1")
        js = _ddplab("doctor", "--master", f"127.0.0.1:{port}", "--timeout-s", "1", "--json")
    assert text.returncode == 1, text.stderr
    assert re.search(r"^problems \(\d+\):$", text.stdout, re.MULTILINE)
    assert f"  - port {port}" in text.stdout and text.stderr == ""
    assert js.returncode == 1 and json.loads(js.stdout)["problems"]  # the JSON still prints


def test_doctor_exit_status_follows_the_problems_list():
    p = _ddplab("doctor", "--master", f"127.0.0.1:{free_port()}", "--timeout-s", "1", "--json")
    assert p.returncode == (1 if json.loads(p.stdout)["problems"] else 0), p.stderr


def test_doctor_help_documents_the_exit_status():
    p = _ddplab("doctor", "--help")
    assert p.returncode == 0
    assert "exit status: 0 no problems found, 1 the report lists problems, 2 bad input" in p.stdout


# --- 5. output files: new or ddplab's own, in folders that exist (issue 25, D2) ---------------
# A missing parent folder used to be created (`-o results/calib.json` on a fresh checkout); a
# typo then built a tree somewhere unexpected, as root anywhere. Now the line says to make it.


@pytest.fixture(scope="module")
def calib_json(tmp_path_factory):
    """A calibration of a fake 2-rank CPU probe of gpt2-tiny on 1 Gbit/s, written by the CLI."""
    d = tmp_path_factory.mktemp("first")
    run = probe_run(d / "1gbit" / "probe")
    path = d / "new" / "deeper" / "calib.json"
    p = _ddplab("calibrate", str(run), "-o", str(path))
    assert p.returncode == 2 and "no such directory" in p.stderr and not (d / "new").exists(), p.stderr
    path.parent.mkdir(parents=True)
    p = _ddplab("calibrate", str(run), "-o", str(path))
    assert p.returncode == 0, p.stderr
    return path


def test_calibrate_writes_its_plots_beside(calib_json):
    written = json.loads(calib_json.read_text())
    assert written["compute"]["model"] == "gpt2-tiny" and written["plots"]
    for name in written["plots"]:  # the plots beside it, in the same folder
        assert (calib_json.parent / name).read_bytes().startswith(b"\x89PNG"), name


def test_validate_plot_into_a_missing_folder_is_one_line(calib_json, tmp_path):
    run = train_run(tmp_path / "1gbit" / "train", config={}, step_s=1.0)
    plot = tmp_path / "plots" / "here" / "v.png"
    p = _ddplab("validate", str(run), "--calib", str(calib_json), "--plot", str(plot))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "no such directory" in p.stderr, p.stderr
    assert not (tmp_path / "plots").exists()
    plot.parent.mkdir(parents=True)
    p = _ddplab("validate", str(run), "--calib", str(calib_json), "--plot", str(plot))
    assert p.returncode == 0, p.stderr
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_simulate_out_creates_its_folder_and_stragglers_plot_does_not(tmp_path):
    out = tmp_path / "a" / "b"  # an output folder: made, with its parents (mkdir -p)
    p = _ddplab("simulate", "h100-1024", "--ranks", "8", "--steps", "4", "--records", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert (out / "ranks-0008" / "records.npz").exists()
    plot = tmp_path / "c" / "d" / "s.png"  # an output file: its folder must exist
    p = _ddplab("stragglers", str(out), "--plot", str(plot))
    assert p.returncode == 2 and "no such directory" in p.stderr and not (tmp_path / "c").exists(), p.stderr


def test_an_output_folder_that_is_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = _ddplab("simulate", "h100-1024", "--ranks", "8", "--steps", "2", "--out", str(blocker / "x"))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith("ddplab simulate: error: ") and str(blocker) in p.stderr


# --- 6. --params with suffixes --------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [("124M", 124e6), ("1.3B", 1.3e9), ("1.3G", 1.3e9), ("760e6", 760e6), ("2k", 2e3), ("1T", 1e12), ("42", 42.0)],
)
def test_parse_count(text, value):
    assert parse_count(text, "--params") == pytest.approx(value, rel=1e-15)


def test_cost_params_124m():
    p = _ddplab("cost", "--params", "124M", "--ranks", "4", "--json")
    assert p.returncode == 0, p.stderr
    # Ring allreduce: 2(N-1)/N x params x 2 bytes.
    rows = json.loads(p.stdout)
    assert len(rows) == 4 and [r["traffic_bytes"] for r in rows] == [pytest.approx(2 * 3 / 4 * 124e6 * 2)] * 4


@pytest.mark.parametrize(
    "bad,why",
    [
        ("12x", "expected a count like 124M, 1.3B or 760e6, got '12x'"),
        ("1.3BB", "expected a count like 124M, 1.3B or 760e6, got '1.3BB'"),
        ("0", "must be 1 to 1e+15, got '0'"),
        ("1e999", "must be 1 to 1e+15, got '1e999'"),
    ],
)
def test_cost_bad_params_is_one_line(bad, why):
    p = _ddplab("cost", "--params", bad)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"ddplab cost: error: --params: {why}\n")


# --- 7. --version ---------------------------------------------------------------------------


def test_version():
    p = _ddplab("--version")
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert (p.returncode, p.stdout, p.stderr) == (0, f"ddplab {expected}\n", "")
    assert cli.version() == metadata.version("ddplab") == expected


def test_version_falls_back_to_pyproject(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert cli.version() == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# --- 8. help for every flag, with its default -----------------------------------------------


def _parsers(p: argparse.ArgumentParser, path: str):
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help():
    missing = []
    for path, p in _parsers(cli.build_parser(), "ddplab"):
        for a in p._actions:
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help:
                missing.append(f"{path} {'/'.join(a.option_strings) or a.dest}")
    assert missing == []
    names = {path for path, _ in _parsers(cli.build_parser(), "ddplab")}
    assert {"ddplab netlab up", "ddplab netlab run", "ddplab probe", "ddplab doctor"} <= names


def test_help_shows_defaults_and_only_real_ones():
    texts = {path: p.format_help() for path, p in _parsers(cli.build_parser(), "ddplab")}
    cost = re.sub(r"\s+", " ", texts["ddplab cost"])
    assert "data-parallel ranks N (default: 2)" in cost
    assert "effective fraction of line rate (default: 0.85)" in cost
    assert "(default: 760M)" in cost
    probe = re.sub(r"\s+", " ", texts["ddplab probe"])
    assert "(default: collectives,link,compute,overlap)" in probe  # a list as it is typed
    for path, text in texts.items():
        assert "(default: None)" not in text and "(default: False)" not in text, path
        assert "(default: [])" not in text and "(default: ==SUPPRESS==)" not in text, path


# --- 9. straggler waits within the time they explain -----------------------------------------


def test_straggler_wait_never_exceeds_the_idle_time(tmp_path):
    """h100-1024's 73 buckets: each bucket waits from the moment this rank made it ready, while
    it still computes the later ones, so the per-bucket sum far exceeds the idle time."""
    result = simulate(load_scenario("h100-1024", ranks=16, steps=5, seed=1, stragglers="3:1.3"), records=True)
    idle = result.exposed_comm_s + result.straggler_wait_s
    assert (result.collective_wait_s > 2 * idle).any()  # the old value
    rec = st.load(write_result(result, tmp_path))
    assert (rec.wait_s <= idle).all() and (rec.wait_s >= 0).all()
    np.testing.assert_array_equal(rec.wait_s, np.minimum(result.collective_wait_s, idle))
    rep = st.analyse(rec)
    assert rep.lowest_score_rank == rep.least_waiting_rank == 3
    step = result.step_time_s.mean()
    assert max(r.wait_s_mean for r in rep.ranks) < step


def test_straggler_wait_cap_by_hand(tmp_path):
    d = tmp_path / "ranks-0002"
    d.mkdir()
    # Two ranks, one step: rank 0's buckets waited 0.30 s in all but it idled only 0.10 s.
    np.savez(
        d / "records.npz",
        schema="ddplab.sim/1",
        compute_s=np.array([[1.0, 1.2]]),
        collective_wait_s=np.array([[0.30, 0.01]]),
        exposed_comm_s=np.array([[0.04, 0.02]]),
        straggler_wait_s=np.array([[0.06, 0.0]]),
    )
    assert st.load(d).wait_s.tolist() == [[pytest.approx(0.10), 0.01]]


def test_straggler_records_without_the_idle_parts_are_one_line(tmp_path):
    d = tmp_path / "ranks-0002"
    d.mkdir()
    np.savez(d / "records.npz", schema="ddplab.sim/1", compute_s=np.ones((1, 2)), collective_wait_s=np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"records.npz: no exposed_comm_s array$"):
        st.load(d)


# --- 10. a calibration moved to another model says so ---------------------------------------


@pytest.fixture(scope="module")
def cpu_calib(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu")
    calib = calibrate([probe_run(d / "1gbit" / "probe")], seed=0)
    path = d / "calib.json"
    path.write_text(json.dumps(calib.to_json()))
    return path, calib


def test_calibration_applied_to_another_model_warns_once(cpu_calib):
    path, calib = cpu_calib
    p = _ddplab("simulate", "homelab-1gbe", "--calib", str(path), "--steps", "3", "--json")
    assert p.returncode == 0, p.stderr
    sc = calibrated("homelab-1gbe", calib, str(path), flags=flag_patches(steps=3))[0].scenario
    fwd_s, bwd_s = micro_step_compute_s(sc)  # minutes: 760M at a CPU's rate, its forward recomputed
    assert sc.training.activation_checkpointing  # homelab-1gbe's, to fit the 4070's 12 GiB
    step_s = (fwd_s + bwd_s + fwd_s * recompute_fraction(sc)) * sc.training.grad_accum
    assert step_s > 100
    gflop_s = calib.compute.achieved_tflop_s.value * 1e3
    assert p.stderr.splitlines() == [
        f"ddplab simulate: warning: --calib: {gflop_s:.3g} GFLOP/s achieved on gpt2-tiny (seq 64;"
        " measured on cpu, 2 ranks) applied to gpt2-760m (seq 1024), a model other than the one measured,"
        f" through FLOP counts: {step_s:.2f} s of compute per step"
    ]
    # The simulation's compute agrees (rank 1 of the fake probe is no slower: speed ~1).
    assert json.loads(p.stdout)["compute_s"] == pytest.approx(step_s, rel=0.05)


def test_whatif_warns_as_simulate_does_when_the_calibration_reaches_another_model(cpu_calib):
    """`whatif --calib` lays the calibration as simulate does, so a CPU probe's compute carried to
    a 760M model through FLOP counts is said once there too, on stderr, its JSON untouched."""
    path, _ = cpu_calib
    common = ("homelab-1gbe", "--calib", str(path), "--steps", "3", "--json")
    sim = _ddplab("simulate", *common)
    p = _ddplab("whatif", *common, "--try", "accum=2")
    assert p.returncode == 0, p.stderr
    [line] = sim.stderr.splitlines()
    assert p.stderr.splitlines() == [line.replace("ddplab simulate:", "ddplab whatif:")]
    assert [r["mitigation"] for r in json.loads(p.stdout)][1:] == ["accum=2"]
    quiet = _ddplab(
        "whatif", *common, "--try", "accum=2", "--set", "model.preset=gpt2-tiny", "--set", "training.seq_len=64"
    )
    assert (quiet.returncode, quiet.stderr) == (0, "")


def test_calibration_of_the_same_model_is_quiet(cpu_calib):
    path, _ = cpu_calib
    p = _ddplab(
        "simulate", "homelab-1gbe", "--calib", str(path), "--steps", "3", "--json",
        "--set", "model.preset=gpt2-tiny", "--set", "training.seq_len=64",
    )  # fmt: skip
    assert (p.returncode, p.stderr) == (0, "")


def test_calibration_in_shape_mode_is_quiet(cpu_calib):
    path, _ = cpu_calib
    p = _ddplab("simulate", "homelab-1gbe", "--calib", str(path), "--steps", "3", "--calib-mode", "shape", "--json")
    assert (p.returncode, p.stderr) == (0, "")
