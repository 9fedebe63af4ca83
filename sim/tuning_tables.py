"""The constants NCCL and RCCL choose their collective algorithm with, as data.

Read from NVIDIA/nccl ``src/graph/tuning.cc`` (2.30 line: ``ncclTunerConstantsDefaults``,
``treeCorrectionFactor``, ``getNetOverhead``) and ROCm/rccl ``src/graph/tuning.cc``
(``tuning_model_5``, the model ``rome_models.cc`` assigns to 8 x MI300X nodes with a NIC
per GPU). Latencies in microseconds, bandwidths in GB/s, every triple is
(LL, LL128, Simple). Per-channel caps and LL caps are triples by node count:
(1 node, 2 nodes, more).

These are the libraries' *tuner* numbers: what they believe, to pick the cheapest
(algorithm, protocol). Some are measurements (NVIDIA's per-hop latencies, its LL and
per-channel bandwidth ceilings); some are selection weights (RCCL's 320 us per
network step of a Simple ring keeps that pair away from small messages). sim/nccl.py
uses the whole table to choose, as the library does, and only the physical parts to
predict time (its module docstring says which).
"""

from typing import NamedTuple

Triple = tuple[float, float, float]


class TunerTable(NamedTuple):
    name: str
    base_us: dict[str, Triple]  # per algorithm: the fixed part of every collective
    hop_us: dict[tuple[str, str], Triple]  # (link, algorithm): one step over that link
    ll_max_gb_s: Triple | None  # LL's bus bandwidth ceiling; None: no cap (RCCL)
    ring_ll128_per_channel_gb_s: Triple
    tree_per_channel_gb_s: Triple
    tree_ll128_per_channel_gb_s: Triple
    ll128: bool  # LL128 enabled by default on this hardware
    tree_correction: tuple[tuple[float, ...], ...]  # [protocol][log2(bytes / 64)]
    ring_correction: tuple[tuple[float, ...], ...] | None  # RCCL: multi-node rings too
    bw_ratio: dict[tuple[str, str], Triple] | None  # RCCL: (nodes <= 2 | more, algorithm)
    ring_plateau: float  # NCCL: multi-node Simple ring latency x this above 64 B per channel-rank
    tree_simple_single_node: bool  # RCCL skips tree/Simple inside one MI300X node
    rccl_inter_steps: bool  # RCCL counts 2 x nodes network steps in a ring allreduce, NCCL 2 x (nodes - 1)
    net_overhead_us: float  # per ring step over the network (getNetOverhead: Intel host 1, AMD 2), x3 for Simple


# NVIDIA/nccl tuning.cc: baseLatencies, hwLatencies (NVLINK, PCI, NET rows).
NCCL_BASE_US = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0),
    "nvlstree": (0.0, 0.0, 0.0),
}
NCCL_HOPS = {
    ("nvlink", "tree"): (0.6, 1.25, 4.0),
    ("nvlink", "ring"): (0.6, 1.9, 3.4),
    ("nvlink", "nvls"): (0.0, 0.0, 25.0),
    ("nvlink", "nvlstree"): (0.0, 0.0, 25.0),
    ("pci", "tree"): (1.0, 1.9, 4.0),
    ("pci", "ring"): (1.0, 2.5, 5.7),
    ("net", "tree"): (5.0, 8.5, 14.0),
    ("net", "ring"): (2.7, 4.0, 14.0),
    ("net", "nvls"): (0.0, 0.0, 18.0),
    ("net", "nvlstree"): (0.0, 0.0, 20.9),
}
# treeCorrectionFactor: "Trees are not perfectly sticking to the model for medium sizes"; powers
# of two from 64 B.
_NCCL_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5)
    + (0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6)
    + (0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5)
    + (0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)

# llMaxBws: one node by GPU generation; several nodes by host CPU (Intel row here; the AMD-host
# row, (22.5, 19.0) for 2 / more nodes, is taken when network.cpu_vendor = "amd").
NCCL_HOPPER = TunerTable(
    name="nccl-hopper",
    base_us=NCCL_BASE_US,
    hop_us=NCCL_HOPS,
    ll_max_gb_s=(141.0, 39.0, 20.4),
    ring_ll128_per_channel_gb_s=(36.7, 36.7, 36.7),
    tree_per_channel_gb_s=(38.7, 41.4, 36.0),
    tree_ll128_per_channel_gb_s=(36.7, 36.7, 29.0),
    ll128=True,
    tree_correction=_NCCL_TREE_CORRECTION,
    ring_correction=None,
    bw_ratio=None,
    ring_plateau=1.4,
    tree_simple_single_node=True,
    rccl_inter_steps=False,
    net_overhead_us=1.0,
)
NCCL_AMPERE = NCCL_HOPPER._replace(
    name="nccl-ampere",
    ll_max_gb_s=(87.7, 39.0, 20.4),
    ring_ll128_per_channel_gb_s=(20.0, 20.0, 20.0),
    tree_per_channel_gb_s=(24.0, 23.6, 17.8),
    tree_ll128_per_channel_gb_s=(20.0, 20.0, 20.0),
)
NCCL_AMD_HOST_LL_MAX = (22.5, 19.0)  # llMaxBws' AMD-host row, 2 nodes / more

# ROCm/rccl tuning.cc, tuning_model_5 (MI300X: xGMI in the NVLINK row, LL128 disabled).
RCCL_MI300X = TunerTable(
    name="rccl-mi300x",
    base_us={"tree": (12.0, 12.0, 17.0), "ring": (12.0, 12.0, 17.0)},
    hop_us={
        ("xgmi", "tree"): (0.9, 0.0, 2.3),
        ("xgmi", "ring"): (0.8, 0.0, 2.1),
        ("pci", "tree"): (2.2, 2.2, 5.7),
        ("pci", "ring"): (2.2, 2.2, 5.7),
        ("net", "tree"): (10.5, 0.0, 25.0),
        ("net", "ring"): (9.5, 0.0, 320.0),
    },
    ll_max_gb_s=None,
    ring_ll128_per_channel_gb_s=(0.0, 0.0, 0.0),
    tree_per_channel_gb_s=(0.0, 0.0, 0.0),
    tree_ll128_per_channel_gb_s=(0.0, 0.0, 0.0),
    ll128=False,
    tree_correction=(
        (0.1,) * 6 + (1.0, 1.0, 1.0, 1.0, 1.0, 0.6, 1.0, 0.9, 1.0, 1.0) + (0.1,) * 11,
        (0.0,) * 27,
        (0.1,) * 15 + (0.7,) + (1.0,) * 10 + (0.8,),
    ),
    ring_correction=(
        (0.1,) * 11 + (1.0, 0.2, 1.0, 0.4, 0.4, 0.1, 0.2, 0.2) + (0.1,) * 8,
        (0.0,) * 27,
        (0.1,) * 23 + (0.8, 1.0, 1.0, 1.0),
    ),
    bw_ratio={
        ("2", "tree"): (0.06, 0.0, 0.11),
        ("2", "ring"): (0.08, 0.0, 1.0),
        ("more", "tree"): (0.06, 0.0, 0.59),
        ("more", "ring"): (0.08, 0.0, 1.0),
    },
    ring_plateau=1.0,
    tree_simple_single_node=False,
    rccl_inter_steps=True,
    net_overhead_us=2.0,  # an AMD EPYC host
)

TABLES = {t.name: t for t in (NCCL_HOPPER, NCCL_AMPERE, RCCL_MI300X)}
