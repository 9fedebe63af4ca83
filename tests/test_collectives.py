"""The alpha-beta collective model: closed forms, NCCL's tuning constants, and the
measured 8 x H100 table in REFERENCES.md."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.collectives import Fabric, algbw_busbw_gb_s, bus_factor, candidates, collective_cost
from sim.config import load_scenario
from sim.workload import fabric_for


def gloo(ranks, busbw_gb_s=0.10625, hop_us=100.0):
    return Fabric(
        ranks=ranks,
        gpus_per_node=1,
        backend="gloo",
        algorithm="ring",
        intra_busbw_gb_s=1.0,
        inter_busbw_gb_s=busbw_gb_s,
        gloo_hop_latency_us=hop_us,
    )


@pytest.mark.parametrize("n", [2, 3, 8, 1024])
@pytest.mark.parametrize("op", ["allreduce", "allgather", "reduce_scatter"])
def test_gloo_ring_closed_form(n, op):
    size, alpha, beta = 64 * 2**20, 100e-6, 0.10625e9
    steps = 2 * (n - 1) if op == "allreduce" else n - 1
    expected = steps * alpha + bus_factor(op, n) * size / beta
    assert collective_cost(op, size, gloo(n)).time_s == pytest.approx(expected, rel=1e-12)


def test_bus_factors_match_nccl_tests():
    assert bus_factor("allreduce", 8) == 2 * 7 / 8
    assert bus_factor("allgather", 8) == bus_factor("reduce_scatter", 8) == 7 / 8
    assert bus_factor("broadcast", 8) == 1.0
    algbw, busbw = algbw_busbw_gb_s("allreduce", 1e9, 0.01, 8)
    assert (algbw, busbw) == pytest.approx((100.0, 175.0))


def h100(ranks, algorithm="auto"):
    return fabric_for(load_scenario("h100-1024", [f"network.algorithm={algorithm}"], ranks=ranks))


def test_nccl_ring_latency_from_tuning_table():
    # 8 GPUs on NVLink, Simple protocol: 8.4 + 2(n-1) x 3.4 us; bandwidth 450 x 0.82 GB/s.
    f = h100(8, "ring")
    simple = {c.algorithm: c.time_s for c in candidates("allreduce", 2**30, f)}["ring/Simple"]
    expected = (8.4 + 14 * 3.4) * 1e-6 + 2 * 7 / 8 * 2**30 / (450e9 * 0.82)
    assert simple == pytest.approx(expected, rel=1e-12)
    # Across nodes, NET hops: nInter = 2 (nNodes - 1).
    f = h100(64, "ring")
    ll = {c.algorithm: c.time_s for c in candidates("allreduce", 8, f)}["ring/LL"]
    n_inter = 2 * 7
    expected_lat = 6.6 + (2 * 63 - n_inter) * 0.6 + n_inter * 2.7
    assert ll == pytest.approx(expected_lat * 1e-6 + 2 * 63 / 64 * 8 / (0.5 * 369e9), rel=1e-9)


def test_tree_latency_grows_with_log_nodes():
    f = h100(1024, "tree")
    t = {c.algorithm: c.time_s for c in candidates("allreduce", 8, f)}["tree/LL"]
    bw = 0.92 * 0.5 * 369e9
    assert t == pytest.approx((6.8 + 2 * (7 * 0.6 + math.log2(128) * 5.0)) * 1e-6 + 2 * 1023 / 1024 * 8 / bw)


def test_auto_picks_tree_for_small_messages_at_scale():
    # Ring latency grows with 2(n-1) hops: at 1024 ranks a small allreduce goes to the tree.
    assert collective_cost("allreduce", 64 * 1024, h100(1024)).algorithm.startswith("tree")
    assert collective_cost("allreduce", 2**30, h100(8)).algorithm.startswith("ring")


def test_two_level_bus_bandwidth_is_the_slowest_segment():
    f = Fabric(ranks=16, gpus_per_node=8, backend="nccl", algorithm="ring", intra_busbw_gb_s=300, inter_busbw_gb_s=50)
    assert f.ring_busbw_gb_s() == 50
    assert Fabric(**{**f.__dict__, "ranks": 8}).ring_busbw_gb_s() == 300


# REFERENCES.md: togethercomputer/together-nccl-tests, 8x H100 SXM, NCCL 2.26.2, Ring busbw (GB/s).
MEASURED_RING_BUSBW = {16 * 2**20: 234.1, 64 * 2**20: 320.8, 256 * 2**20: 348.0, 2**30: 360.7}


@pytest.mark.parametrize("size", MEASURED_RING_BUSBW)
def test_h100_ring_busbw_within_15_percent_of_measured(size):
    f = h100(8, "ring")
    c = collective_cost("allreduce", size, f)
    _, busbw = algbw_busbw_gb_s("allreduce", size, c.time_s, 8)
    assert busbw == pytest.approx(MEASURED_RING_BUSBW[size], rel=0.15)


@given(
    st.integers(min_value=2, max_value=1024),
    st.floats(min_value=1, max_value=1e10),
    st.floats(min_value=1.0001, max_value=100),
)
def test_time_monotone_in_bytes(n, size, scale):
    f = Fabric(ranks=n, gpus_per_node=8, backend="nccl", algorithm="auto", intra_busbw_gb_s=369, inter_busbw_gb_s=376)
    assert collective_cost("allreduce", size * scale, f).time_s >= collective_cost("allreduce", size, f).time_s


def test_bad_size():
    with pytest.raises(ValueError, match="size_bytes"):
        collective_cost("allreduce", 0, gloo(2))
