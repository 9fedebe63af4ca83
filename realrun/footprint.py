"""What a run needs from this machine (memory at least, its data file), checked before
torchrun starts.

Floors only: a run refused here could never have fitted, so no run that fits is
refused. sim/memory.py is the full estimate (realrun may not import sim); this
module needs only the model's shape from scenarios/models.toml. torch-free.
"""

from pathlib import Path

# Importing torch and torch.distributed alone took 218 MiB of max RSS on this project's
# 2-core CI box (CPU torch 2.13: `python -c "import resource, torch, torch.distributed;
# print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"`); 200 MiB is a floor for
# every rank process before it builds anything.
RANK_FLOOR_BYTES = 200 << 20
# Tensors a GPT-2 block saves for its backward, per token, in units of d_model: about 17
# (Korthikanti et al. 2022, "Reducing Activation Recomputation", 34 s b h bytes at 2
# bytes each, attention scores aside). Half of that is a floor whatever the kernels fuse.
SAVED_PER_TOKEN_LAYER_D = 8
ADAM_STATES = 2  # AdamW's two moments, in the parameters' dtype


def params_at_least(shape: dict) -> int:
    """A shape's weight matrices and embeddings (biases and norms left out): GPT-2's, or
    Llama's (layout = "llama": Q and O d x d, K and V d x kv, SwiGLU's three d x ffn_hidden,
    no position table, an output layer of its own unless tied). sim/transformer.py counts
    every tensor; tests/test_llama.py holds this below it."""
    d, layers, v = shape["n_embd"], shape["n_layer"], shape["vocab_size"]
    if shape.get("layout", "gpt2") == "gpt2":
        return 12 * layers * d * d + v * d + shape["block_size"] * d
    kv = d // shape["n_head"] * shape["n_kv_head"]
    block = 2 * d * d + 2 * d * kv + 3 * d * shape["ffn_hidden"]
    return layers * block + v * d * (1 if shape.get("tied_embeddings", False) else 2)


def rank_bytes_at_least(shape: dict, micro_batch: int, seq_len: int, precision: str) -> int:
    """One rank during a step: weights, gradients and AdamW state; the activations one
    micro-batch saves for its backward; its fp32 logits (cross-entropy runs in fp32)."""
    param_bytes = 2 if precision == "bf16" else 4  # AMP keeps fp32 weights
    act_bytes = 4 if precision in ("fp32", "tf32") else 2
    state = params_at_least(shape) * param_bytes * (2 + ADAM_STATES)
    tokens = micro_batch * seq_len
    saved = tokens * shape["n_layer"] * SAVED_PER_TOKEN_LAYER_D * shape["n_embd"] * act_bytes
    logits = tokens * shape["vocab_size"] * 4
    return state + saved + logits


MEMINFO = Path("/proc/meminfo")
# cgroup v2, then v1: a container's limit, which MemAvailable (the host's) does not show.
CGROUP_FILES = (
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"), Path("/sys/fs/cgroup/memory/memory.usage_in_bytes")),
)


def _meminfo_available(path: Path = MEMINFO) -> int | None:
    """MemAvailable in bytes: what the kernel can give without swapping."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom(files=CGROUP_FILES) -> int | None:
    """The cgroup's limit minus its usage; None when there is no limit (``max``, or v1's huge
    page-rounded 2^63) or no cgroup file to read."""
    for limit_path, usage_path in files:
        try:
            limit_text, usage = limit_path.read_text().strip(), int(usage_path.read_text())
        except (OSError, ValueError):
            continue
        if limit_text == "max" or int(limit_text) >= 1 << 60:
            return None
        return max(0, int(limit_text) - usage)
    return None


def available_bytes() -> int | None:
    """Memory this process may still take; None where it cannot be read (not Linux)."""
    known = [b for b in (_meminfo_available(), _cgroup_headroom()) if b is not None]
    return min(known) if known else None


def gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_host(nproc: int, per_rank_bytes: int, free_bytes: int | None, micro_batch: int) -> None:
    """ValueError naming the flag when ``nproc`` ranks of ``per_rank_bytes`` (beyond torch's own
    floor) cannot fit in ``free_bytes`` of host memory; ``None``: unknown, not checked."""
    if free_bytes is None:
        return
    each = RANK_FLOOR_BYTES + per_rank_bytes
    if nproc * each <= free_bytes:
        return
    flag, value = ("--nproc", nproc) if nproc * RANK_FLOOR_BYTES > free_bytes / 2 else ("--micro-batch", micro_batch)
    raise ValueError(
        f"{flag} {value}: {nproc} rank(s) need at least {gib(nproc * each)} ({gib(each)} each: torch itself,"
        f" the model's state and one micro-batch's activations), this machine has {gib(free_bytes)} free"
    )


def check_buffers(nproc: int, buffer_bytes: int, free_bytes: int | None, what: str) -> None:
    """ValueError naming ``what`` (``--sizes 64 GiB``) when ``nproc`` ranks each holding a
    ``buffer_bytes`` tensor beyond torch's floor cannot fit in ``free_bytes``: a probe's largest
    collective was allocated by every rank after torchrun had started (issue 25, D18)."""
    if free_bytes is None:
        return
    each = RANK_FLOOR_BYTES + buffer_bytes
    if nproc * each > free_bytes:
        raise ValueError(
            f"{what}: {nproc} rank(s) need at least {gib(nproc * each)} with torch itself;"
            f" this machine has {gib(free_bytes)} free"
        )


def check_device(per_rank_bytes: int, device_bytes: int, device: str, micro_batch: int) -> None:
    if per_rank_bytes > device_bytes:
        raise ValueError(
            f"--micro-batch {micro_batch}: a rank needs at least {gib(per_rank_bytes)} on the GPU (the model's"
            f" state and one micro-batch's activations), {device} has {gib(device_bytes)}"
        )


def check_data_file(path: Path, vocab_size: int, seq_len: int) -> None:
    """``--data``: a readable file of at least seq_len + 2 bytes, for a model whose vocabulary
    holds every byte (realrun/data.py reads one byte as one token)."""
    if vocab_size < 256:
        raise ValueError(f"--data: byte tokens need a vocabulary >= 256, the model has {vocab_size}")
    try:
        size = Path(path).stat().st_size
        if not Path(path).is_file():
            raise ValueError(f"--data {path}: not a file")
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ValueError(f"--data {path}: {e.strerror}") from None
    if size < seq_len + 2:
        raise ValueError(f"--data: {path} has {size} bytes, fewer than seq_len + 2")
