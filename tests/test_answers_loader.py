"""Issue 22 item 6: the data loader as PyTorch's DataLoader (sim/loader.py, docs/loader.md).

Closed forms of the recurrence, the straggler-dataloader preset's ranking, the refused old key,
and realrun's DataLoader path. The model against real slowed-loader runs is
bench/loader_check.py (measurements/loader-check.txt)."""

import numpy as np
import pytest

from sim.loader import loader_wait_s
from sim.scenario_file import load_scenario, scenario_data
from sim.whatif import compare, plan
from sim.whatif_defaults import default_tries
from sim.workload import micro_step_compute_s
from tests.conftest import in_process


def wait(b, *, w, p=2, c=0.1, k=1, gap=0.0):
    r = loader_wait_s(np.array([b]), workers=w, prefetch_factor=p, micro_s=np.array([c]), micro_steps=k, gap_s=gap)
    return float(r.first_step_s[0]), float(r.steady_s[0])


@pytest.mark.parametrize("k", [1, 3])
def test_no_workers_blocks_on_every_batch(k):
    first, steady = wait(0.07, w=0, k=k)
    assert first == pytest.approx(k * 0.07) and steady == pytest.approx(k * 0.07)


@pytest.mark.parametrize("w", [1, 2, 8])
def test_a_loader_faster_than_compute_costs_only_the_first_batch(w):
    b = 0.9 * w * 0.1  # W workers deliver a batch every b / W = 0.09 s; compute takes 0.1 s
    first, steady = wait(b, w=w, k=4, gap=0.02)
    assert first == pytest.approx(b)  # the first batch, once
    assert steady == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(("w", "k", "gap"), [(1, 1, 0.0), (2, 1, 0.03), (4, 4, 0.05), (3, 2, 0.01)])
def test_a_loader_slower_than_compute_sets_the_pace(w, k, gap):
    """Steady state with a deep queue: a step lasts as long as the workers take for its K
    batches, K b / W, so the wait is that less the K micro-steps and the gap."""
    c, b = 0.1, 1.5 * w * 0.1
    _, steady = wait(b, w=w, p=16, c=c, k=k, gap=gap)
    assert steady == pytest.approx(max(0.0, k * b / w - k * c - gap), rel=1e-9, abs=1e-12)


def test_prefetch_covers_a_burst_of_micro_steps_only_if_the_queue_holds_it():
    """Loader pace 1.5 c per batch, K = 4 micro-steps, a 4 c gap: over a step the workers keep
    up (4 x 1.5 c = 6 c of building against an 8 c step), but only a queue that holds the
    step's 4 batches lets the burst run without waiting."""
    c = 0.1
    deep = wait(3 * c, w=2, p=2, c=c, k=4, gap=4 * c)[1]
    short = wait(3 * c, w=2, p=1, c=c, k=4, gap=4 * c)[1]
    assert deep == pytest.approx(0.0, abs=1e-12)
    assert short > 0.05  # two batches queued, the other two built during the burst


def test_the_preset_loader_is_slower_than_compute_on_rank_5_only():
    sc = load_scenario("straggler-dataloader", ranks=64, steps=2)
    micro = sum(micro_step_compute_s(sc))
    c = sc.compute
    per_batch = c.dataloader_batch_s / c.dataloader_workers  # what the workers deliver, s per batch
    assert per_batch < micro < per_batch * 1.667  # healthy hidden, rank 5 (0.6x speed) not


def test_accumulation_is_no_fix_for_a_slow_loader_and_a_repaired_one_is():
    tries = ["accum=4", "fix-loader", "workers=8"]
    data = scenario_data("straggler-dataloader", [], ranks=64, steps=20)
    rows = compare(plan(data, tries), horizon_h=24.0, restart_min=10.0)
    by = {r.mitigation: r for r in rows}
    nothing = by["nothing"].tokens_per_s
    assert by["accum=4"].tokens_per_s / nothing < 1.05  # the wait grows with the micro-steps
    assert by["fix-loader"].tokens_per_s / nothing > 1.2
    assert by["workers=8"].tokens_per_s == pytest.approx(by["fix-loader"].tokens_per_s, rel=0.01)
    assert by["accum=4"].tokens_per_s < by["fix-loader"].tokens_per_s
    # The wait is booked as loading on the slow rank, not as compute.
    assert by["nothing"].dataloader_s > by["fix-loader"].dataloader_s


def test_whatif_without_try_repairs_the_loader_or_adds_workers():
    tries, why = default_tries(load_scenario("straggler-dataloader", ranks=64, steps=2))
    assert tries[:2] == ["fix-loader", "workers=8"] and "slow data loaders" in why


def test_the_old_per_step_key_is_refused_with_its_replacement(capsys):
    code, _, err = in_process(capsys, "simulate", "h100-1024", "--set", "compute.dataloader_s=0.05", "--steps", "2")
    assert code == 2
    assert err.count("\n") == 1 and "compute.dataloader_s: replaced by compute.dataloader_batch_s" in err


def test_realrun_loader_gives_the_same_batches_whichever_worker_builds_them():
    torch = pytest.importorskip("torch")
    from realrun.data import Batches, Loader

    def first(workers):
        src = Batches(vocab_size=256, seq_len=16, seed=3, rank=1)
        loader = Loader(src, seed=3, rank=1, batch=2, workers=workers, prefetch=2, delay_s=0.0)
        return [loader.next(2)[0] for _ in range(5)]

    for a, b in zip(first(0), first(2), strict=True):
        assert torch.equal(a, b)
