"""Which device a rank computes on (``--device``) and which backend its group runs (``--backend``).

The two are chosen apart (issue 22): the seed's home lab, an RTX 4070 box and an Apple M2
over 1GbE, cannot run NCCL (the Mac has no CUDA), yet both machines should compute on
their GPUs, over gloo.

- Compute device, per rank, ``--device auto``: CUDA (``cuda:LOCAL_RANK``, shared round-robin
  when there are more ranks than GPUs), then Apple's MPS, then the CPU. A rank that computes
  on the CPU while a GPU is present says so in one line.
- Backend, ``--backend auto``: NCCL when every rank has CUDA, gloo otherwise. One rank cannot
  know the others' devices before the group exists, so each rank posts whether it has a CUDA
  device to the rendezvous store torchrun already runs, reads everyone's, and all of them
  take the same answer (realrun/dist.py ``agree_backend``). NCCL also needs one GPU per rank
  on a machine (it refuses two ranks on one device), which each rank checks for itself.
- Where gradients are reduced: on the compute device, except MPS tensors over gloo, which
  torch's gloo cannot take (torch 2.13: ``Backend.backend_capability["gloo"]`` is cpu and
  cuda; pytorch/pytorch#160732 asks for mps and is open): they go through the CPU.

torch is imported inside the functions, so that the launcher's import stays torch-free.
"""

DEVICES = ("auto", "cuda", "mps", "cpu")
BACKENDS = ("auto", "nccl", "gloo")


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def has_mps() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def compute_device(choice: str, local_rank: int):
    """The torch.device this rank computes on; a ValueError naming --device when the asked
    device is absent."""
    import torch

    if choice not in DEVICES:
        raise ValueError(f"--device: one of {', '.join(DEVICES)}, got {choice!r}")
    if choice == "cuda" or (choice == "auto" and has_cuda()):
        if not has_cuda():
            raise ValueError("--device cuda: CUDA is not available here (--device auto picks what is)")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if choice == "mps" or (choice == "auto" and has_mps()):
        if not has_mps():
            raise ValueError("--device mps: Apple's MPS is not available here (--device auto picks what is)")
        return torch.device("mps")
    return torch.device("cpu")


def cpu_while_gpu_warning(device) -> str | None:
    """One line when a rank computes on the CPU although this machine has a GPU; else None."""
    if device.type != "cpu":
        return None
    gpu = "CUDA" if has_cuda() else "MPS" if has_mps() else None
    if gpu is None:
        return None
    return f"warning: computing on the CPU although a {gpu} GPU is here (--device cpu); --device auto uses it"


def local_backend(choice: str, device, local_ranks: int) -> str:
    """What this rank can run: nccl asked or auto with a CUDA device and a GPU per local rank;
    gloo otherwise. --backend nccl without CUDA is a ValueError."""
    import torch

    if choice not in BACKENDS:
        raise ValueError(f"--backend: one of {', '.join(BACKENDS)}, got {choice!r}")
    if choice == "gloo":
        return "gloo"
    if device.type != "cuda":
        if choice == "nccl":
            raise ValueError(f"--backend nccl: needs CUDA tensors; this rank computes on {device.type}")
        return "gloo"
    gpus = torch.cuda.device_count()
    if local_ranks > gpus:  # NCCL refuses two ranks on one GPU
        if choice == "nccl":
            raise ValueError(f"--backend nccl: {local_ranks} ranks on this machine, {gpus} GPU(s); NCCL needs one each")
        return "gloo"
    return "nccl"


def comm_device(backend: str, device):
    """Where a collective's tensors must live: the compute device, or the CPU for MPS over gloo."""
    import torch

    return torch.device("cpu") if backend == "gloo" and device.type == "mps" else device
