"""Issue 22, items 10 and 11 (the edges a first user meets): time and money to train, headers that
follow --ranks, plots that say what they show, help that says what the tool does, names that say
what they measure, whatif's default mitigations."""

import json
import math

import pytest

from sim.checkpointing import wall_per_work_analytic
from sim.train_cost import FAILURES_PER_1000_GPU_DAYS, train_cost
from tests.conftest import in_process

# ---------------------------------------------------------------------------------------------------
# Item 10: --tokens and --usd-per-gpu-hour


def test_llama3_failure_rate_gives_its_own_mtbf_back():
    # The default rate is Llama 3's: at its 16,384 GPUs the job's MTBF is 54 days / 419 interruptions.
    c = train_cost(tokens=1e12, tokens_per_s=1e6, gpus=16384)
    assert c.mtbf_h == pytest.approx(54 * 24 / 419, rel=1e-12)
    # 1024 GPUs fail 16x less often: 49.5 h, docs/design.md's worked example.
    assert train_cost(tokens=1e12, tokens_per_s=1e6, gpus=1024).mtbf_h == pytest.approx(49.5, abs=0.02)
    assert FAILURES_PER_1000_GPU_DAYS == pytest.approx(0.4736, abs=1e-4)


def test_days_gpu_hours_and_dollars_in_closed_form():
    c = train_cost(tokens=2e12, tokens_per_s=5e6, gpus=1024, usd_per_gpu_hour=2.5)
    goodput = 1.0 / wall_per_work_analytic(
        mtbf_min=c.mtbf_h * 60, restart_min=10.0, checkpoint_min=1.0, interval_min=c.interval_min
    )
    assert c.goodput == pytest.approx(goodput, rel=1e-12)
    assert 0.9 < c.goodput < 1.0  # 49.5 h MTBF, 10 min restarts, 1 min checkpoints: ~97 %
    assert c.days == pytest.approx(2e12 / 5e6 / goodput / 86400, rel=1e-12)
    assert c.gpu_hours == pytest.approx(c.days * 24 * 1024, rel=1e-12)
    assert c.usd == pytest.approx(c.gpu_hours * 2.5, rel=1e-12)
    # More GPUs fail more often: the same throughput on 16x the GPUs has a lower goodput.
    assert train_cost(tokens=2e12, tokens_per_s=5e6, gpus=16384).goodput < c.goodput


def test_simulate_prints_and_returns_time_and_money(capsys):
    argv = ("simulate", "h100-1024", "--ranks", "16", "--steps", "10", "--tokens", "300B")
    code, out, _ = in_process(capsys, *argv, "--usd-per-gpu-hour", "2.5", "--json")
    assert code == 0
    s = json.loads(out)
    t = s["to_train"]
    assert t["tokens"] == 300e9
    assert t["days"] == pytest.approx(300e9 / s["tokens_per_s"] / t["goodput"] / 86400, rel=1e-12)
    assert t["gpu_hours"] == pytest.approx(t["days"] * 24 * 16, rel=1e-12)
    assert t["usd"] == pytest.approx(t["gpu_hours"] * 2.5, rel=1e-12)
    assert t["mtbf_h"] == pytest.approx(54 * 24 / 419 * 16384 / 16, rel=1e-12)
    assert "Llama 3" in t["mtbf_from"]
    code, text, _ = in_process(capsys, *argv, "--usd-per-gpu-hour", "2.5")
    assert code == 0
    # The same numbers printed, what the time includes and which MTBF said.
    assert f"{t['days']:,.2f} days wall clock including failures" in text
    assert f"{t['gpu_hours']:,.0f} GPU-hours, ${t['usd']:,.0f} at $2.50/GPU-hour" in text
    assert f"MTBF {t['mtbf_h']:.3g} h (16 GPUs at 0.474 failures per 1000 GPU-days, Llama 3's" in text


@pytest.mark.parametrize(
    ("params", "tokens", "run"),
    [
        (124e6, 0.5e6, "GPT-3 Small"),  # below every published model: the smallest one's
        (760.3e6, 0.5e6, "GPT-3 Large"),  # GPT-3 Small, Medium and Large share 0.5M: the nearest in size
        (1.5576e9, 1e6, "GPT-3 XL"),
        (8.03e9, 4e6, "LLaMA 7B"),  # LLaMA's 4M beside GPT-3 6.7B's 2M: the larger batch
        (70.55e9, 4e6, "LLaMA 65B"),
        (405e9, 16e6, "Llama 3 405B"),
    ],
)
def test_the_published_batch_for_a_model_size(params, tokens, run):
    """The most generous published batch for a model no larger than this one
    (docs/references.md, "Published batch sizes")."""
    from sim.batch_reference import reference

    ref = reference(params)
    assert (ref.tokens, ref.run.split(",")[0].split(" (")[0]) == (tokens, run)


def test_to_train_says_how_far_its_batch_is_from_the_published_ones(capsys):
    """The days to train rest on the batch: h100-1024 steps 1024 x 8 x 2048 = 16.8M tokens with a
    760M model, 33.6x GPT-3 Large's 0.5M, past the 4x the published runs spanned: the line says the
    days are a floor. At 16 ranks (262,144 tokens, 0.52x) it only states the batch."""
    argv = ("simulate", "h100-1024", "--steps", "5", "--tokens", "300B")
    code, out, err = in_process(capsys, *argv, "--json")
    assert code == 0, err
    b = json.loads(out)["to_train"]["batch"]
    assert b["tokens_per_step"] == 1024 * 8 * 2048 and b["reference_tokens"] == 0.5e6
    assert (b["ratio"], b["far"]) == (pytest.approx(1024 * 8 * 2048 / 0.5e6), True)
    code, out, err = in_process(capsys, *argv)
    line = next(x for x in out.splitlines() if x.startswith("    batch"))
    assert line.startswith("    batch          16.78M tokens a step, 33.6x the 0.5M of GPT-3 Large, 760M")
    assert line.endswith("so these days are a floor (docs/references.md)")
    code, out, err = in_process(capsys, *argv, "--ranks", "16")
    line = next(x for x in out.splitlines() if x.startswith("    batch"))
    assert line.endswith(" 262,144 tokens a step, 0.524x the 0.5M of GPT-3 Large, 760M (Brown et al. 2020, Table 2.1)")


def test_compare_rows_carry_their_own_time_and_money(capsys):
    code, out, _ = in_process(
        capsys, "compare", "h100-1024", "slow=h100-1024:network.nic_gbit_s=25", "--ranks", "16", "--steps", "5",
        "--tokens", "1T", "--usd-per-gpu-hour", "3", "--json",
    )  # fmt: skip
    assert code == 0
    rows = json.loads(out)
    for r in rows:
        assert r["to_train"]["days"] == pytest.approx(1e12 / r["tokens_per_s"] / r["to_train"]["goodput"] / 86400)
        assert r["to_train"]["usd"] == pytest.approx(r["to_train"]["gpu_hours"] * 3)
    # A 16x slower NIC makes the step slower, so the same tokens cost more.
    assert rows[1]["to_train"]["usd"] > rows[0]["to_train"]["usd"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tokens", "2X"], "--tokens: expected a token count like 2T"),
        (["--tokens", "1e99"], "--tokens: expected a token count"),
        (["--usd-per-gpu-hour", "2"], "--usd-per-gpu-hour: needs --tokens"),
        (["--tokens", "1T", "--usd-per-gpu-hour", "-1"], "--usd-per-gpu-hour: expected a price > 0"),
        (["--tokens", "1T", "--usd-per-gpu-hour", "nan"], "--usd-per-gpu-hour: expected a price > 0"),
    ],
)
def test_bad_tokens_or_price_is_one_line_naming_the_flag(capsys, flags, named):
    code, out, err = in_process(capsys, "simulate", "h100-1024", "--ranks", "8", "--steps", "5", *flags)
    assert code == 2
    assert out == ""
    assert named in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_train_cost_library_refuses_nonsense():
    with pytest.raises(ValueError, match="tokens_per_s"):
        train_cost(tokens=1e12, tokens_per_s=math.nan, gpus=8)
    with pytest.raises(ValueError, match="usd_per_gpu_hour"):
        train_cost(tokens=1e12, tokens_per_s=1e6, gpus=8, usd_per_gpu_hour=0.0)


# ---------------------------------------------------------------------------------------------------
# Item 11: headers follow --ranks


def test_simulate_header_describes_the_ranks_run(capsys):
    # Was: "h100-1024: 1024 x H100 SXM (128 x 8), ..." over a 64-rank run.
    code, out, _ = in_process(capsys, "simulate", "h100-1024", "--ranks", "64", "--steps", "5")
    assert code == 0
    header = out.splitlines()[0]
    assert header.startswith("h100-1024: 64 x H100 SXM (8 x 8), NVLink 450 GB/s")
    assert "1024" not in header.removeprefix("h100-1024")


@pytest.mark.parametrize(
    ("description", "file_ranks", "ranks", "per_node", "expected"),
    [
        (
            "Llama 3's cluster: 16,384 x H100 (2,048 x 8), pods",
            16384,
            2048,
            8,
            "Llama 3's cluster: 2,048 x H100 (256 x 8), pods",
        ),
        ("8 x A100 SXM 80GB (one node), 8 x 200G IB", 8, 16, 8, "16 x A100 SXM 80GB (2 x 8), 8 x 200G IB"),
        ("1024 x H100 SXM (128 x 8), NVLink", 1024, 4, 8, "4 x H100 SXM (one node), NVLink"),
        ("1024 x H100 with one lemon", 1024, 12, 8, "12 x H100 with one lemon"),
        ("RTX 4070 + Apple M2 over 1GbE", 2, 4, 1, "RTX 4070 + Apple M2 over 1GbE; run at 4 ranks (4 x 1)"),
        ("1024 x H100 SXM (128 x 8)", 1024, 1024, 8, "1024 x H100 SXM (128 x 8)"),
    ],
)
def test_description_at_the_ranks_run(description, file_ranks, ranks, per_node, expected):
    from sim.describe import description_at

    assert description_at(description, file_ranks, ranks, per_node) == expected


def test_a_description_set_by_hand_is_kept():
    from sim.scenario_file import load_scenario

    sc = load_scenario("h100-1024", ["description=mine"], ranks=64)
    assert sc.description == "mine"
    assert load_scenario("h100-1024", ["ranks=64"]).description.startswith("64 x H100 SXM (8 x 8)")


def test_whatif_header_describes_the_ranks_run(capsys):
    code, out, _ = in_process(
        capsys, "whatif", "straggler-lemon", "--ranks", "32", "--steps", "10", "--try", "rebalance"
    )
    assert code == 0
    assert out.splitlines()[0] == "straggler-lemon: 32 x H100 with one lemon GPU (rank 17) 1.40x slower"


# ---------------------------------------------------------------------------------------------------
# Item 11: plots carry scenario, ranks and mode; labels do not overlap; the sweep axis starts at 0


@pytest.fixture
def figures(monkeypatch):
    """Every figure ddplab would save, drawn, instead of written."""
    import output.plot

    drawn = []

    def keep(fig, path, dpi=120):
        fig.canvas.draw()
        drawn.append(fig)
        return path

    monkeypatch.setattr(output.plot, "save_png", keep)
    return drawn


def _title(fig) -> str:
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return " ".join([sup, *(ax.get_title() for ax in fig.axes)])


def _overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of visible texts (titles, legends, tick labels, axis labels) whose boxes intersect."""
    renderer = fig.canvas.get_renderer()
    boxes = []
    if fig._suptitle is not None:
        boxes.append(("suptitle", fig._suptitle.get_window_extent(renderer)))
    for i, leg in enumerate(fig.legends):
        boxes.append((f"legend {i}", leg.get_window_extent(renderer)))
    for a, ax in enumerate(fig.axes):
        if ax.get_title():
            boxes.append((f"title {a}", ax.title.get_window_extent(renderer)))
        if ax.get_legend() is not None:
            boxes.append((f"axes legend {a}", ax.get_legend().get_window_extent(renderer)))
        span = ax.get_window_extent(renderer)
        for t, label in enumerate(ax.get_xticklabels()):
            box = label.get_window_extent(renderer)
            # Ticks outside the view limits keep a text but are not drawn.
            if label.get_text() and label.get_visible() and span.x0 - 1 <= (box.x0 + box.x1) / 2 <= span.x1 + 1:
                boxes.append((f"xtick {a}.{t}", box))
    hits = []
    for i, (n1, b1) in enumerate(boxes):
        for n2, b2 in boxes[i + 1 :]:
            if b1.overlaps(b2) and not (n1.startswith("axes legend") or n2.startswith("axes legend")):
                hits.append((n1, n2))
    return hits


def test_breakdown_and_compare_plots_say_what_they_show(capsys, tmp_path, figures):
    # A name as long as llama3-8b-1024's: the legend at the upper right covered the title's end.
    argv = ("simulate", "h100-1024", "--ranks", "16", "--steps", "5", "--set", "training.mode=fsdp", "--out")
    assert in_process(capsys, *argv, str(tmp_path / "s"), "--set", "name=a-long-cluster-name")[0] == 0
    (fig,) = figures
    assert "a-long-cluster-name: 16 ranks, FSDP" in _title(fig)
    assert _overlaps(fig) == []  # was: the legend covered the end of the title
    figures.clear()
    code, _, _ = in_process(
        capsys, "compare", "h100-1024", "a-long-set-up-name=h100-1024:network.nic_gbit_s=200", "--ranks", "16",
        "--steps", "5", "--out", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 0
    (fig,) = figures
    assert "h100-1024: 16 ranks, DDP" in _title(fig)
    assert _overlaps(fig) == []


def test_whatif_plot_says_scenario_ranks_and_mode(capsys, tmp_path, figures):
    code, _, _ = in_process(
        capsys, "whatif", "straggler-lemon", "--ranks", "32", "--steps", "10", "--try", "rebalance",
        "--try", "exclude-slowest", "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0
    (fig,) = figures
    assert "straggler-lemon: 32/24 ranks, DDP" in _title(fig)
    assert _overlaps(fig) == []


def test_sweep_axes_start_at_zero(capsys, tmp_path, figures):
    # Values 0.3 % apart used to fill the whole panel: the axis now starts at 0.
    code, _, _ = in_process(
        capsys, "sweep", "h100-1024", "--ranks", "8", "--steps", "5", "--vary", "network.nic_gbit_s", "400", "401",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0
    (fig,) = figures
    assert "h100-1024: 8 ranks, DDP" in _title(fig)
    step, eff = fig.axes[:2]
    assert step.get_ylim()[0] == 0 and eff.get_ylim() == (0, 105)
    assert "axis from 0" in step.get_ylabel()
    assert _overlaps(fig) == []


# ---------------------------------------------------------------------------------------------------
# Item 11: help says what the tool does; --json help names the keys it prints


def test_help_opens_with_what_the_tool_does(capsys):
    code, out, _ = in_process(capsys, "--help")
    assert code == 0
    opening = out.split("\n\n")[1]  # after the usage
    assert opening.startswith("ddplab predicts how fast data-parallel training")
    assert "the command users type" not in out  # was: the module's docstring


def _json_helps():
    import argparse

    from ddplab.cli import build_parser

    out = {}

    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, (*path, name))
            elif "--json" in a.option_strings:
                out[path] = a.help

    walk(build_parser(), ())
    return out


def test_no_help_points_at_a_source_file():
    import argparse
    import re

    from ddplab.cli import build_parser

    texts = []

    def walk(parser):
        texts.append(parser.description or "")
        for a in parser._actions:
            texts.append(a.help or "")
            if isinstance(a, argparse._SubParsersAction):
                texts.extend(c.help or "" for c in a._choices_actions)
                for sub in a.choices.values():
                    walk(sub)

    walk(build_parser())
    assert [t for t in texts if re.search(r"\b\w+\.py\b", t)] == []


@pytest.mark.parametrize(
    "argv",
    [
        ("cost",),
        ("simulate", "h100-1024", "--ranks", "8", "--steps", "5", "--tokens", "1T"),
        ("collective", "h100-1024", "--ranks", "8", "--sizes", "1M"),
        ("models",),
        ("scenarios",),
        ("compare", "h100-1024", "--ranks", "8", "--steps", "5"),
        ("whatif", "straggler-lemon", "--ranks", "32", "--steps", "5", "--try", "rebalance"),
        ("sweep", "h100-1024", "--ranks", "8", "--steps", "5", "--vary", "noise.sigma", "0.01"),
        ("launch", "--nodes", "2", "--master", "10.0.0.1:29500"),
        ("validate", "--public"),
    ],
)
def test_json_help_names_keys_that_json_prints(capsys, monkeypatch, argv):
    import re

    helps = _json_helps()
    command = argv[0]
    text = helps[(command,)]
    if command == "validate":  # the help gives both forms; this runs the public one
        text = text.split("with --public", 1)[1]
        # Every row has the same keys: the first of each source (held-out and in-sample rows
        # among them), not all 333 (12 s of simulation that tests/test_validation_public.py runs).
        from calibrate.public import evaluate, table_rows
        from workflow import calibration

        firsts = list({r.source: r for r in reversed(table_rows())}.values())
        assert {r.held_out for r in firsts} == {True, False}
        monkeypatch.setattr(calibration, "public_table", lambda: [evaluate(r) for r in firsts])
    named = [k for k in re.findall(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+)\b", text.split(":", 1)[1])]
    code, out, _ = in_process(capsys, *argv, "--json")
    assert code == 0
    printed = json.loads(out)

    def keys(x, into):
        if isinstance(x, list):
            for item in x:
                keys(item, into)
        elif isinstance(x, dict):
            for k, v in x.items():
                into.add(k)
                keys(v, into)
        return into

    have = keys(printed, set())
    # Every snake_case name the help gives is a key of the output; plain words must be too unless
    # they are the help's own English.
    english = {"a", "list", "per", "and", "the", "with", "what", "it", "for", "each", "its", "one", "row", "link",
               "size", "model", "preset", "node", "set", "up", "seed", "grid", "point", "metric", "s", "prints",
               "simulate", "json", "public", "tokens", "sweep", "parts", "step", "keys", "values", "run"}  # fmt: skip
    missing = [k for k in named if k not in have and k not in english]
    assert missing == [], f"{command} --json help names {missing}, not in its output"
    assert ".py" not in text


def test_ddp_engine_models_the_recompute(capsys):
    # sim/config.py used to say the ddp engine does not model it; it does (sim/workload.py).
    def compute(*sets):
        argv = ("simulate", "h100-1024", "--ranks", "8", "--steps", "5", "--json", *sets)
        code, out, _ = in_process(capsys, *argv)
        assert code == 0
        return json.loads(out)["compute_s"]

    ratio = compute("--set", "training.activation_checkpointing=true") / compute()
    # One more forward of the blocks: the forward is ~1/3 of forward + backward, the blocks most of it.
    assert 1.2 < ratio < 1.34
    from tests.conftest import ROOT

    for doc in ("sim/config.py", "scenarios/README.md"):
        assert "does not model the recompute" not in (ROOT / doc).read_text()
        assert "engine does not" not in (ROOT / doc).read_text()


# ---------------------------------------------------------------------------------------------------
# Item 11: train's per-step time is named for what it is (step_wall_s, was total_s)


def test_step_wall_s_is_read_from_files_written_as_total_s(tmp_path):
    import shutil

    from calibrate.records import read_jsonl
    from realrun.records import read_records
    from realrun.report import summarize_train
    from tests.conftest import ROOT

    # A committed run, its step time named as files before the rename named it.
    run = tmp_path / "train-base"
    shutil.copytree(ROOT / "measurements/validation/200mbit/train-base", run)
    for f in run.glob("train-rank*.jsonl"):
        f.write_text(f.read_text().replace('"step_wall_s"', '"total_s"'))
    path = run / "train-rank0000.jsonl"
    assert '"total_s"' in path.read_text() and '"step_wall_s"' not in path.read_text()
    for steps in (read_records(path).of_type("step"), [r for r in read_jsonl(path) if r["type"] == "step"]):
        assert steps and all("step_wall_s" in s and "total_s" not in s for s in steps)
        # The step's wall time holds its phases (data, forward, backward, wait, optimizer).
        s = steps[-1]
        parts = sum(s[k] for k in ("data_s", "forward_s", "backward_s", "wait_s", "optimizer_s"))
        assert parts <= s["step_wall_s"] * 1.001
    header, row = summarize_train(run)[1:3]
    assert header.split()[2] == "step_wall_s" and row.split()[2] != "-"


# ---------------------------------------------------------------------------------------------------
# Item 11: `whatif SCENARIO` without --try runs the mitigations that fit it


@pytest.mark.parametrize(
    ("preset", "sets", "expected", "reason"),
    [
        ("straggler-lemon", [], ["rebalance", "exclude-slowest"], "slow GPUs (rank 17 x1.4)"),
        ("straggler-gc", [], ["sync-gc"], "unsynchronised pauses"),
        ("straggler-dataloader", [], ["fix-loader", "workers=8", "rebalance", "exclude-slowest"], "slow data loaders"),
        ("straggler-failslow", [], ["comm_hook=bf16"], "degraded or jittery network"),
        ("straggler-jitter", [], ["comm_hook=bf16"], "degraded or jittery network"),
        ("straggler-throttle", [], ["bucket_cap_mb=100", "comm_hook=bf16"], "transient compute slowdowns"),
        ("h100-1024", [], ["bucket_cap_mb=100", "comm_hook=bf16"], "no slow rank, loader, pause or network"),
        ("h100-1024", ["training.mode=fsdp"], ["training.fsdp_prefetch=2"], "FSDP prefetch"),
        # FP8 FSDP without the FP8 all-gather: torchao's option, half the allgather bytes
        (
            "h100-1024",
            ["training.mode=fsdp", "training.precision=fp8"],
            ["training.fsdp_prefetch=2", "training.fp8_all_gather=true"],
            "gathered in FP8",
        ),
        # TP with sequence parallelism: its collectives overlapped with their matmuls (AsyncTP, TE)
        (
            "h100-1024",
            ["training.mode=fsdp", "training.tp=8", "training.sequence_parallel=true"],
            ["training.fsdp_prefetch=2", "training.tp_comm_overlap=full"],
            "TP's collectives overlapped",
        ),
        # the distributed optimizer has DDP's buckets and no prefetch to deepen
        ("h100-1024", ["training.mode=zero1"], ["bucket_cap_mb=100"], "bigger buckets"),
        # pure bf16 gradients are already 2 bytes: a bf16 hook would change nothing
        ("straggler-failslow", ["training.precision=bf16"], ["bucket_cap_mb=100"], "gradients already 2 bytes"),
    ],
)
def test_default_mitigations_fit_the_scenario(preset, sets, expected, reason):
    from sim.scenario_file import load_scenario
    from sim.whatif_defaults import default_tries

    tries, why = default_tries(load_scenario(preset, sets, ranks=32))
    assert tries == expected
    assert reason in why


def test_whatif_without_try_runs_and_names_them(capsys):
    argv = ("whatif", "straggler-lemon", "--ranks", "32", "--steps", "20")
    code, out, _ = in_process(capsys, *argv)
    assert code == 0
    assert out.splitlines()[1].startswith("  no --try given: trying rebalance, exclude-slowest (slow GPUs")
    code, out, _ = in_process(capsys, *argv, "--json")
    rows = {r["mitigation"]: r for r in json.loads(out)}
    assert list(rows) == ["nothing", "rebalance", "exclude-slowest"]
    # A 1.4x lemon: sizing work to speed wins back most of the 1.4x; excluding its node (8 of 32
    # GPUs) makes the step as fast, on a quarter fewer GPUs.
    assert rows["rebalance"]["speedup"] > 1.2
    assert rows["exclude-slowest"]["ranks"] == 24
    assert rows["exclude-slowest"]["step_time_s"] < rows["nothing"]["step_time_s"] / 1.2


def test_whatif_on_a_job_that_does_not_fit_tries_what_would(capsys):
    """llama3-8b-1024 is DDP at 193 GiB a GPU on an 80 GB H100: bigger buckets or a bf16 hook (the
    generic knobs) ran out of memory too, every row OOM. Without --try it now tries what
    `simulate` names as fitting (sim/memory_fit.py), and each of those rows runs and fits; a row
    that shrinks the micro-batch says its global batch shrank with it."""
    from sim.memory_fit import alternatives, fit
    from sim.scenario_file import load_scenario
    from sim.whatif_defaults import default_tries

    sc = load_scenario("llama3-8b-1024", ["training.micro_batch_size=4"], ranks=64)
    assert not fit(sc).fits
    tries, why = default_tries(sc)
    assert tries == [a.text for a in alternatives(sc)] and len(tries) >= 2
    assert why.startswith(f"out of memory, {fit(sc).total_gib:.2f} GiB per GPU against 79.65 GiB: what would fit")
    argv = ("whatif", "llama3-8b-1024", "--set", "training.micro_batch_size=4", "--ranks", "64", "--steps", "5")
    code, out, err = in_process(capsys, *argv, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["mitigation"] for r in rows] == ["nothing", *tries]
    assert rows[0]["oom"] and all(not r["oom"] and r["tokens_per_s"] > 0 for r in rows[1:])
    shrunk = [r for r in rows[1:] if "micro_batch_size=1" in r["mitigation"]]
    assert shrunk and all(r["note"].endswith("global batch 64 samples a step, was 256") for r in shrunk)
    # --ignore-memory simulates the job as it is, so the usual tries follow
    assert default_tries(sc, ignore_memory=True)[0] == ["bucket_cap_mb=100", "comm_hook=bf16"]


def test_whatif_says_when_nothing_would_fit(capsys):
    """A 70B model on the home lab's two small GPUs: nothing sim/memory_fit.py tries fits, so a
    default whatif has no fix to run: the job's OOM row, and why no other."""
    argv = ("whatif", "homelab-1gbe", "--set", "model.preset=llama3-70b", "--set", "training.seq_len=1024")
    code, out, err = in_process(capsys, *argv, "--steps", "5")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("  no --try given: out of memory, 657.58 GiB per GPU against 12 GiB, and nothing")
    assert lines[1].endswith("a smaller micro-batch): --try KEY=VALUE, or --ignore-memory")
    assert [ln.split()[0] for ln in lines[3:]] == ["mitigation", "nothing", "OOM"]


def test_whatif_row_that_changes_the_batch_says_so(capsys):
    """A row whose global batch differs from the base's (micro-batch, ranks, sequence length) says
    by how much: its tokens/s is of another job. accum=K's own note says it (K x the tokens)."""
    argv = ("whatif", "h100-1024", "--ranks", "32", "--steps", "5", "--json")
    tries = ("training.micro_batch_size=4", "ranks=16", "training.seq_len=1024", "accum=2", "bucket_cap_mb=100")
    code, out, err = in_process(capsys, *argv, *(a for t in tries for a in ("--try", t)))
    assert code == 0, err
    notes = {r["mitigation"]: r["note"] for r in json.loads(out)}
    assert notes["training.micro_batch_size=4"] == "global batch 128 samples a step, was 256"
    assert notes["ranks=16"] == "global batch 128 samples a step, was 256"
    assert notes["training.seq_len=1024"] == "global batch 262,144 tokens a step, was 524,288"
    assert notes["accum=2"] == "2 x the tokens per step"
    assert notes["bucket_cap_mb=100"] == ""


def test_validation_plot_drops_labels_that_would_overlap(monkeypatch, tmp_path):
    import output.calib_plots as cp

    drawn = []
    monkeypatch.setattr(cp, "save_png", lambda fig, path, dpi=110: drawn.append(fig))
    # Ten runs within 2 % of each other (as 10gbit/train-base and -cap5 are): their names collided.
    rows = [
        {"name": f"1gbit/train-run{i}", "measured_p50_s": 1.0 + 0.002 * i, "predicted_p50_s": 1.0 + 0.002 * i,
         "measured_p95_s": 1.05, "predicted_p95_s": 1.05}
        for i in range(10)
    ] + [{"name": "200mbit/far", "measured_p50_s": 3.0, "predicted_p50_s": 3.1, "measured_p95_s": 3.2,
          "predicted_p95_s": 3.3}]  # fmt: skip
    cp.predicted_vs_measured(rows, 0.02, tmp_path / "v.png")
    (fig,) = drawn
    ax = fig.axes[0]
    visible = [t for t in ax.texts if t.get_visible()]
    assert 1 <= len(visible) < len(rows) and "200mbit/far" in [t.get_text() for t in visible]
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in visible]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert f"{len(rows) - len(visible)} overlapping labels left out" in ax.get_xlabel()


def test_calibration_plots_say_what_was_measured(monkeypatch, tmp_path):
    import output.calib_plots as cp
    from calibrate.calibration import Calibration
    from tests.conftest import ROOT

    drawn = []

    def keep(fig, path, dpi=110):
        fig.canvas.draw()
        drawn.append(fig)

    monkeypatch.setattr(cp, "save_png", keep)
    cp.write_calibration_plots(Calibration.read(ROOT / "measurements/validation/calib.json"), tmp_path / "calib")
    assert len(drawn) == 4
    for fig in drawn:
        # The probes of 2026-12-02 name the CPU (realrun/device.py device_info).
        assert fig._suptitle.get_text() == "calibration measured on Intel(R) Xeon(R) Processor, 2 ranks (gloo, DDP)"
        assert _overlaps(fig) == []


def test_fewer_ranks_than_a_named_straggler_says_how_to_drop_it(capsys):
    """`compare homelab-1gbe 4070-alone=homelab-1gbe:ranks=1` is the seed's question (the 4070
    without the M2), refused because the preset names rank 1 as a straggler. The refusal now
    says how to drop it, and with that the set-up runs."""
    code, out, err = in_process(capsys, "simulate", "homelab-1gbe", "--ranks", "1", "--steps", "3")
    assert code == 2 and out == ""
    assert err.strip() == (
        "ddplab simulate: error: stragglers: rank out of range for 1 ranks (stragglers= drops them), got '1:8.06'"
    )
    code, out, err = in_process(
        capsys, "simulate", "homelab-1gbe", "--ranks", "1", "--steps", "3", "--set", "stragglers="
    )
    assert code == 0, err


def test_selective_recompute_says_it_is_megatrons_and_how_little_it_saves(capsys):
    """torchtitan's Llama 3 8B (128 H100, FSDP, local batch 2, seq 8192) ran with its "selective"
    AC; here selective is Megatron's, which under fused attention frees only the core's log-sum-exp
    (n_head fp32 per token and layer), so the same words give an out-of-memory verdict. The
    output must say which selective it is, and how much it saves: 32 layers x 32 heads x 4 B x
    16,384 tokens = 64 MiB."""
    argv = ("simulate", "llama3-8b-1024", "--ranks", "128", "--steps", "2", "--set", "training.mode=fsdp",
            "--set", "training.micro_batch_size=2")  # fmt: skip
    code, out, _ = in_process(capsys, *argv, "--set", "training.activation_checkpointing=selective")
    assert code == 3 and "out of memory" in out
    line = next(x for x in out.splitlines() if x.startswith("    selective"))
    assert "Megatron's: the attention core alone rerun" in line and "saves 64.00 MiB a GPU here" in line
    assert "torchtitan's per-op selective AC is training.activation_checkpointing=op" in line
    # none and full say nothing of it; nor does selective where attention is unfused (it saves the scores).
    for value in ("none", "full"):
        code, out, _ = in_process(capsys, *argv, "--set", f"training.activation_checkpointing={value}")
        assert "    selective" not in out
    code, out, _ = in_process(capsys, *argv[:4], "--steps", "2", "--set", "training.activation_checkpointing=selective",
                              "--set", "training.fused_attention=false", "--ignore-memory")  # fmt: skip
    assert code == 0 and "    selective" not in out


def test_a_header_names_what_set_changed_from_its_description(capsys):
    """llama3-8b-1024's description says "micro-batch 1"; run at micro-batch 2 its header said
    the same. The header now names every --set that changed a value (not one that repeats the
    file's), four at most, and leaves a description given by --set as given."""
    base = ("simulate", "llama3-8b-1024", "--ranks", "128", "--steps", "2", "--set", "training.mode=fsdp")
    code, out, _ = in_process(capsys, *base, "--set", "training.micro_batch_size=2", "--set", "training.seq_len=8192",
                              "--set", "training.activation_checkpointing=op")  # fmt: skip
    assert code == 0
    assert out.splitlines()[0] == (
        "llama3-8b-1024: Llama 3 8B, 128 x H100 SXM (16 x 8), seq 8192, micro-batch 1, bf16 autocast;"
        " --set training.mode=fsdp, training.micro_batch_size=2, training.activation_checkpointing=op"
    )  # seq_len=8192 is the file's own value: not a change
    many = [x for k in ("noise.sigma=0.01", "noise.speed_spread_sd=0", "compute.stack=compiled", "network.channels=8")
            for x in ("--set", k)]  # fmt: skip
    code, out, _ = in_process(capsys, *base, *many)
    assert code == 0 and out.splitlines()[0].endswith(
        "; --set training.mode=fsdp, noise.sigma=0.01, noise.speed_spread_sd=0, compute.stack=compiled, +1 more"
    )
    code, out, _ = in_process(capsys, *base, "--set", "description=mine")
    assert code == 0 and out.splitlines()[0] == "llama3-8b-1024: mine"
    code, out, _ = in_process(capsys, "simulate", "h100-1024", "--steps", "2")
    assert "--set" not in out.splitlines()[0]


@pytest.mark.parametrize(
    "sets,line",
    [
        (["host_delays_s=1:-0.01"], "host_delays_s: expected RANK:SECONDS like 2:0.02, got '1:-0.01'"),
        (["host_delays_s=1:nan"], "host_delays_s: expected RANK:SECONDS like 2:0.02, got '1:nan'"),
        (["host_delays_s=one:0.01"], "host_delays_s: expected RANK:SECONDS like 2:0.02, got 'one:0.01'"),
        (
            ["host_delays_s=1:0.01,1:0.02"],  # the last of the two used to win, unsaid
            "host_delays_s: rank 1 is given twice; give each rank once, got '1:0.02'",
        ),
        (["stragglers=1:1.5, 1:2"], "stragglers: rank 1 is given twice; give each rank once, got '1:2'"),
        (
            ["host_delays_s=9:0.01"],
            "host_delays_s: rank out of range for 2 ranks (host_delays_s= drops them), got '9:0.01'",
        ),
        (
            ["host_delays_s=1:0.01", "stragglers=", "training.tp=2", "ranks=2", "network.gpus_per_node=2"],
            "host_delays_s: is not modelled for a tensor-, context- or pipeline-parallel or zero1 job (sim/steps3d.py),"
            " got '1:0.01'",
        ),
    ],
)
def test_a_bad_host_delay_is_one_line(capsys, sets, line):
    """host_delays_s ("RANK:SECONDS", a trace calibration's late ranks) refused in one line, exit 2; a rank
    given twice there or in stragglers too."""
    argv = ["simulate", "homelab-1gbe", "--steps", "3"]
    for s in sets:
        argv += ["--set", s]
    code, out, err = in_process(capsys, *argv)
    assert (code, out) == (2, "") and err.strip() == f"ddplab simulate: error: {line}", err
