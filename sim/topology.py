"""Tiers above the node: racks and pods of a Clos (fat-tree) fabric, and what one collective
pays to cross them (docs/references.md "Big clusters: racks, pods and oversubscription").

The fabric: nodes sit under a rack (ToR) switch; racks join into a pod with full bisection
bandwidth (Llama 3's 3,072-GPU pods, a k-ary fat-tree's k^2/4-host pods); pods join through
a top tier whose uplinks may be oversubscribed: a pod's capacity upward is

    U = pod nodes x NICs per node x achieved NIC rate / oversubscription   (GB/s, per direction)

(1:7 at Llama 3's aggregation layer). A step between two nodes under one ToR costs
``net_hop_us`` (sim/nccl.py, calibrated on 2-node runs); each tier an edge climbs above that
costs ``tier_hop_us`` more (two more switch traversals, up and down): a step across racks
inside a pod pays it once, a step across pods twice (rack tier, then pod tier).

Which edges cross, per placement of the job's nodes (nodes in rank order, as NCCL lays its
rings and trees over them; its tuning model, src/graph/tuning.cc, sees nodes and NICs and
nothing above them, so its pick is made on the flat fabric and only our timing pays):

- packed: ranks fill racks and pods in order, P = ceil(nodes / pod nodes) pods. Every
  channel's ring enters and leaves each pod once, so one node-edge (the node's k NIC flows,
  k = min(NICs, channels)) crosses each pod's uplink per direction: demand k x r against a
  capacity U of pod nodes x NICs x r / oversubscription, so the per-flow rate across the
  tier, min(r, U / (k flows)), stays r unless a pod has fewer nodes than the
  oversubscription (a 384-node Llama pod at 1:7 has 55x headroom). NCCL's double binary
  tree splits the data over two trees whose edges leave an aligned pod subtree once each:
  again about one node-edge's worth. What a packed job pays is latency: a ring allreduce's
  chunk passes P - 1 pod boundaries per phase (2(P - 1) of NCCL's 2(nodes - 1) network
  steps) and R - 1 rack boundaries (R racks spanned); a tree's top ceil(log2 P) levels join
  pods (and ceil(log2 R) racks), each level twice (up and down).
- scattered: the nodes are dealt round-robin over the pods a fragmented scheduler left
  (``cluster_pods``, else as many pods as the job fills), so consecutive nodes sit in
  different pods and every inter-node ring or tree edge crosses the top tier: each of the
  job's n_pod = ceil(nodes / pods) nodes in a pod sends its k flows out through U, the
  per-flow rate is min(r, U / (n_pod x k)) = r x min(1, pod nodes x NICs / (n_pod x k x
  oversubscription)), and every network step pays both tiers' hops. This is the worst
  case of a topology-blind rank order; a real fragmented allocation lies between the two.

A ring or tree runs at its slowest edge, so the factor on the flow rate is a factor on the
bandwidth across nodes (sim/nccl.py applies it to the NIC side only; NVLink is untouched).
No fabric kind key: a rail-optimised fabric (NIC i of every node on rail switch i) and a
fat-tree differ, for rings and trees, only in which switches an intra-pod step climbs, since
NCCL keeps each channel on one NIC index end to end; set ``gpus_per_rack`` to the GPUs one
leaf (or rail group) reaches in one hop. Not modelled: ECMP hash collisions inside a pod
(Llama 3 spreads each pair over 16 flows to avoid them), other jobs' traffic on a packed
job's uplinks, an oversubscribed rack tier.
"""

import math
from typing import NamedTuple

PLACEMENTS = ("packed", "scattered")


def _ceil_log2(x: int) -> int:
    return max(0, math.ceil(math.log2(x))) if x >= 1 else 0


class Tiers(NamedTuple):
    """The tiers above the node as one collective sees them; the defaults are one flat tier."""

    rack_nodes: int = 0  # nodes under one ToR switch; 0 = no rack tier
    pod_nodes: int = 0  # nodes in one full-bisection pod; 0 = no pod tier
    cluster_pods: int = 0  # pods a scattered job is dealt over; 0 = as many as it fills
    placement: str = "packed"  # PLACEMENTS
    pod_uplink_gb_s: float = math.inf  # U: one pod's achieved capacity to the tier above, per direction
    tier_hop_us: float = 0.0  # latency each tier climbed adds to a network step

    def pods_spanned(self, nodes: int) -> int:
        if self.pod_nodes <= 0 or nodes <= 1:
            return 1
        if self.placement == "scattered":
            return min(nodes, self.cluster_pods or math.ceil(nodes / self.pod_nodes))
        return math.ceil(nodes / self.pod_nodes)

    def racks_spanned(self, nodes: int) -> int:
        """Packed: ceil(nodes / rack nodes); scattered jobs cross racks wherever they cross pods."""
        return math.ceil(nodes / self.rack_nodes) if self.rack_nodes > 0 and nodes > 1 else 1

    def crossing_edges(self, nodes: int) -> int:
        """Node-edges (each a node's k NIC flows) leaving one pod through its uplink, per direction."""
        pods = self.pods_spanned(nodes)
        if pods <= 1:
            return 0
        return math.ceil(nodes / pods) if self.placement == "scattered" else 1

    def bandwidth_factor(self, nodes: int, node_busbw_gb_s: float) -> float:
        """Per-flow rate across the top tier / the NIC's: min(1, U / (edges x node rate))."""
        edges = self.crossing_edges(nodes)
        if edges == 0:
            return 1.0
        return min(1.0, self.pod_uplink_gb_s / (edges * node_busbw_gb_s))

    def tier_crossings(self, algo: str, op: str, nodes: int) -> int:
        """Tiers climbed, summed over the network steps on the critical path (see the module doc)."""
        if nodes <= 1 or algo == "nvls" or (self.rack_nodes <= 0 and self.pod_nodes <= 0):
            return 0
        pods, racks = self.pods_spanned(nodes), self.racks_spanned(nodes)
        scattered = self.placement == "scattered" and pods > 1
        tiers = (self.rack_nodes > 0) + (self.pod_nodes > 0)
        if algo == "ring":
            phases = 2 if op == "allreduce" else 1
            if scattered:
                return phases * (nodes - 1) * tiers
            return phases * ((racks - 1) + (pods - 1))
        levels = int(math.floor(math.log2(nodes)))  # tree, nvlstree: NCCL's 2 log2(nodes) steps
        if scattered:
            return 2 * levels * tiers
        return 2 * (min(levels, _ceil_log2(racks)) + min(levels, _ceil_log2(pods)))

    def extra_us(self, algo: str, op: str, nodes: int) -> float:
        return self.tier_crossings(algo, op, nodes) * self.tier_hop_us


FLAT = Tiers()
