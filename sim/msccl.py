"""RCCL's MSCCL all-pairs allreduce: when it runs instead of a ring or a tree.

RCCL checks its MSCCL scheduler before its tuner (ROCm/rccl src/misc/msccl/msccl_lifecycle.cc):
an algorithm whose rank count, size range and chunking match the call runs, and the tuner is
not asked. The node model RCCL assigns to 8 x MI300X with a NIC per GPU turns it on
(src/graph/rome_models.cc: "mscclEnabled=1" beside "tuning=5"), and RCCL ships all-pairs
allreduce algorithms for 8 GPUs (tools/msccl-algorithms/allreduce-allpairs-8n-*.xml): every GPU
sends each peer its share directly over the node's fully connected xGMI links, a reduce-scatter
and an all-gather of one step each, where a ring takes 2(n - 1) = 14.

Modelled here: the Simple one (``allreduce-allpairs-8n-simple.xml``: proto="Simple",
nchannels="8", nchunksperloop="512", minBytes="524288", maxBytes="11534336" in place; its
out-of-place twin and ``-simple_2`` cover up to 16 MiB), which DDP's fp32 gradient buckets of
0.5-16 MiB meet on one MI300X node. Its latency and bus bandwidth are the preset's
``msccl_latency_us`` and ``msccl_gb_s``; a platform with none (every NVIDIA one) sets 0. The LL
ones (up to 512 KiB) run first as well (sim/nccl.py), timed by the one-node LL latency
``latency_ll_us``, which was fitted on that range (docs/validation-public.md).

``runs_msccl_ll`` says where the LL ones run (allreduce-allpairs-8n-ll-32tb.xml: nchunksperloop
"256", minBytes "0", maxBytes "65536"; -ll-64tb.xml: "512", 65537-524287). The scheduler takes
an algorithm only when the element count divides into its chunks (msccl_lifecycle.cc,
mscclInternalSchedulerSelectAlgo: ``(count * sizeMultiplier) % nChunksPerLoop == 0``, the
multiplier 1 for allreduce): below 256 floats (1 KiB) no all-pairs LL runs and the call goes to
RCCL's tuner, which picks the ring (sim/nccl_time.py times that ring's LL latency).
"""

KIB, MIB = 1024, 1024 * 1024
MSCCL_ALGORITHM = "msccl-allpairs/Simple"
MSCCL_LL_ALGORITHM = "msccl-allpairs/LL"
MSCCL_RANKS = 8  # ngpus="8": the algorithms are written for one node of 8
# Size range of the in-place algorithm (DDP reduces its buckets in place): minBytes..maxBytes of
# allreduce-allpairs-8n-simple.xml, then allreduce-allpairs-8n-simple_2.xml's.
MSCCL_RANGES_BYTES = ((512 * KIB, 11534336), (14680065, 16 * MIB))
# nchunksperloop="512": the element count must divide into 512 chunks; elements of 4 bytes (fp32
# gradients, rccl-tests' default float).
MSCCL_CHUNK_BYTES = 512 * 4


def runs_msccl(op: str, size_bytes: float, busbw_gb_s: float, ranks: int, nodes: int) -> bool:
    """Whether RCCL's scheduler takes this call to the all-pairs allreduce."""
    if busbw_gb_s <= 0 or op != "allreduce" or ranks != MSCCL_RANKS or nodes != 1:
        return False
    if size_bytes % MSCCL_CHUNK_BYTES:
        return False
    return any(lo <= size_bytes <= hi for lo, hi in MSCCL_RANGES_BYTES)


# The LL all-pairs algorithms: (minBytes, maxBytes, nchunksperloop x 4-byte elements).
MSCCL_LL_RANGES = ((0, 64 * KIB, 256 * 4), (64 * KIB + 1, 512 * KIB - 1, 512 * 4))


def runs_msccl_ll(op: str, size_bytes: float, busbw_gb_s: float, ranks: int, nodes: int) -> bool:
    """Whether RCCL's scheduler takes this call to an all-pairs LL allreduce."""
    if busbw_gb_s <= 0 or op != "allreduce" or ranks != MSCCL_RANKS or nodes != 1 or size_bytes <= 0:
        return False
    return any(lo <= size_bytes <= hi and size_bytes % chunk == 0 for lo, hi, chunk in MSCCL_LL_RANGES)
