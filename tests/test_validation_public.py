"""The presets against the public record (calibrate/public.py, docs/validation-public.md).

Bounds are tiers set before any row was added; a row outside its tier is a miss and stays one,
so no test here asserts every row passes. What is held: each row's tier follows the written
rule, its error is recomputed from the source's printed figure, in-sample rows name their
constant, the headline counts held-out rows only (and does not fall below what was measured
when the table was built), and no row bends a platform constant."""

import json

import pytest

from calibrate import public_data as data
from calibrate.public import KIB, MIB, SOURCES, TIERS, evaluate, headline, public_table, table_rows
from sim.scenario_file import load_scenario
from sim.transformer import param_count

ROWS = table_rows()


@pytest.fixture(scope="module")
def results():
    return public_table()


def test_tiers_are_the_ones_written_down():
    assert TIERS == {
        "latency": 0.30, "small": 0.20, "multi-node": 0.20, "step": 0.20, "one-node": 0.10, "nic-bound": 0.10
    }  # fmt: skip
    for row in ROWS:
        if row.unit in ("s", "TFLOP/s", "MFU"):  # a step time, or its inverse (TFLOP/s per GPU, MFU)
            assert row.tier == "step", row.what
            continue
        words = row.command.split()
        size, ranks = int(words[words.index("--sizes") + 1]), int(words[words.index("--ranks") + 1])
        if size < KIB:
            expected = "latency"
        elif size < MIB:
            expected = "small"
        elif ranks <= 8:
            expected = "one-node"
        else:
            expected = "nic-bound" if size >= 64 * MIB else "multi-node"
        assert row.tier == expected, row.what
        assert row.unit == ("us" if size < MIB else "GB/s"), row.what


def test_every_row_has_a_source_and_is_held_out_or_names_its_constant():
    for row in ROWS:
        assert row.source in SOURCES
        assert row.held_out or "network." in row.fitted or "_" in row.fitted, row.what


def test_every_size_each_curve_prints_is_a_row():
    sizes = {r.what.split(", ")[-1] for r in ROWS if r.what.startswith("8 x H100, allreduce, ring")}
    assert len(sizes) == len(data.T1_RING_ALLREDUCE) == 31
    assert sum(r.source == "aac10-mi300x" for r in ROWS) == len(data.AAC10_MI300X_2NODE) == 32


def test_error_is_prediction_over_the_printed_figure(results):
    for r in results[:40]:
        assert r.error == pytest.approx(r.predicted / r.row.measured - 1.0, rel=1e-12)
        assert r.ok == (abs(r.error) <= r.row.bound)


def test_headline_counts_held_out_rows_apart(results):
    h = headline(results)
    held = [r for r in results if r.row.held_out]
    assert h["held_out"]["rows"] == len(held) >= 40
    assert h["in_sample"]["rows"] == len(results) - len(held)
    assert h["held_out"]["within"] == sum(r.ok for r in held)
    assert sum(b["rows"] for b in h["held_out_by_source"].values()) == len(held)
    assert sum(b["within"] for b in h["held_out_by_source"].values()) == h["held_out"]["within"]
    # The state measured when the model or table last changed (docs/validation-public.md): 196 of
    # 256 held-out rows within their tier, median 6.3 % (6.258), once every one-node row that
    # measures a quantity a constant restates was counted in-sample (43 rows, 40 hits) and the
    # -g 8 ring allreduce's 512 KiB and 1 MiB, in no constant's fit, held out (a miss and a hit;
    # 2026-12-07, twenty-second session). Before: 235 of 297, after torchtitan's FSDP rows were
    # described by the per-op checkpointing they ran (training.activation_checkpointing=op), not
    # full: six hits became misses, none the other way (2026-12-07). Before: 241 of 297, median
    # 5.718 %, after the one-node LL latency was
    # refitted on DGXC's process-per-GPU run (its 8 B-256 KiB went in-sample). Before: 239 of 313
    # with DGXC's curve held out; 225 of 281 before it entered; 226 of 286 before the NVLS loop
    # was fitted on the one-node NVLS run's 2 MiB-8 GiB (its 2-32 MiB rows went in-sample).
    # A change that loses held-out rows fails here.
    assert h["held_out"]["within"] >= 196
    assert h["held_out"]["median_abs_error"] <= 0.0626


def test_one_h100_node_ring_curve(results):
    """The issue's bar for 8 x H100 ring: 8 B-256 KiB within 30 %, 1 MiB-1 GiB busbw within 10 %.
    These rows are in-sample for the one-node latencies, but for 512 KiB and 1 MiB, in no fit's
    range (LL's 8 B-256 KiB, LL128's 2-4 MiB), so held out; the known misses are the sizes where
    the replayed choice differs from the run's (LL kept at 2 MiB, 512 KiB's 69 us outlier)."""
    ring = [r for r in results if r.row.what.startswith("8 x H100, allreduce, ring")]
    held = [r.row.what.removeprefix("8 x H100, allreduce, ring, ") for r in ring if r.row.held_out]
    assert held == ["512.00 KiB", "1.00 MiB"]
    small = [r for r in ring if r.row.unit == "us"]  # 8 B-512 KiB
    assert all(abs(r.error) <= 0.30 for r in small if not r.row.what.endswith("512.00 KiB"))
    large = [r for r in ring if r.row.unit == "GB/s" and not r.row.what.endswith(("2.00 MiB", "8.00 GiB"))]
    assert all(abs(r.error) <= 0.10 for r in large), [(r.row.what, r.error) for r in large if abs(r.error) > 0.1]


def test_dgxc_curve_holds_the_nvls_loop_out_of_sample(results):
    """NVIDIA's DGX H100 curve (a process per GPU, NCCL's pick) enters whole, 8 B-16 GiB; from 2 MiB,
    where NCCL runs NVLS, every size is within its 10 % tier. 2-32 MiB hold the NVLS loop fitted on
    together-h100's -g 8 run out of sample; from 64 MiB the rows measure what nccl-tests #290's
    476 GB/s states (nvls_gb_s), so they are in-sample. Its 8 B-256 KiB are latency_ll_us's fit."""
    dgxc = [r for r in results if r.row.source == "dgxc-h100"]
    assert [r.row.job.size for r in dgxc] == [size for size, _, _ in data.DGXC_H100]
    nvls = [r for r in dgxc if r.row.job.size >= 2**21]
    assert len(nvls) == 14
    assert all(abs(r.error) <= 0.10 for r in nvls), [(r.row.what, r.error) for r in nvls if abs(r.error) > 0.1]
    assert [r.row.held_out for r in nvls] == [True] * 5 + [False] * 9
    assert all(not r.row.held_out for r in dgxc if r.row.job.size <= 256 * 1024)


def test_a_row_that_measures_a_stated_quantity_is_in_sample(results):
    """A constant set from a source's statement (H100's 370 GB/s ring and 476 GB/s NVLS busbw,
    MI300X's 48 of 64 GB/s a link) makes every one-node row of that algorithm on that GPU
    in-sample where the prediction is latency plus bytes at that bandwidth, whichever run it comes
    from, hits and misses alike; a multi-node row, or another GPU's (MI325X), tests more than the statement and stays
    held out."""

    def fitted(what: str) -> str:
        return next(r.row.fitted for r in results if r.row.what == what)

    ring, nvls, xgmi = "nccl-tests #212's 370 GB/s", "nccl-tests #290's 476 GB/s", "48 of 64 GB/s"
    for op in ("allreduce", "allgather", "reduce_scatter"):
        assert ring in fitted(f"8 x H100, {op}, ring, 8.00 MiB") and ring in fitted(f"8 x H100, {op}, ring, 8.00 GiB")
    assert "intra_efficiency" not in fitted("8 x H100, allgather, ring, 4.00 MiB")
    assert nvls in fitted("8 x H100 (DGXC), allreduce, NCCL's pick, 64.00 MiB")
    assert fitted("8 x H100 (DGXC), allreduce, NCCL's pick, 32.00 MiB") == ""
    assert ring in fitted("1 x 8 H100 RoCE, 8 GiB, NVLS off") and nvls in fitted("1 x 8 H100 RoCE, 8 GiB, NVLS on")
    assert fitted("2 x 8 H100 RoCE, 8 GiB, NVLS off") == fitted("4 x 8 H100 RoCE, 8 GiB, NVLS on") == ""
    assert (
        xgmi in fitted("8 x MI300X, allreduce (AAC8), 16.00 MiB")
        and fitted("8 x MI300X, allreduce (AAC8), 8.00 MiB") == ""
    )
    assert all(r.row.held_out for r in results if r.row.source in ("aac10-mi300x", "aac11-mi325x"))


def test_no_row_bends_a_constant():
    """A row may pick the preset, the rank count, the op and size, force an algorithm (as the run it
    compares with did), or describe the measured job (a model, batch, precision, NVLS disabled, an
    optimizer) and the device the source names where it is not the preset's (an A100 40GB, the
    torchtitan H100s' 96 GB of HBM2e at 2.4 TB/s, the H200's 141 GB at 4.8 TB/s, the MI325X's 6 TB/s
    and 255.98 GB), at the datasheet's or
    source's figure; nothing else."""
    allowed = (
        "network.algorithm=",
        "network.nvls_gb_s=0",
        "network.gpus_per_process=8",
        "model.",
        "training.",
        "compute.stack=",
        "compute.optimizer_s=",
    )
    stated = {"compute.hbm_tb_s=1.555", "compute.device_memory_gib=40", "compute.hbm_tb_s=2.4",
              "compute.device_memory_gib=96", "compute.hbm_tb_s=6", "compute.device_memory_gib=255.98",
              "compute.hbm_tb_s=4.8", "compute.device_memory_gib=141"}  # fmt: skip
    for row in ROWS:
        words = row.command.split()
        sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
        assert all(s.startswith(allowed) or s in stated for s in sets), (row.what, sets)


def test_step_rows_follow_their_sources_rules():
    """llm-foundry: every seq-2048 FULL_SHARD bf16/amp_bf16 row, its step the printed global batch
    over the printed throughput; torchtitan: local batch x 8192 over TPS per GPU (Table 2: FSDP
    degree x sequence over 8 x TPS per GPU)."""
    foundry = [r for r in ROWS if r.source == "llm-foundry"]
    assert len(foundry) == len(data.LLM_FOUNDRY) + len(data.LLM_FOUNDRY_FP8) == 82 + 1
    (fp8,) = [r for r in foundry if "amp_fp8" in r.what]
    assert fp8.measured == pytest.approx(983040 / 244692) and "training.precision=fp8" in fp8.command
    seven = next(r for r in foundry if r.what.startswith("llm-foundry mpt-7b on 8 x H100"))
    assert seven.measured == pytest.approx(98304 / 85144)  # 'GlobalBatchSize (T)' / 'Throughput (T/s)'
    assert "--ranks 8 " in seven.command and "model.n_embd=4096" in seven.command
    # The README's NumParams column, from the shapes as the rows set them.
    for model, params in (("125m", 125_311_488), ("7b", 6_658_859_008), ("70b", 64_862_437_376)):
        n_layer, n_embd, n_head = data.MPT_SHAPES[model]
        sets = [f"model.n_layer={n_layer}", f"model.n_embd={n_embd}", f"model.n_head={n_head}"]
        sets += ["model.block_size=2048", "model.vocab_size=50368", "training.seq_len=2048"]
        assert param_count(load_scenario("h100-1024", sets).model.shape) == params
    titan = [r for r in ROWS if r.source == "torchtitan"]
    assert [round(r.measured, 3) for r in titan[:6]] == [2.843, 2.457, 2.923, 2.515, 2.755, 24.749]
    # Float8: 2 x 8192 / 8532 and / 8380; the 2D row's TP group shares its local batch of 16.
    assert [round(r.measured, 3) for r in titan[6:9]] == [1.92, 1.955, round(16 * 8192 / 8 / 829, 3)]
    assert all("training.precision=fp8" in r.command for r in titan[6:9])
    # Table 2: FSDP degree x sequence / (8 GPUs x TPS per GPU), CP as printed, the sequence set.
    assert [round(r.measured, 3) for r in titan[9:13]] == [8.424, 12.901, 30.596, 59.796]
    for r, (fsdp, cp, seq, _) in zip(titan[9:13], data.TORCHTITAN_CP, strict=True):
        assert f"training.cp={cp} " in r.command + " " and f"training.seq_len={seq}" in r.command
        assert fsdp * cp == 8 and "--ranks 8 " in r.command and "training.precision=fp8" in r.command
    # The async-TP page's vanilla TP column: bf16 then float8 tensorwise, 70B then 8B.
    assert [round(r.measured, 3) for r in titan[13:17]] == [27.43, 20.232, 2.807, 2.42]
    assert "training.tp=8" in titan[8].command and "--ranks 256 " in titan[8].command
    # AsyncTP (the TP-overlap rule): Table 4's 2D + AsyncTP, then the async-TP page's Async TP column;
    # each its vanilla row's job plus the overlap, nothing else.
    assert [round(r.measured, 3) for r in titan[17:]] == [round(16 * 8192 / 8 / x, 3) for x in (876, 652.4, 942.4)] + [
        round(12 * 8192 / 8 / x, 3) for x in (4809.4, 5570.1)
    ]
    for fast, slow in zip(titan[17:], (titan[8], titan[13], titan[14], titan[15], titan[16]), strict=True):
        assert fast.command == slow.command + " --set training.tp_comm_overlap=full"
    assert not any("tp_comm_overlap" in r.command for r in titan[:17])
    # Trainy's H200 page: local batch 2 x 8192 over TPS per GPU, on 4 and 8 hosts of 8, Float8 with
    # the FSDP Float8 all-gather as its command line sets them.
    trainy = [r for r in ROWS if r.source == "trainy-h200"]
    assert [round(r.measured, 4) for r in trainy] == [round(16384 / 10938, 4), round(16384 / 10753, 4)]
    for r, gpus in zip(trainy, (32, 64), strict=True):
        assert f"--ranks {gpus} " in r.command and "training.fp8_all_gather=true" in r.command
        assert "training.precision=fp8" in r.command and "compute.hbm_tb_s=4.8" in r.command


def test_every_step_rows_command_runs_as_validate_runs_it():
    """`validate --public` simulates whatever memory says; the command it prints for a row must
    not be refused as out of memory by `simulate`, which refuses a DDP/FSDP job and a 3D one
    alike. The torchtitan rows need their H100s' stated 96 GB for that; Llama 3 405B's, which
    ddplab's memory model puts over 80 GB where Meta ran them, carry --ignore-memory."""
    from calibrate.public import flag_patches, resolve
    from sim.memory_fit import fit

    over = []
    for row in ROWS:
        if row.job.kind != "simulate":
            continue
        sc = resolve(row.job.preset, row.job.sets, flag_patches(ranks=row.job.ranks, steps=row.job.steps)).scenario
        if not fit(sc).fits:
            assert "--ignore-memory" in row.command, row.what
            over.append(row.source)
        else:
            assert "--ignore-memory" not in row.command, row.what
    assert over == ["llama3-table4"] * 3


def test_a_row_evaluates_alone():
    r = evaluate(ROWS[0])
    assert r.row is ROWS[0] and r.predicted > 0


def test_cli_prints_the_same_table(ddplab, results, monkeypatch):
    # The table the fixture computed (12 s here), handed to the command's journey in place of a
    # second computation: what is tested is that the command prints those rows, whole.
    from workflow import calibration

    monkeypatch.setattr(calibration, "public_table", lambda: results)
    code, out, err = ddplab("validate", "--public", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["what"] for r in rows] == [r.row.what for r in results]
    assert [r["predicted"] for r in rows] == pytest.approx([r.predicted for r in results], rel=1e-12)
    assert all({"error", "bound", "held_out", "source", "within", "fitted"} <= set(r) for r in rows)
    assert [r["held_out"] for r in rows] == [r.row.held_out for r in results]
    # Step rows carry the class `simulate` reads the record in; collective rows have none.
    from calibrate.record import load_record

    assert {r["what"]: r["regime"] for r in rows if "regime" in r} == {r["what"]: r["regime"] for r in load_record()}
    code, out, err = ddplab("validate", "--public")
    assert code == 0 and "held-out:" in out and "in-sample:" in out
    assert "h100, compiled, attention-heavy (any layout) 0 of 4 within, -45.2% to -24.4%" in " ".join(out.split())
    code, _, err = ddplab("validate", "--public", "--calib", "x.json")
    assert code == 2 and "--public: takes no RUN_DIR or --calib" in err
    code, _, err = ddplab("validate", "--public", "--seed", "3")  # was taken and ignored
    assert code == 2 and "--seed: --public predicts each row with its scenario's own seed" in err


def test_the_plot_draws_every_row_and_rings_every_miss(ddplab, results, monkeypatch, tmp_path):
    """`validate --public --plot` (it was taken and ignored): every row is drawn, a collective
    at its message size and any other row in its source's group, and each row outside its tier
    is ringed; the counts come back from the drawing, so a row lost on the way fails here."""
    from output.public_plot import plot_public
    from workflow import calibration

    monkeypatch.setattr(calibration, "public_table", lambda: results)
    rows, h = calibration.public_validation()
    collectives = [r for r in rows if r["bytes"]]
    assert len(collectives) == sum(r.row.job.kind == "collective" for r in results) > 200
    assert all(r["bytes"] == r_.row.job.size for r, r_ in zip(rows, results, strict=True) if r["bytes"])
    drawn = plot_public(rows, h, tmp_path / "direct.png")
    misses = sum(not r["within"] for r in rows)
    assert drawn == {"collectives": len(collectives), "steps": len(rows) - len(collectives), "misses": misses}
    code, out, err = ddplab("validate", "--public", "--plot", str(tmp_path / "p.png"))
    assert code == 0, err
    assert out.rstrip().endswith(f"plot: {tmp_path / 'p.png'}")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_llama3_rows_run_what_the_paper_states():
    """Table 4's rows (arXiv 2407.21783): 16M tokens a step, the interleaved schedule with one
    layer per chunk (126 + 2 chunks over 16 stages: v = 8), no activation checkpointing; the
    third with context parallelism 16 at 131,072 tokens."""
    rows = [r for r in ROWS if r.source == "llama3-table4"]
    assert [r.measured for r in rows] == [0.43, 0.41, 0.38] and len(rows) == len(data.LLAMA3_TABLE4)
    for row, (gpus, tp, cp, pp, dp, seq, per_dp, *_) in zip(rows, data.LLAMA3_TABLE4, strict=True):
        assert tp * cp * pp * dp == gpus and dp * per_dp * seq == 2**24  # "16M" tokens
        words = row.command.split()
        sets = dict(words[i + 1].split("=") for i, w in enumerate(words) if w == "--set")
        assert sets["training.pp_schedule"] == "interleaved" and sets["training.pp_virtual_stages"] == "8"
        assert sets["training.activation_checkpointing"] == "none" and sets["training.grad_accum"] == str(per_dp)
        sc = load_scenario("h100-16k", [f"{k}={v}" for k, v in sets.items()], ranks=gpus)
        assert sc.dp == dp and sc.training.cp == cp and sc.seq_len == seq
        assert param_count(sc.model.shape) == pytest.approx(405e9, rel=0.01)


def test_nemo_rows_follow_their_rule():
    """NeMo 24.07's H100 table: the GPT3 and LLAMA2 rows (CP 1), step = GBS x seq / (TPS x GPUs),
    micro-batches = GBS / (MBS x DP), interleaved where VP > 1, FP8."""
    rows = [r for r in ROWS if r.source == "nemo-2407"]
    assert len(rows) == len(data.NEMO_2407_H100_FP8) == 7
    for row, (model, gpus, gbs, mbs, seq, tp, pp, vp, tps, _) in zip(rows, data.NEMO_2407_H100_FP8, strict=True):
        assert row.measured == pytest.approx(gbs * seq / (tps * gpus), rel=1e-12) and row.held_out
        assert row.what.startswith(f"NeMo 24.07 {model} on {gpus} x H100")
        words = row.command.split()
        sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
        assert f"training.grad_accum={gbs // (mbs * gpus // (tp * pp))}" in sets
        assert "training.precision=fp8" in sets and f"--ranks {gpus} " in row.command
        assert "training.mode=zero1" in sets  # the launcher's distributed_fused_adam
        assert ("training.pp_schedule=interleaved" in sets) == (vp > 1)
        # What NeMo-Framework-Launcher's 24.07 yamls set beyond the table: the bucket cap, TP overlap.
        bucket_mb, ub_overlap = data.NEMO_2407_LAUNCHER[model]
        assert f"training.bucket_cap_mb={bucket_mb}" in sets
        # Userbuffers where the yaml has them, else Transformer Engine's default wherever TP > 1.
        want = "full" if ub_overlap else ("wgrad" if tp > 1 else None)
        assert [s for s in sets if s.startswith("training.tp_comm_overlap=")] == (
            [f"training.tp_comm_overlap={want}"] if want else []
        )
    assert [m for m, (_, ub) in data.NEMO_2407_LAUNCHER.items() if ub] == ["GPT3-20B", "LLAMA2-70B"]
    # The 175B on 512 GPUs: 2048 x 2048 / (825 x 512) s.
    assert rows[3].measured == pytest.approx(9.93, abs=0.01)
    sc = load_scenario("h100-1024", [s for s in rows[-1].command.split() if "=" in s], ranks=64)
    assert param_count(sc.model.shape) == pytest.approx(69e9, rel=0.01)  # LLAMA2-70B


def test_the_committed_public_record_is_the_current_models(results):
    """calibrate/public_record.json, which `simulate` prints beside a step time, holds the step
    rows as this model predicts them: a change to the model fails here until `make record`."""
    from calibrate.record import RECORD_PATH, record_rows

    fresh = record_rows(results)
    committed = json.loads(RECORD_PATH.read_text())["rows"]
    assert [r["what"] for r in committed] == [r["what"] for r in fresh], "run `make record`"
    for old, new in zip(committed, fresh, strict=True):
        assert old | {"step_error": 0} == new | {"step_error": 0}, f"{new['what']}: run `make record`"
        assert old["step_error"] == pytest.approx(new["step_error"], abs=2e-4), f"{new['what']}: run `make record`"
