"""What one (algorithm, protocol) pair costs: the model's own latency and bandwidth.

NCCL and RCCL pick a pair by their tuners (sim/nccl.py, sim/tuning_tables.py). Some of a
tuner's numbers are weights for that choice, not times: RCCL's correction factors run a Simple
ring at 0.1 of its bandwidth below 512 MiB and a 2-node tree at 0.11, its Simple ring pays
320 us per network step, NCCL's tree correction dips to 0.4. Nothing here reads a tuner
table: flipping any of their numbers changes which pair runs, never what a pair costs
(tests/test_collectives.py holds that).

    time = latency + bus factor x bytes / busbw

Latency (microseconds):

- one node: the platform's measured fixed latency per protocol, ``Platform.latency_us``
  (LL, LL128, Simple), with a process per GPU as torchrun runs DDP. They are fitted per
  platform on a published one-node curve and say so in the preset (docs/validation-public.md
  lists the rows each was fitted on). On one node the measured time is flat from 8 B to
  256 KiB (about 17 us on 8 x H100, about 13.5 us on 8 x MI300X): the launch, the first and
  last step and the completion, not the 2(n - 1) per-hop latencies of tuning.cc, which put
  8 GPUs at 15 us for LL and 56 us for Simple.
- one process driving G GPUs (nccl-tests -g G; never torchrun's DDP): an LL collective takes
  (G - 1) x ``ll_us_per_process_gpu`` longer, ``Platform.process_ll_us``. NVIDIA on nccl-tests
  #333: higher latency "due to using multiple GPUs per node (-g 8) instead of one GPU per
  process ... due to the CUDA latency overheads of single process jobs". Measured on 8 x H100:
  the ring's LL sizes (8 B-1 MiB) take 35-46 us in a -g 8 run (together-nccl-tests) and
  13-27 us with a process per GPU (DGXC); NVLS at 2 MiB-8 GiB differs by 1-2 us between the
  same two runs, so the term is LL's alone (LL128 and Simple have no -g 1 H100 curve: their
  latencies, fitted on the -g 8 run, stand for both).
- a ring LL on a platform that runs RCCL's MSCCL all-pairs algorithms (MI300X): its fitted
  13.5 us LL latency is the all-pairs LL path's (two steps, 1 KiB-512 KiB, which sim/nccl.py
  takes before this module), while a ring is 2(n - 1) LL steps (below 1 KiB, where no all-pairs
  algorithm applies, or forced). Its latency is RCCL's own for that ring (ROCm/rccl
  src/graph/tuning.cc, tuning_model_5, the MI300X model: base 12 us + 0.8 us per xGMI LL step,
  12 + 14 x 0.8 = 23.2 us on 8 GPUs), nothing fitted; the constants live here, apart from the
  tuner tables, so the choice's weights still time nothing.
- across nodes: each network step adds NVIDIA's measured NET latency (tuning.cc hwLat, NET
  row) plus the fabric's ``net_hop_us`` (NIC, switches, the proxy thread); a ring's steps
  beyond one node's own pay the larger of the intra-node hop latency (hwLat's NVLink row,
  RCCL's xGMI row) and the host's per-step network overhead (tuning.cc getNetOverhead: 1 us on
  an Intel host, 2 on AMD, x3 for Simple). The racks and pods above the node add their hops
  (sim/topology.py).

Bus bandwidth (GB/s), from where the bytes go:

- ring, one node: the intra-node ring's achieved bus bandwidth.
- ring across nodes: min(intra x ppn / (ppn - 1), NICs). Each of a node's rings leaves it
  through one GPU's NIC, so a GPU sends (ppn - 1) / ppn of its ring traffic over NVLink/xGMI
  and the rest over PCIe to its NIC: the intra-node side is not the one-node cap (MI325X, 8 x
  400G, ring forced: 319 GB/s on one node, 350 on 2-8 nodes).
- tree across nodes: the NIC rate on 2 nodes, half of it beyond (measured, forced Tree on
  8 x 400G nodes: about the ring's rate on 2 nodes, 190-196 GB/s against the ring's 388 on
  4-64; tuning.cc models NVLS-tree the same way, bwInter / 2 beyond 2 nodes).
- NVLS on one node: NCCL's loop, not an alpha-beta line (``nvls_one_node``, below).
- NVLS-tree: the NVLS stage's ``nvls_latency_us`` (the one-node curve's alpha-beta intercept at
  64 MiB-8 GiB, where NCCL's NVLS chunks are 64-128 KiB as NVLS-tree's are; NVLS-tree's own
  chunk rule is not modelled) plus its network steps.
- NVLS-tree's bandwidth: the switch's reduction rate inside the node. On 2 nodes: each byte,
  already reduced in the NVSwitch, crosses the network once each way, so the NIC side carries
  S per node where the bus convention counts 2(n - 1)/n S: up to the NIC rate x 2(n - 1)/n
  (nccl-tests #196: "the tree (or nvlstree) algorithm ... can indeed go beyond the network
  bottleneck"; 717-720 GB/s busbw on 2 x 8 B200 with 8-12 x 400G). Beyond 2 nodes the NIC rate.
- protocol: LL moves 4 bytes of data per 8-byte line (x 0.5), LL128 120 of 128 (x 0.9375),
  Simple all; across nodes LL is also held to NVIDIA's measured LL ceilings (tuning.cc
  llMaxBws, by host CPU: the proxy posts every 8-byte line).
"""

import math

from sim.topology import FLAT

PROTOCOLS = ("LL", "LL128", "Simple")
KIB = 1024
DATA_FRACTION = (0.5, 120.0 / 128.0, 1.0)  # data bytes per byte on the wire, by protocol
# NVIDIA's measured LL bus-bandwidth ceilings across nodes (tuning.cc llMaxBws), (2 nodes, more).
LL_NET_CEILING_GB_S = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
# Per-step latencies (us, (LL, LL128, Simple)): NVIDIA's measured hwLat rows (tuning.cc), xGMI's
# from RCCL's MI300X model (it has no LL128).
INTRA_HOP_US = {"nvlink": (0.6, 1.9, 3.4), "pci": (1.0, 2.5, 5.7), "xgmi": (0.8, 0.0, 2.1)}
NET_HOP_US = {
    "ring": (2.7, 4.0, 14.0),
    "tree": (5.0, 8.5, 14.0),
    "nvlstree": (0.0, 0.0, 20.9),
}
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}  # per ring step with a network in it; x3 for Simple
# RCCL's base latency of a ring LL collective (ROCm/rccl tuning.cc tuning_model_5 baseLat, Ring LL).
RCCL_RING_LL_BASE_US = 12.0


def _log2_floor(x: int) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else 0


def ring_steps(op: str, ranks: int, nodes: int) -> tuple[int, int]:
    """A ring's (steps, steps across nodes): allreduce is a reduce-scatter then an allgather."""
    phases = 2 if op == "allreduce" else 1
    return phases * (ranks - 1), 0 if nodes == 1 else phases * (nodes - 1)


def busbw_gb_s(p, s, algo: str, proto: int, nic: float) -> float:
    """The bus bandwidth the bytes of this pair move at (GB/s); ``nic``: the node's NIC side
    after the tiers above the node."""
    intra = p.intra_busbw_gb_s
    if s.nodes > 1 and s.ppn > 1:
        intra = intra * s.ppn / (s.ppn - 1)  # one of a node's ppn ring edges is a NIC's
    if algo == "ring":
        bw = intra if s.nodes == 1 else min(intra, nic)
    elif algo == "tree":
        bw = p.intra_busbw_gb_s if s.nodes == 1 else min(intra, nic if s.nodes == 2 else nic / 2.0)
    elif algo == "nvls":
        bw = p.nvls_busbw_gb_s
    else:  # nvlstree
        bw = min(p.nvls_busbw_gb_s, nic * (2.0 * (s.ranks - 1) / s.ranks if s.nodes == 2 else 1.0))
    bw *= DATA_FRACTION[proto]
    if proto == 0 and s.nodes > 1:
        bw = min(bw, LL_NET_CEILING_GB_S[p.cpu_vendor][0 if s.nodes == 2 else 1])
    return bw


def latency_us(p, s, op: str, algo: str, proto: int) -> tuple[float, int]:
    """(latency in us, network steps on the critical path) of this pair, without the bytes."""
    net_step = NET_HOP_US[algo][proto] + p.net_hop_us
    if algo == "nvlstree":
        net_steps = 2 * _log2_floor(s.nodes)
        return p.nvls_latency_us + net_steps * net_step, net_steps
    fixed = p.latency_us[proto]
    if algo == "ring" and proto == 0 and p.msccl_busbw_gb_s > 0:
        # the one-node ring's own LL latency by RCCL (its fitted LL latency is the all-pairs path's)
        fixed = RCCL_RING_LL_BASE_US + ring_steps(op, s.ppn, 1)[0] * INTRA_HOP_US[p.intra_link][0]
    if algo == "tree":
        net_steps = 2 * _log2_floor(s.nodes) if s.nodes > 1 else 0
        return fixed + net_steps * net_step, net_steps
    steps, net_steps = ring_steps(op, s.ranks, s.nodes)
    if s.nodes == 1:
        return fixed, 0
    own = ring_steps(op, s.ppn, 1)[0]  # the one-node ring that ``fixed`` was measured on
    intra = max(INTRA_HOP_US[p.intra_link][proto], NET_OVERHEAD_US[p.cpu_vendor] * (3.0 if proto == 2 else 1.0))
    extra = max(0, steps - net_steps - own)
    return fixed + extra * intra + net_steps * net_step, net_steps


def time_pair(p, s, op: str, size_bytes: float, bus_factor: float, algo: str, proto: int):
    """(latency us, network steps, busbw GB/s, time us) of one pair on this platform, with the
    tiers above the node (sim/topology.py) in the latency and the NIC side."""
    if algo == "nvls":
        latency, time_us = nvls_one_node(p, s.ranks, size_bytes)
        return latency, 0, bus_factor * size_bytes / ((time_us - latency) * 1e3), time_us
    latency, net_steps = latency_us(p, s, op, algo, proto)
    if proto == 0:
        latency += p.process_ll_us
    nic = p.inter_busbw_gb_s
    if p.tiers != FLAT:
        latency += p.tiers.extra_us(algo, op, s.nodes)
        nic *= p.tiers.bandwidth_factor(s.nodes, p.inter_busbw_gb_s)
    bw = busbw_gb_s(p, s, algo, proto, nic)
    return latency, net_steps, bw, latency + bus_factor * size_bytes / (bw * 1e3)


def nvls_chunk_bytes(size_bytes: float, concurrent_ops: int) -> int:
    """NCCL's NVLS allreduce chunk for a message (src/enqueue.cc, 2.19-2.26): 128 KiB
    (NCCL_NVLS_CHUNKSIZE), cut to 64 KiB below 64 loops of the channels' and heads' concurrent
    chunks, to 32 KiB below 8, to 16 KiB below 2: small messages run in small chunks."""
    chunk = 128 * KIB
    for loops, smaller in ((64, 64 * KIB), (8, 32 * KIB), (2, 16 * KIB)):
        if size_bytes < loops * concurrent_ops * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_loop_128k_us(nvls_busbw_gb_s: float, channels: int, ranks: int) -> float:
    """One loop of 128 KiB chunks (every channel, one chunk per GPU) at the NVLS bus bandwidth the
    long messages reach, overhead in (``nvls_one_node``), microseconds."""
    bus_factor = 2.0 * (ranks - 1) / ranks  # allreduce: NVLS runs nothing else here
    return bus_factor * channels * ranks * 128 * KIB / (nvls_busbw_gb_s * 1e3)


def nvls_one_node(p, ranks: int, size_bytes: float) -> tuple[float, float]:
    """(fill us, time us) of an NVLS allreduce on one NVSwitch node, NCCL's kernel as it runs.

    Each of the ``nvls_channels`` channels takes 1/channels of the message and loops over it,
    one chunk per head (one head per GPU) a loop, through three stages that overlap across
    loops: copy into the multicast buffer, reduce and broadcast in the switch, copy out
    (src/device/all_reduce.h, RunWorkColl NVLS, single node; a last loop's chunk is its
    remainder over the heads, rounded up to 16 KiB). So

        time = nvls_fixed_us + (loops + 2) x loop(chunk),  loop(c) = nvls_loop_us + c x r

    (the pipeline fills in two loops, then finishes one a loop). r makes a loop of 128 KiB
    chunks move its bytes at ``nvls_busbw_gb_s`` with its overhead in: the rate the long
    messages reach, which is where NCCL runs that chunk. The chunk shrinks with the message
    (``nvls_chunk_bytes``), so a small allreduce fills fast and runs at a lower rate: at 2 MiB
    one loop of 16 KiB chunks, about 44 us on 8 x H100, where an alpha-beta line through the
    long messages says 88. nvls_fixed_us and nvls_loop_us are fitted per platform
    (docs/validation-public.md says on which rows)."""
    ops = p.nvls_channels * ranks
    loop_128k_us = nvls_loop_128k_us(p.nvls_busbw_gb_s, p.nvls_channels, ranks)
    us_per_byte = max(0.0, loop_128k_us - p.nvls_loop_us) / (128 * KIB)
    chunk = nvls_chunk_bytes(size_bytes, ops)
    fill = p.nvls_fixed_us + 2 * (p.nvls_loop_us + chunk * us_per_byte)
    per_channel = size_bytes / p.nvls_channels
    full = int(per_channel // (ranks * chunk))
    rest = per_channel - full * ranks * chunk
    loops_us = full * (p.nvls_loop_us + chunk * us_per_byte)
    if rest > 0:
        last = math.ceil(rest / ranks / (16 * KIB)) * 16 * KIB
        loops_us += p.nvls_loop_us + last * us_per_byte
    return fill, fill + loops_us
