"""calib.json as typed records (calibrate/calibration.py): what `ddplab calibrate` writes reads
back equal, files from before --precision still read, and a damaged file is refused in one
line that names the key."""

import copy
import json

import pytest
from conftest import ROOT
from fake_runs import probe_run

from calibrate.calib import calibrate
from calibrate.calibration import Calibration

# measurements/validation/calib.json as committed on 2026-11-29: written before --precision,
# the per-size jitter and the collective jitter existed.
OLD = ROOT / "tests" / "calib-2026-11-29.json"


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    return calibrate([probe_run(tmp_path_factory.mktemp("c") / "1gbit" / "probe", speed={1: 1.5})], seed=0)


def test_a_calibration_reads_back_equal(calib):
    text = json.dumps(calib.to_json())
    back = Calibration.from_json(json.loads(text), "calib.json")
    assert back == calib
    assert back.compute.step_s.seconds(512) == pytest.approx(calib.compute.step_s.seconds(512))
    assert set(back.ranks) == {0, 1} and back.ranks[1].flagged
    # On disk the collective fit's fields sit in one table with its holdout and times.
    allreduce = json.loads(text)["networks"]["1gbit"]["collectives"]["allreduce"]
    assert {"alpha_s", "busbw_gb_s", "holdout_rel_err", "times_s"} <= set(allreduce)


def test_an_open_bandwidth_interval_reads_back_and_prints(calib):
    """calibrate/collective_fit.py leaves the busbw interval's upper end open (None) where the
    sizes measured do not bound it: the file carries null and the tables say so."""
    import dataclasses

    from workflow.render_calib import calibration_lines

    net = calib.networks["1gbit"]
    entry = net.collectives["allreduce"]
    fit = entry.fit._replace(busbw_ci_gb_s=(entry.fit.busbw_ci_gb_s[0], None))
    nets = {"1gbit": dataclasses.replace(net, collectives={"allreduce": dataclasses.replace(entry, fit=fit)})}
    opened = dataclasses.replace(calib, networks=nets)
    text = json.dumps(opened.to_json())
    assert json.loads(text)["networks"]["1gbit"]["collectives"]["allreduce"]["busbw_ci_gb_s"][1] is None
    assert Calibration.from_json(json.loads(text), "calib.json") == opened
    (row,) = [line for line in calibration_lines(opened) if line.startswith("1gbit") and "allreduce" in line]
    assert "-unbounded]" in row


def _same_values(old, new, where=""):
    """Every value of the old file, unchanged, in the new one (null = absent)."""
    if isinstance(old, dict):
        for k, v in old.items():
            if v is None:
                assert new.get(k) is None, f"{where}.{k}"
            else:
                _same_values(v, new[k], f"{where}.{k}")
    elif isinstance(old, list):
        assert len(old) == len(new), where
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _same_values(a, b, f"{where}[{i}]")
    else:
        assert old == new, where


def test_a_file_from_before_precision_reads_with_its_defaults():
    data = json.loads(OLD.read_text())
    assert "precision" not in data and "memory" not in data["compute"]
    c = Calibration.read(OLD)
    assert (c.precision, c.compiled, c.compute.memory, c.device_class) == ("fp32", False, None, None)
    assert c.noise.multipliers_by_micro_batch is None
    assert all(n.allreduce_jitter is None for n in c.networks.values())
    assert (
        c.networks["1gbit"].allreduce.busbw_gb_s == data["networks"]["1gbit"]["collectives"]["allreduce"]["busbw_gb_s"]
    )
    _same_values(data, c.to_json())


def _refused(calib, change) -> str:
    data = copy.deepcopy(calib.to_json())
    change(data)
    with pytest.raises(ValueError) as e:
        Calibration.from_json(data, "calib.json")
    return str(e.value)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d["compute"].pop("step_s"), "calib.json: compute.step_s: missing"),
        (lambda d: d["compute"].update(seq_len="64"), "calib.json: compute.seq_len: expected int, got '64'"),
        (lambda d: d["compute"]["step_s"].update(r2="high"), "compute.step_s.r2: expected float, got 'high'"),
        (lambda d: d["noise"].update(sigmaa=0.1), "calib.json: noise.sigmaa: unknown key"),
        (lambda d: d["ranks"].update(x=d["ranks"]["0"]), "calib.json: ranks.x: expected a key of type int, got 'x'"),
        (
            lambda d: d["networks"]["1gbit"]["collectives"]["allreduce"].pop("alpha_s"),
            "networks.1gbit.collectives.allreduce.alpha_s: missing",
        ),
        (
            lambda d: d["networks"]["1gbit"]["collectives"]["allreduce"]["alpha_ci_s"].append(1.0),
            "networks.1gbit.collectives.allreduce.alpha_ci_s: expected 2 values",
        ),
        (lambda d: d["networks"]["1gbit"]["collectives"].clear(), "networks.1gbit.collectives.allreduce: missing"),
        (lambda d: d.update(schema_version=2), "calib.json: not a ddplab-calib v1 file"),
    ],
)
def test_a_damaged_file_is_refused_naming_the_key(calib, change, message):
    assert message in _refused(calib, change)


def test_the_cli_says_it_in_one_line(calib, tmp_path, ddplab):
    data = calib.to_json()
    data["compute"]["optimizer_s"]["value"] = "fast"
    path = tmp_path / "calib.json"
    path.write_text(json.dumps(data))
    code, out, err = ddplab("simulate", "homelab-1gbe", "--calib", str(path), "--steps", "2")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip() == (
        f"ddplab simulate: error: --calib: {path}: compute.optimizer_s.value: expected float, got 'fast'"
    )


def test_a_file_nested_past_the_parser_is_one_line(tmp_path, ddplab):
    path = tmp_path / "calib.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = ddplab("simulate", "homelab-1gbe", "--calib", str(path), "--steps", "2")
    assert code == 2 and out == ""
    assert err == f"ddplab simulate: error: --calib: {path}: nested too deeply to be a calibration\n"
