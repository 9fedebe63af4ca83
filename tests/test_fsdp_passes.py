"""sim/fsdp.py runs a step in two passes: the leaders place the collectives, then every rank
runs against them, in closed form where a group of ranks all take the same side of every max
(_closed_run) and in place otherwise (_ranks). tests/test_engine_golden.py holds the whole at
64 ranks; here each shortcut is held to the long way at thousands of ranks, where the closed
form carries most ranks and the leaders are a handful among them."""

import numpy as np
import pytest

import sim.fsdp as fsdp
from sim.online import RANK_FIELDS
from sim.scenario_file import load_scenario

NOISE = ["noise.distribution=lognormal", "noise.sigma=0.05", "stragglers=17:1.4"]
CASES = {
    "fsdp": ("h100-1024", [*NOISE, "training.mode=fsdp"], 2048),
    "hsdp": ("h100-1024", [*NOISE, "training.mode=hsdp"], 2048),
    "fsdp accum=2 prefetch=2": (
        "h100-1024",
        [*NOISE, "training.mode=fsdp", "training.grad_accum=2", "training.fsdp_prefetch=2"],
        1024,
    ),
    "fsdp communication-bound": ("h100-64k", ["training.mode=fsdp"], 8192),
    "hsdp dataloader stragglers": ("straggler-dataloader", ["training.mode=hsdp"], 1024),
    "fsdp gc pauses": ("straggler-gc", ["training.mode=fsdp"], 1024),
}
STEPS = 4
RTOL = 1e-12


def _numbers(res) -> dict[str, np.ndarray]:
    got = {"step_end_s": res.step_end_s}
    got.update({f"rank_mean.{k}": res.rank_mean[k] for k in RANK_FIELDS})
    got.update({f"step_mean.{k}": res.step_mean[k] for k in RANK_FIELDS})
    return got


def _run(name):
    preset, sets, ranks = CASES[name]
    return fsdp.simulate_fsdp(load_scenario(preset, sets, ranks=ranks, steps=STEPS))


@pytest.mark.parametrize("name", CASES)
def test_closed_form_gives_the_in_place_numbers(name, monkeypatch):
    closed = []
    real = fsdp._closed_run

    def counted(*args):
        out = real(*args)
        closed.append(out is not None)
        return out

    monkeypatch.setattr(fsdp, "_closed_run", counted)
    monkeypatch.setattr(fsdp, "_RANKS_PER_SPLIT", 1)  # split as often as it takes, however slow
    monkeypatch.setattr(fsdp, "_CLOSED_MIN_RANKS", 0)  # and at these sizes too
    fast = _numbers(_run(name))
    # The closed form carried the steps: without that this test compares _ranks with itself.
    assert closed and all(closed), closed
    monkeypatch.setattr(fsdp, "_closed_run", lambda *args: None)
    slow = _run(name)
    scale = float(slow.step_time_s.max())
    for k, v in _numbers(slow).items():
        np.testing.assert_allclose(fast[k], v, rtol=RTOL, atol=RTOL * scale, err_msg=f"{name}: {k}")


@pytest.mark.parametrize("name", ["fsdp", "hsdp dataloader stragglers", "fsdp gc pauses"])
def test_leaders_place_the_collectives_as_every_rank_would(name, monkeypatch):
    fast = _run(name)
    assert len(fsdp._leaders(*_inputs(name))) < 64  # a handful of the ranks, or nothing is shown
    monkeypatch.setattr(fsdp, "_leaders", lambda start, fwd, bwd, keep: np.arange(len(start)))
    every = _run(name)
    np.testing.assert_array_equal(fast.step_end_s, every.step_end_s)
    for k in RANK_FIELDS:
        np.testing.assert_allclose(fast.rank_mean[k], every.rank_mean[k], rtol=RTOL, atol=RTOL, err_msg=k)


def _inputs(name):
    """The first step's (start, fwd, bwd, keep) as simulate_fsdp gives them to _leaders."""
    preset, sets, ranks = CASES[name]
    sc = load_scenario(preset, sets, ranks=ranks, steps=1)
    rng = np.random.default_rng(sc.seed)
    wl = fsdp.build_fsdp_workload(sc, rng)
    noise = fsdp.multipliers(rng, sc.noise.distribution, sc.noise.sigma, (ranks, wl.grad_accum), sc.noise.samples)
    start = wl.dataloader_s + 0.0
    return start, wl.forward_s[:, None] * noise, wl.backward_s[:, None] * noise, []
