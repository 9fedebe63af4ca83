"""--precision and --compile: the dtype table, the checks made before any process starts
(GPUs simulated by replacing torch.cuda's queries: CI has none), device facts and the CLI."""

import os
import types

import pytest
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach

from realrun import cli, device, precision
from realrun.model import build
from realrun.precision import PRECISIONS, TABLE, preflight, resolve
from realrun.recipe import Recipe
from realrun.records import one_line
from sim.transformer import model_shape, param_tensors

CPU = torch.device("cpu")
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16

# name: (param_dtype, autocast_dtype, grad_dtype, grad_scaler, tf32)
EXPECTED = {
    "fp32": (F32, None, F32, False, False),
    "tf32": (F32, None, F32, False, True),
    "bf16-amp": (F32, BF16, F32, False, False),
    "bf16": (BF16, None, BF16, False, False),
    "fp16-amp": (F32, F16, F32, True, False),
}


def test_cli_choices_are_the_precisions():
    # realrun/cli.py repeats the names to stay torch-free; they must not drift apart.
    assert cli.PRECISIONS == ("auto", *PRECISIONS)
    assert set(EXPECTED) == set(PRECISIONS) == set(TABLE)


@pytest.mark.parametrize("name", PRECISIONS)
def test_precision_table(name):
    p = resolve(name, CPU)
    assert p.name == name
    assert (p.param_dtype, p.autocast_dtype, p.grad_dtype, p.grad_scaler, p.tf32) == EXPECTED[name]
    names = {F32: "float32", BF16: "bfloat16", F16: "float16", None: None}
    assert p.describe() == {
        "name": name,
        "param_dtype": names[EXPECTED[name][0]],
        "autocast_dtype": names[EXPECTED[name][1]],
        "grad_dtype": names[EXPECTED[name][2]],
        "grad_scaler": EXPECTED[name][3],
        "tf32": EXPECTED[name][4],
    }


@pytest.mark.parametrize("name", PRECISIONS)
def test_autocast_scaler_and_model_dtypes_on_cpu(name):
    p = resolve(name, CPU)
    recipe = Recipe(p, compile=False, device=CPU)
    model = recipe.prepare(build("gpt2-tiny"))
    assert {q.dtype for q in model.parameters()} == {p.param_dtype}
    x = torch.randint(0, model.cfg.vocab_size, (2, 16))
    with p.autocast(CPU):
        logits, per_seq = model(x, x)
    assert logits.dtype == (p.autocast_dtype or p.param_dtype)
    per_seq.mean().backward()
    assert {q.grad.dtype for q in model.parameters()} == {p.grad_dtype}
    scaler = p.make_scaler(CPU)
    assert (scaler is not None) == p.grad_scaler
    if scaler is not None:
        assert scaler.get_scale() == 2.0**16  # torch.amp.GradScaler's init_scale


def test_matmul_precision_is_set_both_ways():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        TABLE["tf32"].apply_matmul_precision()
        assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == ("high", True)
        TABLE["bf16-amp"].apply_matmul_precision()
        assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == ("highest", False)
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def test_auto_is_fp32_on_cpu():
    assert resolve("auto", CPU) is TABLE["fp32"]
    assert preflight("gloo", "auto", False) == "fp32"
    assert preflight("gloo", "fp16-amp", False) == "fp16-amp"  # CPU autocast has float16


def test_preflight_errors_name_the_flag():
    with pytest.raises(ValueError, match=r"^--precision tf32: TF32 is a tensor-core mode .* \(use fp32 or bf16-amp\)$"):
        preflight("gloo", "tf32", False)
    with pytest.raises(ValueError, match=r"^--compile with --straggler 1:1\.5: .*throttle"):
        preflight("gloo", "fp32", True, [(1, 1.5)])
    with pytest.raises(ValueError, match=r"^--precision: unknown 'fp8'"):
        preflight("gloo", "fp8", False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_cuda_fails_here_but_not_for_other_machines():
    with pytest.raises(ValueError, match=r"^--backend nccl: needs CUDA tensors; this rank computes on cpu"):
        preflight("nccl", "auto", False)
    # `ddplab launch` prints commands for other machines: their workers check their own GPUs.
    assert preflight("nccl", "auto", False, this_machine=False) == "auto"
    assert preflight("nccl", "bf16", True, this_machine=False) == "bf16"
    with pytest.raises(ValueError, match="^--precision tf32"):  # hardware-free: still checked
        preflight("gloo", "tf32", False, this_machine=False, device="cpu")
    # gloo no longer means CPU (issue 22): a node's rank may compute on its GPU over gloo
    assert preflight("gloo", "tf32", False, this_machine=False) == "tf32"


def fake_gpu(monkeypatch, *, name: str, cc: tuple[int, int], hip: str | None = None, arch: str = "", triton=True):
    """torch.cuda's answers for one GPU, as a CUDA (or ROCm) build would give them."""
    props = types.SimpleNamespace(
        name=name, total_memory=141 << 30, multi_processor_count=132, major=cc[0], minor=cc[1], gcnArchName=arch
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(precision, "_has_triton", lambda: triton)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def test_preflight_on_a_gpu_without_bf16(monkeypatch):
    fake_gpu(monkeypatch, name="Tesla T4", cc=(7, 5))
    assert preflight("nccl", "auto", False) == "fp32"
    assert preflight("nccl", "fp16-amp", False) == "fp16-amp"
    for name in ("bf16", "bf16-amp"):
        with pytest.raises(ValueError) as e:
            preflight("nccl", name, False)
        assert str(e.value) == (
            f"--precision {name}: Tesla T4 (compute capability 7.5) has no native bfloat16 (use fp16-amp or fp32)"
        )
    with pytest.raises(ValueError, match=r"^--precision tf32: Tesla T4 \(compute capability 7\.5\) has no TF32"):
        preflight("nccl", "tf32", False)


def test_preflight_on_hopper_and_rocm(monkeypatch):
    fake_gpu(monkeypatch, name="NVIDIA H200", cc=(9, 0))
    assert [preflight("nccl", p, False) for p in ("auto", "tf32", "bf16")] == ["bf16-amp", "tf32", "bf16"]
    assert resolve("auto", torch.device("cuda", 0)) is TABLE["bf16-amp"]
    monkeypatch.setattr(precision, "_has_triton", lambda: False)
    with pytest.raises(ValueError, match=r"^--compile: torch.compile generates Triton kernels"):
        preflight("nccl", "auto", True)
    # MI250X (CDNA2) has bf16 but no TF32; torch reports compute capability 9.0 for it too.
    fake_gpu(monkeypatch, name="AMD Instinct MI250X", cc=(9, 0), hip="6.2", arch="gfx90a:sramecc+:xnack-")
    assert preflight("nccl", "auto", False) == "bf16-amp"
    with pytest.raises(ValueError, match="^--precision tf32: AMD Instinct MI250X"):
        preflight("nccl", "tf32", False)
    fake_gpu(monkeypatch, name="AMD Instinct MI300X", cc=(9, 4), hip="6.2", arch="gfx942:sramecc+:xnack-")
    assert preflight("nccl", "tf32", False) == "tf32"


def test_compile_on_cpu_needs_a_cpp_compiler(monkeypatch):
    from torch._inductor import config

    monkeypatch.setattr(config.cpp, "cxx", (None, "/nonexistent/g++"))
    monkeypatch.delenv("TORCHINDUCTOR_INSTALL_GXX", raising=False)
    with pytest.raises(
        ValueError, match=r"^--compile: torch.compile on CPU needs a C\+\+ compiler.*/nonexistent/g\+\+"
    ):
        preflight("gloo", "fp32", True)


def test_device_info_and_memory_on_cpu():
    info = device.device_info(CPU)
    assert info["kind"] == "cpu" and info["capability"] is None and info["bf16"] is True
    assert info["multiprocessors"] == os.cpu_count()
    assert info["memory_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert isinstance(info["name"], str) and info["name"]
    device.reset_peak(CPU)
    assert device.peak_memory(CPU) == {"peak_allocated_bytes": None, "peak_reserved_bytes": None}


def test_device_info_on_gpus(monkeypatch):
    fake_gpu(monkeypatch, name="NVIDIA H200", cc=(9, 0))
    gpu = torch.device("cuda", 0)
    expected = {
        "kind": "cuda",
        "name": "NVIDIA H200",
        "memory_bytes": 141 << 30,
        "multiprocessors": 132,
        "capability": "9.0",
        "bf16": True,
    }
    assert device.device_info(gpu) == expected
    fake_gpu(monkeypatch, name="Tesla V100", cc=(7, 0))
    assert device.device_info(gpu)["bf16"] is False
    fake_gpu(monkeypatch, name="AMD Instinct MI300X", cc=(9, 4), hip="6.2", arch="gfx942")
    assert device.device_info(gpu) | {"name": "x"} == expected | {"kind": "rocm", "name": "x", "capability": "9.4"}


def test_recipe_on_cpu_keeps_names_and_uses_torchs_default_adamw():
    recipe = Recipe(TABLE["bf16"], compile=True, device=CPU)
    model = recipe.prepare(build("gpt2-tiny"))  # compiles lazily, at the first call
    # nn.Module.compile() is in place: realrun/model.py's names, no "_orig_mod." prefix.
    assert [n for n, _ in model.named_parameters()] == [t.name for t in param_tensors(model_shape("gpt2-tiny"))]
    params = list(model.parameters())
    assert recipe.optimizer_name == "adamw-for-loop"
    opt = recipe.optimizer(params, 1e-3)
    assert opt.defaults["fused"] is None and opt.defaults["foreach"] is None
    # What torch picks then on CPU: neither fused nor foreach (torch/optim/optimizer.py).
    assert _default_to_fused_or_foreach(params, False, False) == (False, False)
    meta = recipe.meta()
    assert meta["precision"]["name"] == "bf16" and meta["compile"] is True and meta["device_info"]["kind"] == "cpu"
    assert Recipe(TABLE["fp32"], False, torch.device("cuda", 0)).optimizer_name == "adamw-fused"


def test_compile_error_keeps_the_compilers_words_on_one_line():
    class InductorError(RuntimeError):
        pass

    err = InductorError(
        "CppCompileError: C++ compile error\n\nCommand:\ng++ a.cpp -o a.so\n\nOutput:\n"
        "a.cpp:1: error: expected ';'\n\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace"
    )
    assert one_line(err) == "InductorError: CppCompileError: C++ compile error (a.cpp:1: error: expected ';')"


def test_nccl_nproc_above_the_gpu_count_fails_before_the_run_directory(monkeypatch, tmp_path):
    from ddplab.cli import build_parser
    from realrun.local import launch_local

    fake_gpu(monkeypatch, name="NVIDIA H200", cc=(9, 0))
    out = tmp_path / "run"
    argv = ["train", "--nproc", "2", "--backend", "nccl", "--out", str(out)]
    args = build_parser().parse_args(argv)
    args.argv = argv
    with pytest.raises(ValueError) as e:
        launch_local("train", args)
    assert str(e.value) == "--nproc 2: this machine has 1 GPU(s); NCCL runs one rank per GPU (use --nproc 1)"
    assert not out.exists()


@pytest.mark.parametrize(
    "verb, args, words",
    [
        ("train", ["--precision", "tf32"], ["--precision tf32"]),
        ("probe", ["--precision", "tf32"], ["--precision tf32"]),
        ("train", ["--compile", "--straggler", "0:1.5"], ["--compile", "--straggler 0:1.5"]),
        ("train", ["--compile", "--bucket-cap-mb", "0.05"], ["--bucket-cap-mb 0.05", "--compile"]),
        ("probe", ["--compile", "--bucket-cap-mb", "0.05"], ["--bucket-cap-mb 0.05", "--compile"]),
    ],
)
def test_bad_combinations_fail_in_one_line_before_anything_starts(ddplab, tmp_path, verb, args, words):
    out = tmp_path / "run"
    code, stdout, stderr = ddplab(verb, "--nproc", "1", "--out", str(out), *args)
    assert code == 2 and stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ddplab {verb}: error: "), stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert not out.exists()


def test_help_describes_every_option():
    for make in cli.PARSERS.values():
        for action in make()._actions:
            assert action.help, f"{make.__name__}: {action.option_strings} has no help"
