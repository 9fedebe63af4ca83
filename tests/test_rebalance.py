"""Rebalancing in whole samples (sim/rebalance.py): the split against an exhaustive search, the
global batch kept, and what it means for whatif's rows and memory."""

import itertools
import json

import numpy as np
import pytest
from conftest import in_process

from sim.memory_fit import fit
from sim.rebalance import describe, whole_samples
from sim.scenario_file import load_scenario
from sim.workload import build_workload, largest_micro_batch


def _best_max(t: np.ndarray, samples: int, d: np.ndarray | float = 0.0) -> float:
    """The least slowest-rank time d_r + n_r u_r over every split of ranks x samples into parts >= 1."""
    total, u = len(t) * samples, t / samples
    best = np.inf
    for head in itertools.product(range(1, total + 1), repeat=len(t) - 1):
        last = total - sum(head)
        if last >= 1:
            best = min(best, float(np.max(d + np.array([*head, last]) * u)))
    return best


def test_the_split_is_the_exhaustive_optimum():
    """On 300 random small cases (2-4 ranks, 1-5 samples each, speeds 1 to 10 x apart): the split
    keeps the global batch, gives every rank at least one sample, and its slowest rank's time is
    the least any split reaches."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        ranks, samples = int(rng.integers(2, 5)), int(rng.integers(1, 6))
        t = np.exp(rng.uniform(0.0, np.log(10.0), ranks))
        n = whole_samples(t, samples)
        assert n.sum() == ranks * samples and n.min() >= 1
        assert np.max(n * t / samples) == pytest.approx(_best_max(t, samples), rel=1e-12), (t, samples, n)


def test_the_split_with_delays_paid_whatever_the_samples_is_the_exhaustive_optimum():
    """As above, each rank also paying a fixed time a step (a host delay, 0 to 3 x its configured
    work, none on half the ranks): the split's slowest rank, d_r + n_r u_r, is the least any split
    reaches; four equal ranks, one late by half its work, give it 5 samples and the others 9."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        ranks, samples = int(rng.integers(2, 5)), int(rng.integers(1, 6))
        t = np.exp(rng.uniform(0.0, np.log(10.0), ranks))
        d = np.where(rng.random(ranks) < 0.5, 0.0, rng.uniform(0.0, 3.0, ranks) * t)
        n = whole_samples(t, samples, d)
        assert n.sum() == ranks * samples and n.min() >= 1
        assert np.max(d + n * t / samples) == pytest.approx(_best_max(t, samples, d), rel=1e-12), (t, d, samples, n)
    same = whole_samples(np.ones(4), 8, np.array([0.0, 0.0, 0.0, 0.5]))
    assert same.tolist() == [9, 9, 9, 5]  # 9/8 a step each; the late one 0.5 + 5/8 = 9/8 too


def test_at_least_one_sample_each():
    """Two ranks 4 x slow and one sample each: the continuous optimum gives them a quarter each
    and the fast rank two; whole samples give each rank one (the only split there is)."""
    assert whole_samples(np.array([4.0, 4.0, 1.0]), 1).tolist() == [1, 1, 1]


def test_a_spread_smaller_than_one_sample_is_left_alone():
    """Identical GPUs 1.2 % apart (sd) at 8 samples a step: one sample is 12.5 % of a rank's work,
    so every rank keeps its 8, and the whatif row is the unchanged job's, to the digit."""
    rng = np.random.default_rng(0)
    t = 1.0 + 0.012 * rng.standard_normal(1024)
    n = whole_samples(t, 8)
    assert (n == 8).all()
    assert describe(n, 8) == "every rank keeps its 8 samples a step (one is 12.5% of its work)"


def test_whatif_rebalance_says_how_the_samples_fell(capsys):
    """straggler-jitter's persistent spread cannot be rebalanced in whole samples (the same row as
    doing nothing), and straggler-lemon's slow GPU (1.4 x) takes 6 of 8 while two healthy ranks take
    9, so the rebalanced job is slower than a healthy cluster: the fix cannot beat having no
    straggler."""
    argv = ("--ranks", "256", "--steps", "30", "--json")
    code, out, err = in_process(capsys, "whatif", "straggler-jitter", "--try", "rebalance", *argv)
    assert code == 0, err
    nothing, rebalance = json.loads(out)
    assert rebalance["step_time_s"] == nothing["step_time_s"]
    assert rebalance["note"].endswith("every rank keeps its 8 samples a step (one is 12.5% of its work)")
    code, out, err = in_process(
        capsys, "whatif", "straggler-lemon", "--try", "rebalance", "--try", "stragglers=", *argv
    )
    assert code == 0, err
    nothing, rebalance, healthy = json.loads(out)
    assert nothing["step_time_s"] > rebalance["step_time_s"] > healthy["step_time_s"]
    assert rebalance["note"].startswith("work sized to speed: rank 17 takes 6, ranks ")
    assert rebalance["note"].endswith(" take 9 samples a step (each had 8)")


def test_the_rank_given_a_ninth_sample_holds_its_activations():
    """Memory under rebalance is the fullest rank's: at 8 samples a micro-step, a healthy rank
    given a ninth runs a micro-batch of 9, and the row's peak is the peak at micro-batch 9."""
    lemon = load_scenario("straggler-lemon", ["rebalance=true"], ranks=64, steps=2)
    assert build_workload(lemon, np.random.default_rng(lemon.seed)).samples_per_step.max() == 9
    assert largest_micro_batch(lemon) == 9
    nine = load_scenario("straggler-lemon", ["training.micro_batch_size=9"], ranks=64, steps=2)
    eight = load_scenario("straggler-lemon", [], ranks=64, steps=2)
    assert fit(lemon).total_gib == pytest.approx(fit(nine).total_gib, rel=1e-12)
    assert fit(lemon).total_gib > fit(eight).total_gib


def test_a_3d_job_refuses_rebalance(capsys):
    """sim/steps3d.py sizes no rank's work, so a TP job with rebalance set ran as if it were not
    (the same step as without): now one line, exit 2."""
    tp = ("--set", "training.tp=8", "--set", "training.sequence_parallel=true")
    code, out, err = in_process(capsys, "simulate", "straggler-lemon", *tp, "--set", "rebalance=true", "--steps", "2")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "rebalance: is not modelled for a tensor-, context- or pipeline-parallel or zero1 job" in line


def test_rebalancing_the_home_lab_lowers_efficiency_and_the_table_says_why(capsys):
    """homelab-1gbe's M2 (8x slower) gives up 3 of its 4 samples: tokens/s rises while each rank
    is busy for less of the step, since the 1GbE allreduce now sets it. The two columns then
    disagree, and the table says what efficiency measures."""
    code, out, err = in_process(capsys, "whatif", "homelab-1gbe", "--try", "rebalance", "--steps", "10", "--json")
    assert code == 0, err
    nothing, rebalance = json.loads(out)
    assert rebalance["tokens_per_s"] > 1.1 * nothing["tokens_per_s"]
    assert rebalance["scaling_efficiency"] < 0.6 * nothing["scaling_efficiency"]
    assert rebalance["note"] == "work sized to speed: rank 1 takes 1, rank 0 takes 7 samples a step (each had 4)"
    code, out, err = in_process(capsys, "whatif", "homelab-1gbe", "--try", "rebalance", "--steps", "10")
    assert code == 0, err
    assert "  efficiency: each rank's busy share of the step" in out
