"""Collective cost in nccl-tests' bus-bandwidth convention (NVIDIA/nccl-tests doc/PERFORMANCE.md):
an allreduce of S bytes puts 2(n-1)/n x S on each rank's bus, allgather and reduce-scatter
(n-1)/n x S, broadcast S.

NCCL and RCCL: sim/nccl.py replays the library's choice of algorithm and protocol and times
the chosen one. gloo: a ring only, one hop latency measured on the link.

Two-level topology: ``gpus_per_node`` GPUs on NVLink/xGMI, ``nics_per_node`` NICs between
nodes. A ring's bus bandwidth is the minimum over its segments: the intra-node link per GPU,
or the node's NICs together (rail-optimised: one NIC per GPU, 8 NICs move 8 x NIC rate).
Above the node, racks and pods (sim/topology.py ``Tiers``; flat unless the scenario sets
them) add hop latency per tier crossed and slow the NIC side to the top tier's per-flow rate.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

from sim.nccl import Option, Platform, Shape, choose, options
from sim.topology import FLAT, Tiers

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast")


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
    algorithm: str  # "auto" | "ring" | "tree" | "nvls" | "nvlstree"
    intra_busbw_gb_s: float  # achieved bus bandwidth inside a node, per GPU
    inter_busbw_gb_s: float  # achieved bus bandwidth across nodes (all NICs of a node)
    intra_link: str = "nvlink"  # "nvlink" | "xgmi" | "pci": which hop-latency row applies
    gloo_hop_latency_us: float = 50.0
    tuner: str = "nccl-hopper"  # sim/tuning_tables.py
    channels: int = 16
    cpu_vendor: str = "intel"
    nvls_busbw_gb_s: float = 0.0
    net_hop_us: float = 16.0  # the [network] default (sim/config.py)
    latency_us: tuple[float, float, float] = (35.0, 31.5, 45.0)  # one node, (LL, LL128, Simple)
    nvls_latency_us: float = 80.0
    msccl_busbw_gb_s: float = 0.0  # RCCL's all-pairs allreduce on one node (sim/msccl.py); 0 = none
    msccl_latency_us: float = 0.0
    tiers: Tiers = FLAT  # racks and pods above the node (sim/topology.py)

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.ranks / self.gpus_per_node))

    @property
    def ranks_per_node(self) -> int:
        return min(self.ranks, self.gpus_per_node)

    def ring_busbw_gb_s(self) -> float:
        if self.nodes == 1:
            return self.intra_busbw_gb_s
        inter = self.inter_busbw_gb_s * self.tiers.bandwidth_factor(self.nodes, self.inter_busbw_gb_s)
        if self.ranks_per_node == 1:
            return inter
        return min(self.intra_busbw_gb_s, inter)

    def platform(self) -> Platform:
        # One GPU per node: the ring's "intra-node" segment is the NIC as well.
        intra = self.inter_busbw_gb_s if self.ranks_per_node == 1 and self.nodes > 1 else self.intra_busbw_gb_s
        return Platform(
            tuner=self.tuner,
            intra_link=self.intra_link,
            intra_busbw_gb_s=intra,
            inter_busbw_gb_s=self.inter_busbw_gb_s,
            channels=self.channels,
            cpu_vendor=self.cpu_vendor,
            nvls_busbw_gb_s=self.nvls_busbw_gb_s,
            net_hop_us=self.net_hop_us,
            latency_us=self.latency_us,
            nvls_latency_us=self.nvls_latency_us,
            msccl_busbw_gb_s=self.msccl_busbw_gb_s,
            msccl_latency_us=self.msccl_latency_us,
            tiers=self.tiers,
        )

    def shape(self) -> Shape:
        return Shape(self.ranks, self.nodes, self.ranks_per_node)


class CollectiveCost(NamedTuple):
    time_s: float
    algorithm: str  # e.g. "ring/LL128", "tree/Simple", "ring" (gloo)
    chosen: Option | None = None  # NCCL/RCCL: the pair with its estimates (None for gloo)


def candidates(op: str, size_bytes: float, fabric: Fabric) -> list[Option]:
    """Every (algorithm, protocol) NCCL/RCCL could use, with its own estimate and ours."""
    if size_bytes <= 0:
        raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
    if fabric.backend != "nccl":
        raise ValueError("candidates: NCCL/RCCL fabrics only (gloo runs a ring)")
    opts = options(op, size_bytes, fabric.platform(), fabric.shape(), bus_factor(op, fabric.ranks), fabric.algorithm)
    if not opts:
        raise ValueError(f"network.algorithm: {fabric.algorithm!r} cannot run {op} on {fabric.ranks} ranks here")
    return opts


def collective_cost(op: str, size_bytes: float, fabric: Fabric) -> CollectiveCost:
    """The library's pick, timed (sim/nccl.py); gloo's ring."""
    if size_bytes <= 0:
        raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
    n = fabric.ranks
    if n == 1:
        return CollectiveCost(0.0, "local")
    if fabric.backend == "gloo":
        # Ring: reduce-scatter then allgather, one hop latency per step (gloo's allreduce).
        steps = 2 * (n - 1) if op == "allreduce" else n - 1
        bw = fabric.ring_busbw_gb_s() * 1e9
        latency_us = steps * fabric.gloo_hop_latency_us + fabric.tiers.extra_us("ring", op, fabric.nodes)
        return CollectiveCost(latency_us * 1e-6 + bus_factor(op, n) * size_bytes / bw, "ring")
    best = choose(candidates(op, size_bytes, fabric))
    return CollectiveCost(best.time_us * 1e-6, best.algorithm, best)


def algbw_busbw_gb_s(op: str, size_bytes: float, time_s: float, ranks: int) -> tuple[float, float]:
    """nccl-tests' algbw = S / t and busbw = algbw x bus factor, in GB/s (1e9 B/s)."""
    if time_s <= 0:
        return math.inf, math.inf
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(op, ranks)
