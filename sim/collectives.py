"""Collective cost in nccl-tests' bus-bandwidth convention (NVIDIA/nccl-tests doc/PERFORMANCE.md):
an allreduce of S bytes puts 2(n-1)/n x S on each rank's bus, allgather and reduce-scatter
(n-1)/n x S, broadcast S, alltoall (n-1)/n x S (S: each rank's buffer, S/n to every rank).

NCCL and RCCL: sim/nccl.py replays the library's choice of algorithm and protocol and times
the chosen one. gloo: a ring only, one hop latency measured on the link. The all-to-all is no
ring (``alltoall_s`` below).

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
from sim.nccl_time import NET_HOP_US
from sim.topology import FLAT, Tiers

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
# The ops whose buffer is cut into a piece per rank: (n - 1)/n of it on the bus, and nccl-tests
# prints a piece's element count (realrun/probe_collectives.py has the twin, PER_RANK).
PER_RANK_OPS = ("allgather", "reduce_scatter", "alltoall")
SIMPLE = 2  # the Simple protocol's column of the latency tables (sim/nccl_time.py PROTOCOLS)


def bus_factor(op: str, ranks: int) -> float:
    """Bytes on each rank's bus per byte of collective size (nccl-tests busbw factor)."""
    if op == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if op in PER_RANK_OPS:
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
    latency_us: tuple[float, float, float] = (17.0, 31.5, 45.0)  # one node, (LL, LL128, Simple)
    nvls_latency_us: float = 80.0
    nvls_channels: int = 16
    gpus_per_process: int = 1  # nccl-tests -g; torchrun: 1
    ll_us_per_process_gpu: float = 0.0  # what each GPU past the first one process drives adds to LL (sim/nccl_time.py)
    nvls_fixed_us: float = 9.5
    nvls_loop_us: float = 4.4
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
            nvls_channels=self.nvls_channels,
            # A process drives at most the GPUs of its node, and never more than the job's ranks.
            process_ll_us=(min(self.gpus_per_process, self.ranks_per_node) - 1) * self.ll_us_per_process_gpu,
            nvls_fixed_us=self.nvls_fixed_us,
            nvls_loop_us=self.nvls_loop_us,
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
    if op == "alltoall":
        return CollectiveCost(alltoall_s(size_bytes, fabric), "p2p" if fabric.backend == "nccl" else "pairwise")
    if fabric.backend == "gloo":
        # Ring: reduce-scatter then allgather, one hop latency per step (gloo's allreduce).
        steps = 2 * (n - 1) if op == "allreduce" else n - 1
        bw = fabric.ring_busbw_gb_s() * 1e9
        latency_us = steps * fabric.gloo_hop_latency_us + fabric.tiers.extra_us("ring", op, fabric.nodes)
        return CollectiveCost(latency_us * 1e-6 + bus_factor(op, n) * size_bytes / bw, "ring")
    best = choose(candidates(op, size_bytes, fabric))
    return CollectiveCost(best.time_us * 1e-6, best.algorithm, best)


def alltoall_s(size_bytes: float, fabric: Fabric) -> float:
    """nccl-tests' alltoall of ``size_bytes`` per rank (S / n to each of the n ranks), seconds.

    NCCL runs it as grouped point-to-point sends to every peer at once (ncclAllToAll is
    ncclSend/ncclRecv in a group), outside its tuner: no algorithm or protocol is chosen, so
    nothing of sim/nccl.py applies. A rank's (ppn - 1) / n S to the GPUs of its node leave over
    NVLink/xGMI at the node's per-GPU rate; its (n - ppn) / n S to other nodes over its own NIC
    (rail-optimised, one NIC per GPU: the node's NIC rate / ppn), the two at once, so the slower
    side sets the time. NVIDIA on nccl-tests #267 (6 x 8 H100, 8 x 400G each): "Alltoall cannot
    aggregate the bandwidth of multiple NICs, so the performance you should see is the
    performance of a single NIC." Across pods, unlike a ring's one edge a pod, every node sends
    (pods - 1) / pods of its network bytes up: the pod's nodes share its uplink U (sim/topology.py).
    Latency, assumed: the platform's one-node Simple latency (one kernel whose sends run
    together), plus one network step (NVIDIA's NET Simple hop and ``net_hop_us``) and the tiers a
    send climbs when the ranks span nodes; no per-peer term, so at thousands of ranks, where each
    peer gets a few bytes, it is optimistic.
    gloo: pairwise exchanges one peer after another, n - 1 hop latencies, at the link's rate, both
    directions at once; on netlab's 1 Gbit link gloo ran 17 of 42 iterations so and the rest at
    half that rate, one direction after the other (docs/validation.md, "All-to-all on the emulated
    link"), so for gloo this is the fast mode."""
    n, ppn, nodes = fabric.ranks, fabric.ranks_per_node, fabric.nodes
    if n == 1:
        return 0.0
    if fabric.backend == "gloo":
        latency_us = (n - 1) * fabric.gloo_hop_latency_us + fabric.tiers.extra_us("ring", "allgather", nodes)
        return latency_us * 1e-6 + bus_factor("alltoall", n) * size_bytes / (fabric.ring_busbw_gb_s() * 1e9)
    intra_s = (ppn - 1) / n * size_bytes / (fabric.intra_busbw_gb_s * 1e9) if ppn > 1 else 0.0
    latency_us = fabric.latency_us[SIMPLE]
    inter_s = 0.0
    if nodes > 1:
        tiers, node = fabric.tiers, fabric.inter_busbw_gb_s
        pods = tiers.pods_spanned(nodes)
        share = 1.0
        if pods > 1:  # each pod's nodes send (pods - 1) / pods of their network bytes through its uplink
            in_pod = math.ceil(nodes / pods)
            share = min(1.0, tiers.pod_uplink_gb_s / (in_pod * node * (pods - 1) / pods))
        inter_s = (n - ppn) / n * size_bytes / (node * share / ppn * 1e9)
        climbed = (tiers.racks_spanned(nodes) > 1) + (pods > 1)
        latency_us += NET_HOP_US["ring"][SIMPLE] + fabric.net_hop_us + climbed * tiers.tier_hop_us
    return latency_us * 1e-6 + max(intra_s, inter_s)


def algbw_busbw_gb_s(op: str, size_bytes: float, time_s: float, ranks: int) -> tuple[float, float]:
    """nccl-tests' algbw = S / t and busbw = algbw x bus factor, in GB/s (1e9 B/s)."""
    if time_s <= 0:
        return math.inf, math.inf
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(op, ranks)
