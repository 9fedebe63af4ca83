"""Real runs that must never outlive their owner, share a folder, or drown the diagnosis
(docs/reliability.md). Each test reproduces one case through the real command and
asserts on the process table, the exit code, stderr and the record files.

The netlab case needs root and iproute2 and skips without them (CI runs as root)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from fake_runs import probe_run, train_run
from procs import alive as _alive
from procs import family as _family
from procs import start as _start
from procs import stop

from calibrate.records import read_run as calibrate_read_run
from realrun.launch import TorchrunFilter
from realrun.records import RecordWriter, end_unfinished, read_records, read_run
from realrun.runfolder import CLAIM, claim

TINY = ["--model", "gpt2-tiny", "--seq-len", "32", "--micro-batch", "2"]
FOREVER = ["train", *TINY, "--steps", "1000000"]


def _wait_for_records(out: Path, verb: str, ranks: int, lines: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = list(out.glob(f"{verb}-rank*.jsonl"))
        if len(files) == ranks and all(len(f.read_text().splitlines()) >= lines for f in files):
            return
        time.sleep(0.3)
    raise AssertionError(f"no {lines} records per rank in {out} within {timeout_s} s")


def _rank_pids(out: Path, verb: str) -> set[int]:
    return {read_records(f).meta["pid"] for f in out.glob(f"{verb}-rank*.jsonl")}


def _kill_9_and_check(p: subprocess.Popen, out: Path, verb: str, ranks: int) -> list:
    """kill -9 the launcher; 2 s later nothing of the run may be alive, and every rank's
    file must read as a valid, incomplete run that says why it ended."""
    run = _family(p.pid) | _rank_pids(out, verb)
    assert len(run) >= 2 + ranks, run  # the launcher, torchrun(s) and the ranks
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    time.sleep(2.0)
    assert [pid for pid in run if _alive(pid)] == []
    records = read_run(out, verb)
    assert len(records) == ranks
    assert not any(r.complete for r in records)
    reasons = [r.error or r.ended_by_launcher for r in records]
    assert all(reasons), reasons
    assert any(f"the launcher (pid {p.pid}) is gone" in why for why in reasons), reasons
    return records


@pytest.mark.serial  # starts real ranks and times their end (tests/conftest.py)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc (Linux)")
def test_kill_9_of_train_ends_every_process_and_marks_the_records(tmp_path):
    out = tmp_path / "run"
    p = _start([*FOREVER, "--nproc", "2", "--out", str(out)], tmp_path)
    try:
        _wait_for_records(out, "train", ranks=2, lines=4)
        _kill_9_and_check(p, out, "train", ranks=2)
    finally:
        stop(p)


@pytest.mark.serial  # starts real ranks and times their end (tests/conftest.py)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc (Linux)")
def test_kill_9_of_probe_ends_every_process_and_marks_the_records(tmp_path):
    out = tmp_path / "probe"
    argv = ["probe", "--nproc", "2", "--parts", "collectives", "--ops", "allreduce", "--sizes", "1K"]
    p = _start([*argv, "--warmup", "0", "--iters", "10000000", "--out", str(out)], tmp_path)
    try:
        _wait_for_records(out, "probe", ranks=2, lines=1)  # the sweep writes a size's records at its end
        time.sleep(1.0)  # well inside the sweep's first size
        _kill_9_and_check(p, out, "probe", ranks=2)
    finally:
        stop(p)


@pytest.mark.serial  # starts real ranks and times their end (tests/conftest.py)
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
    reason="netlab needs root and iproute2 (ip, tc)",
)
def test_kill_9_of_netlab_run_ends_every_process_and_down_has_nothing_left(tmp_path):
    from realrun import netlab

    name = f"k{os.getpid() % 100000}"
    out = tmp_path / "lab"
    try:
        p = _start(["netlab", "run", "--name", name, "--", *FOREVER, "--out", str(out)], tmp_path)
        _wait_for_records(out, "train", ranks=2, lines=4)
        _kill_9_and_check(p, out, "train", ranks=2)
        # The namespaces outlive a killed launcher; `netlab down` removes them with anything inside.
        assert netlab.our_namespaces(name)
    finally:
        if "p" in locals():
            stop(p)
        netlab.down(name)
    assert netlab.our_namespaces(name) == []


@pytest.mark.serial  # starts real ranks and times their end (tests/conftest.py)
def test_ctrl_c_ends_the_run_in_one_line_with_interrupted_records(tmp_path):
    out = tmp_path / "run"
    # SIGINT at its default in the child whatever this suite inherited (tests/procs.py): a suite
    # started in the background ignores it, and the run this test sent Ctrl-C trained for hours.
    p = _start([*FOREVER, "--nproc", "2", "--out", str(out)], tmp_path)
    try:
        _wait_for_records(out, "train", ranks=2, lines=4)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal sends to its foreground job
        # The launcher's stop takes at most its 3 s grace and a second of kills (measured ~0.5 s).
        assert p.wait(timeout=60) == 130
    finally:  # a run that ignored the Ctrl-C must not outlive the test
        stop(p)
    err = (tmp_path / "stderr.txt").read_text()
    assert err.count("\n") == 1 and err.startswith("ddplab train: interrupted;"), err
    records = read_run(out, "train")
    # What the run wrote, not how fast: each rank ends with the launcher's reason, in its own error
    # record, or, for a rank too slow to answer in the grace (a loaded machine), in the end
    # record the launcher wrote for it. A rank whose peer answered first says so after the
    # launcher's reason ("(then ...").
    reasons = [r.error or r.ended_by_launcher for r in records]
    assert len(records) == 2 and all(not r.complete for r in records)
    assert all(why and why.startswith("interrupted: Ctrl-C (or SIGTERM) to the launcher") for why in reasons), reasons


def test_a_failed_run_ends_with_the_diagnosis_not_torchruns_traceback(ddplab, tmp_path):
    out = tmp_path / "run"
    code, _, err = ddplab("train", *TINY, "--nproc", "2", "--steps", "4", "--fault", "1:1:kill", "--out", str(out))
    assert code == 1
    assert "Traceback" not in err and "ChildFailedError" not in err and "elastic" not in err, err
    assert f"ddplab train: ranks exited with code 1; records so far in {out}/" in err
    assert "diagnosis: rank 1 stopped after step 0 without an error record (killed or hung)" in err
    log = (out / "train.log").read_text()  # everything torchrun said is kept
    assert "ChildFailedError" in log and "Traceback" in log


def test_torchrun_filter_keeps_the_ranks_lines_and_drops_its_own():
    lines = [
        "realrun train: rank 0: step 2: allreduce of bucket 0 failed: a peer rank died\n",
        "E1130 20:41:31.628000 19736 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)\n",
        "[W1130 20:41:31.1 socket.cpp:767] [c10d] The hostname of the client socket cannot be retrieved\n",
        "Traceback (most recent call last):\n",
        '  File "torch/distributed/run.py", line 1032, in <module>\n',
        "    main()\n",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
        "============================================================\n",
        "realrun FAILED\n",
        "Root Cause (first observed failure):\n",
    ]
    keep = TorchrunFilter()
    assert [line for line in lines if keep.show(line)] == lines[:1]
    # Kineto's start/stop notices under --profile stay in the log; its errors reach the console.
    keep = TorchrunFilter()
    kineto = [
        "USDT:2026-12-07 12:51:25 20443:20443 SyncActivityProfilerHandler.cpp:52] profiler_start\n",
        "ERROR:2026-12-07 12:51:25 20443:20443 CuptiActivityApi.cpp:99] CUPTI initialization failed\n",
    ]
    assert [line for line in kineto if keep.show(line)] == kineto[1:]
    # A rank's own uncaught exception keeps its last line: the one clue on the console.
    keep = TorchrunFilter()
    bug = ["Traceback (most recent call last):\n", '  File "x.py", line 1\n', "KeyError: 'wte'\n", "next\n"]
    assert [line for line in bug if keep.show(line)] == ["KeyError: 'wte'\n", "next\n"]


def test_two_runs_never_share_a_folder(ddplab, tmp_path):
    out = tmp_path / "same"
    held = claim(out)  # a run in progress
    try:
        code, _, err = ddplab("train", *TINY, "--nproc", "1", "--steps", "1", "--out", str(out))
    finally:
        held.release()
    assert code == 2 and err.count("\n") == 1
    assert f"--out {out}: in use by a running ddplab run (pid {os.getpid()})" in err


def test_an_earlier_run_is_refused_and_force_moves_it_aside(ddplab, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / CLAIM).write_text("pid 1\n")  # the marker every run leaves: an earlier run, not any folder
    (out / "train-rank0000.jsonl").write_text("earlier\n")
    code, _, err = ddplab("train", *TINY, "--nproc", "1", "--steps", "1", "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "holds an earlier run" in err and "--force" in err
    assert (out / "train-rank0000.jsonl").read_text() == "earlier\n"  # untouched
    code, _, err = ddplab("train", *TINY, "--nproc", "1", "--steps", "1", "--out", str(out), "--force")
    assert code == 0, err
    (aside,) = tmp_path.glob("run.old-*")
    assert (aside / "train-rank0000.jsonl").read_text() == "earlier\n"  # moved, never deleted
    assert read_run(out, "train")[0].complete


def test_a_crashed_launcher_leaves_no_stuck_claim(tmp_path):
    out = tmp_path / "run"
    code = f"from realrun.runfolder import claim; import os, signal; c = claim({str(out)!r}); os.kill(os.getpid(), 9)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == -signal.SIGKILL
    assert (out / CLAIM).exists()
    claim(out).release()  # the kernel dropped the dead holder's lock


@pytest.mark.parametrize(
    "args, says",
    [
        (["--data", "/nonexistent/corpus.txt"], "--data /nonexistent/corpus.txt: No such file or directory"),
        (["--lr", "nan"], "argument --lr: nan holds a NaN or an infinity"),
        (["--micro-batch", "10000000"], "--micro-batch 10000000: 1 rank(s) need at least"),
        (["--nproc", "10000000"], "--nproc 10000000: 10000000 rank(s) need at least"),
    ],
)
def test_what_can_be_checked_before_launch_is(ddplab, tmp_path, args, says):
    code, out, err = ddplab("train", "--model", "gpt2-mini", "--nproc", "1", *args, "--out", str(tmp_path / "r"))
    assert code == 2 and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "r").exists()  # nothing started, nothing claimed


def test_records_of_two_runs_in_one_folder_are_named_a_mix(tmp_path):
    a = train_run(tmp_path / "a", config={"model": "gpt2-mini"}, step_s=1.0)
    b = train_run(tmp_path / "b", config={"model": "gpt2-mini"}, step_s=1.0)
    for run, run_id in ((a, "run-a"), (b, "run-b")):
        for f in run.glob("train-rank*.jsonl"):
            lines = f.read_text().splitlines()
            lines[0] = json.dumps({**json.loads(lines[0]), "run_id": run_id})
            f.write_text("\n".join(lines) + "\n")
    shutil.copy(b / "train-rank0001.jsonl", a / "train-rank0001.jsonl")
    with pytest.raises(ValueError, match=r"more than one run are mixed here \(run ids \['run-a', 'run-b'\]"):
        read_run(a, "train")
    with pytest.raises(ValueError, match=r"more than one run are mixed here \(run ids \['run-a', 'run-b'\]"):
        calibrate_read_run(a)


def test_end_unfinished_mends_a_torn_line_and_says_why(tmp_path):
    w = RecordWriter(tmp_path / "train-rank0000.jsonl", verb="train", config={}, dist_info={"rank": 0})
    w.write({"type": "step", "step": 0, "loss": float("nan")})  # a diverged loss: standard JSON (null)
    with open(w.path, "a") as f:
        f.write('{"type":"step","st')  # killed mid-write
    assert end_unfinished(tmp_path, "train", "interrupted: test") == [w.path]
    lines = w.path.read_text().splitlines()
    assert [json.loads(line, parse_constant=_no_constants)["type"] for line in lines] == ["meta", "step", "error"]
    r = read_records(w.path)
    assert (r.complete, r.error, r.ended_by_launcher) == (False, None, "interrupted: test")
    assert r.of_type("step")[0]["loss"] is None
    assert end_unfinished(tmp_path, "train", "again") == []  # it already ends with a record


def _no_constants(name):
    raise AssertionError(f"non-standard JSON constant {name}")


# Atomic writes under kill: the command is SIGKILLed halfway through writing its k-th file,
# for every k until it runs to the end; each file at a final path must then be whole.
_KILL_AT_FILE = """
import builtins, io, os, signal, sys
target, kill_at = os.path.realpath(sys.argv[1]), int(sys.argv[2])
opened = [0]
real_open = io.open

class Dying:
    def __init__(self, f):
        self._f = f
    def write(self, data):
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)
    def __getattr__(self, name):
        return getattr(self._f, name)

def dying_open(file, mode="r", *args, **kw):
    f = real_open(file, mode, *args, **kw)
    inside = isinstance(file, (str, bytes, os.PathLike)) and os.path.realpath(file).startswith(target)
    if inside and any(m in mode for m in "wax+"):
        opened[0] += 1
        if opened[0] == kill_at:
            return Dying(f)
    return f

builtins.open = io.open = dying_open
from ddplab.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _whole(path: Path) -> bool:
    data = path.read_bytes()
    if path.suffix == ".png":
        return data.endswith(b"IEND\xaeB`\x82")
    if path.suffix == ".json":
        json.loads(data)
        return True
    if path.suffix == ".html":
        return data.rstrip().endswith(b"</html>")
    raise AssertionError(f"no wholeness check for {path}")


def _kill_while_writing(target: Path, argv: list[str]) -> int:
    """Kill ``argv`` at each file it writes under ``target``; the number of kill points. After
    each kill every result file there (temporary names start with a dot) must be whole."""
    for k in range(1, 100):
        p = subprocess.run(
            [sys.executable, "-c", _KILL_AT_FILE, str(target), str(k), *argv], cwd=ROOT, capture_output=True
        )
        for path in target.rglob("*"):
            if path.suffix in (".png", ".json", ".html") and not path.name.startswith("."):
                assert _whole(path), f"{path} is partial after a kill at file {k}"
        if p.returncode == 0:
            return k - 1
        assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    raise AssertionError("more than 99 files written?")


def test_calibrate_killed_mid_write_never_leaves_a_partial_file(tmp_path):
    probe = probe_run(tmp_path / "probe", model="gpt2-mini", seq_len=128)
    out = tmp_path / "out"
    out.mkdir()
    calib = out / "calib.json"
    kills = _kill_while_writing(out, ["calibrate", str(probe), "-o", str(calib)])
    pngs = sorted(out.glob("calib*.png"))
    assert kills >= 1 + len(pngs) and pngs  # calib.json and every plot were each cut halfway once
    for path in [calib, *pngs]:
        assert _whole(path)


def test_report_killed_mid_write_keeps_the_earlier_report(tmp_path):
    from workflow.report import write_report

    d = tmp_path / "demo"
    probe_run(d / "probe", model="gpt2-mini", seq_len=128)
    subprocess.run(
        [sys.executable, "-m", "ddplab", "calibrate", str(d / "probe"), "-o", str(d / "calib.json")],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    page = write_report(d)
    kills = _kill_while_writing(d, ["report", str(d)])
    assert kills >= 1 and _whole(page)  # each kill left the earlier page in place, whole


def test_a_teardown_abort_after_complete_records_is_a_whole_run(tmp_path, monkeypatch, capsys):
    """torch + gloo abort a rank now and then while the process group is torn down, after the
    run ("terminate called without an active exception"; seen in make test, 2026-12-07): torchrun
    then reports a failure for a run whose every rank closed its records as complete. That run is
    whole: exit 0, said in one line. A rank without its end record, an interrupt or a time limit
    stays a failure."""
    from argparse import Namespace

    from realrun import local
    from realrun.report import whole_despite

    out = tmp_path / "run"
    train_run(out, config={}, step_s=0.1, rate=None)
    assert whole_despite(out, "train", 1) and whole_despite(out, "train", -6)
    assert not whole_despite(out, "train", 130) and not whole_despite(out, "train", 124)
    assert not whole_despite(out, "train", 0)  # nothing to excuse
    args = Namespace(out=out, force=False, nproc=2, straggler=[], micro_batch_per_rank=None, backend="gloo", argv=[])
    monkeypatch.setattr(local, "check_args", lambda verb, a: None)
    monkeypatch.setattr(local, "claim", lambda path, force: claim(tmp_path / "other"))
    monkeypatch.setattr(local, "run_local", lambda *a, **k: 1)
    assert local.launch_local("train", args) == 0
    err = capsys.readouterr().err
    assert "every rank finished and closed its records; exit code 1 came after" in err
    assert "ranks exited with code" not in err
    # One rank's file without its end record: a failure, as before.
    rank1 = out / "train-rank0001.jsonl"
    rank1.write_text("".join(rank1.read_text().splitlines(keepends=True)[:-1]))
    assert not whole_despite(out, "train", 1)
    assert local.launch_local("train", args) == 1
    assert "ranks exited with code 1" in capsys.readouterr().err
    # Fewer rank files than the world: not whole either.
    rank1.unlink()
    assert not whole_despite(out, "train", 1)
