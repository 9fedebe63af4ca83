"""`ddplab calibrate`: known parameters recovered from hand-written probe records,
the noise model chosen by AIC, provenance, and every bad input named in one line
with nothing written."""

import json
from dataclasses import replace

import numpy as np
import pytest
from fake_runs import probe_run

from calibrate.calib import calibrate
from calibrate.noise_fit import fit_noise
from sim.transformer import flops_per_token, model_shape


@pytest.fixture
def probe(tmp_path):
    return probe_run(tmp_path / "1gbit" / "probe", speed={1: 1.5}, sigma=0.03)


def test_recovers_compute_network_and_ranks(probe):
    c = calibrate([probe], seed=0)
    k = c.compute
    # Per micro-step time = 10 ms + 100 us/token, every rank normalised to speed 1.
    assert k.step_s.per_token_s == pytest.approx(1e-4, rel=0.02)
    assert k.step_s.intercept_s == pytest.approx(0.01, abs=0.003)
    assert k.step_s.r2 > 0.99
    assert k.backward_s.per_token_s / k.step_s.per_token_s == pytest.approx(0.65, rel=1e-6)
    top = 8 * 64
    flops = flops_per_token(model_shape("gpt2-tiny"), 64) * top
    assert k.achieved_tflop_s.value == pytest.approx(flops / (0.01 + 1e-4 * top) / 1e12, rel=0.02)
    assert k.optimizer_s.value == pytest.approx(0.003)  # the slowest rank's: 2 ms x 1.5
    net = c.networks["1gbit"]
    assert net.interference_gamma.value == pytest.approx(0.12)
    # Rank 1 runs 1.5 x slower: factor 1.5, score 1/1.5 = 0.667 < 0.75, flagged.
    r = c.ranks
    assert r[0].speed_factor == 1.0 and not r[0].flagged
    assert r[1].speed_factor == pytest.approx(1.5, rel=0.02)
    assert r[1].score == pytest.approx(1 / 1.5, rel=0.02) and r[1].flagged
    assert net.collectives_sched == "other"  # these fake probes record no --sched
    ar = net.allreduce
    assert ar.busbw_gb_s == pytest.approx(0.118, rel=0.02)
    assert ar.alpha_s == pytest.approx(200e-6, rel=0.1)
    assert ar.hop_latency_us == pytest.approx(ar.alpha_s / 2 * 1e6)
    assert net.stack_efficiency.value == pytest.approx(ar.busbw_gb_s * 8 / 0.96)
    # Half the sizes predict the other half within 10 % (issue 5, item 4).
    assert max(abs(e) for e in net.collectives["allreduce"].holdout_rel_err.values()) < 0.10
    # Jitter: lognormal sigma 0.03 around each (rank, size) mean.
    assert c.noise.sigma == pytest.approx(0.03, rel=0.15)
    assert len(c.noise.multipliers) == 2 * 4 * 30


@pytest.mark.parametrize(
    "name,draw,sigma",
    [
        ("lognormal", lambda g: g.lognormal(-(0.3**2) / 2, 0.3, 4000), 0.3),
        ("gamma", lambda g: g.gamma(1 / 0.3**2, 0.3**2, 4000), 0.3),
        ("normal", lambda g: g.normal(1.0, 0.1, 4000), 0.1),
    ],
)
def test_aic_picks_the_generating_distribution(name, draw, sigma):
    best = fit_noise(draw(np.random.default_rng(3)))[0]
    assert best.distribution == name
    assert best.sigma == pytest.approx(sigma, rel=0.05)
    assert best.ks < 0.03


def test_cli_writes_json_and_plots(probe, tmp_path, ddplab):
    out = tmp_path / "cal" / "calib.json"
    out.parent.mkdir()
    code, stdout, err = ddplab("calibrate", str(probe), "-o", str(out))
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["schema"] == "ddplab-calib" and data["runs"] == [str(probe)]
    assert "FLAGGED" in stdout and "1gbit" in stdout
    for name in data["plots"]:
        png = out.parent / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.parent.glob(".*tmp"))


def _fails(ddplab, out, *args):
    code, stdout, err = ddplab("calibrate", *map(str, args), "-o", str(out))
    assert code == 2, (stdout, err)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and err.strip().endswith(errors[0]) and "Traceback" not in err
    assert not out.exists()
    return errors[0]


def test_bad_inputs_named_in_one_line(tmp_path, ddplab):
    out = tmp_path / "calib.json"
    bad = probe_run(tmp_path / "a", incomplete_rank=1)
    assert "a/probe-rank0001.jsonl: incomplete run" in _fails(ddplab, out, bad)
    no_compute = probe_run(tmp_path / "b", omit=("compute",))
    assert "missing probe kind: probe with --parts compute" in _fails(ddplab, out, no_compute)
    no_link = probe_run(tmp_path / "c", omit=("link",))
    assert "c: no link records" in _fails(ddplab, out, no_link)
    ok2 = probe_run(tmp_path / "d", rate="10gbit")
    three = probe_run(tmp_path / "e", world=3, rate="200mbit")
    assert "world_size 3 differs" in _fails(ddplab, out, ok2, three)
    garbage = tmp_path / "f"
    garbage.mkdir()
    (garbage / "probe-rank0000.jsonl").write_bytes(b"\xff\xfe\x00binary")
    assert "not a text file" in _fails(ddplab, out, garbage)
    assert "not a run directory" in _fails(ddplab, out, tmp_path / "nowhere")
    same = probe_run(tmp_path / "g", rate="10gbit")
    assert "network '10gbit' is also measured by" in _fails(ddplab, out, ok2, same)


def test_rejected_fits_hand_the_simulator_the_samples(tmp_path, ddplab):
    """A sharp peak with wide tails (as CPU jitter here): every parametric fit fails
    the KS test, so the calibration carries the samples and the simulator resamples them."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(1.0, 0.005, 400), rng.uniform(0.8, 1.3, 80)])
    best = fit_noise(x)[0]
    assert best.ks > 1.628 / np.sqrt(len(x))
    c = calibrate([probe_run(tmp_path / "p", sigma=0.0001)], seed=0)
    x = x / x.mean()
    noise = replace(c.noise, distribution="empirical", multipliers=list(x), sigma=float(np.std(x)))
    path = tmp_path / "calib.json"
    path.write_text(json.dumps(replace(c, noise=noise).to_json()))
    code, out, err = ddplab("simulate", "homelab-1gbe", "--calib", str(path), "--json", "--steps", "400")
    assert code == 0, err
    s = json.loads(out)
    assert {p["key"]: p["value"] for p in s["parameters"]}["noise.distribution"] == "empirical"
    # Step time = max over 2 ranks of compute x resampled multiplier (+ the rest, fixed):
    # its spread follows the samples' tails, not a fitted normal's.
    assert s["step_time_s"]["p99"] > s["step_time_s"]["p50"] * 1.05


def test_empirical_noise_resamples_and_is_checked():
    from sim.noise import multipliers

    pool = [0.5, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    draws = multipliers(np.random.default_rng(0), "empirical", 0.0, 20000, pool)
    assert set(np.unique(draws)) <= {0.5, 1.0, 1.5} and draws.mean() == pytest.approx(1.0, abs=0.01)
    from sim.config import NoiseConfig

    with pytest.raises(ValueError, match="noise.samples: empirical noise needs at least 8 samples, got '3 values'"):
        NoiseConfig(distribution="empirical", samples=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"noise.samples: every multiplier must be > 0, got \[0.0\]"):
        NoiseConfig(distribution="empirical", samples=[1.0] * 8 + [0.0])
