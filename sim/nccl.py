"""NCCL's and RCCL's choice of collective algorithm, replayed.

The library picks among ring, tree (double binary tree across nodes), NVLS (NVLink SHARP
inside an NVSwitch node) and NVLS-tree (NVLS inside, a tree across), each with the LL, LL128
or Simple protocol, by its own cost model (src/graph/tuning.cc; constants in
sim/tuning_tables.py): a base and per-hop latency, a bus bandwidth with per-protocol caps,
correction factors; the cheapest wins (src/enqueue.cc). RCCL asks its MSCCL scheduler first,
and on one 8 x MI300X node takes the all-pairs allreduce, LL or Simple, where it applies
(sim/msccl.py).
``options`` replays that estimate for every pair and ``choose`` the pick. The estimate only
chooses: some of its numbers are weights, not times (RCCL charges a Simple ring 320 us per
network step and runs it at 0.1 of its bandwidth below 512 MiB, to keep it off those sizes).
What the chosen pair costs comes from the model's own latency and bandwidth
(sim/nccl_time.py), which reads no tuner number.

Everything is per platform in the preset, the same constants at every size and rank
count; docs/validation-public.md holds the result to published measurements.
"""

import math
from typing import NamedTuple

from sim.msccl import MSCCL_ALGORITHM, MSCCL_LL_ALGORITHM, runs_msccl, runs_msccl_ll
from sim.nccl_time import DATA_FRACTION, PROTOCOLS, time_pair
from sim.topology import FLAT, Tiers
from sim.tuning_tables import NCCL_AMD_HOST_LL_MAX, TABLES, TunerTable

ALGORITHMS = ("ring", "tree", "nvls", "nvlstree")


class Platform(NamedTuple):
    """One fabric's constants (sim/workload.py fabric_for builds it from [network])."""

    tuner: str  # a key of sim/tuning_tables.TABLES
    intra_link: str  # nvlink | xgmi | pci
    intra_busbw_gb_s: float  # achieved ring bus bandwidth inside a node
    inter_busbw_gb_s: float  # achieved bus bandwidth of a node's NICs together
    channels: int  # ring/tree channels (per-channel caps multiply by this)
    cpu_vendor: str  # intel | amd: NCCL's multi-node LL ceiling and net overhead follow the host
    nvls_busbw_gb_s: float  # 0 = no NVLink SHARP
    net_hop_us: float
    latency_us: tuple[float, float, float]  # one node, (LL, LL128, Simple)
    nvls_latency_us: float  # NVLS-tree's NVLS stage (sim/nccl_time.py)
    tiers: Tiers = FLAT  # racks and pods above the node (sim/topology.py); flat by default
    msccl_busbw_gb_s: float = 0.0  # RCCL's MSCCL all-pairs allreduce on one node (sim/msccl.py); 0 = none
    msccl_latency_us: float = 0.0
    process_ll_us: float = 0.0  # LL's extra latency from one process driving several GPUs (nccl-tests -g)
    nvls_channels: int = 16  # NVLS on one node: NCCL's loop (sim/nccl_time.py nvls_one_node)
    nvls_fixed_us: float = 9.5
    nvls_loop_us: float = 4.4


class Shape(NamedTuple):
    ranks: int
    nodes: int
    ppn: int  # ranks per node


class Option(NamedTuple):
    """One (algorithm, protocol) pair: the library's estimate and the prediction, both in us."""

    algorithm: str  # e.g. "tree/LL128"
    tuner_us: float
    latency_us: float  # predicted, without the bytes
    network_steps: int  # steps across nodes on the critical path
    busbw_gb_s: float  # predicted bus bandwidth the bytes move at
    time_us: float  # predicted


def _node_index(nodes: int) -> int:
    return 0 if nodes == 1 else (1 if nodes == 2 else 2)


def _log2i(x: float) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else -1


def _busbw(t: TunerTable, p: Platform, s: Shape, algo: str, proto: int) -> float:
    """Bus bandwidth of a pair as the library models it (GB/s; 0 = not offered)."""
    ring = min(p.intra_busbw_gb_s, p.inter_busbw_gb_s) if s.nodes > 1 else p.intra_busbw_gb_s
    i = _node_index(s.nodes)
    if algo in ("nvls", "nvlstree"):
        if proto != 2 or p.nvls_busbw_gb_s <= 0:
            return 0.0
        if algo == "nvls":  # inside one node; across nodes it needs CollNet (SHARP), off by default
            return p.nvls_busbw_gb_s if s.nodes == 1 else 0.0
        return min(p.nvls_busbw_gb_s, p.inter_busbw_gb_s) if s.nodes > 1 else 0.0
    if proto == 1 and not t.ll128:
        return 0.0
    if t.bw_ratio is not None:  # RCCL: measured ratios of the ring bandwidth
        if algo == "tree" and proto == 2 and s.nodes == 1 and not t.tree_simple_single_node:
            return 0.0
        return ring * t.bw_ratio[("2" if s.nodes <= 2 else "more", algo)][proto]
    ll_max = t.ll_max_gb_s[i]
    if s.nodes > 1 and p.cpu_vendor == "amd":
        ll_max = NCCL_AMD_HOST_LL_MAX[i - 1]
    bw = ring
    if algo == "ring":
        if proto == 0:
            bw = min(ll_max, bw * 0.5)
        elif proto == 1:
            bw = min(bw * 0.92, p.channels * t.ring_ll128_per_channel_gb_s[i])
        return bw
    bw = min(bw * 0.92, p.channels * t.tree_per_channel_gb_s[i])
    if proto == 0:
        bw = min(bw / 3.8, ll_max)
    elif proto == 1:
        bw = min(bw * (7.0 / 9.0 if s.nodes == 1 else 120.0 / 128.0), p.channels * t.tree_ll128_per_channel_gb_s[i])
    return bw


def _steps(op: str, s: Shape, rccl: bool) -> tuple[int, int]:
    """A ring's (steps, network steps); RCCL counts one more network step per node pair."""
    if op == "allreduce":
        inter = 0 if s.nodes == 1 else (2 * s.nodes if rccl else 2 * (s.nodes - 1))
        return 2 * (s.ranks - 1), inter
    return s.ranks - 1, 0 if s.nodes == 1 else s.nodes - 1


def _latency(t: TunerTable, p: Platform, s: Shape, op: str, algo: str, proto: int, rccl: bool) -> float:
    """The tuner's per-hop latency of a pair (us), its base aside."""
    intra = t.hop_us.get((p.intra_link, algo), (0.0, 0.0, 0.0))[proto]
    inter = t.hop_us[("net", "tree" if s.ppn == 1 and algo == "ring" else algo)][proto]
    if algo == "ring":
        steps, net_steps = _steps(op, s, rccl)
        if s.nodes > 1:  # "inter-node rings still have to launch nsteps x net overhead" (tuning.cc)
            intra = max(intra, t.net_overhead_us * (3.0 if proto == 2 else 1.0))
        return (steps - net_steps) * intra + net_steps * inter
    if algo == "tree":
        return 2 * (s.ppn - 1) * intra + 2 * _log2i(s.nodes) * inter
    if algo == "nvls":
        return intra
    return intra + 2 * _log2i(s.nodes) * inter  # nvlstree


def _offered(op: str, algo: str, s: Shape) -> bool:
    if op == "allreduce":
        return algo in ALGORITHMS and not (algo == "tree" and s.ranks < 2)
    return algo == "ring"  # allgather, reduce_scatter, broadcast: rings here


def options(op: str, size_bytes: float, p: Platform, s: Shape, bus_factor: float, algorithm: str = "auto"):
    """Every pair the library offers for this collective, with both estimates."""
    if algorithm == "auto" and runs_msccl(op, size_bytes, p.msccl_busbw_gb_s, s.ranks, s.nodes):
        # RCCL asks its MSCCL scheduler before its tuner: a matching algorithm runs, unweighed.
        time_us = p.msccl_latency_us + bus_factor * size_bytes / (p.msccl_busbw_gb_s * 1e3)
        return [Option(MSCCL_ALGORITHM, time_us, p.msccl_latency_us, 0, p.msccl_busbw_gb_s, time_us)]
    if algorithm == "auto" and runs_msccl_ll(op, size_bytes, p.msccl_busbw_gb_s, s.ranks, s.nodes):
        # Its all-pairs LL allreduce (1 KiB-512 KiB) goes before the tuner too: the one-node LL
        # latency fitted on this path (1-128 KiB), at LL's half of the node's ring rate.
        busbw = p.intra_busbw_gb_s * DATA_FRACTION[0]
        latency = p.latency_us[0] + p.process_ll_us
        time_us = latency + bus_factor * size_bytes / (busbw * 1e3)
        return [Option(MSCCL_LL_ALGORITHM, time_us, latency, 0, busbw, time_us)]
    t = TABLES[p.tuner]
    rccl = t.bw_ratio is not None
    log_size = _log2i(size_bytes / 64.0) if size_bytes >= 64 else -1
    # NCCL's pick sees the flat fabric (its model has nodes and NICs, nothing above); the
    # timing runs the tiers above the node (sim/nccl_time.py, sim/topology.py).
    out = []
    for algo in ALGORITHMS if algorithm == "auto" else (algorithm,):
        if not _offered(op, algo, s):
            continue
        for proto, name in enumerate(PROTOCOLS):
            bus = _busbw(t, p, s, algo, proto)
            if bus <= 0:
                continue
            # The tuner's estimate: its base and hops, its bandwidth through its correction factors.
            tuner_lat = t.base_us.get(algo, (0.0, 0.0, 0.0))[proto] + _latency(t, p, s, op, algo, proto, rccl)
            corr = 1.0
            if algo == "tree" and 0 <= log_size:
                table = t.tree_correction[proto]
                corr = table[min(log_size, len(table) - 1)] if rccl or log_size < 23 else 1.0
            if algo == "ring" and rccl and s.nodes > 1 and 0 <= log_size:
                corr = t.ring_correction[proto][min(log_size, 26)]
            if algo == "ring" and proto == 2 and s.nodes > 1 and op == "allreduce":
                if size_bytes / (p.channels * s.ranks) >= 64:
                    tuner_lat *= t.ring_plateau
            if bus * corr <= 0:
                continue
            tuner_us = tuner_lat + bus_factor * size_bytes / (bus * corr * 1e3)
            # The prediction: the model's own latency and bandwidth (sim/nccl_time.py).
            latency, net_steps, busbw, time_us = time_pair(p, s, op, size_bytes, bus_factor, algo, proto)
            out.append(Option(f"{algo}/{name}", tuner_us, latency, net_steps, busbw, time_us))
    return out


def choose(opts: list[Option]) -> Option:
    """The library's pick: the least time by its own estimate."""
    return min(opts, key=lambda o: o.tuner_us)
