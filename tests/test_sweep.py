"""`ddplab sweep` (issue 17): a 200-run grid gives the same rows in local processes and on a
Dask LocalCluster this file starts itself; the mean and 95 % interval against closed forms;
seeds change runs and a seed repeated repeats its run; bad input is one line and exit 2."""

import csv
import json
import math
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT, in_process

from workflow.sweep import interval

GRID_200 = [
    "h100-1024", "--ranks", "8", "--steps", "5",
    "--vary", "noise.sigma", "0.01", "0.02", "0.03", "0.05",
    "--vary", "training.bucket_cap_mb", "10", "25", "50", "100", "200",
    "--seeds", "10",
]  # fmt: skip
SMALL = GRID_200[:5]


def cli(*args: str, timeout_s: float = 300) -> tuple[int, str, str]:
    """The real console entry point in a subprocess: (exit code, stdout, stderr)."""
    p = subprocess.run(
        [sys.executable, "-m", "ddplab", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout_s
    )
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def dask_cluster():
    """A Dask cluster of two single-threaded worker processes, started here and closed after."""
    distributed = pytest.importorskip("distributed", reason="the test extra installs dask[distributed]")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def local_200():
    code, out, err = cli("sweep", *GRID_200, "--workers", "2", "--json")
    assert code == 0, err
    return json.loads(out), err


def test_a_200_run_sweep_gives_identical_rows_locally_and_on_a_dask_cluster(local_200, dask_cluster, capsys):
    local, err = local_200  # local processes, through the console entry point
    code, out, _ = in_process(capsys, "sweep", *GRID_200, "--engine", "dask", "--scheduler", dask_cluster, "--json")
    assert code == 0
    on_dask = json.loads(out)
    assert local["grid"]["runs"] == len(local["runs"]) == 200
    assert len(local["rows"]) == 20  # 4 x 5 grid points, 10 seeds each
    # Exact equality of every number, run by run and row by row, in the same (grid) order.
    assert on_dask["runs"] == local["runs"]
    assert on_dask["rows"] == local["rows"]
    # Grid order: the first key slowest, the seed fastest.
    first = local["runs"][:11]
    assert [r["seed"] for r in first] == [*range(10), 0]
    assert first[0]["vary"] == first[9]["vary"] == {"noise.sigma": "0.01", "training.bucket_cap_mb": "10"}
    assert first[10]["vary"] == {"noise.sigma": "0.01", "training.bucket_cap_mb": "25"}
    assert local["runs"][-1]["vary"] == {"noise.sigma": "0.05", "training.bucket_cap_mb": "200"}
    # Progress: a line at each quarter, whatever order the runs finished in.
    quarters = [f"[{k}/200] runs done" for k in (50, 100, 150, 200)]
    assert [line.split(":")[0] for line in err.splitlines()] == quarters


def test_the_command_starts_and_closes_its_own_local_cluster(local_200, capsys):
    # Without --scheduler, a LocalCluster of --workers processes lives as long as the command.
    args = [*SMALL, "--vary", "noise.sigma", "0.05", "--vary", "training.bucket_cap_mb", "200", "--seeds", "8,9"]
    code, out, err = in_process(capsys, "sweep", *args, "--engine", "dask", "--workers", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["runs"] == local_200[0]["runs"][-2:]


# --- the aggregation against closed forms -----------------------------------------------


def test_the_interval_is_students_t_in_closed_form():
    # t quantiles with closed forms: one degree of freedom is Cauchy, tan(pi (p - 1/2));
    # two have t = (2p - 1) / sqrt(2 p (1 - p)).
    p = 0.975
    t1 = math.tan(math.pi * (p - 0.5))
    t2 = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    for values, t in (([1.0, 3.0], t1), ([2.0, 4.0, 9.0], t2)):
        n = len(values)
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        got = interval(values)
        assert got["mean"] == pytest.approx(mean, rel=1e-15)
        assert got["ci95_low"] == pytest.approx(mean - t * sd / math.sqrt(n), rel=1e-12)
        assert got["ci95_high"] == pytest.approx(mean + t * sd / math.sqrt(n), rel=1e-12)
    # [1, 3]: mean 2, s = sqrt(2), half = 12.7062 x sqrt(2) / sqrt(2) = 12.7062.
    assert interval([1.0, 3.0])["ci95_high"] == pytest.approx(2 + 12.7062047361747, rel=1e-12)
    # One seed: no spread to measure, so no interval (not a zero-width one).
    assert interval([5.0]) == {"mean": 5.0, "ci95_low": None, "ci95_high": None}


def test_each_row_is_the_mean_and_t_interval_of_its_runs(local_200):
    local, _ = local_200
    t9 = 2.262157162798205  # t(0.975, 9), the published quantile for ten seeds
    runs = local["runs"]
    for i, row in enumerate(local["rows"]):
        group = runs[10 * i : 10 * (i + 1)]
        assert {r["seed"] for r in group} == set(range(10)) and all(r["vary"] == row["vary"] for r in group)
        for metric in ("step_time_mean_s", "scaling_efficiency", "exposed_comm_s", "straggler_wait_s"):
            values = [r[metric] for r in group]
            mean = sum(values) / 10
            half = t9 * statistics.stdev(values) / math.sqrt(10)
            got = row[metric]
            assert got["mean"] == pytest.approx(mean, rel=1e-12)
            assert got["ci95_low"] == pytest.approx(mean - half, rel=1e-9, abs=1e-15)
            assert got["ci95_high"] == pytest.approx(mean + half, rel=1e-9, abs=1e-15)
    # The model's answer, not only its arithmetic: more jitter, slower steps (sigma 0.01 vs 0.05).
    assert local["rows"][0]["step_time_mean_s"]["mean"] < local["rows"][-1]["step_time_mean_s"]["mean"]


# --- seeds ----------------------------------------------------------------------------


def test_seeds_change_runs_and_a_repeated_seed_repeats_its_run(local_200, capsys):
    local, _ = local_200
    steps = [r["step_time_mean_s"] for r in local["runs"][:10]]  # one grid point, seeds 0..9
    assert len(set(steps)) == 10
    # Seeds 3 and 7 again, alone and in this process: the same numbers as in the 200-run grid.
    code, out, _ = in_process(capsys, "sweep", *SMALL, "--vary", "noise.sigma", "0.01", "--vary",
                              "training.bucket_cap_mb", "10", "--seeds", "3,7", "--workers", "1", "--json")  # fmt: skip
    assert code == 0
    again = json.loads(out)["runs"]
    assert [r["seed"] for r in again] == [3, 7]
    assert again == [local["runs"][3], local["runs"][7]]


def test_a_notebook_gets_the_same_runs_from_python(local_200):
    from workflow.sweep_run import run_sweep

    local, _ = local_200
    result, files = run_sweep(
        ["h100-1024"], vary=[["noise.sigma", "0.02"], ["training.bucket_cap_mb", "50"]], seeds="4,9", ranks=8, steps=5
    )
    assert files == [] and [r["seed"] for r in result["runs"]] == [4, 9]
    # Grid point (sigma 0.02, 50 MB) is the 8th of the 200-run grid's 20, its seeds 0..9 in order.
    assert result["runs"] == [local["runs"][7 * 10 + 4], local["runs"][7 * 10 + 9]]
    with pytest.raises(ValueError, match="--engine: expected local or dask, got 'ray'"):
        run_sweep(["h100-1024"], vary=["noise.sigma", "0.02"], seeds="1", engine="ray")


# --- what it writes and prints --------------------------------------------------------------


def test_out_files_one_seed_and_a_value_with_commas(capsys, tmp_path):
    code, out, err = in_process(
        capsys, "sweep", *SMALL, "--vary", "stragglers", "1:1.4", "1:1.4,3:2.0",
        "--seeds", "4,", "--workers", "1", "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("sweep: 2 runs (1 scenario x 2 stragglers x 1 seed) on local processes")
    assert "1:1.4,3:2.0" in lines[3] and "±n/a" in lines[3]
    assert "no interval (n/a)" in lines[4]
    result = json.loads((tmp_path / "sweep.json").read_text())
    slow, slower = (r["step_time_mean_s"]["mean"] for r in result["rows"])
    assert slower > slow * 1.3  # rank 3 at 2.0x is the straggler everyone waits for
    with open(tmp_path / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert [r["stragglers"] for r in runs] == ["1:1.4", "1:1.4,3:2.0"] and [r["seed"] for r in runs] == ["4", "4"]
    assert float(runs[1]["step_time_mean_s"]) == result["runs"][1]["step_time_mean_s"]  # full precision
    with open(tmp_path / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["seeds"] == "1" and rows[0]["step_time_mean_s_ci95_low"] == ""  # undefined, not 0
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


# --- bad input: one line, exit 2 ------------------------------------------------------------

BAD = [
    (["--vary", "noise.sigma"], "--vary noise.sigma", "no values"),
    (["--vary"], "--vary", "nothing"),
    (["--seeds", "0"], "--seeds", "'0'"),
    (["--vary", "noise.sigm", "0.1", "0.2"], "noise.sigm", "unknown key"),
    (["--vary", "bogus", "1", "2"], "bogus", "unknown key"),
    (["--set", "nois.sigma=0.1"], "nois", "unknown key"),  # the section is what is unknown
    (["--vary", "noise.sigma", "0.01", "-0.1"], "noise.sigma", "-0.1"),
    (["--vary", "training.overlap", "true", "maybe"], "training.overlap", "maybe"),
    (["--vary", "noise.sigma=0.1"], "--vary noise.sigma=0.1", "KEY V1 V2"),
    (["--set", "noise.sigma=0.1", "--vary", "noise.sigma", "0.2"], "noise.sigma", "--set"),
    (["--vary", "seed", "1", "2"], "seed", "--seeds"),
    (["--seeds", "2,2"], "--seeds", "2"),
    (["--workers", "0"], "--workers", "0"),
    # Issue 25 D20: a key set twice, the last silently winning (whatif's --try shares the check).
    (["--set", "noise.sigma=0.1", "--set", "noise.sigma=0.2"], "--set noise.sigma", "given twice"),
    # D21: a worker per core at most four times over; more share the cores and cost memory.
    (["--workers", "100000"], "--workers", "100000"),
    (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler", "--engine dask"),
]


@pytest.mark.parametrize("extra, field, value", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, extra, field, value):
    code, out, err = in_process(capsys, "sweep", *SMALL, *extra)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddplab sweep: error: "), err
    assert field in lines[0] and value in lines[0], lines[0]


def test_no_scenario_is_one_line(capsys):
    code, _, err = in_process(capsys, "sweep", "--vary", "noise.sigma", "0.1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "SCENARIO" in err


def test_a_million_runs_without_yes_is_refused_by_the_real_entry_point():
    values = [str(v) for v in range(1, 1001)]
    code, out, err = cli("sweep", *SMALL, "--vary", "training.bucket_cap_mb", *values,
                         "--vary", "compute.optimizer_s", *values[:50], "--seeds", "1")  # fmt: skip
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "50,000 runs, over 10,000" in line and "--yes" in line
    # A million is past even --yes (issue 25 D4).
    code, out, err = cli("sweep", *SMALL, "--vary", "training.bucket_cap_mb", *values,
                         "--vary", "compute.optimizer_s", *values, "--seeds", "1", "--yes")  # fmt: skip
    (line,) = err.strip().splitlines()
    assert code == 2 and "1,000,000 runs, over the limit of 100,000 (even with --yes)" in line


def test_a_long_grid_needs_yes():
    from sim.limits import simulation_cost
    from sim.scenario_file import load_scenario
    from workflow.limits import LONG_RUN_S

    # 1024 ranks x 20000 steps on one worker, as many seeds as make twice the limit by
    # sim/limits.py's estimate (whatever its constants are today).
    one = simulation_cost(load_scenario("h100-1024", steps=20000)).seconds
    seeds = math.ceil(2 * LONG_RUN_S / one)
    # A timeout, so that a check that let it through fails here in seconds, not after an hour.
    code, out, err = cli(
        "sweep", "h100-1024", "--steps", "20000", "--seeds", str(seeds), "--workers", "1", timeout_s=60
    )
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"{seeds} runs" in err and "pass --yes" in err


def test_dask_missing_is_one_line_naming_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` now fails
    code, _, err = in_process(capsys, "sweep", *SMALL, "--seeds", "2", "--engine", "dask")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "pip install 'ddplab[dask]'" in err
    # The default engine never imports it.
    code, out, err = in_process(capsys, "sweep", *SMALL, "--seeds", "2", "--workers", "1")
    assert code == 0 and out.startswith("sweep: 2 runs"), err


def test_d4_a_huge_grid_is_refused_from_its_size_before_it_is_built():
    """Issue 25 D4: `--seeds 1000000000` built a billion-seed tuple (MemoryError) before the
    count was checked, and with --yes a huge grid grew without bound. Under a 2 GiB address
    space, so a grid that is built fails here at once instead of swapping the machine."""
    import resource

    def small_address_space():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    for yes in ([], ["--yes"]):
        p = subprocess.run(
            [sys.executable, "-m", "ddplab", "sweep", *SMALL, "--seeds", "1000000000", *yes],
            capture_output=True, text=True, cwd=ROOT, timeout=60, preexec_fn=small_address_space,
        )  # fmt: skip
        (line,) = p.stderr.strip().splitlines()
        assert p.returncode == 2 and "1,000,000,000 runs, over the limit of 100,000 (even with --yes)" in line, line


def test_d4_the_grids_own_memory_is_checked_before_it_is_built(capsys, monkeypatch):
    from workflow.sweep import BYTES_PER_RUN

    # 100,000 runs' bookkeeping (~1.2 GB) on a machine with 1 GB available.
    monkeypatch.setattr("workflow.limits.available_bytes", lambda: 1e9)
    code, out, err = in_process(capsys, "sweep", *SMALL, "--seeds", "100000", "--yes")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "100,000 runs" in err and "memory" in err and "sweep fewer values" in err
    assert 100_000 * BYTES_PER_RUN > 0.8e9


def test_d21_the_memory_check_counts_each_worker_process(capsys, monkeypatch):
    from workflow.sweep_engines import WORKER_BYTES

    # Four workers' interpreters alone (4 x 45 MB) exceed 80 % of 200 MB; the runs are small.
    monkeypatch.setattr("workflow.limits.available_bytes", lambda: 200e6)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    code, out, err = in_process(capsys, "sweep", *SMALL, "--seeds", "4", "--workers", "4")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "4 runs" in err and "memory" in err and 4 * WORKER_BYTES > 0.8 * 200e6


def test_a_local_workers_heartbeat_failure_is_dropped_and_nothing_else():
    # What a LocalCluster's worker logs when the scheduler closed under its heartbeat (the
    # Ctrl-C test's rare extra line) is dropped; the worker's other errors are kept.
    import logging

    from workflow.sweep_engines import HEARTBEAT_FAILURE, _not_a_heartbeat_failure

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, None, None)

    assert not _not_a_heartbeat_failure(record(HEARTBEAT_FAILURE + "."))
    assert _not_a_heartbeat_failure(record("Unexpected exception during heartbeat. Closing worker."))
    assert _not_a_heartbeat_failure(record("Compute Failed"))
