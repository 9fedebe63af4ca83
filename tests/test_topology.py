"""Racks and pods above the node (sim/topology.py): the defaults change nothing, the
closed forms of the per-flow rate across an oversubscribed tier and of the extra hops,
and the two big-cluster presets with their published sizes."""

import math

import numpy as np
import pytest

from sim.collectives import Fabric, candidates, collective_cost
from sim.config import NetworkConfig, Scenario
from sim.scenario_file import load_scenario
from sim.topology import FLAT, Tiers
from sim.workload import build_workload, fabric_for

FLAT_SETS = [
    "network.gpus_per_rack=0",
    "network.gpus_per_pod=0",
    "network.cluster_pods=0",
    "network.pod_oversubscription=1",
    "network.tier_hop_us=0",
    "network.placement=packed",
]


# --- the defaults are the flat fabric, to the bit -------------------------------------------


@pytest.mark.parametrize(
    "name", ["homelab-1gbe", "homelab-10gbe", "a100-8", "h100-1024", "mi300x-1024", "llama3-8b-1024"]
)
def test_every_existing_preset_keeps_its_bucket_costs(name):
    sc = load_scenario(name)
    assert fabric_for(sc).tiers == FLAT
    base = build_workload(sc, np.random.default_rng(0))
    explicit = build_workload(load_scenario(name, FLAT_SETS), np.random.default_rng(0))
    assert np.array_equal(base.collective_s, explicit.collective_s)
    assert base.algorithms == explicit.algorithms


# --- closed forms ----------------------------------------------------------------------------

R_NIC = 400 / 8 * 0.94  # GB/s: one 400G NIC at h100-1024's achieved 94 %
K = 8  # NIC flows per node-edge: min(8 NICs, 16 channels)


def tiers(placement="packed", oversub=7.0, pod_nodes=384, rack_nodes=2, cluster_pods=8, hop_us=2.0):
    uplink = pod_nodes * 8 * R_NIC / oversub
    return Tiers(
        rack_nodes=rack_nodes,
        pod_nodes=pod_nodes,
        cluster_pods=cluster_pods,
        placement=placement,
        pod_uplink_gb_s=uplink,
        tier_hop_us=hop_us,
    )


def per_flow_gb_s(t: Tiers, nodes: int) -> float:
    return R_NIC * t.bandwidth_factor(nodes, K * R_NIC)


def test_packed_ring_crosses_each_pod_once_and_keeps_the_nic_rate():
    # Llama 3: 2,048 nodes fill 6 pods of 384; one node-edge (8 flows) leaves each pod
    # against an uplink of 384 x 8 x r / 7: min(r, U / 8) = r (55x headroom).
    t = tiers()
    assert t.pods_spanned(2048) == 6 and t.crossing_edges(2048) == 1
    uplink = 384 * 8 * R_NIC / 7
    assert per_flow_gb_s(t, 2048) == min(R_NIC, uplink / (1 * K)) == R_NIC


def test_packed_pays_bandwidth_only_when_a_pod_is_smaller_than_the_taper():
    # 4-node pods at 1:16: U = 4 x 8 x r / 16 = 2r for one 8-flow edge: r / 4 per flow.
    t = tiers(oversub=16.0, pod_nodes=4, rack_nodes=0, cluster_pods=0)
    assert per_flow_gb_s(t, 64) == pytest.approx(min(R_NIC, 4 * 8 * R_NIC / 16 / K)) == pytest.approx(R_NIC / 4)


def test_scattered_every_edge_crosses_and_shares_the_uplink():
    # 2,048 nodes dealt over the cluster's 8 pods: 256 per pod, each sending 8 flows up
    # through 384 x 8 x r / 7: per flow min(r, U / (256 x 8)) = r x 384 / (256 x 7).
    t = tiers(placement="scattered")
    assert t.pods_spanned(2048) == 8 and t.crossing_edges(2048) == 256
    expected = min(R_NIC, 384 * 8 * R_NIC / 7 / (256 * K))
    assert per_flow_gb_s(t, 2048) == pytest.approx(expected) == pytest.approx(R_NIC * 384 / (256 * 7))
    # With no cluster size the job fills its pods: 1,536 nodes, 4 full pods, every node of a
    # pod crosses: r / oversubscription; 2,048 nodes over 6 pods: 342 a pod, r x 384 / (342 x 7).
    full = tiers(placement="scattered", cluster_pods=0)
    assert per_flow_gb_s(full, 1536) == pytest.approx(R_NIC / 7)
    assert per_flow_gb_s(full, 2048) == pytest.approx(R_NIC * 384 / (342 * 7))


def test_scattered_rate_falls_monotonically_with_oversubscription():
    rates = [per_flow_gb_s(tiers(placement="scattered", oversub=o), 2048) for o in (1, 1.5, 2, 4, 7, 16)]
    assert rates[0] == R_NIC
    assert all(a > b for a, b in zip(rates[1:], rates[2:], strict=False))
    assert rates[0] >= rates[1]


def test_extra_latency_per_tier_crossed():
    t = tiers()  # racks of 2 nodes, pods of 384, 2 us per tier climbed
    # Ring allreduce, packed: a chunk passes R - 1 rack and P - 1 pod boundaries per phase.
    assert t.tier_crossings("ring", "allreduce", 2048) == 2 * ((1024 - 1) + (6 - 1))
    assert t.extra_us("ring", "allreduce", 2048) == 2.0 * 2 * (1023 + 5)
    assert t.tier_crossings("ring", "allgather", 2048) == 1023 + 5
    # Tree, packed: the top ceil(log2 R) levels join racks, ceil(log2 P) pods, up and down.
    assert t.tier_crossings("tree", "allreduce", 2048) == 2 * (10 + 3)
    # Scattered: every network step climbs both tiers.
    s = tiers(placement="scattered")
    assert s.tier_crossings("ring", "allreduce", 2048) == 2 * 2047 * 2
    assert s.tier_crossings("nvlstree", "allreduce", 2048) == 2 * 11 * 2
    assert t.tier_crossings("nvls", "allreduce", 1) == 0


def t16k(sets, ranks, size=2**28):
    """h100-16k's allreduce time, seconds, with these --set overrides at this many ranks."""
    return collective_cost("allreduce", size, fabric_for(load_scenario("h100-16k", sets, ranks=ranks))).time_s


def test_inside_one_pod_nothing_extra_across_pods_it_pays():
    pods = ["network.gpus_per_rack=0", "network.tier_hop_us=2"]  # the pod tier alone
    for size in (2**20, 2**28):  # 3,072 ranks: one pod
        assert t16k(pods, 3072, size) == t16k(FLAT_SETS, 3072, size)
    # Two pods, packed ring: P - 1 = 1 pod boundary per phase, 2 x 2 us; the bandwidth is the NIC's.
    ring = ["network.algorithm=ring", *pods]
    packed = t16k(ring, 6144)
    assert packed - t16k(["network.algorithm=ring", *FLAT_SETS], 6144) == pytest.approx(2 * 2.0e-6, rel=1e-6)
    # Scattered over a two-pod cluster: every edge crosses, all 384 nodes of a pod send their
    # whole rate up: r / oversubscription, and the time grows with the taper.
    scattered = [*ring, "network.placement=scattered", "network.cluster_pods=2"]
    times = [t16k([*scattered, f"network.pod_oversubscription={o}"], 6144) for o in (1, 2, 4, 7)]
    assert packed < times[0] < times[1] < times[2] < times[3]


def test_nccl_pick_is_topology_blind_only_the_timing_pays():
    packed = fabric_for(load_scenario("h100-16k"))
    scattered = fabric_for(load_scenario("h100-16k", ["network.placement=scattered"]))
    a, b = collective_cost("allreduce", 2**28, packed), collective_cost("allreduce", 2**28, scattered)
    assert a.algorithm == b.algorithm and a.chosen.tuner_us == b.chosen.tuner_us
    assert b.time_s > a.time_s
    # A ring's bus bandwidth: min(NVLink ring, NICs x 384 / (256 x 7)) across the top tier.
    sets = ["network.algorithm=ring", "network.placement=scattered"]
    opts = {o.algorithm: o for o in candidates("allreduce", 2**28, fabric_for(load_scenario("h100-16k", sets)))}
    nics = 8 * R_NIC
    assert opts["ring/Simple"].busbw_gb_s == pytest.approx(min(450 * 0.82, nics * 384 / (256 * 7)), rel=1e-12)


def test_gloo_ring_pays_the_same_tiers():
    f = Fabric(
        ranks=8,
        gpus_per_node=1,
        backend="gloo",
        algorithm="ring",
        intra_busbw_gb_s=10.0,
        inter_busbw_gb_s=1.0,
        gloo_hop_latency_us=50.0,
        tiers=Tiers(pod_nodes=2, placement="scattered", pod_uplink_gb_s=0.5, tier_hop_us=3.0),
    )
    # 8 nodes over 4 pods, 2 per pod, each edge crossing: per-node rate min(1, 0.5 / 2) = 0.25.
    size = 2**24
    expected = (2 * 7 * 50.0 + 2 * 7 * 1 * 3.0) * 1e-6 + 2 * 7 / 8 * size / 0.25e9
    assert collective_cost("allreduce", size, f).time_s == pytest.approx(expected, rel=1e-12)


# --- presets ---------------------------------------------------------------------------------


def test_h100_16k_is_llama3s_cluster():
    sc = load_scenario("h100-16k")
    n = sc.network
    assert sc.ranks == 16384 and n.gpus_per_node == 8 and n.nics_per_node == 8 and n.nic_gbit_s == 400
    assert (n.gpus_per_rack, n.gpus_per_pod, n.cluster_pods, n.pod_oversubscription) == (16, 3072, 8, 7.0)
    assert n.gpus_per_pod // n.gpus_per_rack == 192  # racks per pod (Llama 3, Sec. 3.3.1)
    assert n.placement == "packed"


def test_h100_64k_is_a_k64_fat_tree():
    sc = load_scenario("h100-64k")
    n, k = sc.network, 64
    assert sc.ranks == k**3 // 4 == 65536
    assert (n.gpus_per_rack, n.gpus_per_pod, n.cluster_pods) == (k // 2, k**2 // 4, k)
    assert n.pod_oversubscription == 1.0


@pytest.mark.parametrize("name", ["h100-16k", "h100-64k"])
def test_big_presets_simulate_a_few_steps(name):
    from sim.engine import simulate
    from sim.workload import micro_step_compute_s

    sc = load_scenario(name, ["steps=3"])
    summary = simulate(sc).summary()
    assert summary.ranks == load_scenario(name).ranks and summary.steps == 3
    # At least one micro-step of compute (GPT-2 760M, eager: 0.288 s), and its allreduce mostly
    # hidden, the order statistics of N jittery ranks on top: under 1.25 x the compute.
    compute_s = sum(micro_step_compute_s(sc))
    assert compute_s < summary.step_time_s.mean < 1.25 * compute_s


# --- bad values: one line naming the key -----------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        ({"pod_oversubscription": 0.5, "gpus_per_pod": 64}, "network.pod_oversubscription"),
        ({"pod_oversubscription": math.inf, "gpus_per_pod": 64}, "network.pod_oversubscription"),
        ({"gpus_per_pod": 100}, "network.gpus_per_pod"),
        ({"gpus_per_rack": 16, "gpus_per_pod": 24}, "network.gpus_per_pod"),
        ({"gpus_per_rack": 12}, "network.gpus_per_rack"),
        ({"gpus_per_pod": -8}, "network.gpus_per_pod"),
        ({"cluster_pods": 4}, "network.cluster_pods"),
        ({"tier_hop_us": -1.0}, "network.tier_hop_us"),
        ({"placement": "random"}, "network.placement"),
        ({"placement": "scattered"}, "network.placement"),
    ],
)
def test_bad_values_name_the_key(sets, key):
    with pytest.raises(ValueError) as err:
        NetworkConfig(**sets)
    msg = str(err.value)
    assert msg.startswith(f"{key}: ") and "\n" not in msg


def test_a_job_larger_than_the_cluster_is_refused():
    with pytest.raises(ValueError, match=r"^ranks: .*cluster_pods x network.gpus_per_pod \(24576\)"):
        Scenario(ranks=32768, network=NetworkConfig(gpus_per_pod=3072, cluster_pods=8))
