"""The one scenario resolver (sim/scenario_file.py resolve, sim/patches.py): file < calibration <
--set < flags, each layer typed patches parsed once, the scenario built once, and the source of
every key recorded, so provenance credits whoever set a value (issue 27)."""

import dataclasses

import pytest

from sim.patches import Patch, apply_patches, flag_patches, parse_set, parse_sets
from sim.scenario_file import Refused, load_scenario, resolve


def test_a_set_is_parsed_once_into_a_typed_value():
    assert parse_set("noise.sigma=0.05") == Patch("noise.sigma", 0.05, "--set")
    assert parse_set("training.overlap=false").value is False
    assert parse_set("stragglers=17:1.4,100:2.0").value == "17:1.4,100:2.0"  # not TOML: the bare text
    assert parse_set(' name = "x y" ', "--try") == Patch("name", "x y", "--try")
    with pytest.raises(ValueError, match="--set: expected KEY=VALUE, got 'noise.sigma'"):
        parse_set("noise.sigma")


def test_each_key_names_the_layer_that_set_it_last():
    calibration = (Patch("noise.sigma", 0.3, "calibration", "measured"), Patch("compute.mfu", 0.4, "calibration"))
    r = resolve("h100-1024", calibration, parse_sets(["noise.sigma=0.01"]), flag_patches(ranks=64, steps=None))
    assert r.scenario.noise.sigma == 0.01 and r.scenario.compute.mfu == 0.4 and r.scenario.ranks == 64
    assert r.source("noise.sigma") == "--set"  # over the calibration's 0.3
    assert r.source("compute.mfu") == "calibration"
    assert r.source("ranks") == "--ranks"
    assert r.source("steps") == "h100-1024.toml"  # --steps not given: the file's
    assert r.source("network.nic_gbit_s") == "h100-1024.toml"
    assert r.source("compute.step_compute_s") == "default"  # no file sets it: sim/config.py's
    # The same values as the user's texts through load_scenario: one path, one answer. The
    # headers differ, as they should: only what --set changed is named there (sim/patches.py).
    by_sets = load_scenario("h100-1024", ["noise.sigma=0.01", "compute.mfu=0.4"], ranks=64)
    assert dataclasses.replace(by_sets, description="") == dataclasses.replace(r.scenario, description="")
    assert by_sets.description.endswith("; --set noise.sigma=0.01, compute.mfu=0.4")
    assert r.scenario.description.endswith("; --set noise.sigma=0.01")


def test_a_model_named_anew_drops_the_model_keys_set_before():
    data, origin = apply_patches(
        {"model": {"preset": "gpt2-760m"}},
        (Patch("model.n_layer", 30, "calibration"),),
        (Patch("model.preset", "gpt2-tiny", "--set"),),
    )
    assert data["model"] == {"preset": "gpt2-tiny"}
    assert set(origin) == {"model.preset"}


def test_a_refused_value_names_the_patch_that_set_it():
    with pytest.raises(Refused, match="^noise.sigma: ") as caught:
        resolve("h100-1024", (Patch("noise.sigma", -1.0, "calibration", "measured"),))
    assert caught.value.patch.source == "calibration"
    with pytest.raises(Refused) as caught:
        resolve("h100-1024", (Patch("noise.sigma", 0.1, "calibration"),), parse_sets(["noise.sigma=-1"]))
    assert caught.value.patch.source == "--set"  # the user's value, not the calibration's
