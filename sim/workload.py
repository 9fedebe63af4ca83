"""What one optimizer step costs before anything runs: per-rank compute and
per-bucket collective times, derived from a scenario. The engine only schedules."""

import math
from dataclasses import dataclass

import numpy as np

from sim.buckets import Bucket, build_buckets
from sim.collectives import Fabric, bus_factor, collective_cost
from sim.config import NetworkConfig, Scenario, parse_host_delays, parse_stragglers
from sim.loader import loader_wait_s
from sim.noise import speed_factors
from sim.optimizer import optimizer_step_s
from sim.rebalance import whole_samples
from sim.roofline import (
    EMBEDDING_KERNELS,
    block_kernels,
    head_kernels,
    kernel_time_s,
    micro_step_time,
    op_kept_share,
    rates,
    rerun,
)
from sim.topology import FLAT, Tiers
from sim.transformer import ComputeShares, compute_shares, flops_per_token, gradient_ready_order, param_tensors


@dataclass(frozen=True, kw_only=True)
class Workload:
    ranks: int
    grad_accum: int
    tokens_per_step: int  # all ranks together
    speed_factor: np.ndarray  # (ranks,) persistent compute-time multiplier
    forward_s: np.ndarray  # (ranks,) one micro-step's forward, before noise
    backward_s: np.ndarray  # (ranks,) one micro-step's backward, before noise
    dataloader_s: np.ndarray  # (ranks,)
    host_delay_s: np.ndarray  # (ranks,) Scenario.host_delays_s: before the first forward, not compute nor loader
    optimizer_s: float
    buckets: list[Bucket]
    ready_fraction: np.ndarray  # (buckets,) of the last backward, when each bucket is ready
    wire_bytes: np.ndarray  # (buckets,) bytes each bucket's allreduce carries
    collective_s: np.ndarray  # (buckets,) allreduce time (+ compression), before jitter
    algorithms: tuple[str, ...]  # (buckets,) the algorithm chosen per bucket
    overlap: bool
    interference_gamma: float
    samples_per_step: np.ndarray | None = None  # (ranks,) rebalanced samples a step; None: as configured

    @property
    def traffic_bytes_per_step(self) -> float:
        """Bytes each rank puts on its bus per optimizer step (nccl-tests convention)."""
        return float(self.wire_bytes.sum()) * bus_factor("allreduce", self.ranks) if self.ranks > 1 else 0.0


def fabric_for(sc: Scenario, ranks: int | None = None) -> Fabric:
    net = sc.network
    return Fabric(
        ranks=ranks or sc.ranks,
        gpus_per_node=net.gpus_per_node,
        backend=net.backend,
        algorithm=net.algorithm,
        intra_busbw_gb_s=net.intra_gb_s * net.intra_efficiency,
        # One ring channel drives one NIC: fewer channels than NICs leave NICs idle.
        inter_busbw_gb_s=min(net.nics_per_node, net.channels) * net.nic_gbit_s / 8.0 * net.nic_efficiency,
        intra_link=net.intra_link,
        gloo_hop_latency_us=net.gloo_hop_latency_us,
        tuner=net.tuner,
        channels=net.channels,
        cpu_vendor=net.cpu_vendor,
        nvls_busbw_gb_s=net.nvls_gb_s,
        net_hop_us=net.net_hop_us,
        latency_us=(net.latency_ll_us, net.latency_ll128_us, net.latency_simple_us),
        nvls_latency_us=net.nvls_latency_us,
        nvls_channels=net.nvls_channels,
        gpus_per_process=net.gpus_per_process,
        ll_us_per_process_gpu=net.ll_us_per_process_gpu,
        nvls_fixed_us=net.nvls_fixed_us,
        nvls_loop_us=net.nvls_loop_us,
        msccl_busbw_gb_s=net.msccl_gb_s,
        msccl_latency_us=net.msccl_latency_us,
        tiers=tiers_for(net),
    )


def tiers_for(net: NetworkConfig) -> Tiers:
    """The racks and pods above the node (sim/topology.py); FLAT when the scenario sets none."""
    if not (net.gpus_per_rack or net.gpus_per_pod):
        return FLAT
    pod_nodes = net.gpus_per_pod // net.gpus_per_node
    # One NIC port per NIC goes up from every node; the top tier carries 1/oversubscription of them.
    uplink = pod_nodes * net.nics_per_node * net.nic_gbit_s / 8.0 * net.nic_efficiency / net.pod_oversubscription
    return Tiers(
        rack_nodes=net.gpus_per_rack // net.gpus_per_node,
        pod_nodes=pod_nodes,
        cluster_pods=net.cluster_pods,
        placement=net.placement,
        pod_uplink_gb_s=uplink if pod_nodes else math.inf,
        tier_hop_us=net.tier_hop_us,
    )


def recompute_fraction(sc: Scenario) -> float:
    """The share of a forward that backward runs again. Activation checkpointing reruns every
    block's forward inside backward (torch.utils.checkpoint; Chen et al. 2016): backward grows by
    the blocks' share of the forward (FSDP does the same per block); selective recomputation
    (Megatron's) reruns attention's core alone (forward_shares); torchtitan's per-op AC what its
    policy does not keep (block_rerun_share)."""
    return sc.model.shape.n_layer * block_rerun_share(sc)


def block_rerun_share(sc: Scenario) -> float:
    """What one block's backward runs again under training.recompute, as a share of a
    micro-step's forward. "op" (torchtitan's per-op selective AC) reruns each forward kernel but
    for the share of it whose output the policy keeps (sim/roofline.py op_kept_share): on the
    roofline by the kernels' times; with a given time or a fixed MFU by FLOPs, where the rerun
    matmuls are wk, wo and w3 (2 d (kv + d + f) per token) and the memory-bound rest weighs
    nothing."""
    recompute = sc.training.recompute
    if recompute == "none":
        return 0.0
    shares, core = forward_shares(sc)
    if recompute != "op":
        return rerun(recompute, shares.block, core)
    c, t, shape, seq = sc.compute, sc.training, sc.model.shape, sc.seq_len
    if c.step_compute_s is not None or c.mfu is not None:
        d, kv, f = shape.n_embd, shape.kv_dim, shape.ffn_hidden
        return shares.block * 2.0 * d * (kv + d + f) / (2.0 * shape.block_matmul_numel + 4.0 * seq * d)
    r = rates(c, t.dtypes)
    kernels = [
        k
        for k in block_kernels(
            shape,
            seq,
            float(t.micro_batch_size * seq),
            t.dtypes,
            fused_attention=t.fused_attention,
            dropout=t.dropout > 0,
        )  # fmt: skip
        if not k.backward
    ]
    block = sum(kernel_time_s(k, r) for k in kernels)
    again = sum(kernel_time_s(k, r) * (1.0 - op_kept_share(k.name, shape)) for k in kernels)
    return shares.block * again / block


def forward_shares(sc: Scenario) -> tuple[ComputeShares, float]:
    """(each part's share of a micro-step's forward, one block's attention core's share). On the
    roofline, by its kernels' times (sim/roofline.py): memory-bound kernels weigh what they
    take, so the loss over a large vocabulary, or unfused attention's s x s passes, move the
    shares from the FLOP count's. With a given step time or a fixed MFU, by FLOPs
    (sim/transformer.py compute_shares; the core: QK^T and AV's 4 s d per token, Korthikanti et
    al. 2022, Sec. 5)."""
    c, t, shape, seq = sc.compute, sc.training, sc.model.shape, sc.seq_len
    if c.step_compute_s is not None or c.mfu is not None:
        shares = compute_shares(shape, seq)
        block = 2.0 * shape.block_matmul_numel + 4.0 * seq * shape.n_embd
        return shares, shares.block * 4.0 * seq * shape.n_embd / block
    r = rates(c, t.dtypes)
    tokens = float(t.micro_batch_size * seq)
    blk = core = embedding = head = 0.0
    for k in block_kernels(shape, seq, tokens, t.dtypes, fused_attention=t.fused_attention, dropout=t.dropout > 0):
        if not k.backward:
            blk += kernel_time_s(k, r)
            core += kernel_time_s(k, r) if k.core else 0.0
    for k in head_kernels(shape, tokens, t.dtypes, fused_loss=t.fused_loss):
        if not k.backward:
            if k.name.startswith(EMBEDDING_KERNELS):
                embedding += kernel_time_s(k, r)
            else:
                head += kernel_time_s(k, r)
    total = shape.n_layer * blk + embedding + head
    return ComputeShares(embedding / total, blk / total, head / total), core / total


def micro_step_compute_s(sc: Scenario) -> tuple[float, float]:
    """(forward, backward) seconds of one micro-step on a speed-1 rank: given
    (compute.step_compute_s), from a fixed MFU (FLOPs / (peak x mfu)), or the roofline of
    every kernel (sim/roofline.py); compute.backward_fraction, when set, splits the total."""
    c, t = sc.compute, sc.training
    shape, seq = sc.model.shape, sc.seq_len
    if c.step_compute_s is not None or c.mfu is not None:
        if c.step_compute_s is not None:
            total = c.step_compute_s
        else:
            flops = flops_per_token(shape, seq) * t.micro_batch_size * seq
            total = flops / (c.peak_for(t.dtypes) * 1e12 * c.mfu)
        frac = 2.0 / 3.0 if c.backward_fraction is None else c.backward_fraction
        return total * (1.0 - frac), total * frac
    r = micro_step_time(
        shape, seq, t.micro_batch_size, t.dtypes, rates(c, t.dtypes), fused_attention=t.fused_attention,
        dropout=t.dropout > 0, fused_loss=t.fused_loss,
    )  # fmt: skip
    if c.backward_fraction is None:
        return r.forward_s, r.backward_s
    return r.step_s * (1.0 - c.backward_fraction), r.step_s * c.backward_fraction


def measured_ready_order(sc: Scenario) -> list[tuple[str, float]] | None:
    """The measured profile as (parameter, fraction) in ready order, scaled so the last
    gradient ends backward (DDP's view of it); None when the scenario has none."""
    measured = sc.compute.ready_fractions
    if measured is None:
        return None
    shape = sc.model.shape
    names = [p.name for p in param_tensors(shape)]
    missing, unknown = sorted(set(names) - set(measured)), sorted(set(measured) - set(names))
    if missing or unknown:
        what = f"no value for {missing[0]}" if missing else f"{unknown[0]} is not a parameter"
        raise ValueError(f"compute.ready_fractions: {what} of {sc.model.shape.name} (measured on another model?)")
    last = max(measured.values())
    if last <= 0:
        raise ValueError("compute.ready_fractions: every fraction is 0")
    # Ties (a weight and its bias finish in one autograd node) keep the FLOP profile's
    # order, which matches DDP's rebuilt buckets (tests/test_shared_shapes.py).
    flop_order = [n for n, _ in gradient_ready_order(shape, sc.seq_len)]
    return sorted(((n, measured[n] / last) for n in flop_order), key=lambda item: item[1])


def loader_batch_s(sc: Scenario) -> np.ndarray:
    """Each rank's time for one loader worker to build one micro-batch: the scenario's, times
    the rank's loader_stragglers slowdown."""
    out = np.full(sc.ranks, sc.compute.dataloader_batch_s)
    for rank, slowdown in parse_stragglers(sc.loader_stragglers, "loader_stragglers").items():
        out[rank] *= slowdown
    return out


def host_delay_s(sc: Scenario) -> np.ndarray:
    """Each rank's Scenario.host_delays_s, seconds a step (0 where unnamed)."""
    out = np.zeros(sc.ranks)
    for rank, seconds in parse_host_delays(sc.host_delays_s).items():
        out[rank] = seconds
    return out


def loader_wait_per_step_s(sc: Scenario, batch_s: np.ndarray, micro_s: np.ndarray, gap_s: float) -> np.ndarray:
    """Each rank's steady wait for its batches per optimizer step (sim/loader.py). The workers
    build during the rank's K micro-steps and ``gap_s`` after them; the run's first batch, paid
    once, is not in a step's mean (docs/loader.md)."""
    if not batch_s.any():
        return np.zeros(sc.ranks)
    c = sc.compute
    wait = loader_wait_s(
        batch_s,
        workers=c.dataloader_workers,
        prefetch_factor=c.dataloader_prefetch_factor,
        micro_s=micro_s,
        micro_steps=sc.training.grad_accum,
        gap_s=gap_s,
    )
    return wait.steady_s


def _wire_bytes(sc: Scenario, b: Bucket) -> float:
    t = sc.training
    if t.comm_hook in ("fp16", "bf16"):
        return 2.0 * b.numel
    if t.comm_hook == "powersgd":
        return float(b.powersgd_numel * t.dtypes.grad_bytes)
    return float(b.size_bytes)


def build_workload(sc: Scenario, rng: np.random.Generator) -> Workload:
    shape, seq = sc.model.shape, sc.seq_len
    t = sc.training
    buckets = build_buckets(
        shape,
        seq,
        bytes_per_grad=t.dtypes.grad_bytes,
        bucket_cap_mb=t.bucket_cap_mb,
        first_bucket_mb=t.effective_first_bucket_mb,
        powersgd_rank=t.powersgd_rank,
        ready_order=measured_ready_order(sc),
    )
    # The engine reads a rank's backward end as its last bucket's ready time.
    assert buckets[-1].ready_fraction == 1.0
    factor = speed_factors(rng, sc.ranks, sc.noise.speed_spread_sd, sc.straggler_map)
    fwd_s, bwd_s = micro_step_compute_s(sc)
    recompute = recompute_fraction(sc)
    wire = np.array([_wire_bytes(sc, b) for b in buckets])
    fabric = fabric_for(sc)
    costs = [collective_cost("allreduce", w, fabric) for w in wire]
    coll = np.array([c.time_s for c in costs])
    coll += sc.training.compress_s_per_gb * np.array([b.size_bytes for b in buckets]) / 1e9
    if not sc.network.enabled:
        coll = np.zeros_like(coll)
    optimizer_s = optimizer_step_s(sc)
    # After its last micro-step a rank's loader keeps building through the optimizer step and
    # the last bucket's all-reduce, which no backward hides: the gap it catches up in. Other
    # exposed communication is left out, so a loader near the edge is charged, not hidden.
    gap_s = optimizer_s + (coll[-1] if len(coll) else 0.0)
    micro_s = (fwd_s + bwd_s + fwd_s * recompute) * factor
    batch_s = loader_batch_s(sc)
    loader = loader_wait_per_step_s(sc, batch_s, micro_s, gap_s)
    split = None
    if sc.rebalance:
        # Work sized to speed, in whole samples (sim/rebalance.py): rank r's per-step time t_r
        # (its K micro-steps and what it waits for batches, both taken as proportional to its
        # samples) sets its samples per step n_r, the global batch unchanged; its micro-steps
        # and batches scale by n_r / (K x micro-batch), and its wait is found again. A host delay
        # is paid whatever the samples, so a late rank takes fewer until the others catch it up.
        per_step_s = loader + micro_s * t.grad_accum
        samples = t.grad_accum * t.micro_batch_size
        split = whole_samples(per_step_s, samples, host_delay_s(sc))
        share = split / samples
        factor = factor * share
        micro_s, batch_s = micro_s * share, batch_s * share
        loader = loader_wait_per_step_s(sc, batch_s, micro_s, gap_s)
    return Workload(
        ranks=sc.ranks,
        grad_accum=t.grad_accum,
        tokens_per_step=sc.ranks * t.grad_accum * t.micro_batch_size * seq,
        speed_factor=factor,
        forward_s=fwd_s * factor,
        backward_s=(bwd_s + fwd_s * recompute) * factor,
        dataloader_s=loader,
        host_delay_s=host_delay_s(sc),
        optimizer_s=optimizer_s,
        buckets=buckets,
        ready_fraction=np.array([b.ready_fraction for b in buckets]),
        wire_bytes=wire,
        collective_s=coll,
        algorithms=tuple(c.algorithm for c in costs),
        overlap=t.overlap,
        interference_gamma=sc.compute.interference_gamma,
        samples_per_step=split,
    )


def largest_micro_batch(sc: Scenario) -> int:
    """The most samples any rank runs in one micro-step: the configured micro-batch, or under
    rebalance the most a rank takes a step spread over its K micro-steps, rounded up (a rank
    given a ninth sample holds a ninth sample's activations: sim/memory_fit.py)."""
    if not sc.rebalance:
        return sc.training.micro_batch_size
    samples = build_workload(sc, np.random.default_rng(sc.seed)).samples_per_step
    return max(sc.training.micro_batch_size, math.ceil(int(samples.max()) / sc.training.grad_accum))
