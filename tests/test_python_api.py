"""docs/architecture.md "From Python": the notebook block runs as it stands, and its numbers are
the commands' own (the same scenario, seed and engine; the command only prints)."""

import json
import re

import pytest
from conftest import ROOT, in_process

DOC = ROOT / "docs" / "architecture.md"


def block() -> str:
    text = DOC.read_text()
    section = text[text.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def ran():
    ns: dict = {}
    exec(compile(block(), str(DOC), "exec"), ns)  # noqa: S102 - the documented block, as a reader runs it
    return ns


def test_the_block_runs_and_says_what_each_command_would(ran, capsys):
    code, out, _ = in_process(capsys, "simulate", "homelab-1gbe", "--ranks", "2", "--steps", "50", "--json")
    assert code == 0
    cli = json.loads(out)
    s = ran["summary"]
    assert s.step_time_s.p50 == cli["step_time_s"]["p50"] and s.exposed_comm_s == cli["exposed_comm_s"]
    code, out, _ = in_process(capsys, "sweep", "h100-1024", "--ranks", "8", "--steps", "5", "--vary", "noise.sigma",
                              "0.01", "0.05", "--seeds", "3", "--workers", "1", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["rows"] == ran["result"]["rows"]
    assert [r.name for r in ran["rows"]] == ["h100-1024", "h100-1024:training.bucket_cap_mb=100"]
    code, out, _ = in_process(capsys, "compare", "h100-1024", "h100-1024:training.bucket_cap_mb=100", "--ranks", "64",
                              "--steps", "20", "--json")  # fmt: skip
    assert code == 0

    def numbers(rows):  # wall_s is this machine's time to simulate, not an answer
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in json.loads(json.dumps(rows, default=str))]

    assert numbers(json.loads(out)) == numbers([r.to_json_dict() for r in ran["rows"]])
    assert [r["mitigation"] for r in ran["found"].rows] == ["nothing", "exclude-slowest"]
    assert 0 < ran["g"]["goodput"]["simulated"] < 1 and 0 < ran["g"]["goodput"]["analytic"] < 1
    assert ran["files"] == [] and isinstance(ran["warning"], str | None)


def test_the_named_functions_exist():
    from workflow import calibration, demo, layouts, stragglers

    for mod, name in ((calibration, "calibrate_runs"), (calibration, "validate_runs"),
                      (calibration, "public_validation"), (layouts, "plan_layouts"),
                      (stragglers, "find_stragglers"), (demo, "Demo")):  # fmt: skip
        assert callable(getattr(mod, name)), name
