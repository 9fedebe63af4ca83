"""A calibration applied to a scenario, and where each parameter then comes from.

Two modes (issue 5):
- ``all``: the scenario describes the machines that were measured (same backend,
  one rank per host, the probe's world size): measured link rate, stack efficiency,
  hop latency, compute, optimizer, per-rank speed, jitter, gamma and the
  bucket-ready profile replace the preset's values. Gamma and the stack efficiency
  are the named network's (gloo's TCP work competes with compute, more on a faster link).
- ``shape``: a cluster the probe never touched. Only dimensionless shape parameters
  transfer: the jitter distribution and sigma, interference gamma, stack
  efficiency and (same model only) the bucket-ready profile. Bandwidths and FLOP/s
  stay the preset's.

``auto`` picks ``all`` when the scenario matches the measured set-up, else ``shape``.
Compute transfers across models through FLOP counts (sim/gpt2.py): the measured
achieved FLOP/s becomes peak x MFU; across sequence lengths the same way.
"""

import re
from pathlib import Path

from sim.config import Scenario, apply_overrides, load_scenario_data, scenario_from_dict
from sim.gpt2 import model_shape, param_count

MODES = ("auto", "all", "shape")

# What `simulate` reports the origin of: (key, what it means).
REPORTED = (
    ("network.nic_gbit_s", "link rate"),
    ("network.nic_efficiency", "stack efficiency"),
    ("network.gloo_hop_latency_us", "gloo hop latency"),
    ("compute.step_compute_s", "compute per micro-step"),
    ("compute.peak_tflop_s", "peak FLOP/s"),
    ("compute.mfu", "MFU"),
    ("compute.backward_fraction", "backward share"),
    ("compute.optimizer_s", "optimizer step"),
    ("compute.interference_gamma", "interference gamma"),
    ("compute.ready_fractions", "bucket-ready profile"),
    ("noise.distribution", "jitter distribution"),
    ("noise.sigma", "jitter sigma"),
    ("noise.speed_spread_sd", "per-rank speed spread"),
    ("stragglers", "slow ranks"),
)


def pick_network(calib: dict, label: str | None) -> tuple[str, dict]:
    nets = calib["networks"]
    if label is None:
        if len(nets) != 1:
            raise ValueError(f"--calib-network: the calibration measured {', '.join(sorted(nets))}; name one")
        label = next(iter(nets))
    if label not in nets:
        raise ValueError(f"--calib-network: {label!r} not in the calibration ({', '.join(sorted(nets))})")
    return label, nets[label]


def choose_mode(sc: Scenario, calib: dict, mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"--calib-mode: must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "auto":
        return mode
    same = sc.network.backend == calib["backend"] and sc.network.gpus_per_node == 1 and sc.ranks == calib["world_size"]
    return "all" if same else "shape"


def _set(data: dict, key: str, value) -> None:
    section, _, name = key.rpartition(".")
    (data.setdefault(section, {}) if section else data)[name] = value


def apply_calibration(
    data: dict, calib: dict, *, calib_path: str, network: str | None = None, mode: str = "auto"
) -> tuple[dict, dict[str, str], str]:
    """(scenario data with the calibration applied, {key: where it came from}, mode used)."""
    data = apply_overrides(data, [])  # a copy
    sc = scenario_from_dict(data)
    mode = choose_mode(sc, calib, mode)
    c, noise = calib["compute"], calib["noise"]
    measured: dict[str, str] = {}

    def put(key: str, value, origin: str) -> None:
        _set(data, key, value)
        measured[key] = f"measured: {calib_path} ({origin})"

    if noise["distribution"] == "empirical":
        why = f"{noise['best_fit']} rejected: KS {noise['ks']:.3f} > {noise['ks_critical_1pct']:.3f}"
        put("noise.distribution", "empirical", f"{noise['samples']} compute iterations resampled; {why}")
        put("noise.samples", list(noise["multipliers"]), "normalised compute iterations")
        put("noise.sigma", noise["sigma"], "sd of the samples (not used by empirical)")
    else:
        put("noise.distribution", noise["distribution"], f"{noise['samples']} compute iterations, best AIC")
        put("noise.sigma", noise["sigma"], f"{noise['distribution']} MLE, KS {noise['ks']:.3f}")
    label, net = pick_network(calib, network) if mode == "all" or network else (None, None)
    if net is None and len(calib["networks"]) == 1:
        label, net = pick_network(calib, None)
    if net is not None:
        eff = net["stack_efficiency"]["value"]
        put("network.nic_efficiency", min(eff, 1.0), f"{label}: allreduce busbw / raw TCP = {eff:.3f}")
        gamma = net["interference_gamma"]
        put("compute.interference_gamma", gamma["value"], f"{label}: overlap probe, {gamma['samples']} iterations")
    else:  # several networks, none named: their mean
        gammas = [n["interference_gamma"]["value"] for n in calib["networks"].values()]
        put("compute.interference_gamma", sum(gammas) / len(gammas), f"overlap probes, mean of {len(gammas)} networks")
    same_model = c["model"] == sc.model.preset
    if same_model:
        put("compute.ready_fractions", dict(c["ready_fractions"]["value"]), f"grad_ready of {c['model']}")
    if mode == "all":
        _apply_measured_machines(data, sc, calib, label, net, put)
    return data, measured, mode


def _apply_measured_machines(data, sc, calib, label, net, put) -> None:
    c = calib["compute"]
    ar = net["collectives"]["allreduce"]
    put(
        "network.nic_gbit_s",
        net["link_gbit_s"]["value"],
        f"{label}: raw TCP, {net['link_gbit_s']['samples']} transfers",
    )
    put(
        "network.gloo_hop_latency_us",
        ar["hop_latency_us"],
        f"{label}: allreduce alpha / 2(n-1), {ar['samples']} iterations",
    )
    seq = sc.training.seq_len or model_shape(sc.model.preset).block_size
    tokens = sc.training.micro_batch_size * seq
    step = c["step_s"]["intercept_s"] + c["step_s"]["per_token_s"] * tokens
    bwd = c["backward_s"]["intercept_s"] + c["backward_s"]["per_token_s"] * tokens
    if c["model"] == sc.model.preset and c["seq_len"] == seq:
        put("compute.step_compute_s", step, f"affine fit in tokens at {tokens}, R^2 {c['step_s']['r2']:.4f}")
        put("compute.backward_fraction", bwd / step, "backward / (forward + backward) fits")
    else:
        _set(data, "compute.step_compute_s", None)
        put("compute.peak_tflop_s", c["achieved_tflop_s"]["value"], f"achieved on {c['model']}, through FLOP counts")
        put("compute.mfu", 1.0, "peak_tflop_s is already the achieved rate")
        top = c["step_s"]["points"][-1][0]
        frac = (c["backward_s"]["intercept_s"] + c["backward_s"]["per_token_s"] * top) / (
            c["step_s"]["intercept_s"] + c["step_s"]["per_token_s"] * top
        )
        put("compute.backward_fraction", frac, f"measured on {c['model']}")
    opt = c["optimizer_s"]
    params = param_count(model_shape(sc.model.preset))
    measured_params = param_count(model_shape(c["model"]))
    put("compute.optimizer_s", opt["value"] * params / measured_params, f"AdamW, {opt['samples']} steps, x params")
    slow = {int(r): v["speed_factor"] for r, v in calib["ranks"].items() if v["speed_factor"] > 1.0}
    put("stragglers", ",".join(f"{r}:{f:.4g}" for r, f in sorted(slow.items())), "per-rank median speed")
    put("noise.speed_spread_sd", 0.0, "the measured ranks' own factors are the stragglers entry")


def _toml_comments(path: Path) -> dict[str, str]:
    """{"section.key": "file (the line's trailing comment)"} of a preset file, its stated
    sources; keys it takes from its ``base`` preset cite that file (sim/config.py
    load_scenario_data merges them the same way)."""
    from scenarios import scenario_path

    text = path.read_text()
    base = re.search(r'^base\s*=\s*"([^"]+)"', text, re.MULTILINE)
    out = _toml_comments(scenario_path(base.group(1))) if base else {}
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


def provenance(sc, measured: dict[str, str], scenario_path: Path) -> list[dict]:
    """Every reported parameter of the scenario with its value and origin."""
    comments = _toml_comments(scenario_path) if scenario_path.suffix == ".toml" else {}
    data = {
        "network": sc.network,
        "compute": sc.compute,
        "noise": sc.noise,
    }
    rows = []
    for key, meaning in REPORTED:
        section, _, name = key.rpartition(".")
        value = getattr(data[section], name) if section else getattr(sc, name)
        if key == "compute.step_compute_s" and value is None:
            continue
        if key in ("compute.peak_tflop_s", "compute.mfu") and sc.compute.step_compute_s is not None:
            continue
        if key == "network.gloo_hop_latency_us" and sc.network.backend != "gloo":
            continue
        if key == "compute.ready_fractions":
            value = "measured" if value else "from FLOP counts (sim/gpt2.py)"
        origin = measured.get(key) or f"assumed: {comments.get(key, scenario_path.name)}"
        rows.append({"key": key, "meaning": meaning, "value": value, "source": origin})
    return rows


def load_for_simulation(name_or_path: str, overrides, calib: dict, calib_path: str, network, mode, **top) -> tuple:
    """Scenario data as `simulate` loads it, with the calibration applied underneath the
    --set overrides (what the user types wins). Returns (data, measured, mode, path)."""
    from scenarios import scenario_path

    path = scenario_path(name_or_path)
    # Calibrate the scenario as the user set it (model, sequence...), with the mode decided
    # before --ranks/--sweep-ranks (a sweep keeps one mode at every scale); then the user's
    # own keys are applied again, so what they type wins over what was measured.
    user = apply_overrides(load_scenario_data(path), list(overrides))
    data, measured, used = apply_calibration(user, calib, calib_path=calib_path, network=network, mode=mode)
    data.update({k: v for k, v in top.items() if v is not None})
    if "stragglers" in measured:  # the measured slow ranks that exist at this scale
        ranks = data.get("ranks", 1)
        kept = [item for item in data["stragglers"].split(",") if item and int(item.split(":")[0]) < ranks]
        data["stragglers"] = ",".join(kept)
    data = apply_overrides(data, list(overrides))
    for text in overrides:
        measured.pop(text.partition("=")[0].strip(), None)
    return data, measured, used, path
