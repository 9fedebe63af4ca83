"""The mitigations `ddplab whatif SCENARIO` tries when no --try is given: those that address what
the scenario models (sim/whatif.py applies them), with the reason in one line."""

import numpy as np

from sim.config import SHARDED_MODES, Scenario, parse_host_delays, parse_stragglers
from sim.memory_fit import alternatives, fit
from sim.workload import build_workload


def _ranks(text: str, key: str) -> str:
    items = parse_stragglers(text, key)
    return ", ".join(f"rank {r} x{f:g}" for r, f in sorted(items.items()))


def default_tries(sc: Scenario, ignore_memory: bool = False) -> tuple[list[str], str]:
    """(mitigations, why): a scenario whose peak exceeds its GPU's memory gets what would fit
    (sim/memory_fit.py), since no other fix runs until one does (unless ``ignore_memory``, which
    simulates it anyway and gets what follows). A persistent slow rank gets rebalance and
    exclude-slowest; a slow data loader gets the loader repaired, twice its DataLoader workers,
    or worked around the same way; a rank late before its forward (host_delays_s, as a trace
    calibration sets it) gets the delay removed, rebalance or exclude-slowest; unsynchronised pauses get
    sync-gc; a degraded or jittery
    network, gradients compressed to bf16 (DDP); a communication-bound DDP job (its allreduce
    longer than its compute, as the home lab's 1GbE), accumulation over 4 micro-steps and
    PowerSGD. A scenario with none of these gets the generic communication knobs, and says so. A
    tensor/pipeline-parallel or zero1 job gets those knobs alone: sim/steps3d.py models its slow
    GPUs but none of the named fixes (sim/whatif.py refuses them there)."""
    tries: list[str] = []
    why: list[str] = []
    t = sc.training
    f = fit(sc)
    if not (f.fits or ignore_memory):
        fitting = [a.text for a in alternatives(sc, f.device_gib)]
        peak = f"out of memory, {f.total_gib:.2f} GiB per GPU against {f.device_gib:g} GiB"
        if fitting:
            return fitting, f"{peak}: what would fit (sim/memory_fit.py); once one is --set, whatif tries the rest"
        nothing = "nothing sim/memory_fit.py tries fits (FSDP/HSDP, activation checkpointing, a smaller micro-batch)"
        return [], f"{peak}, and {nothing}: --try KEY=VALUE, or --ignore-memory"
    if sc.parallel3d:
        slow = f"slow GPUs ({_ranks(sc.stragglers, 'stragglers')}) modelled, " if sc.stragglers.strip() else ""
        lead = f"a tensor/pipeline-parallel or zero1 job: {slow}no named fix modelled (sim/steps3d.py)"
        return _knobs(sc, lead, compressible=False)
    if sc.stragglers.strip():
        tries += ["rebalance", "exclude-slowest"]
        why.append(f"slow GPUs ({_ranks(sc.stragglers, 'stragglers')}): work sized to speed, or a restart without them")
    if sc.loader_stragglers.strip():
        workers = 2 * max(sc.compute.dataloader_workers, 1)
        tries += ["fix-loader", f"workers={workers}", "rebalance", "exclude-slowest"]
        loaders = _ranks(sc.loader_stragglers, "loader_stragglers")
        why.append(
            f"slow data loaders ({loaders}): repaired, twice the workers, or worked around by sizing work or a restart"
        )
    if sc.host_delays_s.strip():
        tries += ["host_delays_s=", "rebalance", "exclude-slowest"]
        late = ", ".join(f"rank {r} {d * 1e3:.3g} ms" for r, d in sorted(parse_host_delays(sc.host_delays_s).items()))
        why.append(
            f"ranks late before their forward ({late}): the delay gone, less work for the late, or a restart"
            " without the latest"
        )
    if sc.pauses.every_steps > 0 and not sc.pauses.synchronized:
        tries.append("sync-gc")
        why.append("unsynchronised pauses: every rank pausing at the same steps")
    # DDP's buckets hold gradients in their parameters' dtype: a bf16 hook halves fp32 ones.
    compressible = t.mode == "ddp" and t.comm_hook == "none" and t.dtypes.grad_bytes == 4
    if (sc.episodes.comm_per_h > 0 or sc.network.jitter_sigma > 0) and compressible:
        tries.append("comm_hook=bf16")
        why.append("a degraded or jittery network: half the bytes on it (bf16 gradients)")
    ratio = comm_compute_ratio(sc) if t.mode == "ddp" else 0.0
    if ratio > 1:  # the network, not a rank, sets the step: what shrinks or spreads the allreduce
        knobs = ["accum=4"] + (["comm_hook=powersgd"] if t.comm_hook != "powersgd" else [])
        knobs += ["comm_hook=bf16"] if compressible else []
        tries += knobs
        why.append(
            f"communication-bound (T_comm/T_compute {ratio:.2g}): one allreduce per 4 micro-steps, PowerSGD's"
            " low-rank gradients" + (", or bf16 gradients" if compressible else "")
        )
    tries = list(dict.fromkeys(tries))
    if tries:
        return tries, "; ".join(why)
    lead = []
    if sc.episodes.compute_per_h > 0 or sc.episodes.diurnal_amplitude > 0:
        lead.append(
            "transient compute slowdowns (throttling, diurnal swing) have no fix here: rebalance and exclusion act"
            " on persistent speeds"
        )
    if sc.episodes.comm_per_h > 0 or sc.network.jitter_sigma > 0:
        lead.append("a degraded or jittery network, with gradients already 2 bytes or no DDP hook to compress them")
    lead = "; ".join(lead) or "no slow rank, loader, pause or network trouble in this scenario"
    return _knobs(sc, lead, compressible)


def comm_compute_ratio(sc: Scenario) -> float:
    """A DDP step's allreduce time over its compute, as `simulate` prints T_comm/T_compute: every
    bucket's collective (sim/workload.py, before jitter) against grad_accum micro-steps of the
    mean rank's forward and backward."""
    wl = build_workload(sc, np.random.default_rng(sc.seed))
    compute = wl.grad_accum * float(np.mean(wl.forward_s + wl.backward_s))
    return float(wl.collective_s.sum()) / compute if compute > 0 else 0.0


def _knobs(sc: Scenario, lead: str, compressible: bool) -> tuple[list[str], str]:
    """The generic communication knobs of the scenario's mode, after ``lead`` (why them)."""
    t = sc.training
    # TP's collectives under their matmuls (TE's userbuffers, AsyncTP), where a layout has them.
    full = t.tp > 1 and t.sequence_parallel and t.tp_comm_overlap != "full"
    tp_try = ["training.tp_comm_overlap=full"] if full else []
    tp_knob = ", or TP's collectives overlapped with their matmuls" if tp_try else ""
    if t.mode == "ddp":
        generic = ["bucket_cap_mb=100"] + (["comm_hook=bf16"] if compressible else []) + tp_try
        knobs = "bigger buckets" + (", bf16 gradients" if compressible else "") + tp_knob
        return generic, f"{lead}; the generic DDP communication knobs instead ({knobs})"
    if t.mode == "zero1":  # the distributed optimizer reduces and gathers in DDP's buckets; no prefetch
        return ["bucket_cap_mb=100", *tp_try], f"{lead}; bigger buckets{tp_knob} instead"
    tries = [f"training.fsdp_prefetch={t.fsdp_prefetch + 1}"]
    knobs = "one more unit of FSDP prefetch"
    if t.mode in SHARDED_MODES and t.precision == "fp8" and not t.fp8_all_gather and t.tp * t.cp * t.pp == 1:
        tries.append("training.fp8_all_gather=true")
        knobs += ", or its blocks' weights gathered in FP8 (half their allgather bytes)"
    return tries + tp_try, f"{lead}; {knobs}{tp_knob} instead"
