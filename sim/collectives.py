"""Collective cost: the alpha-beta model NCCL uses to pick its algorithm.

time = latency + bytes_on_the_bus / bus_bandwidth, in nccl-tests' bus-bandwidth
convention (NVIDIA/nccl-tests doc/PERFORMANCE.md): an allreduce of S bytes puts
2(n-1)/n x S on each rank's bus, allgather and reduce-scatter (n-1)/n x S.

NCCL backend: every (algorithm, protocol) pair gets a latency from the per-hop
table in NVIDIA/nccl src/graph/tuning.cc (v2.30.7, copied into REFERENCES.md)
and a bandwidth cap per protocol; the cheapest predicted time wins, as in
src/enqueue.cc. gloo backend: ring only, one hop latency measured on the link.

Two-level topology: ``gpus_per_node`` GPUs on NVLink/xGMI, ``nics_per_node`` NICs
between nodes. A ring's bus bandwidth is the minimum over its segments: the
intra-node link per GPU, or the node's NICs together (NCCL runs one ring channel
per NIC, so a rail-optimised node with 8 NICs moves 8 x NIC rate across nodes).
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast")
PROTOCOLS = ("LL", "LL128", "Simple")

# NVIDIA/nccl src/graph/tuning.cc (v2.30.7), microseconds, per protocol LL/LL128/Simple.
_BASE_LAT_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
_HOP_LAT_US = {
    ("ring", "nvlink"): (0.6, 1.9, 3.4),
    ("ring", "pci"): (1.0, 2.5, 5.7),
    ("ring", "net"): (2.7, 4.0, 14.0),
    ("tree", "nvlink"): (0.6, 1.25, 4.0),
    ("tree", "pci"): (1.0, 2.5, 5.7),  # tuning.cc gives no PCI tree row; ring's PCI values
    ("tree", "net"): (5.0, 8.5, 14.0),
}
# LL sends 8-byte flag+data words (half the wire carries flags); LL128 loses 8 of 128
# bytes: tuning.cc caps their bandwidth at 0.5 and 0.92 of the Simple bus bandwidth.
_PROTO_BW_FACTOR = (0.5, 0.92, 1.0)
# tuning.cc scales tree allreduce bandwidth by 0.92 against the ring's.
TREE_BW_FACTOR = 0.92


def bus_factor(op: str, ranks: int) -> float:
    """Bytes on each rank's bus per byte of collective size (nccl-tests busbw factor)."""
    if op == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if op in ("allgather", "reduce_scatter"):
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"op: unknown collective {op!r} (known: {', '.join(OPS)})")


@dataclass(frozen=True, kw_only=True)
class Fabric:
    """The network one collective runs on, for a given number of ranks."""

    ranks: int
    gpus_per_node: int
    backend: str  # "nccl" | "gloo"
    algorithm: str  # "auto" | "ring" | "tree"
    intra_busbw_gb_s: float  # achieved bus bandwidth inside a node, per GPU
    inter_busbw_gb_s: float  # achieved bus bandwidth across nodes (all NICs of a node)
    intra_link: str = "nvlink"  # "nvlink" | "pci": which hop-latency row applies
    gloo_hop_latency_us: float = 50.0

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.ranks / self.gpus_per_node))

    @property
    def ranks_per_node(self) -> int:
        return min(self.ranks, self.gpus_per_node)

    def ring_busbw_gb_s(self) -> float:
        if self.nodes == 1:
            return self.intra_busbw_gb_s
        if self.ranks_per_node == 1:
            return self.inter_busbw_gb_s
        return min(self.intra_busbw_gb_s, self.inter_busbw_gb_s)


class CollectiveCost(NamedTuple):
    time_s: float
    algorithm: str  # e.g. "ring/LL128", "tree/Simple", "ring" (gloo)


def _ring_latency_us(fabric: Fabric, op: str, p: int) -> float:
    n, nodes = fabric.ranks, fabric.nodes
    if op == "allreduce":
        steps, inter = 2 * (n - 1), (2 * (nodes - 1) if nodes > 1 else 0)
    else:
        steps, inter = n - 1, nodes - 1
    intra_hop = _HOP_LAT_US[("ring", fabric.intra_link)][p]
    net_hop = _HOP_LAT_US[("ring", "net")][p]
    return _BASE_LAT_US["ring"][p] + (steps - inter) * intra_hop + inter * net_hop


def _tree_latency_us(fabric: Fabric, p: int) -> float:
    intra_hop = _HOP_LAT_US[("tree", fabric.intra_link)][p]
    net_hop = _HOP_LAT_US[("tree", "net")][p]
    up_down = (fabric.ranks_per_node - 1) * intra_hop + math.log2(fabric.nodes) * net_hop
    return _BASE_LAT_US["tree"][p] + 2.0 * up_down


def candidates(op: str, size_bytes: float, fabric: Fabric) -> list[CollectiveCost]:
    """Every algorithm the backend could use, with its predicted time."""
    if size_bytes <= 0:
        raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
    n = fabric.ranks
    if n == 1:
        return [CollectiveCost(0.0, "local")]
    bus_bytes = bus_factor(op, n) * size_bytes
    ring_bw = fabric.ring_busbw_gb_s() * 1e9
    if fabric.backend == "gloo":
        # Ring: reduce-scatter then allgather, one hop latency per step (DESIGN.md).
        steps = 2 * (n - 1) if op == "allreduce" else n - 1
        return [CollectiveCost(steps * fabric.gloo_hop_latency_us * 1e-6 + bus_bytes / ring_bw, "ring")]
    algorithms = ("ring", "tree") if fabric.algorithm == "auto" else (fabric.algorithm,)
    out = []
    for algo in algorithms:
        if algo == "tree" and op != "allreduce":
            continue  # NCCL implements tree for allreduce only
        for p, proto in enumerate(PROTOCOLS):
            if algo == "ring":
                lat_us, bw = _ring_latency_us(fabric, op, p), ring_bw
            else:
                lat_us, bw = _tree_latency_us(fabric, p), ring_bw * TREE_BW_FACTOR
            t = lat_us * 1e-6 + bus_bytes / (bw * _PROTO_BW_FACTOR[p])
            out.append(CollectiveCost(t, f"{algo}/{proto}"))
    if not out:
        raise ValueError(f"network.algorithm: {fabric.algorithm!r} cannot run {op}")
    return out


def collective_cost(op: str, size_bytes: float, fabric: Fabric) -> CollectiveCost:
    """The cheapest candidate, as NCCL's tuner picks it."""
    return min(candidates(op, size_bytes, fabric), key=lambda c: c.time_s)


def algbw_busbw_gb_s(op: str, size_bytes: float, time_s: float, ranks: int) -> tuple[float, float]:
    """nccl-tests' algbw = S / t and busbw = algbw x bus factor, in GB/s (1e9 B/s)."""
    if time_s <= 0:
        return math.inf, math.inf
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(op, ranks)
