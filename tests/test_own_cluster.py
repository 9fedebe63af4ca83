"""Issue 16, item 2, "Your own cluster": a scenario file's ``base`` is a preset name or a path
relative to the file naming it; a file without ``base`` sets every key a prediction rests on
(sim/scenario_file.py MUST_SET) or is refused in one line; `ddplab scenarios --keys` lists
every key from sim/config.py; README.md's worked file, scenarios/examples/my-cluster.toml, loads
from any directory and is not a preset.

CLI cases run the real entry point in-process (`ddplab.cli.main`): exit 2 and one stderr line.
"""

import dataclasses
import json

import pytest
from conftest import ROOT

from calibrate.apply import provenance
from ddplab import cli
from scenarios import SCENARIO_DIR, scenario_names
from sim.config import Scenario
from sim.scenario_file import MUST_SET, load_scenario, load_toml, missing_keys, resolve
from sim.scenario_keys import scenario_keys, unit_of

EXAMPLE = SCENARIO_DIR / "examples" / "my-cluster.toml"
# Every MUST_SET key, for a from-scratch file that is complete (a 2-node gloo pair).
COMPLETE = """ranks = 2
[model]
preset = "gpt2-tiny"
[compute]
peak_tflop_s = 58.0
optimizer_s = 0.03
[network]
backend = "gloo"
algorithm = "ring"
gpus_per_node = 1
nics_per_node = 1
nic_gbit_s = 1.0
[noise]
distribution = "none"
"""


def ddplab(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv: str) -> str:
    """The one stderr line of a refused command (exit 2, nothing on stdout)."""
    code, out, err = ddplab(capsys, *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# 1. base: a preset name, or a path relative to the file that names it


def test_relative_base_is_read_from_the_naming_files_folder(tmp_path, monkeypatch):
    write(tmp_path / "site" / "cluster.toml", 'base = "h100-1024"\n[network]\nnic_gbit_s = 200.0\n')
    mine = write(tmp_path / "site" / "mine.toml", 'base = "cluster.toml"\nranks = 64\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # resolved from the current directory before: "no such file"
    sc = load_scenario(str(mine))
    assert (sc.ranks, sc.network.nic_gbit_s, sc.network.nics_per_node) == (64, 200.0, 8)


def test_dotdot_base_and_a_chain_of_bases(tmp_path, monkeypatch):
    write(tmp_path / "root.toml", 'base = "h100-1024"\nsteps = 7\n[compute]\noptimizer_s = 0.5\n')
    write(tmp_path / "mid" / "b.toml", 'base = "../root.toml"\n[network]\nnics_per_node = 4\n')
    top = write(tmp_path / "mid" / "deep" / "a.toml", 'base = "../b.toml"\nranks = 16\n')
    monkeypatch.chdir(ROOT)
    sc = load_scenario(str(top))
    # each level's own key, and h100-1024's underneath them all
    assert (sc.ranks, sc.network.nics_per_node, sc.steps, sc.compute.optimizer_s) == (16, 4, 7, 0.5)
    assert sc.compute.peak_tflop_s == 989.4 and sc.network.nic_gbit_s == 400.0


def test_a_preset_name_still_means_the_preset(tmp_path, monkeypatch):
    # A file of the preset's name beside the naming file (and in the current directory) is not it.
    write(tmp_path / "h100-1024.toml", 'base = "a100-8"\nranks = 8\n')
    mine = write(tmp_path / "mine.toml", 'base = "h100-1024"\n')
    monkeypatch.chdir(tmp_path)
    sc = load_scenario(str(mine))
    assert (sc.ranks, sc.compute.peak_tflop_s) == (1024, 989.4)


def test_missing_base_file_is_one_line_naming_file_and_base(capsys, tmp_path):
    mine = write(tmp_path / "site" / "mine.toml", 'base = "../nope.toml"\n')
    line = refused(capsys, "simulate", str(mine))
    assert line == f"ddplab simulate: error: {mine}: base '../nope.toml': no such file: {mine.parent / '../nope.toml'}"


def test_unknown_preset_base_is_one_line(capsys, tmp_path):
    mine = write(tmp_path / "mine.toml", 'base = "h200-1024"\n')
    line = refused(capsys, "simulate", str(mine))
    names = ", ".join(scenario_names())
    assert line == f"ddplab simulate: error: {mine}: base 'h200-1024': not a preset ({names}) nor a .toml path"


def test_a_cycle_of_bases_is_refused(capsys, tmp_path):
    a = write(tmp_path / "a.toml", 'base = "b.toml"\n')
    b = write(tmp_path / "b.toml", 'base = "./a.toml"\n')
    line = refused(capsys, "simulate", str(a))
    chain = f"{tmp_path / 'a.toml'} is already in this file's chain of bases"
    assert line == f"ddplab simulate: error: {b}: base './a.toml': a cycle ({chain})"


def test_a_base_that_is_not_a_string(capsys, tmp_path):
    mine = write(tmp_path / "mine.toml", "base = 3\n")
    line = refused(capsys, "simulate", str(mine))
    assert line == f"ddplab simulate: error: {mine}: base: expected a preset's name or a .toml path, not 3"


def test_provenance_cites_the_relative_bases_comments(tmp_path, monkeypatch):
    # calibrate/apply.py reads the chain of comments the same way the loader reads the keys.
    monkeypatch.chdir(tmp_path)
    rows = {r["key"]: r["source"] for r in provenance(resolve(str(EXAMPLE)))}
    assert rows["network.nic_gbit_s"] == "assumed: my-cluster.toml (HDR InfiniBand, as a100-8.toml's)"
    assert rows["network.nic_efficiency"].startswith("assumed: h100-1024.toml (46-49 of 50 GB/s")


# ---------------------------------------------------------------------------------------------
# 2. a file without base sets what a prediction rests on, or is refused


def test_from_scratch_file_missing_keys_is_refused_in_one_line(capsys, tmp_path):
    mine = write(tmp_path / "mine.toml", 'name = "mine"\nranks = 16\n[network]\ngpus_per_node = 8\n')
    line = refused(capsys, "simulate", str(mine))
    assert line == (
        f"ddplab simulate: error: {mine}: no base, and not set: model.preset or model.hf_config or model.n_layer,"
        " compute.peak_tflop_s or compute.step_compute_s, compute.hbm_tb_s or compute.optimizer_s,"
        " network.nics_per_node, network.nic_gbit_s, noise.distribution"
        ' (set them, or start from a preset: base = "h100-1024")'
    )


def test_an_empty_file_names_every_key_it_must_set(tmp_path):
    mine = write(tmp_path / "empty.toml", "")
    with pytest.raises(ValueError) as e:
        load_scenario(str(mine))
    assert missing_keys({}) == ["ranks", *[" or ".join((k, *alt)) for k, alt in MUST_SET.items() if k != "ranks"]]
    assert str(e.value).startswith(
        f"{mine}: no base, and not set: ranks, model.preset or model.hf_config or model.n_layer, "
    )


def test_a_complete_from_scratch_file_loads(tmp_path):
    sc = load_scenario(str(write(tmp_path / "pair.toml", COMPLETE)))
    assert (sc.ranks, sc.model.preset, sc.compute.optimizer_s, sc.network.nic_gbit_s) == (2, "gpt2-tiny", 0.03, 1.0)


def test_step_compute_s_stands_in_for_the_peak(tmp_path):
    text = COMPLETE.replace("peak_tflop_s = 58.0", "step_compute_s = 0.25")
    sc = load_scenario(str(write(tmp_path / "pair.toml", text)))
    assert sc.compute.step_compute_s == 0.25
    without = write(tmp_path / "none.toml", COMPLETE.replace("peak_tflop_s = 58.0\n", ""))
    with pytest.raises(ValueError, match=r"not set: compute\.peak_tflop_s or compute\.step_compute_s \(set"):
        load_scenario(str(without))


def test_a_wrong_key_or_type_is_said_before_what_is_missing(capsys, tmp_path):
    mine = write(tmp_path / "mine.toml", 'ranks = "many"\n')
    assert refused(capsys, "simulate", str(mine)) == "ddplab simulate: error: ranks: expected int, got 'many'"
    mine.write_text("rank = 8\n")
    assert refused(capsys, "simulate", str(mine)).startswith("ddplab simulate: error: rank: unknown key (known: ")


@pytest.mark.parametrize("name", scenario_names())
def test_every_preset_without_base_sets_what_it_must(name):
    data = load_toml(SCENARIO_DIR / f"{name}.toml")
    if "base" not in data:
        assert missing_keys(data) == []
    assert load_scenario(name).name == name


def test_the_worked_example_is_a_file_not_a_preset(tmp_path, monkeypatch):
    assert "my-cluster" not in scenario_names()
    monkeypatch.chdir(tmp_path)  # its relative base works from anywhere
    sc = load_scenario(str(EXAMPLE))
    assert (sc.name, sc.ranks, sc.network.nics_per_node, sc.network.nic_gbit_s) == ("my-cluster", 512, 4, 200.0)
    assert (sc.network.gpus_per_node, sc.compute.hbm_tb_s, sc.noise.sigma) == (8, 3.35, 0.02)  # h100-1024's


# ---------------------------------------------------------------------------------------------
# 3. ddplab scenarios --keys


def _schema_defaults() -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(Scenario):
        if dataclasses.is_dataclass(f.type):
            out |= {f"{f.name}.{sub.name}": sub.default for sub in dataclasses.fields(f.type) if sub.init}
        else:
            out[f.name] = f.default
    return out


def test_every_field_appears_with_its_default():
    rows = {r["key"]: r for r in scenario_keys()}
    defaults = _schema_defaults()
    assert set(rows) == {"base", *defaults}
    assert {k: rows[k]["default"] for k in defaults} == defaults
    assert rows["network.nic_gbit_s"]["default"] == 400.0 and rows["compute.mfu"]["default"] is None
    assert [k for k, r in rows.items() if not r["meaning"]] == []  # each field has its docstring


def test_units_come_from_the_names():
    got = {k: unit_of(k) for k in ("nic_gbit_s", "intra_gb_s", "hbm_tb_s", "peak_tflop_s", "optimizer_s")}
    assert got == {
        "nic_gbit_s": "Gbit/s",
        "intra_gb_s": "GB/s",
        "hbm_tb_s": "TB/s",
        "peak_tflop_s": "TFLOP/s",
        "optimizer_s": "s",
    }
    assert (unit_of("compress_s_per_gb"), unit_of("bucket_cap_mb"), unit_of("comm_per_h")) == ("s/GB", "MiB", "1/h")
    assert (unit_of("net_hop_us"), unit_of("memory_peak_gib"), unit_of("ranks")) == ("us", "GiB", "")


def test_keys_text_one_line_per_key(capsys):
    code, out, err = ddplab(capsys, "scenarios", "--keys")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert (
        lines[0]
        == '# every scenario key (sim/config.py); * = a file without base must set it, or use base = "h100-1024"'
    )
    assert lines[1].split() == ["key", "unit", "default", "meaning"]
    assert len(lines) == 2 + len(scenario_keys())
    row = next(line for line in lines if line.startswith("network.nic_gbit_s "))
    assert row.split(None, 4) == ["network.nic_gbit_s", "*", "Gbit/s", "400.0", "Line rate of one NIC, Gbit/s."]
    row = next(line for line in lines if line.startswith("compute.mfu "))
    assert row.split(None, 3)[:3] == ["compute.mfu", "-", "unset"]
    starred = {line.split()[0] for line in lines[2:] if line.split()[1] == "*"}
    assert starred == set(MUST_SET)


def test_keys_json_is_the_same_rows(capsys):
    code, out, _ = ddplab(capsys, "scenarios", "--keys", "--json")
    rows = json.loads(out)
    assert code == 0 and rows == json.loads(json.dumps(scenario_keys()))
    assert rows[0]["key"] == "base"
    nic = next(r for r in rows if r["key"] == "network.nics_per_node")
    assert nic == {
        "key": "network.nics_per_node",
        "unit": "",
        "default": 8,
        "meaning": "NICs per node, one ring channel each.",
        "must_set_without_base": True,
    }


def test_plain_scenarios_still_lists_the_presets(capsys):
    code, out, _ = ddplab(capsys, "scenarios", "--json")
    assert code == 0 and [r["name"] for r in json.loads(out)] == scenario_names()


# ---------------------------------------------------------------------------------------------
# 4. README.md's section shows the committed file


def test_readme_shows_the_worked_file():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("#### Your own cluster", 1)[1].split("\n### ", 1)[0]
    assert "$ ddplab simulate scenarios/examples/my-cluster.toml" in section
    assert "$ ddplab scenarios --keys | head" in section
    for line in EXAMPLE.read_text().splitlines():
        if line and not line.startswith("#"):
            assert line in section, line
