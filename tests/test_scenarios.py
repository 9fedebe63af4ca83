"""The shipped presets load, and scenarios/README.md documents every key."""

import dataclasses

import pytest

from scenarios import SCENARIO_DIR, scenario_names
from sim.config import Scenario
from sim.scenario_file import load_scenario


def test_presets():
    assert {"homelab-1gbe", "homelab-10gbe", "h100-1024", "mi300x-1024"} <= set(scenario_names())


@pytest.mark.parametrize("name", scenario_names())
def test_preset_loads(name):
    sc = load_scenario(name)
    assert sc.name == name and sc.ranks >= 2


def test_cluster_presets_are_128_nodes_of_8():
    for name in ("h100-1024", "mi300x-1024"):
        sc = load_scenario(name)
        assert (sc.ranks, sc.network.gpus_per_node, sc.network.nics_per_node) == (1024, 8, 8)


def test_readme_documents_every_key():
    readme = (SCENARIO_DIR / "README.md").read_text()
    for f in dataclasses.fields(Scenario):
        if dataclasses.is_dataclass(f.type):
            assert f"`[{f.name}]`" in readme
            for sub in dataclasses.fields(f.type):
                if sub.init:  # not derived fields (model.shape)
                    assert f"| `{sub.name}` |" in readme, f"{f.name}.{sub.name}"
        else:
            assert f"| `{f.name}` |" in readme, f.name


def test_every_preset_constant_has_a_comment_or_is_self_evident():
    # Numbers in presets carry their source: any line with a float constant has a comment
    # (or sits under a comment line that explains it), except plain switches and counts.
    for name in scenario_names():
        lines = (SCENARIO_DIR / f"{name}.toml").read_text().splitlines()
        for i, line in enumerate(lines):
            key, _, value = line.partition("=")
            value = value.split("#")[0].strip()
            if "." in value and value.replace(".", "").isdigit() and float(value) not in (0.0, 1.0):
                assert "#" in line or lines[i - 1].startswith("#"), f"{name}: {line}"


def test_none_unsets_an_optional_key_and_nothing_else():
    """TOML has no null, so `--set KEY=none` is how a command line unsets an optional key (a
    first-bucket cap, a fixed MFU); a key that cannot be unset refuses it, naming what it takes."""
    sc = load_scenario("h100-1024", ["training.first_bucket_mb=1", "compute.mfu=0.4"])
    assert sc.training.first_bucket_mb == 1.0 and sc.compute.mfu == 0.4
    sc = load_scenario("h100-1024", ["training.first_bucket_mb=none", "compute.mfu=none"])
    assert sc.training.first_bucket_mb is None and sc.compute.mfu is None
    with pytest.raises(ValueError, match=r"training.bucket_cap_mb: expected float, got 'none'"):
        load_scenario("h100-1024", ["training.bucket_cap_mb=none"])
    with pytest.raises(ValueError, match=r"training.first_bucket_mb: expected float or none, got 'big'"):
        load_scenario("h100-1024", ["training.first_bucket_mb=big"])
