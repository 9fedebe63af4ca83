"""`ddplab stragglers` (calibrate/stragglers.py, workflow/stragglers.py, ddplab/straggcmd.py):
scores, flags and the least-waiting rank on simulated records (the real simulator, a known slow GPU) and on
hand-written train records (realrun/SCHEMA.md "train") whose answers are exact."""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from fake_runs import probe_run, train_run

from calibrate import stragglers as st
from ddplab.straggcmd import add_parser
from output import calib_plots
from output.export import write_result
from sim.engine import simulate
from sim.scenario_file import load_scenario

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _simulate(out: Path, ranks: int, stragglers: str = "", steps: int = 30) -> Path:
    result = simulate(load_scenario("h100-1024", ranks=ranks, steps=steps, stragglers=stragglers), records=True)
    return write_result(result, out)


@pytest.fixture(scope="module")
def slow17(tmp_path_factory) -> Path:
    """`simulate --out DIR` of 64 H100s, rank 17 1.4x slower: the DIR."""
    out = tmp_path_factory.mktemp("slow17")
    _simulate(out, 64, "17:1.4")
    return out


def _cmd(*argv: str):
    p = argparse.ArgumentParser(prog="ddplab")
    sub = p.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = p.parse_args(["stragglers", *argv])
    return args.func(args)


def test_simulated_straggler_is_flagged_and_waits_least(slow17):
    rep = st.analyse(st.load(slow17))  # a single rank count: its ranks-0064 is picked
    assert rep.source == "sim" and rep.path == slow17 / "ranks-0064" and rep.steps == 30
    assert rep.flagged == (17,)
    # 1/1.4 = 0.714, less the fastest GPU's lead (1.2 % sd spread over 64 GPUs) and jitter.
    sf = np.load(slow17 / "ranks-0064" / "records.npz")["speed_factor"]
    assert rep.ranks[17].score == pytest.approx(1 / 1.4, rel=0.05)
    assert rep.ranks[17].score == pytest.approx(sf.min() / sf[17], rel=0.02)
    assert min(r.score for r in rep.ranks if r.rank != 17) > 0.9
    assert rep.lowest_score_rank == rep.least_waiting_rank == 17 and rep.agrees
    assert rep.ranks[17].wait_s_mean < 0.1 * rep.wait_s_median
    assert st.verdict(rep).startswith("rank 17 is a straggler: score 0.7")
    assert "it waits least" in st.verdict(rep)


def test_simulated_run_without_straggler_flags_nothing(tmp_path):
    _simulate(tmp_path, 64)
    rep = st.analyse(st.load(tmp_path / "ranks-0064"))
    assert rep.flagged == () and min(r.score for r in rep.ranks) > 0.9
    assert st.verdict(rep).startswith("no straggler: every score >= 0.75")


def test_two_simulated_stragglers_slowest_waits_least(tmp_path):
    _simulate(tmp_path, 64, "17:1.4,40:2.0", steps=20)
    rep = st.analyse(st.load(tmp_path))
    assert rep.flagged == (17, 40)
    assert rep.lowest_score_rank == rep.least_waiting_rank == 40
    assert rep.ranks[40].score == pytest.approx(0.5, rel=0.05)
    assert st.verdict(rep).startswith("ranks 17, 40 are stragglers")


def test_sweep_needs_a_rank_count(tmp_path):
    for n in (8, 16):
        _simulate(tmp_path, n, steps=5)
    with pytest.raises(ValueError, match=r"a sweep of 8, 16 ranks; pass --ranks N") as e:
        st.load(tmp_path)
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)
    assert st.load(tmp_path, ranks=16).compute_s.shape == (5, 16)
    assert st.load(tmp_path / "ranks-0008").compute_s.shape == (5, 8)
    assert st.load(tmp_path / "ranks-0008", ranks=8).compute_s.shape == (5, 8)
    with pytest.raises(ValueError, match="simulated 8 ranks, not --ranks 16"):
        st.load(tmp_path / "ranks-0008", ranks=16)
    with pytest.raises(ValueError, match=r"no ranks-0032 directory \(simulated: 8, 16 ranks\)"):
        st.load(tmp_path, ranks=32)


# Hand-written train runs: per rank (forward_s, backward_s, [wait_s per kept step]).
FAST, EDGE, SLOW = (0.125, 0.25), (0.125, 0.375), (0.25, 0.375)  # 0.375 s, 0.5 s, 0.625 s: exact in binary


def _write_train(run_dir: Path, ranks: list[tuple[tuple[float, float], list[float]]], straggler=(), data=None) -> Path:
    """Two warm-up steps in which rank 0 computes 10 s and never waits (they must not
    count), then one step per listed wait, each rank's compute the same every step; ``data``:
    each rank's data_s every step (0)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    world = len(ranks)
    config = {"model": "gpt2-tiny", "seq_len": 64, "micro_batch": 1, "straggler": [list(s) for s in straggler]}
    for rank, ((fwd, bwd), waits) in enumerate(ranks):
        meta = {"type": "meta", "schema": "ddplab.realrun", "schema_version": 1, "verb": "train"}
        recs = [meta | {"config": config, "rank": rank, "world_size": world, "backend": "gloo", "device": "cpu"}]
        warm = [(5.0, 5.0, 0.0) if rank == 0 else (fwd, bwd, 1.0)] * 2
        for step, (f, b, w) in enumerate(warm + [(fwd, bwd, w) for w in waits]):
            recs.append(
                {"type": "step", "step": step, "micro_batch": 1, "tokens": 64, "loss": 1.0, "step_wall_s": f + b + w}
                | {"data_s": data[rank] if data else 0.0, "forward_s": f, "backward_s": b, "wait_s": w}
                | {"optimizer_s": 0.01}
                | {"throttle_s": 0.0}
            )
        recs.append({"type": "complete", "wall_s": 1.0, "steps": len(recs) - 1})
        (run_dir / f"train-rank{rank:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run_dir


def test_train_run_scores_and_flags_exactly(tmp_path):
    run = _write_train(
        tmp_path / "run",
        [(FAST, [0.25, 0.5, 0.75]), (EDGE, [0.125] * 3), (SLOW, [0.0, 0.0625, 0.0]), (FAST, [0.5] * 3)],
        straggler=[(2, 5 / 3)],
    )
    rep = st.analyse(st.load(run))
    assert (rep.source, rep.steps, rep.skipped_steps) == ("train", 3, 2)
    assert [r.compute_s_p50 for r in rep.ranks] == [0.375, 0.5, 0.625, 0.375]
    assert [r.score for r in rep.ranks] == [1.0, 0.75, 0.6, 1.0]  # 0.75 itself is not below the flag
    assert [r.flagged for r in rep.ranks] == [False, False, True, False]
    assert rep.flagged == (2,)
    # Rank 0's warm-up waits (0 s) would make it the least-waiting rank if they counted.
    assert [r.wait_s_mean for r in rep.ranks] == pytest.approx([0.5, 0.125, 0.0625 / 3, 0.5])
    assert rep.least_waiting_rank == rep.lowest_score_rank == 2
    assert rep.wait_s_median == pytest.approx((0.125 + 0.5) / 2)
    assert rep.injected == {2: pytest.approx(5 / 3)}
    # Rank 1 computes 125 ms longer than the others' median and waits 375 ms less: 250 ms of its
    # lateness its compute does not explain (these hand-written steps do not end together), above
    # the late flag, 1/3 of the fastest rank's 375 ms. Rank 2's 229 ms is said as what it is, a
    # slow GPU (flagged by its score), not as lateness.
    assert [r.late_s for r in rep.ranks] == pytest.approx([-0.25, 0.25, 0.25 - 0.0625 / 3, -0.25])
    assert rep.late == (1,) and [r.late_flagged for r in rep.ranks] == [False, True, False, False]
    assert st.verdict(rep) == (
        "rank 2 is a straggler: score 0.60, it waits least (20.8 ms vs 312 ms median); rank 1 is late to the"
        " gradient sync, its compute not flagged (score 0.75): the others wait 250 ms a step for it outside its"
        " compute (its data loading 0 s a step, the others' median 0 s)"
    )


def test_a_slow_loader_is_late_not_a_slow_gpu(tmp_path):
    """Three ranks compute alike (375 ms); rank 2 waits 250 ms a step for its batch, so the
    others wait 250 ms longer at the sync than it does. No score is flagged (before, "no
    straggler" was all it said): rank 2 is late outside compute, 250 ms a step, above the flag
    (125 ms: what a rank at score 0.75 would cost), and its data loading is named."""
    run = _write_train(
        tmp_path / "run", [(FAST, [0.3] * 3), (FAST, [0.3] * 3), (FAST, [0.05] * 3)], data=[0.0, 0.0, 0.25]
    )
    rep = st.analyse(st.load(run))
    assert rep.flagged == () and rep.late == (2,) and rep.least_waiting_rank == 2
    assert [r.late_s for r in rep.ranks] == pytest.approx([-0.125, -0.125, 0.25])  # the others: 300 and 50 ms
    assert rep.ranks[2].data_s_mean == 0.25 and rep.late_flag_s == pytest.approx(0.125)
    assert st.verdict(rep) == (
        "no slow GPU: every score >= 0.75 (lowest 1.00, rank 0); rank 2 waits least (50 ms vs 300 ms median);"
        " rank 2 is late to the gradient sync, its compute not flagged (score 1.00): the others wait 250 ms a"
        " step for it outside its compute (its data loading 250 ms a step, the others' median 0 s)"
    )
    # Under the flag it is shown, not flagged: 100 ms late.
    run = _write_train(
        tmp_path / "small", [(FAST, [0.15] * 3), (FAST, [0.15] * 3), (FAST, [0.05] * 3)], data=[0.0, 0.0, 0.1]
    )
    rep = st.analyse(st.load(run))
    assert rep.late == () and rep.ranks[2].late_s == pytest.approx(0.1)
    assert st.verdict(rep).startswith("no straggler: every score >= 0.75")


def test_a_simulated_late_host_is_found_late(tmp_path):
    """64 H100s, rank 5 late 200 ms before its forward (host_delays_s): its compute is the
    others', every other rank waits 200 ms more; stragglers finds it late by that, the only one."""
    result = simulate(load_scenario("h100-1024", ["host_delays_s=5:0.2"], ranks=64, steps=20), records=True)
    rep = st.analyse(st.load(write_result(result, tmp_path)))
    assert rep.flagged == () and rep.late == (5,) and rep.least_waiting_rank == 5
    assert rep.ranks[5].late_s == pytest.approx(0.2, rel=0.1)
    assert max(abs(r.late_s) for r in rep.ranks if r.rank != 5) < 0.01
    assert "rank 5 is late to the gradient sync" in st.verdict(rep) and "(data, host work)" in st.verdict(rep)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 1000])
def test_others_median_is_the_median_of_the_others(n):
    x = np.random.default_rng(n).normal(size=n).round(1)  # ties included
    want = [np.median(np.delete(x, i)) if n > 1 else 0.0 for i in range(n)]
    np.testing.assert_allclose(st.others_median(x), want, rtol=0, atol=0)


def test_train_run_where_the_wait_disagrees(tmp_path):
    run = _write_train(tmp_path / "run", [(FAST, [0.25] * 3), (SLOW, [0.5] * 3), (FAST, [0.125] * 3)])
    rep = st.analyse(st.load(run))
    assert rep.flagged == (1,) and rep.least_waiting_rank == 2 and not rep.agrees
    assert "but rank 2 waits least (125 ms vs 250 ms median): the wait does not confirm it" in st.verdict(rep)


def test_command_json_and_plot(slow17, tmp_path):
    plot = tmp_path / "s.png"
    out = _cmd(str(slow17), "--json", "--plot", str(plot))
    assert out["source"] == "sim" and out["flagged"] == [17] and out["least_waiting_rank"] == 17
    assert out["agrees"] and out["world_size"] == 64 and out["plot"] == str(plot)
    keys = {"rank", "compute_s_p50", "score", "flagged", "wait_s_mean", "late_s", "late_flagged", "data_s_mean"}
    assert set(out["ranks"][17]) == keys and out["late"] == [] and out["ranks"][17]["data_s_mean"] is None
    assert out["ranks"][17]["flagged"] and not out["ranks"][0]["flagged"]
    json.dumps(out)  # what the CLI prints
    assert plot.read_bytes()[:8] == PNG_MAGIC
    assert [p.name for p in tmp_path.iterdir()] == ["s.png"]  # no temporary file left


def test_command_table_and_default_plot(tmp_path, capsys):
    run = _write_train(tmp_path / "run", [(FAST, [0.25] * 3), (SLOW, [0.0] * 3)])
    _cmd(str(run))
    text = capsys.readouterr().out
    assert "train records in" in text and "2 ranks, 3 steps after 2 warm-up steps" in text
    assert "    1             625.0  0.600 FLAGGED *" in text
    assert "rank 1 is a straggler: score 0.60, it waits least (0 s vs 125 ms median)" in text
    assert (run / "stragglers.png").read_bytes()[:8] == PNG_MAGIC


def test_large_table_shows_the_slowest(slow17, capsys, monkeypatch):
    import workflow.stragglers as cmd

    monkeypatch.setattr(cmd, "FULL_TABLE_RANKS", 8)
    _cmd(str(slow17), "--plot", str(slow17 / "big.png"))
    lines = capsys.readouterr().out.splitlines()
    first = lines[2].split()  # the slowest rank heads the table
    assert (first[0], first[3], first[4]) == ("17", "FLAGGED", "*")
    assert len(lines) == 2 + 16 + 4  # header lines, 16 slowest, "... more", legend, verdict, plot
    assert any("48 more ranks" in line for line in lines)


def test_plot_of_many_ranks(tmp_path):
    """Beyond 64 ranks the plot is points over the rank index, not 1024 bars."""
    rng = np.random.default_rng(0)
    compute = rng.normal(0.2, 0.002, (5, 300))
    compute[:, 123] *= 1.5
    wait = np.full((5, 300), 0.04)
    wait[:, 123] = 0.001
    rep = st.analyse(st.Records("sim", tmp_path, compute, wait, 0, {}))
    assert rep.flagged == (123,) and rep.least_waiting_rank == 123
    assert calib_plots.stragglers(rep, tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC


def _one_line_error(match: str, *argv: str) -> str:
    with pytest.raises(ValueError, match=match) as e:
        _cmd(*argv)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_errors_are_one_line_naming_the_path(tmp_path, slow17):
    missing = tmp_path / "nope"
    assert _one_line_error("not a directory", str(missing)).startswith(str(missing))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _one_line_error("no train-rank.*jsonl files and no simulation records", str(empty)).startswith(str(empty))
    probe = probe_run(tmp_path / "probe", iters=8, micro_batches=(1,))
    assert _one_line_error("a probe run, train records are needed here", str(probe)).startswith(str(probe))
    _one_line_error("--ranks: 0: must be >= 1", str(slow17), "--ranks", "0")
    idle = train_run(tmp_path / "idle", config={}, step_s=1.0)  # forward_s = backward_s = 0
    _one_line_error("rank 0's median compute time is 0 s", str(idle))
    short = _write_train(tmp_path / "short", [(FAST, []), (FAST, [])])
    _one_line_error("no step of every rank after the 2 warm-up steps", str(short))
    _one_line_error(
        "a train run of 2 ranks, not --ranks 4", str(_write_train(tmp_path / "w", [(FAST, [0.1])] * 2)), "--ranks", "4"
    )
    bad = tmp_path / "bad" / "ranks-0004"
    bad.mkdir(parents=True)
    (bad / "records.npz").write_text("not a zip")
    _one_line_error("records.npz: not a readable .npz file", str(bad))
    (bad / "records.npz").unlink()
    _one_line_error("ranks-0004: no records.npz", str(bad))
