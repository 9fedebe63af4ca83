"""The engine against closed forms (docs/design.md "Truth tests"): exact where one exists."""

import numpy as np
import pytest
from conftest import assert_breakdown_sums, tiny

from sim.config import ComputeConfig, NetworkConfig, NoiseConfig, TrainingConfig
from sim.engine import simulate
from sim.scenario_file import load_scenario

REL = 1e-9


@pytest.mark.parametrize("ranks,k", [(2, 1), (4, 3), (16, 2)])
def test_no_overlap_no_noise_is_the_sum_of_parts(ranks, k):
    sc = tiny(
        ranks=ranks,
        training=TrainingConfig(micro_batch_size=2, seq_len=64, grad_accum=k, overlap=False, first_bucket_mb=0.05),
        compute=ComputeConfig(step_compute_s=0.3, optimizer_s=0.02, dataloader_batch_s=0.01),
    )
    r = simulate(sc, records=True)
    wl = r.workload
    assert len(wl.buckets) > 1
    expected = k * 0.01 + k * 0.3 + wl.collective_s.sum() + 0.02  # a blocking loader: one batch per micro-step
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)
    # Ring allreduce closed form per bucket: 2(N-1) alpha + 2(N-1)/N S / B.
    alpha, beta = 50e-6, 1e9 / 8 * 0.94
    coll = 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * wl.wire_bytes / beta
    np.testing.assert_allclose(wl.collective_s, coll, rtol=1e-12)


def test_h100_1024_no_overlap_closed_form():
    sc = load_scenario(
        "h100-1024",
        ["training.overlap=false", "noise.distribution=none", "noise.speed_spread_sd=0"],
        steps=3,
    )
    r = simulate(sc, records=True)
    wl = r.workload
    k_f_b = wl.forward_s[0] + wl.backward_s[0]
    np.testing.assert_allclose(r.step_time_s, k_f_b + wl.collective_s.sum() + wl.optimizer_s, rtol=REL)


@pytest.mark.parametrize("nic_gbit_s", [0.01, 1.0, 100.0])
def test_overlap_pipeline_closed_form(nic_gbit_s):
    # Identical ranks: the last collective ends at max_b(ready_b + sum_{j>=b} T_j).
    sc = tiny(
        training=TrainingConfig(micro_batch_size=2, seq_len=64, grad_accum=2, first_bucket_mb=0.02, bucket_cap_mb=0.1),
        compute=ComputeConfig(step_compute_s=0.2, optimizer_s=0.01, dataloader_batch_s=0.005),
        network=NetworkConfig(backend="gloo", algorithm="ring", gpus_per_node=1, nic_gbit_s=nic_gbit_s),
    )
    r = simulate(sc, records=True)
    wl = r.workload
    f, b = wl.forward_s[0], wl.backward_s[0]
    pre = 2 * 0.005 + 2 * f + b  # two blocking batches, then forward, forward, backward
    ready = pre + b * wl.ready_fraction
    tail = np.cumsum(wl.collective_s[::-1])[::-1]
    expected = np.max(ready + tail) + 0.01
    assert len(wl.buckets) >= 3
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)
    assert_breakdown_sums(r)


@pytest.mark.parametrize("nic_gbit_s", [0.05, 0.0005])
def test_interference_closed_form(nic_gbit_s):
    # Two buckets. While collective 0 runs, backward proceeds at 1/(1+gamma).
    gamma = 0.5
    sc = tiny(
        training=TrainingConfig(micro_batch_size=2, seq_len=64, first_bucket_mb=0.1, bucket_cap_mb=100),
        compute=ComputeConfig(step_compute_s=0.3, interference_gamma=gamma, optimizer_s=0.0),
        network=NetworkConfig(backend="gloo", algorithm="ring", gpus_per_node=1, nic_gbit_s=nic_gbit_s),
    )
    r = simulate(sc, records=True)
    wl = r.workload
    assert len(wl.buckets) == 2
    f, w = wl.forward_s[0], wl.backward_s[0]
    f0 = wl.ready_fraction[0]
    t0, t1 = wl.collective_s
    start0 = f + w * f0
    remaining = w * (1 - f0)
    if t0 / (1 + gamma) < remaining:  # backward outlasts collective 0
        bwd_end = start0 + t0 + (remaining - t0 / (1 + gamma))
    else:  # all remaining backward runs slowed
        bwd_end = start0 + remaining * (1 + gamma)
    expected = max(bwd_end, start0 + t0) + t1
    # Both branches are exercised by the two link rates.
    assert (t0 / (1 + gamma) < remaining) == (nic_gbit_s > 0.001)
    np.testing.assert_allclose(r.step_time_s, expected, rtol=REL)
    np.testing.assert_allclose(r.compute_s, bwd_end, rtol=REL)
    assert_breakdown_sums(r)


@pytest.mark.parametrize("ranks", [2, 64, 1024])
def test_persistent_straggler_is_s_times_compute_independent_of_n(ranks):
    s, base = 1.4, 0.25
    sc = tiny(
        ranks=ranks,
        stragglers=f"{ranks - 1}:{s}",
        compute=ComputeConfig(step_compute_s=base, optimizer_s=0.0),
        network=NetworkConfig(enabled=False, gpus_per_node=1),
    )
    r = simulate(sc, records=True)
    np.testing.assert_allclose(r.step_time_s, s * base, rtol=REL)
    # With communication and no overlap, the comm adds on top: s x compute + sum T_b.
    sc = tiny(
        ranks=ranks,
        stragglers=f"{ranks - 1}:{s}",
        compute=ComputeConfig(step_compute_s=base, optimizer_s=0.0),
        training=TrainingConfig(micro_batch_size=2, seq_len=64, overlap=False),
    )
    r = simulate(sc, records=True)
    np.testing.assert_allclose(r.step_time_s - r.workload.collective_s.sum(), s * base, rtol=REL)
    # The straggler waits least: everybody else waits for it.
    waits = r.collective_wait_s.mean(axis=0)
    assert waits.argmin() == ranks - 1
    assert waits[ranks - 1] == pytest.approx(0.0, abs=1e-12)
    assert waits[0] == pytest.approx((s - 1) * base, rel=1e-9)


def test_accumulation_cuts_traffic_k_fold():
    results = {}
    for k in (1, 4):
        sc = load_scenario("h100-1024", [f"training.grad_accum={k}"], ranks=64, steps=5)
        results[k] = simulate(sc, records=True)
    per_token = {k: r.workload.traffic_bytes_per_step / r.workload.tokens_per_step for k, r in results.items()}
    assert per_token[1] / per_token[4] == pytest.approx(4.0, rel=1e-12)
    assert results[4].summary().comm_compute_ratio == pytest.approx(
        results[1].summary().comm_compute_ratio / 4, rel=0.02
    )


def test_overlap_hides_communication():
    runs = {}
    for overlap in (True, False):
        sc = tiny(
            training=TrainingConfig(
                micro_batch_size=2, seq_len=64, overlap=overlap, first_bucket_mb=0.02, bucket_cap_mb=0.02
            ),
            compute=ComputeConfig(step_compute_s=0.5, optimizer_s=0.0),
            network=NetworkConfig(backend="gloo", gpus_per_node=1, nic_gbit_s=0.05),
        )
        runs[overlap] = simulate(sc, records=True).summary()
    assert runs[True].exposed_comm_s < 0.5 * runs[False].exposed_comm_s
    assert runs[True].step_time_s.mean < runs[False].step_time_s.mean


def test_compression_halves_wire_bytes():
    base = ["training.precision=fp32"]
    plain = simulate(load_scenario("homelab-1gbe", base, steps=2), records=True).workload
    fp16 = simulate(load_scenario("homelab-1gbe", [*base, "training.comm_hook=fp16"], steps=2), records=True).workload
    psgd = simulate(
        load_scenario("homelab-1gbe", [*base, "training.comm_hook=powersgd"], steps=2), records=True
    ).workload
    np.testing.assert_allclose(fp16.wire_bytes, plain.wire_bytes / 2)
    assert psgd.wire_bytes.sum() < 0.01 * plain.wire_bytes.sum()  # rank-1 factors of 1536-wide matrices


def test_breakdown_sums_to_step_time_with_everything_on():
    sc = tiny(
        ranks=8,
        steps=20,
        stragglers="3:1.3",
        training=TrainingConfig(micro_batch_size=2, seq_len=64, grad_accum=2, first_bucket_mb=0.02, bucket_cap_mb=0.1),
        compute=ComputeConfig(step_compute_s=0.1, optimizer_s=0.01, dataloader_batch_s=0.003, interference_gamma=0.3),
        network=NetworkConfig(backend="gloo", gpus_per_node=1, nic_gbit_s=0.2, jitter_sigma=0.1),
        noise=NoiseConfig(distribution="gamma", sigma=0.1, speed_spread_sd=0.02),
    )
    r = simulate(sc, records=True)
    assert_breakdown_sums(r)
    assert (r.exposed_comm_s >= -1e-12).all() and (r.straggler_wait_s >= 0).all()
    assert np.all(r.step_time_s[:, None] >= r.compute_s)


@pytest.mark.parametrize("overlap", [False, True])
def test_rebalance_gives_a_late_rank_fewer_samples_until_its_delay_is_paid(overlap):
    """Two identical noiseless ranks, 8 samples each at u = 20 ms a sample; rank 1 starts each
    step 3.5 u late (host_delays_s). Times d_r + n_r u: the best whole split is rank 0 10, rank 1
    6 (10 u against 9.5 u; 9/7 gives 10.5 u), so rebalancing saves 11.5 u - 10 u = 30 ms a step,
    the rest of the step (the last bucket's all-reduce, the optimizer) the same. Before, the split
    ignored the delay and left both at 8."""
    from dataclasses import replace

    u = 0.02
    late = tiny(
        ranks=2,
        host_delays_s=f"1:{3.5 * u}",
        training=TrainingConfig(micro_batch_size=8, seq_len=64, overlap=overlap, first_bucket_mb=0.05),
        compute=ComputeConfig(step_compute_s=8 * u, optimizer_s=0.01),
    )
    kept, sized = simulate(late, records=True), simulate(replace(late, rebalance=True), records=True)
    assert sized.workload.samples_per_step.tolist() == [10, 6]
    np.testing.assert_allclose(sized.step_time_s, kept.step_time_s - 1.5 * u, rtol=1e-9)
    assert_breakdown_sums(sized)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_host_delay_moves_the_step_by_itself_and_the_others_wait_for_it(overlap):
    """Identical ranks without noise; rank 1 starts each step 40 ms late (host_delays_s, as a
    trace calibration sets it). Its buckets are ready 40 ms later, so every collective starts
    40 ms later and the step is exactly 40 ms longer, with or without overlap; rank 1's 40 ms is
    its host-delay part, not compute or waiting, and every other rank waits 40 ms more."""
    from dataclasses import replace

    base = tiny(
        ranks=4,
        training=TrainingConfig(micro_batch_size=2, seq_len=64, overlap=overlap, first_bucket_mb=0.05),
        compute=ComputeConfig(step_compute_s=0.3, optimizer_s=0.02),
    )
    on_time, late = simulate(base, records=True), simulate(replace(base, host_delays_s="1:0.04"), records=True)
    np.testing.assert_allclose(late.step_time_s, on_time.step_time_s + 0.04, rtol=REL)
    assert_breakdown_sums(late)
    np.testing.assert_allclose(late.compute_s, on_time.compute_s, rtol=REL)
    idle = late.exposed_comm_s + late.straggler_wait_s - (on_time.exposed_comm_s + on_time.straggler_wait_s)
    np.testing.assert_allclose(idle[:, [0, 2, 3]], 0.04, rtol=1e-9)
    np.testing.assert_allclose(idle[:, 1], 0.0, atol=1e-12)
    s, s0 = late.summary(), on_time.summary()
    assert s.host_delay_s == pytest.approx(0.04 / 4, rel=1e-12) and s0.host_delay_s == 0.0
    # Efficiency counts the late rank's 40 ms as its own time (as a loader's), the others' 40 ms
    # wait for it as lost: the mean rank's own time grows by 10 ms, the step by 40.
    own = s0.scaling_efficiency * s0.step_time_s.mean + 0.01
    assert s.scaling_efficiency == pytest.approx(own / (s0.step_time_s.mean + 0.04), rel=1e-9)
