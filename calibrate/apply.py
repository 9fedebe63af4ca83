"""A calibration applied to a scenario, and where each parameter then comes from.

Three modes (issues 5 and 12); every measured value a mode does not carry is listed with
its reason (``Applied.withheld``; `simulate --calib` prints them and puts them in JSON):
- ``all``: the scenario describes the machines that were measured (same backend,
  one rank per host, the probe's world size): measured link rate, stack efficiency,
  hop latency, compute, optimizer, per-rank speed, jitter, gamma and the
  bucket-ready profile replace the preset's values. Gamma and the stack efficiency
  are the named network's (gloo's TCP work competes with compute, more on a faster link).
- ``device``: one GPU of the cluster's class was measured (calibrate/devices.py: an
  H200 for ``h100-1024``): its compute per micro-step, optimizer step, peak memory,
  bucket-ready profile and jitter replace the preset's; the network stays the preset's.
  It needs the same precision (the compute of bf16 autocast is not fp32's).
- ``shape``: a cluster the probe never touched. Only dimensionless shape parameters
  transfer: the jitter distribution and sigma, interference gamma, stack
  efficiency and (same model only) the bucket-ready profile. Bandwidths and FLOP/s
  stay the preset's. The stack efficiency is one backend's (gloo over TCP is not NCCL
  over IB), so it needs the same backend; gamma is how one backend's traffic slows one
  device's compute (gloo's TCP threads on the cores a CPU rank computes on; NCCL's kernels
  on a GPU's SMs), so it needs the same backend and a GPU probe: a CPU calibration's gamma
  (0.19-1.00 here) on H100s added +9-17 % compute to a preset that states none (issue 22).
  Neither does jitter measured on a CPU transfer to a GPU cluster:
  a CPU's step-to-step spread is the OS scheduler's and the hypervisor's (sd 1-7 % on the 2-core
  CI box on 2026-11-29, 14-16 % on 2026-12-02; docs/validation.md),
  a GPU's is its kernels' (sd 0.35 % per step on an H200 at micro-batch 8,
  docs/references.md "Measured on one NVIDIA H200"); at 1024 ranks the step waits
  for the slowest draw, so the CPU's tail would be presented as an H100's.

``auto`` picks ``all`` when the scenario matches the measured set-up, ``device`` when it
is a cluster of the probed GPU's class, else ``shape``, and says why. Compute transfers
across models through FLOP counts (sim/transformer.py): the measured achieved FLOP/s becomes a
fixed MFU; across sequence lengths the same way.
"""

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from calibrate.calibration import Calibration, Network
from sim.config import MIN_SAMPLES, Scenario
from sim.memory import GIB
from sim.model_source import same_as_preset
from sim.patches import Patch, apply_patches
from sim.scenario_file import Resolved, scenario_from_dict
from sim.transformer import model_shape, param_count

MODES = ("auto", "all", "device", "shape")

# What `simulate` reports the origin of: (key, what it means).
REPORTED = (
    ("network.nic_gbit_s", "link rate"),
    ("network.nic_efficiency", "stack efficiency"),
    ("network.gloo_hop_latency_us", "gloo hop latency"),
    ("network.jitter_sigma", "collective jitter sigma"),
    ("network.jitter_samples", "collective jitter, measured"),
    ("compute.step_compute_s", "compute per micro-step"),
    ("compute.peak_tflop_s", "peak FLOP/s"),
    ("compute.mfu", "MFU"),
    ("compute.matmul_efficiency", "roofline: matmul efficiency"),
    ("compute.hbm_tb_s", "roofline: memory bandwidth"),
    ("compute.backward_fraction", "backward share"),
    ("compute.optimizer_s", "optimizer step"),
    ("compute.memory_peak_gib", "peak memory"),
    ("compute.interference_gamma", "interference gamma"),
    ("training.compress_s_per_gb", "comm hook's casts"),
    ("compute.ready_fractions", "bucket-ready profile"),
    ("noise.distribution", "jitter distribution"),
    ("noise.sigma", "jitter sigma"),
    ("noise.samples_by_rank", "jitter, whole steps"),
    ("noise.speed_spread_sd", "per-rank speed spread"),
    ("stragglers", "slow ranks"),
    ("host_delays_s", "ranks late to the sync"),
)


class Layer(NamedTuple):
    """A calibration as a layer of the scenario (sim/patches.py): above the file, under --set."""

    patches: tuple[Patch, ...]  # source "calibration", detail: where and how it was measured
    mode: str  # all | device | shape
    why: str  # why that mode
    withheld: list[dict]  # [{key, value, reason}]: measured, not carried, and why

    @property
    def measured(self) -> dict[str, str]:
        """{key: where its value came from}."""
        return {p.key: p.detail for p in self.patches}


class Applied(NamedTuple):
    data: dict  # scenario data with the calibration applied
    measured: dict[str, str]  # {key: where its value came from}
    mode: str  # all | device | shape
    why: str  # why that mode
    withheld: list[dict]  # [{key, value, reason}]: measured, not carried, and why


def _device_mismatch(sc: Scenario, calib: Calibration) -> str | None:
    """Why a one-GPU calibration cannot stand for this scenario's GPUs; None when it can."""
    measured, wanted = calib.device_class, sc.compute.device_class
    if not wanted:
        return f"{sc.name} names no GPU class (compute.device_class)"
    if measured != wanted:
        what = f"class {measured}" if measured else "no preset's class"
        return f"probed on {calib.probed_on} ({what}), {sc.name} is a {wanted} cluster"
    if calib.precision != sc.training.precision:
        return f"probed in {calib.precision}, {sc.name} trains in {sc.training.precision}"
    if calib.compute.memory is None and calib.trace is None:  # a trace's memory stays the preset's
        return "the probe recorded no device memory"
    return None


def choose_mode(sc: Scenario, calib: Calibration, mode: str) -> tuple[str, str]:
    """(mode, why)."""
    if mode not in MODES:
        raise ValueError(f"--calib-mode: must be one of {', '.join(MODES)}, got {mode!r}")
    same = (
        bool(calib.networks)
        and sc.network.backend == calib.backend
        and sc.network.gpus_per_node == 1
        and sc.ranks == calib.world_size
    )
    mismatch = _device_mismatch(sc, calib)
    # A calibration from traces measures no link (calibrate/trace_calib.py): on its own machines
    # its compute, jitter and ranks apply and the network stays the scenario's.
    if mode == "all" and not calib.networks and sc.ranks > 1 and calib.trace is None:
        raise ValueError(
            "--calib-mode all: the calibration measured no network (a one-rank probe); use device or shape"
        )
    if mode == "device" and mismatch:
        raise ValueError(f"--calib-mode device: {mismatch}")
    if mode != "auto":
        return mode, "as asked (--calib-mode)"
    if same:
        return "all", f"the measured machines: {calib.backend}, {calib.world_size} ranks"
    if not mismatch:
        return "device", f"one {sc.compute.device_class}-class GPU measured ({calib.probed_on})"
    return "shape", f"only dimensionless values transfer: {mismatch}"


def apply_calibration(
    data: dict, calib: Calibration, *, calib_path: str, network: str | None = None, mode: str = "auto"
) -> Applied:
    """The scenario data with the calibration applied, where each value came from, what was
    left out and why, and the mode."""
    layer = calibration_layer(scenario_from_dict(data), calib, calib_path=calib_path, network=network, mode=mode)
    return Applied(apply_patches(data, layer.patches)[0], layer.measured, layer.mode, layer.why, layer.withheld)


def calibration_layer(
    sc: Scenario,
    calib: Calibration,
    *,
    calib_path: str,
    network: str | None = None,
    mode: str = "auto",
    ranks: int | None = None,
) -> Layer:
    """The calibration as patches over the scenario ``sc`` (as the user set it: its model,
    sequence, backend decide what transfers), with the mode, why, and what was left out. With
    ``ranks`` (the scale run), only the measured slow ranks that exist at it."""
    mode, why = choose_mode(sc, calib, mode)
    c, noise = calib.compute, calib.noise
    patches: list[Patch] = []
    withheld: list[dict] = []
    where = f"measured on {calib.probed_on}: {calib_path}"
    if calib.trace is not None:  # the traces, ranks and steps each value was measured in
        where = f"{'; '.join(r.provenance for r in calib.trace.ranks.values())} ({calib.probed_on}): {calib_path}"

    def put(key: str, value, origin: str) -> None:
        patches.append(Patch(key, value, "calibration", f"{where} ({origin})"))

    def hold(key: str, value, reason: str) -> None:
        withheld.append({"key": key, "value": value, "reason": reason})

    if mode != "all" and calib.device == "cpu":
        reason = f"a CPU's scheduler jitter: {_gpus(sc)} keep their own"
        hold("noise.distribution", noise.distribution, reason)
        hold("noise.sigma", noise.sigma, reason)
    elif mode == "all" and (sized := _noise_at_size(sc, calib)):
        b, x = sized
        put("noise.distribution", "empirical", f"the {len(x)} compute iterations at micro-batch {b}, resampled")
        put("noise.samples", list(x), f"normalised compute iterations at micro-batch {b}")
        put("noise.sigma", float(np.std(x)), f"sd of those samples (not used); every size's: {noise.sigma:.4f}")
        rows = noise.by_rank_step or {}
        # The ranks stepped together (a trace): whole steps drawn, when there are enough to draw.
        if sorted(rows) == list(range(sc.ranks)) and len(rows[0]) >= MIN_SAMPLES:
            put(
                "noise.samples_by_rank", [rows[r] for r in sorted(rows)], "per rank, step by step, drawn a step at once"
            )
    elif noise.distribution == "none":  # too few multipliers to fit: no evidence of no jitter either
        hold("noise.distribution", "none", f"not fitted ({noise.chosen_because}): the scenario's jitter stays")
    elif noise.distribution == "empirical":
        why_empirical = (
            noise.chosen_because or f"{noise.best_fit} rejected: KS {noise.ks:.3f} > {noise.ks_critical_1pct:.3f}"
        )
        put("noise.distribution", "empirical", f"{noise.samples} compute iterations resampled; {why_empirical}")
        put("noise.samples", list(noise.multipliers), "normalised compute iterations")
        put("noise.sigma", noise.sigma, "sd of the samples (not used by empirical)")
    else:
        chosen = next(x for x in noise.candidates if x.distribution == noise.distribution)
        how = f"best AIC; {noise.chosen_because}" if noise.chosen_because else "best AIC"
        put("noise.distribution", noise.distribution, f"{noise.samples} compute iterations, {how}")
        put("noise.sigma", noise.sigma, f"{noise.distribution} MLE, KS {chosen.ks:.3f}")
    label, net = calib.network(network) if (mode == "all" and calib.networks) or network else (None, None)
    if net is None and len(calib.networks) == 1:
        label, net = calib.network(None)
    _apply_network_shape(sc, calib, mode, label, net, put, hold)
    same_model = same_as_preset(sc.model.shape, c.model)
    if same_model and c.ready_fractions.value:  # a trace's buckets that match no DDP layout carry none
        put("compute.ready_fractions", dict(c.ready_fractions.value), f"grad_ready of {c.model}")
    else:
        hold(
            "compute.ready_fractions",
            f"measured on {c.model}",
            f"the order {c.model}'s backward makes gradients ready; {sc.model.shape.name}'s comes from FLOP counts",
        )
    if mode == "all":
        if net is not None:
            _apply_measured_network(label, net, put)
        _apply_compute(sc, calib, put)
        _apply_memory(sc, calib, put)
        # The measured slow ranks (those that exist at the scale run, if given).
        slow = {r: v.speed_factor for r, v in calib.ranks.items() if v.speed_factor > 1.0 and r < (ranks or r + 1)}
        put("stragglers", ",".join(f"{r}:{f:.4g}" for r, f in sorted(slow.items())), "per-rank median speed")
        if c.host_delays_s is not None:  # a trace's late ranks, where the scale run has them
            late = {r: d for r, d in c.host_delays_s.value.items() if r < (ranks or r + 1)}
            put("host_delays_s", _delays_text(late), "per-rank time before the gradient sync outside compute")
        put("noise.speed_spread_sd", 0.0, "the measured ranks' own factors are the stragglers entry")
        return Layer(tuple(patches), mode, why, withheld)
    if calib.networks:
        nets = [net] if net is not None else list(calib.networks.values())
        mine = f"a property of the measured link, not of {sc.name}'s network"
        hold("network.nic_gbit_s", _span([n.link_gbit_s.value for n in nets]), mine)
        if sc.network.backend == "gloo":
            hold("network.gloo_hop_latency_us", _span([n.allreduce.hop_latency_us for n in nets]), mine)
    if mode == "device":
        _apply_compute(sc, calib, put)
        _apply_memory(sc, calib, put)
    else:
        key, value = _compute_value(sc, calib)
        hold(key, value, f"measured on {calib.probed_on}, not on {_gpus(sc)}: their FLOP/s and roofline stay")
        how = "the optimizer x params" + (" + the traced step's rest" if c.outside_s is not None else "")
        hold(
            "compute.optimizer_s",
            _after_the_wait_s(sc, c),
            f"measured on {calib.probed_on} ({how}), not on {_gpus(sc)}",
        )
        if c.memory is not None:
            hold(
                "compute.memory_peak_gib",
                c.memory.ddp_peak_bytes.value / GIB,
                f"measured on {calib.probed_on}, not on {_gpus(sc)}",
            )
    slow = {r: v.speed_factor for r, v in calib.ranks.items() if v.speed_factor > 1.0}
    if slow:
        text = ",".join(f"{r}:{f:.4g}" for r, f in sorted(slow.items()))
        hold("stragglers", text, f"the probe's own ranks, not {sc.name}'s")
    if c.host_delays_s is not None and c.host_delays_s.value:
        hold("host_delays_s", _delays_text(c.host_delays_s.value), f"the traced job's own ranks, not {sc.name}'s")
    return Layer(tuple(patches), mode, why, withheld)


def _noise_at_size(sc, calib: Calibration) -> tuple[int, list[float]] | None:
    """(micro-batch, its multipliers) when the probe timed this scenario's model, sequence and
    micro-batch: jitter differs by size (calibration.py Noise), and on the measured machines the
    run's own size says it best. None otherwise, or with too few iterations at that size to
    resample (the fit over every size stands)."""
    by_size = calib.noise.multipliers_by_micro_batch or {}
    b = sc.training.micro_batch_size
    same = same_as_preset(sc.model.shape, calib.compute.model) and calib.compute.seq_len == sc.seq_len
    return (b, by_size[b]) if same and len(by_size.get(b, ())) >= MIN_SAMPLES else None


def _gpus(sc) -> str:
    """E.g. "h100-1024's h100 GPUs": every scenario describes accelerators, its class named or not."""
    return " ".join(x for x in (f"{sc.name}'s", sc.compute.device_class, "GPUs") if x)


def _span(values: list[float]):
    """One value, or "lo-hi" over several measured networks."""
    lo, hi = min(values), max(values)
    return lo if lo == hi else f"{lo:.4g}-{hi:.4g}"


def _apply_network_shape(sc, calib: Calibration, mode: str, label, net, put, hold) -> None:
    """The stack efficiency and interference gamma. Outside mode ``all`` each carries only what
    it measured: the stack efficiency is busbw / wire of one backend's stack (gloo over TCP here,
    NCCL over IB there), so it needs the same backend; gamma is how one backend's communication
    slows one device's compute (gloo's TCP threads on the cores a CPU rank computes on; NCCL's
    kernels on a GPU's SMs), so it needs the same backend and a GPU probe (issue 22)."""
    if not calib.networks:
        return
    nets = {label: net} if net is not None else calib.networks
    effs = [n.stack_efficiency.value for n in nets.values()]
    gammas = [n.interference_gamma.value for n in nets.values()]
    backend, theirs = calib.backend, sc.network.backend
    other_stack = f"{backend}'s stack measured, {sc.name} runs {theirs}" if backend != theirs else None
    if mode == "all" or not other_stack:
        if net is not None:
            put("network.nic_efficiency", min(effs[0], 1.0), f"{label}: allreduce busbw / raw TCP = {effs[0]:.3f}")
        else:
            hold("network.nic_efficiency", _span(effs), f"{len(effs)} networks measured: name one (--calib-network)")
    else:
        hold("network.nic_efficiency", _span([min(e, 1.0) for e in effs]), other_stack)
    if mode != "all" and calib.device == "cpu":
        reason = f"{backend}'s TCP work competed with compute for a CPU's cores: {_gpus(sc)} compute apart"
        hold("compute.interference_gamma", _span(gammas), reason)
    elif mode != "all" and other_stack:
        hold("compute.interference_gamma", _span(gammas), other_stack)
    elif net is not None:
        gamma = net.interference_gamma
        put("compute.interference_gamma", gamma.value, f"{label}: overlap probe, {gamma.samples} iterations")
    else:  # several networks, none named: their mean
        put("compute.interference_gamma", sum(gammas) / len(gammas), f"overlap probes, mean of {len(gammas)} networks")


def _compute_value(sc, calib: Calibration) -> tuple[str, float]:
    """The compute key and value mode ``device`` would set (for what shape mode leaves out)."""
    c = calib.compute
    if same_as_preset(sc.model.shape, c.model) and c.seq_len == sc.seq_len:
        return "compute.step_compute_s", c.step_s.at(sc.training.micro_batch_size * sc.seq_len)[0]
    return "compute.mfu", c.achieved_tflop_s.value / sc.compute.peak_for(sc.training.dtypes)


def _apply_compute(sc, calib: Calibration, put) -> None:
    """Compute per micro-step and the optimizer step of one speed-1 rank, as measured: the
    affine fit in tokens for the same model and sequence, else the achieved FLOP/s as an MFU."""
    c = calib.compute
    tokens = sc.training.micro_batch_size * sc.seq_len
    if same_as_preset(sc.model.shape, c.model) and c.seq_len == sc.seq_len:
        step, how = c.step_s.at(tokens)
        put("compute.step_compute_s", step, how)
        backward, how = c.backward_s.at(tokens)
        put("compute.backward_fraction", backward / step, f"backward / (forward + backward), {how}")
    else:
        put("compute.step_compute_s", None, "the preset's time left out: the measured FLOP/s decide (compute.mfu)")
        achieved = c.achieved_tflop_s.value
        peak = sc.compute.peak_for(sc.training.dtypes)
        if achieved > peak:
            raise ValueError(
                f"--calib: {achieved:.4g} TFLOP/s achieved on {c.model} exceeds {sc.name}'s peak {peak:.4g}"
                " (compute.peak_tflop_s): a faster device than the scenario's"
            )
        put("compute.mfu", achieved / peak, f"{achieved:.4g} TFLOP/s achieved on {c.model}, through FLOP counts")
        top = c.step_s.points[-1][0]
        put("compute.backward_fraction", c.backward_s.seconds(top) / c.step_s.seconds(top), f"measured on {c.model}")
    how = f"AdamW, {c.optimizer_s.samples} steps, x params"
    if c.outside_s is not None:
        how += f"; + the traced step's rest, {c.outside_s.value * 1e3:.3g} ms, held at every scale"
    put("compute.optimizer_s", _after_the_wait_s(sc, c), how)
    _apply_hook_casts(sc, calib, put)


def _delays_text(delays: dict[int, float]) -> str:
    """Scenario.host_delays_s's text, to the microsecond."""
    return ",".join(f"{r}:{d:.6f}" for r, d in sorted(delays.items()))


def _after_the_wait_s(sc, c) -> float:
    """The simulator's one term after the wait on ``sc``'s model: the measured optimizer scaled with
    the parameters, plus a trace's rest of the step (data, host work, GPU idle) as measured."""
    optimizer = c.optimizer_s.value * param_count(sc.model.shape) / param_count(model_shape(c.model))
    return optimizer + (c.outside_s.value if c.outside_s is not None else 0.0)


def _apply_hook_casts(sc, calib: Calibration, put) -> None:
    """A compression hook's casts, on the measured device: what they cost per GB of gradient
    (a memory-bound pass, so per byte carries across models). The simulator puts them on each
    bucket's comm path (sim/workload.py), so the last bucket's are exposed, as they are in a
    run; an older calibration without them leaves the scenario's own value, and says so."""
    hook = sc.training.comm_hook
    if hook not in ("fp16", "bf16"):
        return
    cast = (calib.compute.hook_cast_s_per_gb or {}).get(hook)
    if cast is None:
        put(
            "training.compress_s_per_gb",
            sc.training.compress_s_per_gb,
            f"the {hook} hook's casts not measured (probes before 2026-12-06 and profiler traces do not time"
            " them apart): the scenario's own",
        )
        return
    put("training.compress_s_per_gb", cast.value, f"the {hook} hook's casts, {cast.samples} passes over all gradients")


def _apply_memory(sc, calib: Calibration, put) -> None:
    """The measured peak of a DDP step, at this scenario's tokens (same model and sequence); not
    for a tensor- or pipeline-parallel one, whose stages hold other things (sim/parallel3d.py)."""
    c, memory = calib.compute, calib.compute.memory
    same = same_as_preset(sc.model.shape, c.model)
    if memory is None or not same or c.seq_len != sc.seq_len or sc.training.mode != "ddp" or sc.parallel3d:
        return
    tokens = sc.training.micro_batch_size * sc.seq_len
    ddp = memory.ddp_peak_bytes
    how = "a DDP step's max_memory_allocated" + (
        "" if tokens == ddp.tokens else f" at {ddp.tokens} tokens, moved along the per-token slope"
    )
    put("compute.memory_peak_gib", memory.peak_bytes_at(tokens) / GIB, how)


def _apply_measured_network(label: str, net: Network, put) -> None:
    put("network.nic_gbit_s", net.link_gbit_s.value, f"{label}: raw TCP, {net.link_gbit_s.samples} transfers")
    ar = net.allreduce
    put("network.gloo_hop_latency_us", ar.hop_latency_us, f"{label}: allreduce alpha / 2(n-1), {ar.samples} iterations")
    j = net.allreduce_jitter
    if j is not None:
        put("network.jitter_samples", list(j.multipliers), f"{label}: {len(j.multipliers)} {j.source}")
        if j.sizes_bytes is not None:  # each collective draws from its nearest measured size
            put("network.jitter_samples_bytes", list(j.sizes_bytes), f"{label}: the size each was timed at")
        put("network.jitter_sigma", 0.0, f"{label}: the measured jitter_samples instead")


def _toml_comments(path: Path) -> dict[str, str]:
    """{"section.key": "file (the line's trailing comment)"} of a preset file, its stated
    sources; keys it takes from its ``base`` preset cite that file (sim/scenario_file.py
    load_scenario_data merges them the same way, a path relative to the file naming it)."""
    from scenarios import base_path

    text = path.read_text()
    base = re.search(r'^base\s*=\s*"([^"]+)"', text, re.MULTILINE)
    out = _toml_comments(base_path(base.group(1), path)) if base else {}
    section = ""
    for line in text.splitlines():
        head = re.match(r"\s*\[([\w.-]+)\]", line)
        if head:
            section = head.group(1) + "."
            continue
        m = re.match(r"\s*([\w]+)\s*=.*?#\s*(.+)$", line)
        if m:
            out[section + m.group(1)] = f"{path.name} ({m.group(2).strip()})"
    return out


def provenance(resolved: Resolved) -> list[dict]:
    """Every reported parameter of the scenario with its value and origin, from the resolver's
    record of who set each key (sim/scenario_file.py): a flag or the user's --set ("set: --set on
    the command line"), else the calibration (where and how it was measured), else the scenario
    file's comment ("assumed: ...")."""
    sc, scenario_path = resolved.scenario, resolved.path
    comments = _toml_comments(scenario_path) if scenario_path.suffix == ".toml" else {}
    data = {
        "network": sc.network,
        "compute": sc.compute,
        "noise": sc.noise,
        "training": sc.training,
    }
    # Which compute model decides the time: given, a fixed MFU, or the roofline.
    given, fixed = sc.compute.step_compute_s is not None, sc.compute.mfu is not None
    shown = {
        "compute.step_compute_s": given,
        "compute.peak_tflop_s": not given,
        "compute.mfu": fixed and not given,
        "compute.matmul_efficiency": not (fixed or given),
        "compute.hbm_tb_s": not (fixed or given),
        "compute.memory_peak_gib": sc.compute.memory_peak_gib is not None,
        "network.gloo_hop_latency_us": sc.network.backend == "gloo",
        "training.compress_s_per_gb": sc.training.comm_hook in ("fp16", "bf16", "powersgd"),
    }
    rows = []
    for key, meaning in REPORTED:
        section, _, name = key.rpartition(".")
        value = getattr(data[section], name) if section else getattr(sc, name)
        if not shown.get(key, True):
            continue
        if key == "compute.ready_fractions":
            value = "measured" if value else "from FLOP counts (sim/transformer.py)"
        if key == "network.jitter_samples":
            if not value:
                continue
            value = f"{len(value)} multipliers, sd {float(np.std(value)):.4f}"
            sizes = data["network"].jitter_samples_bytes
            if sizes:
                value += f", each collective's from its nearest of {len(set(sizes))} timed sizes"
        if key == "noise.samples_by_rank":
            if not value:
                continue
            value = f"{len(value)} ranks x {len(value[0])} steps"
        patch = resolved.origin.get(key)
        if patch is None:
            origin = f"assumed: {comments.get(key, scenario_path.name)}"
        elif patch.source == "calibration":
            origin = patch.detail
        else:
            origin = f"set: {patch.source} on the command line"
        rows.append({"key": key, "meaning": meaning, "value": value, "source": origin})
    return rows


def calibration_summary(resolved: Resolved, layer: Layer, calib_path: str) -> dict:
    """What `simulate --calib` adds to a summary: {calibration: file, mode, why and withheld
    (each measured value not carried, unless the user's own value replaced it anyway: key,
    value, reason); parameters: every reported parameter with its origin}."""
    user = {k for k, p in resolved.origin.items() if p.source != "calibration"}
    withheld = [w for w in layer.withheld if w["key"] not in user]
    return {
        "calibration": {"file": calib_path, "mode": layer.mode, "why": layer.why, "withheld": withheld},
        "parameters": provenance(resolved),
    }


def transfer_warning(sc: Scenario, calib: Calibration, parameters: list[dict]) -> str | None:
    """One line when the measured compute reached another model or sequence length through FLOP
    counts (a fixed MFU): then a 2-rank CPU probe of gpt2-tiny becomes minutes per 760M step,
    which is what was asked but easy to miss in the parameter table. None when it did not."""
    mfu = next((p for p in parameters if p["key"] == "compute.mfu"), None)
    if mfu is None or not mfu["source"].startswith("measured"):
        return None  # the measured fit itself, the preset's compute, or the user's --set
    from sim.units import fmt_seconds
    from sim.workload import micro_step_compute_s, recompute_fraction

    c = calib.compute
    fwd_s, bwd_s = micro_step_compute_s(sc)  # with checkpointing's recompute, as the engine charges it
    step_s = (fwd_s + bwd_s + fwd_s * recompute_fraction(sc)) * sc.training.grad_accum
    tflop_s = c.achieved_tflop_s.value
    rate = f"{tflop_s:.4g} TFLOP/s" if tflop_s >= 1 else f"{tflop_s * 1e3:.3g} GFLOP/s"
    return (
        f"--calib: {rate} achieved on {c.model} (seq {c.seq_len}; measured on {calib.probed_on}) applied to"
        f" {sc.model.shape.name} (seq {sc.seq_len}), a model other than the one measured, through FLOP counts:"
        f" {fmt_seconds(step_s)} of compute per step"
    )
