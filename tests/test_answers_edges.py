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
