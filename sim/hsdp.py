"""HSDP's two process groups and the fabric each runs on (training.mode = "hsdp").

Hybrid sharding (PyTorch FSDP ``ShardingStrategy.HYBRID_SHARD``; FSDP2 ``fully_shard`` on a
2-D ``DeviceMesh`` of (replicate, shard) dimensions, docs/references.md "HSDP"): the N ranks
form N / S shard groups of S consecutive ranks (a node by default). Inside a shard group it is
FSDP: each unit allgathered for its forward and its backward, its gradient reduce-scattered;
then each rank allreduces its 1/S gradient shard with the ranks holding the same shard in the
other groups, its replica group of R = N / S ranks {j, j + S, j + 2S, ...}.

Where the collectives run, in sim/collectives.py's model:

- a shard group is a job of S ranks on the same nodes (``fabric_for(sc, ranks=S)``): inside one
  node (S <= gpus per node g) it is NVLink/xGMI only; S = k g spans k nodes and has each node's
  NICs to itself, as an FSDP job of S ranks would.
- a replica group holds max(1, g / S) ranks per node (one per node when S >= g) on R / that
  many nodes, and min(S, g) replica groups run their allreduce at once on every node: each
  gets that share of the node's NICs (rail-optimised, g NICs for g GPUs: one NIC per group,
  GPU i's own). NCCL's tuner sees the communicator it is given (one GPU per node, one NIC's
  bandwidth), so its pick is made on that share. Above the node, all S replica groups cross a
  pod's uplink where an FSDP ring crosses it once: each sees U / S of it, and its nodes are
  spaced S / g apart when S > g, so a rack or a pod holds g / S as many of them.
"""

import dataclasses

from sim.collectives import Fabric, bus_factor
from sim.config import Scenario
from sim.topology import FLAT
from sim.workload import fabric_for


def shard_fabric(sc: Scenario) -> Fabric:
    """Where a shard group's allgathers and reduce-scatters run (every rank for fsdp)."""
    return fabric_for(sc, ranks=sc.shard_size)


def replica_groups(sc: Scenario) -> int:
    """R: ranks per replica group, each holding the same shard (1 for fsdp)."""
    return sc.ranks // sc.shard_size


def replica_fabric(sc: Scenario) -> Fabric:
    """Where one replica group's allreduce of a gradient shard runs, with the other groups on
    the same nodes running theirs at the same time (see the module docstring)."""
    s, g, r = sc.shard_size, sc.network.gpus_per_node, replica_groups(sc)
    per_node = min(r, max(1, g // s))  # a replica group's ranks in one node
    sharing = min(s, g) if sc.ranks > g else 1  # replica groups on one node's NICs at once
    full = fabric_for(sc, ranks=r)
    tiers = full.tiers
    if tiers != FLAT:
        spacing = max(1, s // g)  # the group's nodes are every spacing-th node
        tiers = tiers._replace(
            rack_nodes=max(1, tiers.rack_nodes // spacing) if tiers.rack_nodes else 0,
            pod_nodes=max(1, tiers.pod_nodes // spacing) if tiers.pod_nodes else 0,
            pod_uplink_gb_s=tiers.pod_uplink_gb_s / s,
        )
    return dataclasses.replace(
        full, gpus_per_node=per_node, inter_busbw_gb_s=full.inter_busbw_gb_s / sharing, tiers=tiers
    )


def merged(starts, ends) -> tuple[list[float], list[float]]:
    """The union of busy intervals (two streams' collectives overlap) as sorted, disjoint
    intervals, which sim/busy.py's Busy needs for the interference model."""
    out_s: list[float] = []
    out_e: list[float] = []
    for a, b in sorted(zip(starts, ends, strict=True)):
        if out_e and a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_s.append(a)
            out_e.append(b)
    return out_s, out_e


def node_egress_bytes_per_step(sc: Scenario, ops, wire_bytes) -> float:
    """Bytes one node sends to other nodes per optimizer step, for sim/fsdp.py's collectives
    (``ops``, ``wire_bytes``: the workload's). A ring leaves each node once, so a node sends
    one rank's bus bytes, bus factor x S, per group of the collective it hosts; a collective
    inside one node sends none. (NCCL's trees move the same bytes in another order.)"""
    out = 0.0
    for op, size in zip(ops, wire_bytes, strict=True):
        fabric = replica_fabric(sc) if op == "allreduce" else shard_fabric(sc)
        if fabric.nodes > 1:
            groups = sc.network.gpus_per_node // fabric.ranks_per_node  # groups with a rank on the node
            out += groups * bus_factor(op, fabric.ranks) * size
    return out
