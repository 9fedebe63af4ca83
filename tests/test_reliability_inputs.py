"""Issue 15, the input half: every size a user can type is checked against what this machine
can hold or finish before anything is allocated; NaN and infinity are refused wherever a
number is typed; `--json` and every JSON file are standard JSON; and the small items (deep
TOML, huge integers, a missing --slurm folder, IPv6 in the doctor, a public rendezvous store,
a one-rank collective, a missing .toml).

Each case runs the real CLI in-process (`ddplab.cli.main`, as `python -m ddplab` does) and
holds the project's answer to bad input: exit code 2, one line on stderr naming the field and
the value, no traceback (an uncaught exception fails the test), nothing on stdout.
"""

import json
import math
import socket
import time
import tracemalloc

import pytest
from conftest import free_port
from conftest import in_process as ddplab

from realrun import findings, footprint, netrules, nodes
from realrun.hostfacts import Facts, PortProbe
from sim import limits as sim_limits
from sim.engine import simulate
from sim.scenario_file import load_scenario
from workflow import limits

GIB = 1 << 30


def refused(capsys, *argv: str) -> str:
    """The one stderr line of a refused command (exit 2, nothing printed, no traceback)."""
    code, out, err = ddplab(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert out == "", out
    return lines[0]


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as RFC 8259 parsers do."""

    def reject(name):
        raise ValueError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=reject)


# ---------------------------------------------------------------------------------------------------------------
# 1. Sizes: estimated before anything is allocated


@pytest.fixture
def sixteen_gib(monkeypatch):
    """A machine with 16 GiB available, whatever this one has."""
    monkeypatch.setattr(limits, "available_bytes", lambda: 16 * GIB)


def test_simulate_a_hundred_million_ranks_is_refused_by_memory(capsys, sixteen_gib):
    line = refused(capsys, "simulate", "h100-1024", "--ranks", "100000000")
    assert "ranks 100000000 x steps 200" in line and "GiB of memory" in line and "16.00 GiB" in line, line


def test_simulate_ten_billion_steps_is_refused_here(capsys):
    # 1024 ranks x 1e10 steps keep ~600 GiB of per-step times: refused by its real MemAvailable.
    line = refused(capsys, "simulate", "h100-1024", "--steps", "10000000000")
    assert "steps 10000000000" in line and "of memory" in line, line


def test_sweep_is_sized_before_its_first_scale_runs(capsys, sixteen_gib):
    # No "[1/2] 8 ranks ..." progress line: the 8-rank scale never started.
    line = refused(capsys, "simulate", "h100-1024", "--sweep-ranks", "8,100000000")
    assert line.startswith("ddplab simulate: error: --sweep-ranks 8,100000000 x steps 200"), line


def test_available_memory_reads_meminfo_and_a_cgroup_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n")
    assert footprint._meminfo_available(meminfo) == 20000000 * 1024
    assert footprint._meminfo_available(tmp_path / "absent") is None
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    usage.write_text("1000\n")
    limit.write_text("max\n")  # no limit: MemAvailable decides
    assert footprint._cgroup_headroom([(limit, usage)]) is None
    limit.write_text("5000\n")
    assert footprint._cgroup_headroom([(tmp_path / "v2-absent", usage), (limit, usage)]) == 4000
    assert footprint.available_bytes() is None or footprint.available_bytes() > 0


def test_long_simulation_needs_yes(capsys):
    # ~8 min here by the estimate (FSDP, 1024 ranks x 200,000 steps): refused before it starts.
    t0 = time.perf_counter()
    line = refused(capsys, "simulate", "h100-1024", "--steps", "200000", "--set", "training.mode=fsdp")
    assert "ranks 1024 x steps 200000" in line and "pass --yes" in line and "min" in line, line
    assert time.perf_counter() - t0 < 2.0


def test_yes_lets_a_long_simulation_run(capsys, monkeypatch):
    monkeypatch.setattr(limits, "LONG_RUN_S", 1e-9)  # every run is "long"
    line = refused(capsys, "simulate", "homelab-1gbe", "--steps", "3")
    assert "pass --yes" in line
    code, out, err = ddplab(capsys, "simulate", "homelab-1gbe", "--steps", "3", "--yes", "--json")
    assert code == 0, err
    assert strict_json(out)["steps"] == 3


def test_over_a_day_is_refused_even_with_yes(capsys):
    line = refused(capsys, "goodput", "--mtbf-h", "49.5", "--work-h", "1e12", "--yes")
    assert line.startswith("ddplab goodput: error: --work-h 1e+12:") and "over the 24 h limit" in line, line


@pytest.mark.parametrize(
    "sets, ranks, steps",
    [
        ([], 512, 20),
        (["training.grad_accum=8"], 256, 20),
        (["training.mode=fsdp", "training.grad_accum=2"], 256, 10),
        (["compute.interference_gamma=0.1"], 256, 10),
    ],
    ids=["ddp", "accumulation", "fsdp", "interference"],
)
def test_memory_estimate_bounds_a_measured_run(sets, ranks, steps):
    """The estimate is an upper bound of what the engine allocates (tracemalloc's peak), and
    not a wild one: refusing on it refuses only what would not fit."""
    sc = load_scenario("h100-1024", sets, ranks=ranks, steps=steps)
    tracemalloc.start()
    try:
        simulate(sc).summary()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    est = sim_limits.simulation_cost(sc).peak_bytes
    assert peak <= est <= 2 * peak + sim_limits.FIXED_BYTES, (peak, est)


def test_whatif_sizes_every_row_first(capsys, sixteen_gib):
    line = refused(capsys, "whatif", "straggler-lemon", "--try", "rebalance", "--ranks", "100000000")
    assert "2 simulations (the largest: ranks 100000000 x steps 300)" in line and "of memory" in line, line
    # With episodes a row simulates each of its states and the clear job (sim/episode_cost.py).
    line = refused(capsys, "whatif", "straggler-failslow", "--try", "rebalance", "--ranks", "100000000")
    assert "8 simulations (the largest" in line, line
    # A mitigation that sets the size is sized too.
    line = refused(capsys, "whatif", "straggler-lemon", "--try", "rebalance", "--try", "ranks=80000000")
    assert "ranks 80000000" in line, line


def test_goodput_huge_work_is_refused_with_its_estimate(capsys):
    line = refused(capsys, "goodput", "--mtbf-h", "49.5", "--work-h", "1e12")
    assert "--work-h 1e+12" in line and "failures and stalls" in line and "days" in line, line


def test_goodput_a_billion_stalls_a_day_is_refused(capsys):
    line = refused(capsys, "goodput", "--mtbf-h", "49.5", "--stalls-per-day", "1e9")
    assert "--stalls-per-day 1e+09" in line and "cannot progress" in line, line


def test_goodput_failures_faster_than_restarts_cannot_progress(capsys):
    # MTBF 0.36 s, restart 10 min: a restart completes once in e^1667 tries; this ran forever.
    t0 = time.perf_counter()
    line = refused(capsys, "goodput", "--mtbf-h", "0.0001", "--restart-min", "10")
    assert "--restart-min 10" in line and "e^1667" in line and "cannot progress" in line, line
    assert time.perf_counter() - t0 < 2.0


def test_goodput_estimate_counts_what_a_run_simulates():
    """The events estimate is the expected failure count: within 10 % of one run's (the same
    closed form the goodput tests check the simulation against)."""
    from sim.goodput import Campaign, simulate_campaign

    c = Campaign(work_min=2000 * 60.0, mtbf_min=120.0, restart_min=10.0, checkpoint_min=1.0, interval_min=20.0)
    run = simulate_campaign(c, seed=1)
    est = sim_limits.campaign_cost(
        work_min=c.work_min, mtbf_min=120.0, restart_min=10.0, checkpoint_min=1.0, intervals_min=[20.0]
    )
    assert est.kind == "work" and est.events == pytest.approx(run.failures, rel=0.1)


def test_launch_a_hundred_million_nodes_is_refused(capsys):
    t0 = time.perf_counter()
    line = refused(capsys, "launch", "--nodes", "100000000", "--master", "10.0.0.1:29500")
    assert "--nodes" in line and "100000000" in line and f"{nodes.MAX_NODES:,}" in line, line
    assert time.perf_counter() - t0 < 2.0  # it printed for minutes before
    line = refused(capsys, "launch", "--nodes", "2", "--nproc-per-node", "100000", "--master", "10.0.0.1:29500")
    assert "--nproc-per-node" in line and "100000" in line, line


def test_collective_needs_two_ranks_and_huge_counts_stay_closed_form(capsys):
    line = refused(capsys, "collective", "h100-1024", "--ranks", "1")
    assert "--ranks" in line and "2 or more" in line and "got 1" in line, line
    t0 = time.perf_counter()
    code, out, err = ddplab(capsys, "collective", "h100-1024", "--ranks", str(8 * 10**12), "--json")
    assert code == 0 and time.perf_counter() - t0 < 2.0, err
    assert all(r["ranks"] == 8 * 10**12 and r["time_us"] > 0 for r in strict_json(out))


def test_collective_size_past_a_pebibyte_is_refused(capsys):
    line = refused(capsys, "collective", "h100-1024", "--sizes", "9" * 400)  # overflowed a float before
    assert "--sizes" in line and "1 PiB" in line, line


def test_doctor_timeout_is_bounded(capsys):
    line = refused(capsys, "doctor", "--master", "10.0.0.1:29500", "--timeout-s", "1e9")
    assert "--timeout-s" in line and "1000000000" in line, line


# ---------------------------------------------------------------------------------------------------------------
# 2. NaN and infinity


def test_cost_params_nan(capsys):
    line = refused(capsys, "cost", "--params", "nan")
    assert "--params" in line and "nan" in line, line


@pytest.mark.parametrize("rate", ["nan", "inf", "-inf"])
def test_cost_link_rate_must_be_finite(capsys, rate):
    line = refused(capsys, "cost", "--link", f"x={rate}", "--json")  # printed `NaN` in JSON before
    assert "--link" in line and f"x={rate}" in line, line


def test_set_inf_names_the_key(capsys):
    line = refused(capsys, "simulate", "h100-1024", "--set", "compute.step_compute_s=inf")
    assert "compute.step_compute_s" in line and "inf" in line, line


@pytest.mark.parametrize(
    "toml, key",
    [
        ('base = "h100-1024"\n[network]\nnic_gbit_s = inf\n', "network.nic_gbit_s"),
        (
            'base = "h100-1024"\n[noise]\ndistribution = "empirical"\nsamples = [1, 1, 1, 1, 1, 1, 1, nan]\n',
            "noise.samples[7]",
        ),
        ('base = "h100-1024"\nstragglers = "17:1e400"\n', "stragglers"),
    ],
    ids=["inf", "nan-in-a-list", "inf-in-a-string"],
)
def test_toml_nonfinite_names_the_key(capsys, tmp_path, toml, key):
    f = tmp_path / "s.toml"
    f.write_text(toml)
    line = refused(capsys, "simulate", str(f))
    assert key in line, line


def test_whatif_restart_min_nan(capsys):
    line = refused(capsys, "whatif", "straggler-lemon", "--try", "exclude-slowest", "--restart-min", "nan")
    assert "--restart-min" in line and "nan" in line, line


def test_whatif_library_refuses_nan_too():
    from sim.scenario_file import scenario_data
    from sim.whatif import compare, plan

    with pytest.raises(ValueError, match="--restart-min: .*nan"):
        compare(plan(scenario_data("straggler-lemon", steps=2), ["rebalance"]), horizon_h=24.0, restart_min=math.nan)


# Every command's --json, parsed as a strict reader does: no NaN, no Infinity.
JSON_COMMANDS = [
    ["cost", "--json"],
    ["cost", "--link", "x=10", "--compute-s", "0.1", "--json"],
    ["collective", "h100-1024", "--json"],
    ["simulate", "homelab-1gbe", "--steps", "3", "--json"],
    ["simulate", "homelab-1gbe", "--sweep-ranks", "2,4", "--steps", "3", "--json"],
    ["whatif", "straggler-lemon", "--ranks", "64", "--steps", "3", "--try", "rebalance", "--json"],
    ["goodput", "--mtbf-h", "49.5", "--work-h", "500", "--json"],
    ["scenarios", "--json"],
    ["launch", "--nodes", "2", "--master", f"127.0.0.1:{free_port()}", "--json"],
]


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=[" ".join(a[:2]) for a in JSON_COMMANDS])
def test_json_output_is_standard_json(capsys, argv):
    code, out, err = ddplab(capsys, *argv)
    assert code == 0, err
    strict_json(out)


def test_doctor_json_is_standard_json(capsys):
    code, out, err = ddplab(capsys, "doctor", "--master", f"127.0.0.1:{free_port()}", "--timeout-s", "0.5", "--json")
    assert code == 0, err
    assert strict_json(out)["port"]["status"] == "refused"


def test_a_nonfinite_result_is_one_line_not_bad_json(monkeypatch, capsys):
    """Should a NaN ever reach --json (a bug: inputs are checked), it is named, not printed."""
    from ddplab import commands

    monkeypatch.setattr(commands, "cost", lambda args: [{"link": "x", "seconds_per_step": math.nan}])
    line = refused(capsys, "cost", "--json")
    assert "--json: [0].seconds_per_step is nan" in line, line


def test_json_files_refuse_nan_before_writing(tmp_path):
    from output.export import write_summaries
    from output.jsonfile import write_json_atomic
    from sim.engine import simulate

    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "a.json", {"x": math.inf})
    summary = simulate(load_scenario("h100-1024", ranks=4, steps=2)).summary()
    summary.comm_s = math.nan  # past the record's own check (sim/summary.py), as a bug would be
    with pytest.raises(ValueError):
        write_summaries([summary], tmp_path, sweep=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written


# ---------------------------------------------------------------------------------------------------------------
# 3. Small items


def test_deeply_nested_toml_names_the_file(capsys, tmp_path):
    f = tmp_path / "deep.toml"
    f.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")  # a RecursionError traceback before
    line = refused(capsys, "simulate", str(f))
    assert str(f) in line and "nested too deeply" in line, line
    f.write_text("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")
    assert "nested too deeply" in refused(capsys, "simulate", str(f))


def test_deeply_nested_set_value(capsys):
    line = refused(capsys, "simulate", "h100-1024", "--set", "x=" + "[" * 5000 + "]" * 5000)
    assert "--set x" in line and "nested too deeply" in line, line


def test_huge_integer_in_toml_names_the_key(capsys, tmp_path):
    f = tmp_path / "big.toml"
    f.write_text('base = "h100-1024"\nranks = 99999999999999999999\n')
    line = refused(capsys, "simulate", str(f))
    assert "ranks" in line and "99999999999999999999" in line and "64-bit" in line, line


@pytest.mark.parametrize(
    "argv, key",
    [
        (["--set", f"ranks={8 * 10**23}"], "ranks"),  # "Maximum allowed dimension exceeded" before
        (["--ranks", str(8 * 10**23)], "ranks"),
        (["--set", f"training.micro_batch_size={2**64}"], "training.micro_batch_size"),
    ],
    ids=["set", "option", "section"],
)
def test_huge_integer_on_the_command_line_names_the_key(capsys, argv, key):
    line = refused(capsys, "simulate", "h100-1024", *argv)
    assert f"error: {key}: must fit in a 64-bit integer" in line, line


def test_slurm_into_a_missing_folder_is_refused(capsys, tmp_path):
    job = tmp_path / "no" / "such" / "job.sbatch"
    line = refused(capsys, "launch", "--nodes", "2", "--master", "10.0.0.1:29500", "--slurm", str(job))
    assert "--slurm" in line and str(job.parent) in line and "no such directory" in line, line
    assert not (tmp_path / "no").exists()  # created silently before


def test_missing_toml_says_no_such_file(capsys):
    line = refused(capsys, "simulate", "nosuch.toml")
    assert "no such file: nosuch.toml" in line and "not a preset" not in line, line


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_doctor_reads_a_bracketed_ipv6_master_and_checks_the_port(capsys):
    port = free_port()
    code, out, err = ddplab(capsys, "doctor", "--master", f"[::1]:{port}", "--timeout-s", "0.5", "--json")
    assert code == 0, err
    d = strict_json(out)
    assert d["master"]["address"] == "::1" and d["master"]["local"] and d["master"]["error"] is None
    assert d["port"]["status"] == "refused"  # "unresolved" before: no port check at all
    assert f"--rdzv-endpoint=[::1]:{port}" in d["settings"]["torchrun"]
    with socket.socket(socket.AF_INET6) as srv:
        srv.bind(("::1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        code, out, _ = ddplab(capsys, "doctor", "--master", f"[::1]:{port}", "--timeout-s", "0.5", "--json")
    assert strict_json(out)["port"]["status"] == "open"


def test_doctor_plain_host_port(capsys):
    code, out, err = ddplab(capsys, "doctor", "--master", f"localhost:{free_port()}", "--timeout-s", "0.5", "--json")
    assert code == 0, err
    assert strict_json(out)["port"]["status"] == "refused"


def _ifc(name: str, *addrs: str) -> dict:
    fam = {True: "inet6", False: "inet"}
    return {
        "name": name,
        "kind": "ethernet",
        "addresses": [{"address": a, "prefixlen": 24, "family": fam[":" in a]} for a in addrs],
    }


@pytest.mark.parametrize(
    "address, public",
    [
        ("10.0.0.1", False),
        ("192.168.1.10", False),
        ("172.16.0.5", False),
        ("127.0.0.1", False),
        ("169.254.3.4", False),
        ("::1", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("8.8.8.8", True),
        ("203.0.114.7", True),
        ("2001:4860::8888", True),
        ("100.64.0.1", True),
    ],
)
def test_is_public(address, public):
    assert netrules.is_public(address) is public


def test_store_exposure_rule():
    lan = [_ifc("lo", "127.0.0.1", "::1"), _ifc("eth0", "192.168.1.10")]
    cloud = [*lan, _ifc("eth1", "8.8.4.4", "fe80::2")]
    assert netrules.store_exposure("192.168.1.10", True, lan) == []
    # The host's store listens on every address: a public one anywhere on it is exposed.
    assert netrules.store_exposure("192.168.1.10", True, cloud) == ["8.8.4.4"]
    assert netrules.store_exposure("8.8.4.4", True, cloud) == ["8.8.4.4"]
    # Another node sees only the master's address.
    assert netrules.store_exposure("8.8.4.4", False, lan) == ["8.8.4.4"]
    assert netrules.store_exposure("192.168.1.10", False, cloud) == []
    assert netrules.store_exposure(None, False, cloud) == []


def test_doctor_warns_of_a_public_rendezvous_store():
    ifaces = [_ifc("lo", "127.0.0.1"), _ifc("eth0", "198.51.100.7")]
    route = {"dev": "eth0", "src": "198.51.100.7", "gateway": None, "type": "unicast", "error": None}
    facts = Facts(
        env={},
        interfaces=ifaces,
        interfaces_error=None,
        master_host="8.8.4.4",
        master_port=29500,
        master_addresses=["8.8.4.4"],
        route=route,
        hostname="node",
        hostname_addresses=["198.51.100.7"],
        hostname_bindable=["198.51.100.7"],
        gloo_default="198.51.100.7",
        master_tcp_addresses=["8.8.4.4"],
        hostname_tcp=[("node", "198.51.100.7")],
        port=PortProbe("refused", 111, "Connection refused"),
    )
    d = findings.from_facts(facts, nnodes=2, nproc_per_node=1, verb_args=list(nodes.DEFAULT_VERB_ARGS))
    warning = d["rendezvous"]["warning"]
    assert "no authentication" in warning and "8.8.4.4" in warning and "29500" in warning, warning
    assert d["problems"][-1] == f"store: {warning}"
