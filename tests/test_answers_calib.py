"""Issue 22, rows 8-10 and items 4 (calibration) and 9: nothing carried from another machine
by accident, a calibration loop that never dead-ends, and your own GPUs at home.

Row 8: `simulate my-cluster.toml --calib calib.json` with a CPU calibration added the CPU's gloo
interference to H100s; now shape mode leaves it (and gloo's stack efficiency) out and says so.
Row 9: `calibrate` on a noisy box wrote normal jitter sigma 0.289, which simulate and validate
refuse; now it fits the next family, and an old file is refused naming the file and the fix.
Row 10: `train`/`probe`/`launch` default to gloo and CPU compute; now `--backend auto` and a
per-rank compute device (realrun/devices.py), and the sbatch uses the GPUs it asks for.
"""

import dataclasses
import json

import pytest
from conftest import ROOT, in_process
from fake_runs import probe_run

from calibrate.admit import check_admitted
from calibrate.calib import calibrate
from calibrate.calibration import AffineFit, Calibration

MY_CLUSTER = str(ROOT / "scenarios" / "examples" / "my-cluster.toml")


def _write(path, calib: Calibration):
    path.write_text(json.dumps(calib.to_json()))
    return path


@pytest.fixture(scope="module")
def cpu_calib(tmp_path_factory):
    """A CPU calibration of the emulated lab: gamma 0.62 (the README's 3-network mean), 1 Gbit/s."""
    d = tmp_path_factory.mktemp("cpu")
    calib = calibrate([probe_run(d / "1gbit" / "probe", gamma=0.62)], seed=0)
    return _write(d / "calib.json", calib), calib


# ---------------------------------------------------------------------------------------------
# Row 8: shape mode carries no CPU interference (nor gloo's stack efficiency) to H100s


def test_row8_cpu_calibration_leaves_an_h100_clusters_compute_alone(cpu_calib, capsys):
    path, calib = cpu_calib
    assert calib.networks["1gbit"].interference_gamma.value == pytest.approx(0.62, abs=0.02)
    argv = ("simulate", MY_CLUSTER, "--steps", "5", "--ranks", "64", "--json")
    code, out, err = in_process(capsys, *argv)
    assert code == 0, err
    plain = json.loads(out)
    code, out, err = in_process(capsys, *argv, "--calib", str(path))
    assert code == 0, err
    cal = json.loads(out)
    assert cal["calibration"]["mode"] == "shape"
    # Before, compute grew by gamma x the share overlapped with collectives (0.209 s against 0.178 s
    # at 512 ranks with measurements/validation/calib.json). Now it is the uncalibrated run's.
    assert cal["compute_s"] == pytest.approx(plain["compute_s"], rel=1e-9)
    assert cal["step_time_s"]["mean"] == pytest.approx(plain["step_time_s"]["mean"], rel=1e-9)
    params = {p["key"]: p for p in cal["parameters"]}
    assert params["compute.interference_gamma"]["value"] == 0.0
    assert params["network.nic_efficiency"]["value"] == 0.94
    held = {w["key"]: w for w in cal["calibration"]["withheld"]}
    assert held["compute.interference_gamma"]["value"] == pytest.approx(
        calib.networks["1gbit"].interference_gamma.value
    )
    assert held["compute.interference_gamma"]["reason"] == (
        "gloo's TCP work competed with compute for a CPU's cores: my-cluster's h100 GPUs compute apart"
    )
    assert held["network.nic_efficiency"]["reason"] == "gloo's stack measured, my-cluster runs nccl"
    for key in ("noise.distribution", "noise.sigma", "network.nic_gbit_s", "compute.mfu", "compute.optimizer_s"):
        assert key in held, key
    # The table printed for people: one line per value left out, with its value and reason.
    code, out, err = in_process(capsys, "simulate", MY_CLUSTER, "--steps", "5", "--ranks", "64", "--calib", str(path))
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index("  not carried      measured, left at the scenario's value, and why:")
    shown = lines[start + 1 :]
    assert len(shown) == len(held)
    gamma = next(line for line in shown if line.split()[0] == "compute.interference_gamma")
    assert gamma.split()[1] == f"{held['compute.interference_gamma']['value']:.4g}"
    assert gamma.endswith(held["compute.interference_gamma"]["reason"])


def test_gpu_calibration_over_the_same_backend_still_carries_gamma(tmp_path, capsys):
    """The rule is the mechanism, not a blanket: a GPU probe under NCCL (H200s, 2 ranks) carries
    its measured gamma and stack efficiency to an MI300X cluster, also under NCCL (shape mode)."""
    from fake_runs import H200

    run = probe_run(tmp_path / "h200", gpu=H200, precision="bf16-amp", gamma=0.05, rate=None)
    path = _write(tmp_path / "calib.json", calibrate([run]))
    code, out, err = in_process(
        capsys, "simulate", "mi300x-1024", "--calib", str(path), "--ranks", "8", "--steps", "3", "--json"
    )
    assert code == 0, err
    s = json.loads(out)
    assert s["calibration"]["mode"] == "shape"
    params = {p["key"]: p for p in s["parameters"]}
    assert params["compute.interference_gamma"]["value"] == pytest.approx(0.05, abs=0.01)
    assert params["compute.interference_gamma"]["source"].startswith("measured on NVIDIA H200")
    held = {w["key"] for w in s["calibration"]["withheld"]}
    assert "compute.interference_gamma" not in held and "noise.sigma" not in held
    # The public record judges the presets' compute; a calibration's is the user's measurement.
    assert "record" not in s


# ---------------------------------------------------------------------------------------------
# Row 9: a noisy box; calibrate never writes what simulate/validate refuse


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """Probe runs of a noisy box: compute jitter a normal with sd 0.289 (|x|, so times stay
    positive), where normal is the best fit by AIC: the file calibrate used to write."""
    d = tmp_path_factory.mktemp("noisy")
    return d, probe_run(d / "1gbit" / "probe", sigma=0.289, jitter="normal", iters=60)


def test_row9_noisy_box_calibrates_to_a_family_simulate_takes(noisy, capsys):
    d, run = noisy
    out_path = d / "calib.json"
    code, out, err = in_process(capsys, "calibrate", str(run), "-o", str(out_path))
    assert code == 0, err
    calib = Calibration.read(out_path)
    nz = calib.noise
    best = nz.candidates[0]
    assert best.distribution == "normal" and best.sigma > 0.25  # what used to be written
    assert nz.distribution in ("gamma", "lognormal", "empirical")
    assert nz.chosen_because.startswith(f"normal sigma {best.sigma:.3g} > 0.25 (the simulator refuses it")
    if nz.distribution != "empirical":  # the next by AIC, and its own sigma (not normal's)
        assert nz.distribution == nz.candidates[1].distribution and nz.sigma == nz.candidates[1].sigma
    # calibrate says so, where it prints the jitter line
    jitter = next(line for line in out.splitlines() if line.startswith("jitter"))
    assert nz.chosen_because in jitter and "the simulator gets" in jitter
    # simulate takes it, on the measured machines (mode all: the jitter itself is applied)
    code, out, err = in_process(capsys, "simulate", "homelab-1gbe", "--calib", str(out_path), "--steps", "5", "--json")
    assert code == 0, err
    s = json.loads(out)
    params = {p["key"]: p for p in s["parameters"]}
    assert s["calibration"]["mode"] == "all" and params["noise.distribution"]["value"] == nz.distribution
    assert nz.chosen_because in params["noise.distribution"]["source"]


def test_row9_an_old_file_is_refused_naming_the_file_and_a_fix_that_works(noisy, capsys):
    d, run = noisy
    path = d / "written.json"
    code, _, err = in_process(capsys, "calibrate", str(run), "-o", str(path))
    assert code == 0, err
    old = json.loads(path.read_text())
    old["noise"] |= {"distribution": "normal", "sigma": 0.289}  # as calibrate wrote it before
    old["command"] = ""  # a hand-made file: no command to repeat
    stale = d / "stale.json"
    stale.write_text(json.dumps(old))
    argv = ("simulate", "homelab-1gbe", "--calib", str(stale), "--steps", "5", "--json")
    code, out, err = in_process(capsys, *argv)
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert f"{stale}: noise.sigma: normal noise needs sigma <= 0.25, got 0.289;" in err
    assert "rerun `ddplab calibrate` on its probe runs" in err and "--set noise.distribution=lognormal" in err
    # Fix 1, as the line says: the same spread as a lognormal
    code, out, err = in_process(capsys, *argv, "--set", "noise.distribution=lognormal")
    assert code == 0, err
    assert json.loads(out)["step_time_s"]["mean"] > 0
    # Fix 2: the file names its own calibrate command; rerunning it writes a file simulate takes
    old["command"] = f"ddplab calibrate {run} -o {path}"
    stale.write_text(json.dumps(old))
    code, _, err = in_process(capsys, *argv)
    assert code == 2 and f"rerun `ddplab calibrate {run} -o {path}`" in err
    rerun = old["command"].split()[1:]
    assert in_process(capsys, *rerun)[0] == 0
    code, out, err = in_process(capsys, "simulate", "homelab-1gbe", "--calib", str(path), "--steps", "5", "--json")
    assert code == 0, err


def test_validate_names_the_file_and_the_fix_too(noisy):
    from calibrate.records import read_run
    from calibrate.validate import scenario_for

    d, run = noisy
    calib = calibrate([run])
    # As calibrate wrote it before 2026-12: no per-size multipliers, so the pooled fit applies.
    noise = dataclasses.replace(calib.noise, distribution="normal", sigma=0.289, multipliers_by_micro_batch=None)
    stale = dataclasses.replace(calib, noise=noise)
    train = read_run(run)  # validate reads a train run's config; the probe's meta serves here
    train.config.update({"model": "gpt2-tiny", "micro_batch": 2})
    with pytest.raises(ValueError) as e:
        scenario_for(train, stale, "runs/x/calib.json", seed=0)
    assert str(e.value).startswith("runs/x/calib.json: noise.sigma: normal noise needs sigma <= 0.25, got 0.289;")
    assert "--set" not in str(e.value)  # validate takes no --set: the fix offered is the rerun


def test_calibrate_checks_every_value_it_writes_against_the_simulator(cpu_calib):
    """Any other value that would dead-end (here a backward fit longer than the whole step,
    backward_fraction >= 1) is refused by calibrate in one line, before a file is written."""
    _, calib = cpu_calib
    check_admitted(calib, "calib.json")  # the real one passes
    step = calib.compute.step_s
    slow_backward = AffineFit(step.intercept_s * 2, step.per_token_s * 2, step.r2, [(t, 2 * s) for t, s in step.points])
    bad = dataclasses.replace(calib, compute=dataclasses.replace(calib.compute, backward_s=slow_backward))
    with pytest.raises(ValueError, match=r"^out/calib.json: the calibration would be refused by simulate and validate:"
                       r" compute.backward_fraction: must be in \(0, 1\), got 2"):  # fmt: skip
        check_admitted(bad, "out/calib.json")


# ---------------------------------------------------------------------------------------------
# Row 10: your own GPUs at home (realrun/device_choice.py); no GPU here, so torch's answers
# about CUDA and MPS are monkeypatched where the choice is made


@pytest.fixture
def machine(monkeypatch):
    """machine(cuda=N, mps=bool): this process sees N CUDA GPUs and MPS or not."""
    import torch

    def set_up(cuda: int = 0, mps: bool = False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return set_up


@pytest.mark.parametrize(
    "cuda,mps,local_rank,expected",
    [
        (2, False, 1, "cuda:1"),  # the RTX box, one rank per GPU
        (1, False, 1, "cuda:0"),  # more ranks than GPUs: shared round-robin (gloo only, below)
        (0, True, 0, "mps"),  # the M2 laptop
        (1, True, 0, "cuda:0"),  # CUDA first
        (0, False, 0, "cpu"),
    ],
)
def test_auto_device_is_cuda_then_mps_then_cpu(machine, cuda, mps, local_rank, expected):
    from realrun.device_choice import compute_device, cpu_while_gpu_warning

    machine(cuda=cuda, mps=mps)
    device = compute_device("auto", local_rank)
    assert str(device) == expected
    assert cpu_while_gpu_warning(device) is None


def test_asked_devices_and_the_cpu_warning(machine):
    from realrun.device_choice import compute_device, cpu_while_gpu_warning

    machine(cuda=1)
    cpu = compute_device("cpu", 0)
    assert str(cpu) == "cpu"
    assert cpu_while_gpu_warning(cpu) == (
        "warning: computing on the CPU although a CUDA GPU is here (--device cpu); --device auto uses it"
    )
    with pytest.raises(ValueError, match=r"^--device mps: Apple's MPS is not available here"):
        compute_device("mps", 0)
    machine(mps=True)
    assert "an MPS GPU" not in cpu_while_gpu_warning(cpu) and "a MPS GPU is here" in cpu_while_gpu_warning(cpu)
    with pytest.raises(ValueError, match=r"^--device cuda: CUDA is not available here"):
        compute_device("cuda", 0)


def test_backend_auto_is_nccl_only_when_every_rank_has_cuda(machine):
    import torch
    import torch.distributed as dist

    from realrun.device_choice import comm_device, local_backend
    from realrun.dist import agree_backend

    machine(cuda=2)
    cuda0, mps, cpu = torch.device("cuda", 0), torch.device("mps"), torch.device("cpu")
    assert local_backend("auto", cuda0, local_ranks=2) == "nccl"
    assert local_backend("auto", cuda0, local_ranks=3) == "gloo"  # NCCL refuses two ranks on one GPU
    assert local_backend("auto", mps, local_ranks=1) == "gloo"
    assert local_backend("gloo", cuda0, local_ranks=1) == "gloo"
    with pytest.raises(ValueError, match=r"^--backend nccl: needs CUDA tensors; this rank computes on mps"):
        local_backend("nccl", mps, local_ranks=1)

    def agree(can: list[str], asked: str = "auto") -> list[str]:
        store = dist.HashStore()  # one store, as torchrun's rendezvous gives every rank
        for rank, b in enumerate(can[1:], 1):  # the other ranks have posted already
            store.set(f"ddplab/backend/{rank}", b)
        return agree_backend(store, 0, len(can), can[0], asked=asked)

    assert agree(["nccl", "nccl"]) == "nccl"
    assert agree(["nccl", "gloo"]) == "gloo"  # the seed's home lab: RTX 4070 + M2
    with pytest.raises(ValueError, match=r"^--backend nccl: rank\(s\) 1, 3 cannot run NCCL"):
        agree(["nccl", "gloo", "nccl", "gloo"], asked="nccl")
    with pytest.raises(ValueError, match=r"^rank 1 could not start: --device cuda: CUDA is not available here"):
        agree(["gloo", "error: --device cuda: CUDA is not available here"])
    # The RTX rank reduces its CUDA gradients over gloo directly; the Mac's go through the CPU.
    assert comm_device("gloo", cuda0) == cuda0 and comm_device("gloo", mps) == cpu
    assert comm_device("nccl", cuda0) == cuda0 and comm_device("gloo", cpu) == cpu


@pytest.mark.parametrize("verb", ["train", "probe"])
def test_help_shows_backend_and_device_default_auto(verb, capsys):
    code, out, _ = in_process(capsys, verb, "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "--backend {auto,nccl,gloo}" in text and "--device {auto,cuda,mps,cpu}" in text
    backend = text[text.index("--backend {auto,nccl,gloo} auto:") :]
    assert backend[: backend.index("--device")].endswith("(default: auto) ")
    device = text[text.index("--device {auto,cuda,mps,cpu} where") :]
    assert "(default: auto)" in device[: device.index("--", 5)]


def test_real_two_rank_train_auto_resolves_to_gloo_on_cpu(tmp_path, capsys):
    """No GPU here: --backend auto (the default) agrees on gloo, every rank computes on the CPU,
    and the records say so, with what was asked."""
    import torch

    from realrun.records import read_run

    assert not torch.cuda.is_available()
    out = tmp_path / "run"
    code, stdout, err = in_process(
        capsys, "train", "--nproc", "2", "--out", str(out), "--model", "gpt2-tiny", "--seq-len", "32",
        "--micro-batch", "2", "--steps", "2", "--backend", "auto",
    )  # fmt: skip
    assert code == 0, err
    for r in read_run(out, "train"):
        m = r.meta
        assert (m["backend"], m["device"], m["comm_device"]) == ("gloo", "cpu", "cpu")
        assert (m["backend_requested"], m["device_requested"]) == ("auto", "auto")
        assert m["device_info"]["kind"] == "cpu"
        assert m["cpu_malloc"] == "glibc heap kept: no mmap, no trim (realrun/cpu_alloc.py)"
    assert stdout.startswith(f"train: 2 of 2 ranks, gpt2-tiny, 2 steps, backend gloo, compute on cpu: complete ({out})")
    assert "warning" not in err  # no GPU is left idle here


_STAGED = """
import json, os, sys, torch, torch.distributed as dist
from realrun import ddp_wrap
from realrun.dist import DistEnv
from realrun.hooks import staged_allreduce
from realrun.model import build
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
env = DistEnv(0, 1, 0, "gloo", torch.device("cpu"), torch.device("cpu"))
out = {}
for staged in (False, True):
    torch.manual_seed(0)
    model = build("gpt2-tiny")
    ddp = ddp_wrap.wrap(model, env, staged=staged, bucket_cap_mb=0.05)
    buckets = []
    def hook(state, bucket, buckets=buckets):
        buckets.append(bucket.index())
        return staged_allreduce((None, torch.float32), bucket)
    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    per_step = []
    for _ in range(3):
        x = torch.randint(0, 256, (2, 32), generator=g)
        _, per_seq = ddp(x, x)
        per_seq.mean().backward()
        opt.step(); opt.zero_grad()
        per_step.append(len(buckets)); buckets.clear()
    out[str(staged)] = {"buckets": per_step, "sum": float(sum(p.double().sum() for p in model.parameters()))}
print(json.dumps(out))
dist.destroy_process_group()
"""


def test_the_mps_path_trains_like_ddp_on_cpu_ranks():
    """realrun/ddp_wrap.py's path for MPS over gloo (no init sync, no bucket rebuild, every bucket
    through a CPU copy), forced on a CPU rank: the same weights after 3 steps as plain DDP; plain
    DDP rebuilds its buckets after step 0, the staged path keeps step 0's (it cannot broadcast
    the new order on MPS). On a Mac, docs/gpu.md says what to run."""
    import subprocess
    import sys

    from conftest import free_port

    p = subprocess.run(
        [sys.executable, "-c", _STAGED, str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    plain, staged = out["False"], out["True"]
    assert staged["sum"] == pytest.approx(plain["sum"], rel=1e-12)
    assert plain["buckets"][0] == 1 and plain["buckets"][1] > 1  # DDP's rebuild after step 0
    assert staged["buckets"] == [1, 1, 1]  # kept: no broadcast on the parameters' device


# ---------------------------------------------------------------------------------------------
# The sbatch: trains on the GPUs it asks for, and carries no stray text


def test_sbatch_uses_its_gpus_and_has_no_stray_text(tmp_path, capsys):
    job = tmp_path / "job.sbatch"
    code, _, err = in_process(
        capsys, "launch", "--nodes", "2", "--master", "192.168.1.10:29500", "--slurm", str(job),
        "--", "train", "--model", "gpt2-760m", "--out", "runs/home",
    )  # fmt: skip
    assert code == 0, err
    text = job.read_text()
    gpus = next(line for line in text.splitlines() if line.startswith("#SBATCH --gpus-per-node="))
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert gpus == "#SBATCH --gpus-per-node=1"
    assert srun.endswith("-m realrun train --model gpt2-760m --out runs/home --backend nccl --device cuda")
    # Before: "# Seed 2.4: ..." and "(seed 2.2: ...)", references to a document a user does not have.
    assert "seed" not in text.lower()
    # What the user chose stays: gloo on the GPUs, or CPU ranks on purpose.
    from realrun import nodes

    mine = nodes.slurm_script(1, 2, 29500, None, ["train", "--out", "r", "--backend=gloo"])
    assert mine.splitlines()[-1].endswith("train --out r --backend=gloo --device cuda")
    cpu = nodes.slurm_script(1, 2, 29500, None, ["train", "--out", "r", "--device", "cpu"])
    assert cpu.splitlines()[-1].endswith("train --out r --device cpu --backend nccl")
