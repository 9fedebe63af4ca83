"""One GPU calibrates the cluster: a one-rank probe on an H200 (records written by hand in
realrun's schema, with known parameters) becomes compute, optimizer, memory and jitter of
`h100-1024` in mode ``device``; another GPU, another precision or another class falls back
to ``shape`` and says why."""

import json

import pytest
from fake_runs import H200, probe_run

from calibrate.calib import calibrate
from calibrate.devices import device_class

GIB = float(1 << 30)
SEQ, MICRO_BATCHES = 2048, (1, 2, 4, 8)
INTERCEPT_S, PER_TOKEN_S, OPTIMIZER_S, SIGMA = 0.004, 1.45e-5, 0.0062, 0.0035
MEMORY = (9.1e9, 2.05e6, 3.04e9)  # bytes: states, per token, DDP's buckets


def gpu_probe(path, name="NVIDIA H200", precision="bf16-amp"):
    return probe_run(
        path,
        world=1,
        model="gpt2-760m",
        seq_len=SEQ,
        micro_batches=MICRO_BATCHES,
        intercept_s=INTERCEPT_S,
        per_token_s=PER_TOKEN_S,
        optimizer_s=OPTIMIZER_S,
        sigma=SIGMA,
        rate=None,
        gpu=H200 | {"name": name},
        precision=precision,
        memory=MEMORY,
    )


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu")
    calib = calibrate([gpu_probe(d / "h200")], seed=0)
    path = d / "calib.json"
    path.write_text(json.dumps(calib.to_json()))
    return path, calib


def _params(summary) -> dict:
    return {p["key"]: p for p in summary["parameters"]}


@pytest.mark.parametrize(
    "name,cls",
    [
        ("NVIDIA H200", "h100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA GH200 480GB", "h100"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI325X", "mi300x"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA GeForce RTX 4090", None),
        ("Intel(R) Xeon(R) Platinum 8480+", None),
    ],
)
def test_device_classes(name, cls):
    assert device_class(name) == cls


def test_a_one_gpu_probe_calibrates_compute_memory_and_jitter(h200):
    _, c = h200
    assert c.networks == {} and c.world_size == 1
    assert (c.device_class, c.precision, c.device_info["name"]) == ("h100", "bf16-amp", "NVIDIA H200")
    k = c.compute
    assert k.step_s.per_token_s == pytest.approx(PER_TOKEN_S, rel=0.01)
    assert k.step_s.intercept_s == pytest.approx(INTERCEPT_S, abs=0.002)
    assert k.optimizer_s.value == pytest.approx(OPTIMIZER_S)
    mem = k.memory
    assert mem.compute_peak_bytes.per_token_bytes == pytest.approx(MEMORY[1], rel=1e-9)
    assert mem.compute_peak_bytes.intercept_bytes == pytest.approx(MEMORY[0], rel=1e-9)
    assert mem.ddp_peak_bytes.value == pytest.approx(MEMORY[0] + MEMORY[1] * 8 * SEQ + MEMORY[2])
    assert mem.peak_bytes_at(2 * SEQ) == pytest.approx(MEMORY[0] + MEMORY[1] * 2 * SEQ + MEMORY[2])
    assert c.noise.sigma == pytest.approx(SIGMA, rel=0.25)


def test_h100_cluster_takes_the_h200s_compute_memory_and_jitter(h200, ddplab):
    path, c = h200
    code, out, err = ddplab("simulate", "h100-1024", "--calib", str(path), "--json", "--ranks", "64", "--steps", "5")
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "device" and "NVIDIA H200, 1 GPU" in s["calibration"]["why"]
    p = _params(s)
    tokens = 8 * SEQ
    fit = c.compute.step_s
    assert p["compute.step_compute_s"]["value"] == pytest.approx(fit.at(tokens)[0])  # measured at this size
    assert p["compute.optimizer_s"]["value"] == pytest.approx(OPTIMIZER_S)  # same model: as measured
    peak = (MEMORY[0] + MEMORY[1] * tokens + MEMORY[2]) / GIB
    assert p["compute.memory_peak_gib"]["value"] == pytest.approx(peak)
    assert s["memory_gib"]["measured_peak_allocated_gib"] == pytest.approx(peak)
    for key in ("compute.step_compute_s", "compute.optimizer_s", "compute.memory_peak_gib", "noise.sigma"):
        assert p[key]["source"].startswith(f"measured on NVIDIA H200, 1 GPU: {path}"), key
    # The network is the preset's, and says so.
    assert p["network.nic_gbit_s"]["value"] == 400.0
    assert p["network.nic_gbit_s"]["source"].startswith("assumed: h100-1024.toml")
    assert s["compute_s"] == pytest.approx(p["compute.step_compute_s"]["value"], rel=0.01)


def test_a_tensor_parallel_job_says_what_the_calibration_set_and_takes_no_ddp_peak(h200, ddplab):
    """With tp > 1 the step runs sim/parallel3d.py: its output and JSON now name the calibration
    and each parameter's source, as a DDP run's do (they said nothing until 2026-12-08), and the
    measured peak of a DDP step, which holds what a TP stage does not, is not carried."""
    path, _ = h200
    argv = ["simulate", "h100-1024", "--calib", str(path), "--ranks", "64", "--steps", "3", "--set", "training.tp=2"]
    argv += ["--set", "compute.step_compute_s=none"]  # a fixed step time would replace the roofline TP needs
    code, out, err = ddplab(*argv, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "device" and s["layout"]["tp"] == 2
    p = _params(s)
    assert "compute.memory_peak_gib" not in p
    assert p["noise.sigma"]["source"].startswith(f"measured on NVIDIA H200, 1 GPU: {path}")
    code, text, _ = ddplab(*argv)
    assert code == 0 and f"  parameters       calibration {path} applied in mode 'device'" in text
    assert "public record" not in text  # the compute is the user's measurement, not the presets'


def test_a_smaller_micro_batch_moves_along_the_measured_slopes(h200, ddplab):
    path, c = h200
    code, out, err = ddplab(
        "simulate", "h100-1024", "--calib", str(path), "--json", "--ranks", "8", "--steps", "3",
        "--set", "training.micro_batch_size=2",
    )  # fmt: skip
    assert code == 0, err
    p = _params(json.loads(out))
    assert p["compute.memory_peak_gib"]["value"] * GIB == pytest.approx(MEMORY[0] + MEMORY[1] * 2 * SEQ + MEMORY[2])
    fit = c.compute.step_s
    assert p["compute.step_compute_s"]["value"] == pytest.approx(fit.intercept_s + fit.per_token_s * 2 * SEQ)


@pytest.mark.parametrize(
    "args,reason",
    [
        (("h100-1024", "--set", "training.precision=fp32"), "probed in bf16-amp, h100-1024 trains in fp32"),
        (("mi300x-1024",), "mi300x-1024 is a mi300x cluster"),
        (("homelab-1gbe",), "homelab-1gbe names no GPU class"),
    ],
)
def test_no_device_mode_falls_back_to_shape_and_says_why(h200, ddplab, args, reason):
    path, _ = h200
    code, out, err = ddplab("simulate", *args, "--calib", str(path), "--json", "--ranks", "8", "--steps", "3")
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "shape" and reason in s["calibration"]["why"]
    p = _params(s)
    assert "compute.memory_peak_gib" not in p
    assert p["noise.sigma"]["source"].startswith("measured on NVIDIA H200")


def test_another_gpu_is_refused_in_device_mode_and_a_gpu_probe_in_all_mode(tmp_path, ddplab):
    path = tmp_path / "calib.json"
    path.write_text(json.dumps(calibrate([gpu_probe(tmp_path / "4090", name="NVIDIA GeForce RTX 4090")]).to_json()))
    code, out, err = ddplab("simulate", "h100-1024", "--calib", str(path), "--calib-mode", "device", "--steps", "2")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert "--calib-mode device: probed on NVIDIA GeForce RTX 4090, 1 GPU (no preset's class)" in err
    code, out, err = ddplab("simulate", "h100-1024", "--calib", str(path), "--json", "--ranks", "8", "--steps", "2")
    assert code == 0 and json.loads(out)["calibration"]["mode"] == "shape"
    code, _, err = ddplab("simulate", "h100-1024", "--calib", str(path), "--calib-mode", "all", "--steps", "2")
    assert code == 2 and "--calib-mode all: the calibration measured no network" in err


def test_calibrate_prints_the_device_and_writes_no_collective_plot(tmp_path, ddplab):
    run = gpu_probe(tmp_path / "h200")
    code, out, err = ddplab("calibrate", str(run), "-o", str(tmp_path / "calib.json"))
    assert code == 0, err
    assert "NVIDIA H200, 1 GPU, nccl, bf16-amp; GPU class h100" in out
    assert "networks  none measured" in out
    assert "memory    DDP step peak" in out
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["calib-compute.png", "calib-noise.png", "calib-ranks.png"]


def test_a_gpus_jitter_carries_to_another_gpu_cluster(h200, ddplab):
    """Shape mode (an H200 probe, an MI300X cluster): bandwidths and FLOP/s stay the preset's,
    the measured GPU's jitter transfers; a CPU's would not (tests/test_calibration_apply.py)."""
    path, _ = h200
    code, out, err = ddplab("simulate", "mi300x-1024", "--calib", str(path), "--json", "--steps", "3", "--ranks", "8")
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "shape" and "jitter stays" not in s["calibration"]["why"]
    p = {q["key"]: q for q in s["parameters"]}
    assert p["noise.sigma"]["source"].startswith("measured on NVIDIA H200")
    assert p["compute.peak_tflop_s"]["source"].startswith("assumed")
