"""Issue 16 item 3, side by side: `ddplab compare` (every row is what `ddplab simulate` gives for
the same scenario and seed), several keys in one `whatif --try`, and the files `whatif`,
`goodput` and `simulate --out` write beside what they print (parsed back, holding the printed
numbers). Each command runs in this process (`ddplab.cli.main`), as tests/test_reliability_inputs.py does."""

import csv
import json

import pytest
from conftest import ROOT
from conftest import in_process as ddplab

from sim.units import fmt_seconds
from workflow.compare import parse_setup

MY_CLUSTER = str(ROOT / "scenarios" / "examples" / "my-cluster.toml")
FOUR_BY_200 = "h100-1024:network.nics_per_node=4,network.nic_gbit_s=200"
SMALL = ["--ranks", "16", "--steps", "12", "--seed", "3"]
PNG = b"\x89PNG\r\n\x1a\n"


def run_json(capsys, *argv: str):
    code, out, err = ddplab(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def refused(capsys, *argv: str) -> str:
    code, out, err = ddplab(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    return lines[0]


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def without_wall(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "wall_s"}  # seconds this machine took: not a result


# ---------------------------------------------------------------------------------------------------------------
# ddplab compare


def test_every_row_is_what_simulate_gives(capsys, tmp_path):
    rows = run_json(capsys, "compare", "h100-1024", MY_CLUSTER, FOUR_BY_200, *SMALL, "--out", str(tmp_path))
    assert [r["name"] for r in rows] == ["h100-1024", "my-cluster", FOUR_BY_200]
    alone = [
        run_json(capsys, "simulate", "h100-1024", *SMALL),
        run_json(capsys, "simulate", MY_CLUSTER, *SMALL),
        run_json(capsys, "simulate", "h100-1024", "--set", "network.nics_per_node=4", "--set", "network.nic_gbit_s=200",
                 *SMALL),
    ]  # fmt: skip
    for row, summary in zip(rows, alone, strict=True):
        assert without_wall({k: v for k, v in row.items() if k not in ("name", "setup", "vs_first")}) == without_wall(
            summary
        )
    # Half the NIC bandwidth: more collective time per step than the first row, so a slower step.
    assert rows[2]["comm_s"] > rows[0]["comm_s"] and rows[2]["vs_first"]["step_time"] > 1.0
    assert rows[0]["vs_first"] == {"step_time": 1.0, "tokens_per_s": 1.0, "tokens_per_step": 1.0}
    assert all(r["vs_first"]["tokens_per_step"] == 1.0 for r in rows)  # the same batch in every row
    assert rows[1]["vs_first"]["tokens_per_s"] == rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]

    # The files hold the same numbers: compare.json is --json's, compare.csv its rows flattened.
    assert json.loads((tmp_path / "compare.json").read_text()) == rows
    table = read_csv(tmp_path / "compare.csv")
    assert [t["name"] for t in table] == [r["name"] for r in rows]
    for t, r in zip(table, rows, strict=True):
        assert float(t["step_time_mean_s"]) == r["step_time_s"]["mean"]
        assert float(t["step_time_p95_s"]) == r["step_time_s"]["p95"]
        assert float(t["exposed_comm_s"]) == r["exposed_comm_s"]
        assert float(t["straggler_wait_s"]) == r["straggler_wait_s"]
        assert float(t["tokens_per_s"]) == r["tokens_per_s"]
        assert float(t["memory_total_gib"]) == r["memory_gib"]["total_gib"]
        assert float(t["tokens_per_s_vs_first"]) == r["vs_first"]["tokens_per_s"]
        assert float(t["tokens_per_step_vs_first"]) == r["vs_first"]["tokens_per_step"]
        assert int(t["ranks"]) == 16 and t["setup"] == r["setup"]
    assert (tmp_path / "compare.png").read_bytes()[:8] == PNG


def test_table_prints_each_row_with_its_numbers(capsys):
    rows = run_json(capsys, "compare", "h100-1024", "4x200G=" + FOUR_BY_200, *SMALL)
    code, out, err = ddplab(capsys, "compare", "h100-1024", "4x200G=" + FOUR_BY_200, *SMALL)
    assert code == 0, err
    table, below = out.splitlines()[2:4], out.splitlines()[4:]
    lines = {line.split()[0]: line for line in table}
    assert list(lines) == ["h100-1024", "4x200G"]
    # Both are the same class of job: its public record once, naming both (calibrate/record.py).
    assert below[0].startswith("h100-1024, 4x200G: public record    h100, eager, data parallel: ")
    # The same class, so the same record; the step its errors make is each row's own.
    shared = [{k: v for k, v in r["record"].items() if k != "step_s_at_errors"} for r in rows]
    assert shared[0] == shared[1] and shared[0]["rows"] > 0
    assert not any("at their errors" in line for line in below)
    for r in rows:
        at = r["record"]["step_s_at_errors"]
        assert at["median"] == pytest.approx(r["step_time_s"]["mean"] / (1 + r["record"]["step_error_median"]))
    for r in rows:
        line = lines[r["name"]]
        for shown in (
            fmt_seconds(r["step_time_s"]["mean"]),
            fmt_seconds(r["step_time_s"]["p95"]),
            fmt_seconds(r["exposed_comm_s"]),
            f"{r['tokens_per_s']:,.0f}",
            f"{r['memory_gib']['total_gib']:.2f}",
            f"{r['vs_first']['tokens_per_s']:.3f}x",
        ):
            assert shown in line, (shown, line)


def test_setup_syntax():
    assert parse_setup("h100-1024") == ("h100-1024", "h100-1024", (), "h100-1024")
    assert parse_setup("scenarios/examples/my-cluster.toml").name == "my-cluster"
    named = parse_setup("lemon=h100-1024:stragglers=17:1.4,100:2.0,noise.sigma=0.05")
    assert (named.name, named.scenario) == ("lemon", "h100-1024")
    # A piece without '=' continues the value before it; each value parsed once, as --set parses it.
    assert [(p.key, p.value) for p in named.sets] == [("stragglers", "17:1.4,100:2.0"), ("noise.sigma", 0.05)]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "ddplab compare: error: SETUP: give the set-ups to compare, e.g. `ddplab compare h100-1024"
             " h100-1024:network.nics_per_node=4,network.nic_gbit_s=200` (see --help)"),
        (["h100-1024", "nosuch.toml"],
         "ddplab compare: error: set-up 'nosuch.toml': scenario 'nosuch.toml': no such file: nosuch.toml"),
        (["h100-1024:foo"], "ddplab compare: error: set-up 'h100-1024:foo': expected KEY=VALUE after ':', got 'foo'"),
        (["h100-1024", "h100-1024"],
         "ddplab compare: error: set-up 'h100-1024': a second set-up named 'h100-1024'; name one NAME=SCENARIO..."),
        # A change written without its scenario reads as NAME=SCENARIO: named as the key it is.
        (["h100-1024", "training.mode=fsdp"],
         "ddplab compare: error: set-up 'training.mode=fsdp': training.mode is a scenario key, not a name; a change"
         " is written SCENARIO:KEY=VALUE, e.g. h100-1024:training.mode=fsdp"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(capsys, argv, line):
    got = refused(capsys, "compare", *argv)
    assert got == line


def test_a_bad_value_names_the_set_up(capsys):
    line = refused(capsys, "compare", "h100-1024", "scenarios/examples/my-cluster.toml", "--ranks", "12")
    assert line.startswith("ddplab compare: error: set-up 'h100-1024': ranks") and "12" in line, line


def test_unknown_key_names_the_set_up_and_the_key(capsys):
    line = refused(capsys, "compare", "h100-1024", "h100-1024:network.nics_per_nod=4")
    assert line.startswith(
        "ddplab compare: error: set-up 'h100-1024:network.nics_per_nod=4': network.nics_per_nod: unknown key (known: "
    ), line


def test_compare_is_sized_before_anything_runs(capsys):
    line = refused(capsys, "compare", "h100-1024", "h100-1024:ranks=16", "--steps", "1000000000")
    assert line.startswith("ddplab compare: error: 2 set-ups (the largest: ranks 1024 x steps 1000000000):"), line


# ---------------------------------------------------------------------------------------------------------------
# whatif: several keys in one --try, and --out


def test_one_try_may_change_several_keys(capsys):
    rows = run_json(capsys, "whatif", "h100-1024", *SMALL, "--try", "network.nics_per_node=4,network.nic_gbit_s=200",
                    "--try", "network.nic_gbit_s=200")  # fmt: skip
    assert [r["mitigation"] for r in rows] == ["nothing", "network.nics_per_node=4,network.nic_gbit_s=200",
                                               "network.nic_gbit_s=200"]  # fmt: skip
    both = run_json(capsys, "simulate", "h100-1024", *SMALL, "--set", "network.nics_per_node=4",
                    "--set", "network.nic_gbit_s=200")  # fmt: skip
    one = run_json(capsys, "simulate", "h100-1024", *SMALL, "--set", "network.nic_gbit_s=200")
    assert rows[1]["step_time_s"] == both["step_time_s"]["mean"] and rows[1]["tokens_per_s"] == both["tokens_per_s"]
    assert rows[2]["step_time_s"] == one["step_time_s"]["mean"]
    assert both["comm_s"] > one["comm_s"]  # the second key was applied too: half the NICs


def test_a_try_may_combine_a_named_fix_with_keys():
    from sim.scenario_file import scenario_data
    from sim.whatif import plan, rows

    row = rows(plan(scenario_data("straggler-lemon", ranks=32, steps=5), ["rebalance,accum=2"]))[1]
    sc = row.scenario
    assert sc.rebalance is True and sc.training.grad_accum == 2 and row.restart_s == 0.0
    # 16 samples a step: the 1.4 x rank gives up 4 (12 x 1.4 = 16.8), four others take a 17th.
    assert (
        row.note == "work sized to speed: rank 17 takes 12, 4 ranks take 17 samples a step (each had 16);"
        " 2 x the tokens per step"
    )


def test_whatif_out_writes_its_table_and_plot(capsys, tmp_path):
    argv = ["whatif", "straggler-lemon", "--ranks", "32", "--steps", "12", "--try", "rebalance", "--try", "accum=2"]
    rows = run_json(capsys, *argv)
    code, out, err = ddplab(capsys, *argv, "--out", str(tmp_path))
    assert code == 0, err
    assert json.loads((tmp_path / "whatif.json").read_text()) == rows
    table = read_csv(tmp_path / "whatif.csv")
    assert [t["mitigation"] for t in table] == ["nothing", "rebalance", "accum=2"]
    for t, r in zip(table, rows, strict=True):
        assert float(t["step_time_s"]) == r["step_time_s"] and float(t["tokens_per_s"]) == r["tokens_per_s"]
        assert f"{r['tokens_per_s']:>11,.0f}" in out and f"{r['speedup']:>9.3f}x" in out
        # The plot's bar is the row's step, split: its parts add up to the mean step time.
        parts = sum(r[k] for k in ("compute_s", "optimizer_s", "dataloader_s", "exposed_comm_s", "straggler_wait_s"))
        assert parts == pytest.approx(r["step_time_s"], rel=1e-9)
    assert (tmp_path / "whatif.png").read_bytes()[:8] == PNG
    assert out.splitlines()[-1] == f"whatif.csv, whatif.json and whatif.png in {tmp_path}/"


# ---------------------------------------------------------------------------------------------------------------
# goodput --out


def test_goodput_out_writes_what_it_prints(capsys, tmp_path):
    argv = ["goodput", "--mtbf-h", "49.5", "--interval-min", "60", "--work-h", "500"]
    o = run_json(capsys, *argv)
    code, out, err = ddplab(capsys, *argv, "--out", str(tmp_path))
    assert code == 0, err
    assert json.loads((tmp_path / "goodput.json").read_text()) == o
    table = {t["quantity"]: t for t in read_csv(tmp_path / "goodput.csv")}
    assert float(table["wall_per_work"]["simulated"]) == o["wall_per_work"]["simulated"]
    assert float(table["wall_per_work"]["analytic"]) == o["wall_per_work"]["analytic"]
    assert float(table["goodput"]["simulated"]) == o["goodput"]["simulated"]
    assert float(table["best_interval"]["analytic"]) == o["best_interval_min"]["analytic"]
    assert int(table["failures"]["simulated"]) == o["failures"]["simulated"]
    assert (
        table["daly_interval"]["simulated"] == ""
        and float(table["daly_interval"]["analytic"]) == o["daly_interval_min"]
    )
    # The printed table shows the same numbers.
    assert f"{o['wall_per_work']['simulated']:>9.4f}" in out and f"{o['goodput']['analytic']:>10.2%}" in out
    assert (tmp_path / "goodput.png").read_bytes()[:8] == PNG


# ---------------------------------------------------------------------------------------------------------------
# simulate --out: a single scale draws its breakdown; a sweep writes scaling.csv


def test_simulate_single_out_draws_the_breakdown(capsys, tmp_path):
    code, out, err = ddplab(capsys, "simulate", "h100-1024", *SMALL, "--out", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "breakdown.png").read_bytes()[:8] == PNG
    assert not (tmp_path / "scaling.png").exists()
    assert out.splitlines()[-1] == f"per-step and per-rank tables, Chrome trace and breakdown.png in {tmp_path}/"


def test_sweep_out_writes_scaling_csv(capsys, tmp_path):
    code, out, err = ddplab(capsys, "simulate", "h100-1024", "--sweep-ranks", "8,16", "--steps", "10", "--out",
                            str(tmp_path))  # fmt: skip
    assert code == 0, err
    summaries = json.loads((tmp_path / "summary.json").read_text())
    table = read_csv(tmp_path / "scaling.csv")
    assert [int(t["ranks"]) for t in table] == [8, 16]
    for t, s in zip(table, summaries, strict=True):
        assert float(t["step_time_p50_s"]) == s["step_time_s"]["p50"]
        assert float(t["exposed_comm_s"]) == s["exposed_comm_s"]
        assert float(t["tokens_per_s"]) == s["tokens_per_s"]
        assert f"{s['step_time_s']['p50']:.4f}" in out and f"{s['tokens_per_s']:,.0f}" in out
    assert (tmp_path / "scaling.png").read_bytes()[:8] == PNG
    last = f"per-step and per-rank tables, Chrome trace, scaling.png and scaling.csv in {tmp_path}/"
    assert out.splitlines()[-1] == last


# ---------------------------------------------------------------------------------------------------------------
# README.md shows compare's real output


def test_readme_shows_what_compare_prints(capsys, tmp_path):
    command = "$ ddplab compare h100-1024 scenarios/examples/my-cluster.toml --ranks 512 --out runs/compare\n"
    shown = (ROOT / "README.md").read_text().split(command, 1)[1].split("```", 1)[0].splitlines()
    code, out, err = ddplab(capsys, "compare", "h100-1024", MY_CLUSTER, "--ranks", "512", "--out", str(tmp_path))
    assert code == 0, err
    printed = out.splitlines()
    # The same table; the last line names the folder, runs/compare there.
    assert printed[:-1] == shown[:-1] and shown[-1] == "compare.csv, compare.json and compare.png in runs/compare/"


def test_a_row_that_changes_the_mode_sets_what_the_new_mode_has_no_use_for():
    """`--try mode=fsdp` on a DDP job with a bf16 hook and 100 MB buckets: FSDP refuses both (no
    comm hook, no buckets), so the row sets them to FSDP's and says so, rather than refusing the row;
    a key the row gives itself stays as given."""
    from sim.scenario_file import scenario_data
    from sim.whatif import plan, rows

    data = scenario_data("straggler-lemon", ranks=32, steps=5)
    data["training"] |= {"comm_hook": "bf16", "bucket_cap_mb": 100.0}
    fsdp, own = rows(plan(data, ["mode=fsdp", "mode=ddp,bucket_cap_mb=50"]))[1:]
    assert fsdp.scenario.training.mode == "fsdp" and fsdp.scenario.training.comm_hook == "none"
    assert fsdp.scenario.training.bucket_cap_mb == 25.0
    assert fsdp.note == "with comm_hook=none, bucket_cap_mb=25.0 (fsdp has no use for the job's)"
    assert own.scenario.training.bucket_cap_mb == 50.0 and own.scenario.training.comm_hook == "bf16" and own.note == ""
    # A first-bucket cap, which no --set could unset before `none`, is unset too.
    data["training"] |= {"first_bucket_mb": 1.0}
    (fsdp,) = rows(plan(data, ["mode=fsdp"]))[1:]
    assert fsdp.scenario.training.first_bucket_mb is None
    assert fsdp.note == "with comm_hook=none, bucket_cap_mb=25.0, first_bucket_mb=none (fsdp has no use for the job's)"


def test_a_row_stepping_another_batch_says_so(capsys):
    """The 4070 alone against the home-lab pair is 6.6x the tokens/s at half the global batch: a
    different job. The row's vs_first says by how much (0.5), and so does a line under the table;
    rows with the first row's batch get no line."""
    argv = ("compare", "homelab-1gbe", "homelab-10gbe", "alone=homelab-1gbe:ranks=1,stragglers=", "--steps", "3")
    rows = run_json(capsys, *argv)
    assert [r["vs_first"]["tokens_per_step"] for r in rows] == [1.0, 1.0, 0.5]
    code, out, err = ddplab(capsys, *argv)
    assert code == 0, err
    lines = out.splitlines()
    assert [x for x in lines if x.startswith("global batch")] == [
        "global batch against the first row's: alone 0.5x the tokens a step (ranks, micro-batch, accumulation or"
        " sequence differ)"
    ]
