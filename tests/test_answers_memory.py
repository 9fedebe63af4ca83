"""Issue 22, item 3 and its table's row 3: memory is checked by default.

Every preset carries its device's memory (compute.device_memory_gib, checked here against the
figure its comment cites); a configuration whose per-GPU estimate (sim/memory.py) exceeds it
gets no step time, names what would fit with each one's peak, and exits 3; whatif, compare and
sweep mark such rows OOM instead of simulating or ranking them.
"""

import json

import pytest

from scenarios import SCENARIO_DIR, scenario_names
from sim.config import ComputeConfig
from sim.memory import estimate_memory
from sim.memory_fit import MICRO_BATCH, alternatives, fit, with_changes
from sim.scenario_file import load_scenario
from tests.conftest import in_process

LLAMA = "llama3-8b-1024"


def total(name: str, *sets: str, ranks: int | None = None) -> float:
    return estimate_memory(load_scenario(name, list(sets), ranks=ranks)).total_gib


def memory_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith("memory/GPU"))


# --- the presets' device memory, against the figures their comments cite -------------------------

MIB, KIB = 1 / 1024, 1 / 1024**2  # in GiB
SOURCES = {
    # preset: (GiB its source gives, the figure as the comment writes it)
    "h100-1024": (81_559 * MIB, "81,559 MiB"),  # nvidia-smi on an H100 80GB HBM3
    "a100-8": (81_920 * MIB, "81,920 MiB"),  # nvidia-smi on an A100 80GB
    "mi300x-1024": (201_310_208 * KIB, "201,310,208 KiB"),  # rocminfo's VRAM pool on an MI300X
    "homelab-1gbe": (6 * 16 / 8, "six 16 Gbit chips"),  # the RTX 4070's 12 GB of GDDR6X
    "homelab-10gbe": (6 * 16 / 8, "six 16 Gbit chips"),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_preset_device_memory_is_its_sources(name):
    gib, cited = SOURCES[name]
    sc = load_scenario(name)
    assert sc.compute.device_memory_gib == pytest.approx(gib, abs=0.005)  # written to 0.01 GiB
    line = next(x for x in (SCENARIO_DIR / f"{name}.toml").read_text().splitlines() if "device_memory_gib" in x)
    assert cited in line, line


def test_presets_on_an_h100_carry_its_memory_and_the_default_is_an_h100s():
    assert ComputeConfig().device_memory_gib == load_scenario("h100-1024").compute.device_memory_gib
    for name in scenario_names():
        sc = load_scenario(name)
        if sc.compute.device_class == "h100":  # every preset built on h100-1024
            assert sc.compute.device_memory_gib == pytest.approx(81_559 * MIB, abs=0.005), name


def test_every_preset_fits_its_device_but_ddp_llama3_8b():
    """The presets describe configurations that run; llama3-8b-1024 is DDP on purpose, to show
    what does not (its header says so)."""
    for name in scenario_names():
        f = fit(load_scenario(name))
        assert f.checked and f.fits == (name != LLAMA), (name, f)
    header = (SCENARIO_DIR / f"{LLAMA}.toml").read_text()
    assert "exits 3" in header and "training.mode=fsdp" in header


def test_the_demos_scenarios_fit():
    """workflow/demo.py simulates the engine directly; what it simulates fits all the same."""
    from workflow.plan import HOMELAB_SET, LEMON, LEMON_RANK, PLATFORMS

    for name in PLATFORMS:
        preset, sets = ("homelab-1gbe", HOMELAB_SET) if name == "homelab" else (name, [])
        for ranks in (2, 1024):
            assert fit(load_scenario(preset, sets, ranks=ranks)).fits, (name, ranks)
    lemon = load_scenario("h100-1024", [f"stragglers={LEMON_RANK}:{LEMON}"], ranks=1024)
    assert fit(lemon).fits and fit(lemon).total_gib == pytest.approx(44.4, abs=0.1)


def test_the_home_lab_presets_fit_the_4070_only_with_activation_checkpointing():
    """The seed's 760M in pure bf16 under DDP needs 12.2 GiB on a 12 GiB card: the presets
    checkpoint activations (8.2 GiB); without it, simulate names the fixes."""
    for name in ("homelab-1gbe", "homelab-10gbe"):
        sc = load_scenario(name)
        assert sc.training.activation_checkpointing and fit(sc).total_gib < 9
        off = with_changes(sc, {"training.activation_checkpointing": False})
        assert not fit(off).fits and 12 < fit(off).total_gib < 12.5
        named = {a.text for a in alternatives(off)}
        assert {"training.mode=fsdp", "training.activation_checkpointing=true", "training.micro_batch_size=3"} <= named


# --- the issue's row 3, rerun: DDP Llama 3 8B on 1024 H100s --------------------------------------


def test_issue_row_3_ddp_llama3_8b_exits_3_and_names_fsdp_with_its_peak(capsys):
    """Was: "a 0.945 s step, 554,653 tokens/s, exit 0" for 193 GiB a GPU on an 80 GB part."""
    code, out, err = in_process(capsys, "simulate", LLAMA, "--steps", "5")
    assert code == 3, err
    ddp, fsdp = total(LLAMA), total(LLAMA, "training.mode=fsdp")
    assert ddp == pytest.approx(193.18, abs=0.01) and fsdp < 79.65 < ddp
    step = next(line for line in out.splitlines() if line.strip().startswith("step time"))
    assert "none: out of memory" in step and f"{ddp:.2f} GiB" in step and "79.65 GiB" in step
    assert "tokens/s" not in out and "efficiency" not in out  # nothing pretends to have run
    assert "does NOT fit 79.65 GiB" in memory_line(out)
    fix = next(line for line in out.splitlines() if "training.mode=fsdp" in line)
    assert fix.split()[-2] == f"{fsdp:.2f}"  # the printed peak is sim/memory.py's for FSDP
    assert "--ignore-memory" in out


def test_ddp_llama3_8b_json_is_the_verdict_with_the_alternatives(capsys):
    code, out, _ = in_process(capsys, "simulate", LLAMA, "--steps", "5", "--json")
    assert code == 3
    v = json.loads(out)
    assert v["verdict"] == "out_of_memory" and "step_time_s" not in v
    assert v["peak_gib"] == pytest.approx(total(LLAMA), rel=1e-12)
    assert v["device_memory_gib"] == 79.65 and v["memory_gib"]["fits"] is False
    assert v["alternatives"][0] == {
        "set": "training.mode=fsdp",
        "peak_gib": pytest.approx(total(LLAMA, "training.mode=fsdp")),
    }


def test_a_ddp_jobs_own_keys_do_not_hide_the_fsdp_that_fits(capsys):
    """A DDP job with a bf16 hook and 100 MB buckets: FSDP refuses both (no comm hook, no buckets),
    which hid it from "what would fit"; it is suggested with them set to FSDP's, and those keys
    are what `simulate` then runs."""
    sets = ("training.comm_hook=bf16", "training.bucket_cap_mb=100")
    code, out, _ = in_process(
        capsys, "simulate", LLAMA, "--steps", "5", "--json", *(w for s in sets for w in ("--set", s))
    )
    assert code == 3
    first = json.loads(out)["alternatives"][0]
    assert first["set"] == "training.mode=fsdp,training.comm_hook=none,training.bucket_cap_mb=25.0"
    assert first["peak_gib"] == pytest.approx(total(LLAMA, "training.mode=fsdp"))
    # A first-bucket cap is unset, as --set says it (`none`: TOML has no null), and the suggestion
    # runs: simulate takes every key it names.
    sets += ("training.first_bucket_mb=1",)
    code, out, _ = in_process(
        capsys, "simulate", LLAMA, "--steps", "5", "--json", *(w for s in sets for w in ("--set", s))
    )
    first = json.loads(out)["alternatives"][0]
    assert first["set"] == (
        "training.mode=fsdp,training.comm_hook=none,training.bucket_cap_mb=25.0,training.first_bucket_mb=none"
    )
    code, out, err = in_process(
        capsys, "simulate", LLAMA, "--steps", "5", "--json", *(w for s in sets for w in ("--set", s)),
        *(w for s in first["set"].split(",") for w in ("--set", s)),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["memory_gib"]["total_gib"] == pytest.approx(first["peak_gib"], rel=1e-12)


def test_fsdp_llama3_8b_runs_and_fits(capsys):
    code, out, err = in_process(capsys, "simulate", LLAMA, "--steps", "5", "--set", "training.mode=fsdp", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["step_time_s"]["mean"] > 0 and s["memory_gib"]["fits"] is True
    assert s["memory_gib"]["total_gib"] == pytest.approx(total(LLAMA, "training.mode=fsdp"))


def test_ignore_memory_simulates_and_says_the_estimate_exceeds_the_device(capsys):
    code, out, err = in_process(capsys, "simulate", LLAMA, "--ranks", "16", "--steps", "3", "--ignore-memory")
    assert code == 0, err
    assert "step time" in out and "tokens/s" in out
    line = memory_line(out)
    assert "does NOT fit 79.65 GiB" in line and "simulated anyway" in line


def test_device_gib_overrides_the_presets_memory(capsys):
    code, out, _ = in_process(capsys, "simulate", LLAMA, "--ranks", "16", "--steps", "3", "--device-gib", "200")
    assert code == 0 and "fits 200 GiB" in memory_line(out)
    code, out, _ = in_process(capsys, "simulate", "h100-1024", "--ranks", "8", "--steps", "3", "--device-gib", "40")
    assert code == 3 and "none: out of memory" in out  # 760M's 44.4 GiB on a 40 GiB part
    code, _, err = in_process(capsys, "simulate", "h100-1024", "--device-gib", "0")
    assert code == 2 and "--device-gib" in err


def test_a_cpu_only_rank_is_not_checked(capsys):
    """compute.device_memory_gib = 0: a gloo lab with no GPU, whose host RAM the OS pages."""
    sets = ("--set", "compute.device_memory_gib=0")
    code, out, err = in_process(capsys, "simulate", LLAMA, "--ranks", "16", "--steps", "3", *sets)
    assert code == 0, err
    assert "fit" not in memory_line(out)
    code, _, err = in_process(capsys, "simulate", "h100-1024", "--set", "compute.device_memory_gib=-1")
    assert code == 2 and "compute.device_memory_gib" in err and "-1" in err


# --- what would fit, fits --------------------------------------------------------------------------

CASES = [
    # (preset, --set, ranks, device GiB (None: the preset's), changes in each alternative)
    (LLAMA, [], None, None, 1),  # FSDP alone
    ("homelab-1gbe", ["training.activation_checkpointing=false"], None, None, 1),  # three single fixes
    ("h100-1024", ["training.micro_batch_size=32"], None, None, 1),  # checkpointing, or micro-batch 17
    (LLAMA, [], 8, 40.0, 2),  # FSDP + checkpointing: neither alone shards 8 ways enough
    ("h100-1024", ["training.micro_batch_size=32"], None, 12.0, 2),  # FSDP + a smaller micro-batch
]


@pytest.mark.parametrize(("name", "sets", "ranks", "device", "changes"), CASES)
def test_every_alternative_fits_when_applied_and_none_is_more_than_needed(name, sets, ranks, device, changes):
    sc = load_scenario(name, sets, ranks=ranks)
    device = device or sc.compute.device_memory_gib
    assert fit(sc).total_gib > device
    found = alternatives(sc, device)
    assert found and {len(a.changes) for a in found} == {changes}  # the fewest changes that fit
    for a in found:
        # Applied as a user would (--set text), re-estimated: it fits, at the peak named.
        applied = load_scenario(name, [*sets, *a.text.split(",")], ranks=sc.ranks)
        assert estimate_memory(applied).total_gib == pytest.approx(a.total_gib, rel=1e-12)
        assert a.total_gib <= device
        # The largest micro-batch that fits: one more does not.
        if MICRO_BATCH in a.changes:
            bigger = with_changes(sc, a.changes | {MICRO_BATCH: a.changes[MICRO_BATCH] + 1})
            assert estimate_memory(bigger).total_gib > device
        # A combination is named only where none of its parts fits alone.
        if len(a.changes) > 1:
            for key, value in a.changes.items():
                alone = {key: 1} if key == MICRO_BATCH else {key: value}  # a micro-batch at its smallest
                assert estimate_memory(with_changes(sc, alone)).total_gib > device


def test_no_alternative_when_nothing_fits():
    sc = load_scenario("h100-1024", ["model.preset=llama3-70b", "training.mode=fsdp"], ranks=8)
    assert alternatives(sc, 10.0) == []


def test_a_candidate_the_scenario_refuses_is_skipped():
    """{"training.mode": "hsdp"} is in the list: where this version has no HSDP it is refused by
    the config (ValueError) and skipped, not named."""
    from sim.memory_fit import CANDIDATES

    assert {"training.mode": "hsdp"} in CANDIDATES
    named = [a.text for a in alternatives(load_scenario(LLAMA))]
    try:
        with_changes(load_scenario(LLAMA), {"training.mode": "hsdp"})
    except ValueError:
        assert named == ["training.mode=fsdp"]
    else:  # HSDP merged: it is named too, and fits
        assert "training.mode=hsdp" in named


# --- whatif, compare and sweep mark OOM rows --------------------------------------------------------


def test_whatif_marks_oom_rows_and_ranks_only_what_runs(capsys, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr("workflow.whatif.plot_breakdown", lambda rows, labels, *a, **k: drawn.extend(labels))
    argv = ["whatif", LLAMA, "--ranks", "16", "--steps", "3", "--try", "training.mode=fsdp"]
    code, out, err = in_process(capsys, *argv, "--try", "training.activation_checkpointing=true", "--json")
    assert code == 0, err
    nothing, fsdp, ckpt = json.loads(out)
    for row, sets in ((nothing, ()), (ckpt, ("training.activation_checkpointing=true",))):
        assert row["oom"] and row["step_time_s"] is None and row["tokens_per_s"] is None
        assert row["memory_gib"] == pytest.approx(total(LLAMA, *sets, ranks=16))
    assert not fsdp["oom"] and fsdp["step_time_s"] > 0
    assert fsdp["memory_gib"] == pytest.approx(total(LLAMA, "training.mode=fsdp", ranks=16))
    assert fsdp["speedup"] is None  # against a base that cannot run there is no ratio
    code, out, _ = in_process(capsys, *argv, "--out", str(tmp_path))
    oom = next(line for line in out.splitlines() if line.startswith("nothing"))
    assert f"OOM: {total(LLAMA, ranks=16):.2f} GiB per GPU > 79.65 GiB" in oom
    assert [label.split("\n")[0] for label in drawn] == ["training.mode=fsdp"]  # no OOM row drawn as a result


def test_whatif_keeps_ratios_of_rows_that_run(capsys):
    code, out, _ = in_process(
        capsys, "whatif", "h100-1024", "--ranks", "8", "--steps", "3",
        "--try", "training.micro_batch_size=64", "--try", "rebalance", "--json",
    )  # fmt: skip
    nothing, big, rebalance = json.loads(out)
    assert code == 0 and nothing["speedup"] == 1.0 and rebalance["speedup"] > 0
    assert big["oom"] and big["speedup"] is None and big["memory_gib"] > 79.65


def test_compare_marks_oom_rows(capsys, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr("workflow.compare.plot_breakdown", lambda rows, labels, *a, **k: drawn.extend(labels))
    setups = [LLAMA, f"fsdp={LLAMA}:training.mode=fsdp"]
    code, out, err = in_process(capsys, "compare", *setups, "--ranks", "16", "--steps", "3", "--json")
    assert code == 0, err
    ddp, fsdp = json.loads(out)
    assert ddp["verdict"] == "out_of_memory" and "step_time_s" not in ddp
    assert ddp["peak_gib"] == pytest.approx(total(LLAMA, ranks=16))
    assert fsdp["step_time_s"]["mean"] > 0 and fsdp["vs_first"]["tokens_per_s"] is None
    code, out, _ = in_process(capsys, "compare", *setups, "--ranks", "16", "--steps", "3", "--out", str(tmp_path))
    row = next(line for line in out.splitlines() if line.startswith(LLAMA))
    assert "OOM: 193.18 GiB per GPU > 79.65 GiB" in row
    assert [label.split("\n")[0] for label in drawn] == ["fsdp"]
    csv = (tmp_path / "compare.csv").read_text().splitlines()
    assert csv[1].endswith(",True") and csv[2].endswith(",False")


def test_sweep_marks_oom_rows_runs_and_draws_only_what_fits(capsys, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr("workflow.sweep_out.plot_sweep", lambda rows, keys, path: drawn.extend(rows))
    argv = ["sweep", LLAMA, "--ranks", "16", "--steps", "3", "--vary", "training.mode", "ddp", "fsdp"]
    code, out, err = in_process(capsys, *argv, "--seeds", "2", "--workers", "1", "--json", "--out", str(tmp_path))
    assert code == 0, err
    result = json.loads(out)
    ddp, fsdp = result["rows"]
    assert ddp["out_of_memory"] and ddp["step_time_mean_s"] is None
    assert ddp["memory_gib"] == pytest.approx(total(LLAMA, ranks=16))
    assert ddp["alternatives"][0]["set"] == "training.mode=fsdp"
    assert not fsdp["out_of_memory"] and fsdp["step_time_mean_s"]["mean"] > 0
    assert [r["vary"]["training.mode"] for r in result["runs"]] == ["fsdp", "fsdp"]  # DDP never ran
    assert [r["vary"]["training.mode"] for r in drawn] == ["fsdp"]
    code, out, _ = in_process(capsys, *argv, "--seeds", "1", "--workers", "1")
    assert "OOM: 193.18 GiB per GPU > 79.65 GiB, not run" in out


def test_simulate_sweep_ranks_marks_the_scales_that_do_not_fit(capsys, tmp_path):
    """FSDP's shard shrinks with the ranks: at 72 GiB, 8 ranks do not fit (74.2 GiB), 16 do (68.6)."""
    argv = ["simulate", LLAMA, "--sweep-ranks", "8,16", "--steps", "3", "--set", "training.mode=fsdp"]
    code, out, _ = in_process(capsys, *argv, "--device-gib", "72", "--json", "--out", str(tmp_path))
    assert code == 3
    eight, sixteen = json.loads(out)
    assert eight["verdict"] == "out_of_memory" and eight["peak_gib"] == pytest.approx(
        total(LLAMA, "training.mode=fsdp", ranks=8)
    )
    # torchtitan's per-op checkpointing first (it reruns less), then full: each fits alone.
    assert eight["alternatives"] == [
        {
            "set": f"training.activation_checkpointing={ckpt}",
            "peak_gib": pytest.approx(
                total(LLAMA, "training.mode=fsdp", f"training.activation_checkpointing={ckpt}", ranks=8)
            ),
        }
        for ckpt in ("op", "true")
    ]
    assert "verdict" not in sixteen and sixteen["memory_gib"]["fits"] is True
    written = json.loads((tmp_path / "summary.json").read_text())
    assert [s["ranks"] for s in written] == [16]  # the files hold what was simulated
    code, out, _ = in_process(capsys, *argv, "--device-gib", "72")
    row = next(line for line in out.splitlines() if line.split()[:1] == ["8"])
    assert code == 3 and f"OOM: {eight['peak_gib']:.2f} GiB per GPU > 72 GiB" in row


# --- a tensor- or pipeline-parallel job is held to its memory as a DDP one is ---------------------

TP70 = ("--set", "model.preset=llama3-70b", "--set", "training.tp=8", "--set", "training.micro_batch_size=4")


def test_a_3d_job_that_does_not_fit_is_not_simulated(capsys, monkeypatch):
    """Was: "out of memory: 210.7 GiB per GPU > 79.65 GiB" and below it a 2.31 s step, tokens/s
    and 19.4 % MFU, for a 70B model under DDP with tp 8 on 80 GB parts: the 3D path ran the job
    first and judged its memory after. Now, as for DDP, no step at all: the engine is never
    called, the peak is the fullest stage's (sim/parallel3d.py), and what would fit is named
    with each one's peak, which fits."""
    import sim.steps3d
    import workflow.threed

    def refuse(*a, **k):
        raise AssertionError("simulated a job that does not fit")

    monkeypatch.setattr(workflow.threed, "simulate_3d_steps", refuse)
    argv = ("simulate", "h100-1024", "--ranks", "64", "--steps", "2", *TP70)
    code, out, err = in_process(capsys, *argv, "--json")
    assert code == 3, err
    v = json.loads(out)
    sc = load_scenario("h100-1024", sc_sets(TP70), ranks=64)
    assert v["verdict"] == "out_of_memory" and "step_time_s" not in v and "tokens_per_s" not in v
    assert v["peak_gib"] == pytest.approx(fit(sc).total_gib) and v["peak_gib"] > 200 > 79.65
    assert max(v["memory_gib_by_stage"]) == pytest.approx(v["peak_gib"], abs=1e-3)
    assert v["layout"] == {"tp": 8, "cp": 1, "pp": 1, "dp": 8, "virtual_stages": 1, "micro_batches": 1,
                           "schedule": "1f1b"}  # fmt: skip
    assert v["alternatives"], "nothing named that would fit"
    for a in v["alternatives"]:  # each as --set takes it, and each fits by the 3D model
        changed = load_scenario("h100-1024", [*sc_sets(TP70), a["set"]], ranks=64)
        assert fit(changed).total_gib == pytest.approx(a["peak_gib"]) and a["peak_gib"] <= 79.65
    code, out, _ = in_process(capsys, *argv)
    step = next(line for line in out.splitlines() if line.strip().startswith("step time"))
    assert code == 3 and f"none: out of memory, {v['peak_gib']:.1f} GiB per GPU" in step
    assert "tokens/s" not in out and "MFU" not in out  # nothing pretends to have run
    assert "(sim/parallel3d.py), as --set:" in out and "--ignore-memory simulates it anyway" in out
    monkeypatch.setattr(workflow.threed, "simulate_3d_steps", sim.steps3d.simulate_3d_steps)
    code, out, _ = in_process(capsys, *argv, "--ignore-memory")
    line = next(line for line in out.splitlines() if line.strip().startswith("memory per GPU"))
    assert code == 0 and "does NOT fit 79.65 GiB: simulated anyway (--ignore-memory)" in line
    assert "MFU" in out


def sc_sets(argv: tuple) -> list[str]:
    return [x for x in argv if x != "--set"]


def test_what_would_fit_is_typed_as_set_takes_it(capsys):
    """An alternative of two changes is printed "a=1,b=2" under "as --set:"; `simulate --set`
    takes it so (sim/patches.py parse_sets), as whatif's --try always did."""
    sets = ["model.preset=llama3-70b", "training.tp=8", "training.micro_batch_size=4"]
    two = next(a for a in alternatives(load_scenario("h100-1024", sets, ranks=64)) if len(a.changes) > 1)
    code, out, err = in_process(capsys, "simulate", "h100-1024", "--ranks", "64", "--steps", "2",
                                *(x for s in sets for x in ("--set", s)), "--set", two.text, "--json")  # fmt: skip
    assert code == 0, err
    s = json.loads(out)
    assert s["peak_memory_gib"] == pytest.approx(two.total_gib) and s["fits"] is True
