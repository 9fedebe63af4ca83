"""Does one rank's memory fit its device, and if not, what would: the check `simulate`,
`whatif`, `compare` and `sweep` make before they simulate a configuration.

The peak is sim/memory.py's estimate, or for a tensor-, context- or pipeline-parallel or
distributed-optimizer job (Scenario.parallel3d) its fullest stage by sim/parallel3d.py, the
memory `simulate` prints for it (or a GPU calibration's measured peak, which
``compute.memory_peak_gib`` carries), plus the CUDA context; the budget is
``compute.device_memory_gib``, the device's memory as its driver reports it (0: no check). A
configuration over it would die with an out-of-memory error on its first backward, so its step
time is not a result: the commands say so instead, with what would fit.

What would fit is searched over the changes a practitioner makes first (CANDIDATES, as data):
sharding (FSDP, and HSDP where this version has it), activation checkpointing, and the
largest smaller micro-batch, each alone; where none alone fits, the smallest combinations that
do. Each is re-estimated on the changed scenario, so every peak named is one that fits.
"""

import itertools
from dataclasses import replace
from typing import NamedTuple

from sim.config import Scenario, keys_for
from sim.memory import CUDA_CONTEXT_GIB, GIB, estimate_memory
from sim.parallel3d import layout, memory_by_stage, step_costs
from sim.patches import value_text
from sim.workload import largest_micro_batch

# The changes tried, in the order they are named. A candidate the scenario refuses (ValueError:
# a mode this version does not have, or one that does not go with the rest) is skipped, and one
# that changes nothing (FSDP on an FSDP scenario) is not a suggestion.
CANDIDATES = (
    {"training.mode": "fsdp"},
    {"training.mode": "hsdp"},
    {"training.activation_checkpointing": "op"},  # torchtitan's per-op AC: Llama blocks, no tp or cp
    {"training.activation_checkpointing": True},
)
MICRO_BATCH = "training.micro_batch_size"  # searched: the largest below the scenario's that fits

# NCCL's own buffers and state live outside PyTorch's caching allocator: neither
# max_memory_allocated nor sim/memory.py sees them. Measured: about 1.6 GB on a GPU once one
# communicator has run an allreduce, about 6 GB with three or more (NVIDIA/nccl#864); on
# 8 x H100, 1.06 GB before a first all-to-all and 4.34 GB after it, 32 channels to every peer
# (NVIDIA/nccl#1685). The amount moves with the channels, the algorithms a communicator has
# connected and the NCCL version ("linearly tied to the number of channels", NVIDIA/nccl#986),
# so it is not added to the peak: a fit with less spare than this per communicator is reported
# as tight, where the number is.
NCCL_BYTES_PER_COMMUNICATOR = 1.6e9


class Fit(NamedTuple):
    total_gib: float  # the rank's peak on the device: allocated (estimated or measured) + CUDA context
    device_gib: float  # compute.device_memory_gib; 0 = not checked
    measured: bool  # total_gib rests on a GPU calibration's measured peak
    communicators: int = 0  # NCCL communicators the rank runs collectives on (``communicators``)

    @property
    def checked(self) -> bool:
        return self.device_gib > 0

    @property
    def fits(self) -> bool:
        return not self.checked or self.total_gib <= self.device_gib

    @property
    def spare_gib(self) -> float:
        return self.device_gib - self.total_gib

    @property
    def tight(self) -> bool:
        """It fits, but with less spare than NCCL's own buffers take (NCCL_BYTES_PER_COMMUNICATOR)."""
        return bool(self.checked and self.fits and self.spare_gib < nccl_reserve_gib(self.communicators))


def nccl_reserve_gib(communicators: int) -> float:
    return communicators * NCCL_BYTES_PER_COMMUNICATOR / GIB


def communicators(sc: Scenario) -> int:
    """The NCCL communicators one rank runs collectives on: one per process group of more than
    one rank (PyTorch makes one for each group it runs a collective on). Tensor, context and
    pipeline groups; the data-parallel group, or under HSDP its shard and replicate groups. gloo
    (no NCCL) and one rank: none."""
    if sc.network.backend != "nccl" or sc.ranks <= 1:
        return 0
    t = sc.training
    # One count for every engine: without tp, cp or pp the data-parallel group is every rank and
    # dp_shard_size is HSDP's shard group (sim/config.py), as the DDP/FSDP engines take them.
    group = sc.dp * t.cp  # the ranks each parameter's data parallelism spans
    shard = sc.dp_shard_size
    data = [shard, group // shard] if t.mode == "hsdp" else [group]
    return sum(n > 1 for n in (t.tp, t.cp, t.pp, *data))


class Alternative(NamedTuple):
    changes: dict  # scenario key -> value, as --set takes them
    total_gib: float  # its estimated peak per GPU, which fits

    @property
    def text(self) -> str:
        """As --set (and whatif's --try) take it: key=value,key=value."""
        return ",".join(f"{k}={value_text(v)}" for k, v in self.changes.items())


def fit(sc: Scenario) -> Fit:
    """The scenario's peak per GPU against its device: under rebalance, the rank with the most
    samples per micro-step (sim/workload.py largest_micro_batch)."""
    measured = sc.compute.memory_peak_gib
    if sc.rebalance and measured is None and not sc.parallel3d:
        largest = largest_micro_batch(sc)
        if largest > sc.training.micro_batch_size:
            sc = with_changes(sc, {"training.micro_batch_size": largest})
    total = _estimated_total(sc) if measured is None else measured + CUDA_CONTEXT_GIB
    return Fit(total, sc.compute.device_memory_gib, measured is not None, communicators(sc))


def with_changes(sc: Scenario, changes: dict) -> Scenario:
    """``sc`` with ``section.key: value`` changes, checked again as a scenario is (ValueError)."""
    sections: dict[str, dict] = {}
    for key, value in changes.items():
        section, _, name = key.partition(".")
        sections.setdefault(section, {})[name] = value
    return replace(sc, **{s: replace(getattr(sc, s), **kw) for s, kw in sections.items()})


def _estimated_total(sc: Scenario) -> float:
    """The peak per GPU with the CUDA context: sim/memory.py's, or a 3D job's fullest stage (the
    model that simulates it: sim/memory.py knows no TP, CP, PP or distributed optimizer)."""
    if sc.parallel3d:
        return max(stage_peaks_gib(sc))
    return estimate_memory(sc).total_gib


def stage_peaks_gib(sc: Scenario) -> list[float]:
    """A tensor- or pipeline-parallel job's peak per GPU on each pipeline stage, with the CUDA
    context (sim/parallel3d.py memory_by_stage)."""
    lay = layout(sc)
    return [float(m.total_gib) for m in memory_by_stage(sc, lay, step_costs(sc, lay))]


def _applicable(sc: Scenario) -> list[dict]:
    """The candidates that change something and that this scenario accepts; a change of mode
    with the keys the new mode has no use for set to its values (sim/config.py keys_for: a DDP
    job's bf16 hook or bucket cap), where a --set can say them."""
    out = []
    t = sc.training
    for changes in CANDIDATES:
        if all(_current(sc, k) == v for k, v in changes.items()):
            continue
        if "training.mode" in changes:
            resets = keys_for(t, changes["training.mode"], t.tp, t.cp, t.pp).items()
            changes = changes | {f"training.{k}": v for k, v in resets}
        try:
            with_changes(sc, changes)
        except ValueError:
            continue
        out.append(changes)
    return out


def _current(sc: Scenario, key: str):
    section, _, name = key.partition(".")
    return getattr(getattr(sc, section), name)


def _largest_micro_batch(sc: Scenario, device_gib: float) -> Alternative | None:
    """The largest micro-batch below ``sc``'s that fits (memory grows with it), or None."""
    for m in range(sc.training.micro_batch_size - 1, 0, -1):
        total = _estimated_total(with_changes(sc, {MICRO_BATCH: m}))
        if total <= device_gib:
            return Alternative({MICRO_BATCH: m}, total)
    return None


def _try(sc: Scenario, levers: tuple, device_gib: float) -> Alternative | None:
    """Apply every lever (a candidate's changes, or MICRO_BATCH: searched last, on top of the
    rest); the result if it fits."""
    changes: dict = {}
    for lever in levers:
        if lever != MICRO_BATCH:
            if set(lever) & set(changes):  # two values of one key (FSDP and HSDP): not a combination
                return None
            changes |= lever
    changed = with_changes(sc, changes)
    if MICRO_BATCH in levers:
        smaller = _largest_micro_batch(changed, device_gib)
        return Alternative(changes | smaller.changes, smaller.total_gib) if smaller else None
    total = _estimated_total(changed)
    return Alternative(changes, total) if total <= device_gib else None


def alternatives(sc: Scenario, device_gib: float | None = None) -> list[Alternative]:
    """What would fit ``device_gib`` (default: the scenario's device): each candidate alone that
    fits; where none does, the fewest candidates together that do. Empty when nothing tried fits."""
    device_gib = sc.compute.device_memory_gib if device_gib is None else device_gib
    levers: list = _applicable(sc)
    if sc.training.micro_batch_size > 1:
        levers.append(MICRO_BATCH)
    for size in range(1, len(levers) + 1):
        found = [a for combo in itertools.combinations(levers, size) if (a := _try(sc, combo, device_gib))]
        if found:
            return found
    return []


def verdict(sc: Scenario, f: Fit | None = None) -> dict:
    """What the commands report for a configuration that does not fit, as JSON: the verdict, the
    peak, the device's memory and what would fit, each with its peak."""
    f = f or fit(sc)
    return {
        "verdict": "out_of_memory",
        "peak_gib": f.total_gib,
        "peak_measured": f.measured,
        "device_memory_gib": f.device_gib,
        "alternatives": [{"set": a.text, "peak_gib": a.total_gib} for a in alternatives(sc, f.device_gib)],
    }
