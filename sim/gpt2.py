"""GPT-2 arithmetic without torch: parameter tensors, FLOPs, backward order.

The shapes come from ``scenarios/models.toml``; the tensor names and order follow
nanoGPT's ``model.py`` (the module realrun builds), so buckets computed here are
the buckets DDP builds there.
"""

from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from scenarios import load_models


@dataclass(frozen=True, kw_only=True)
class GPT2Shape:
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    block_size: int
    vocab_size: int

    def __post_init__(self):
        for field in ("n_layer", "n_embd", "n_head", "block_size", "vocab_size"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model {self.name}: {field} must be > 0, got {getattr(self, field)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"model {self.name}: n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")


class ParamTensor(NamedTuple):
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@cache  # one read of models.toml per preset and process; GPT2Shape is frozen
def model_shape(preset: str) -> GPT2Shape:
    models = load_models()
    if preset not in models:
        raise ValueError(f"model.preset: unknown preset {preset!r} (known: {', '.join(models)})")
    return GPT2Shape(name=preset, **models[preset])


def _block_tensors(i: int, d: int) -> list[ParamTensor]:
    # nn.Linear stores weight as (out_features, in_features).
    p = f"transformer.h.{i}."
    return [
        ParamTensor(p + "ln_1.weight", (d,)),
        ParamTensor(p + "ln_1.bias", (d,)),
        ParamTensor(p + "attn.c_attn.weight", (3 * d, d)),
        ParamTensor(p + "attn.c_attn.bias", (3 * d,)),
        ParamTensor(p + "attn.c_proj.weight", (d, d)),
        ParamTensor(p + "attn.c_proj.bias", (d,)),
        ParamTensor(p + "ln_2.weight", (d,)),
        ParamTensor(p + "ln_2.bias", (d,)),
        ParamTensor(p + "mlp.c_fc.weight", (4 * d, d)),
        ParamTensor(p + "mlp.c_fc.bias", (4 * d,)),
        ParamTensor(p + "mlp.c_proj.weight", (d, 4 * d)),
        ParamTensor(p + "mlp.c_proj.bias", (d,)),
    ]


def param_tensors(shape: GPT2Shape) -> list[ParamTensor]:
    """Parameters in ``model.parameters()`` order; lm_head is tied to wte, so absent."""
    d = shape.n_embd
    tensors = [
        ParamTensor("transformer.wte.weight", (shape.vocab_size, d)),
        ParamTensor("transformer.wpe.weight", (shape.block_size, d)),
    ]
    for i in range(shape.n_layer):
        tensors += _block_tensors(i, d)
    tensors += [
        ParamTensor("transformer.ln_f.weight", (d,)),
        ParamTensor("transformer.ln_f.bias", (d,)),
    ]
    return tensors


def param_count(shape: GPT2Shape) -> int:
    return sum(t.numel for t in param_tensors(shape))


def flops_per_token(shape: GPT2Shape, seq_len: int) -> float:
    """Training FLOPs per token, forward + backward: 6N + 12 L H Q T.

    nanoGPT ``estimate_mfu`` after PaLM (Chowdhery et al. 2022) appendix B; N counts
    every parameter here (760M at T=2048: 5.47 GFLOP/token, docs/references.md "Models").
    """
    n = param_count(shape)
    return 6.0 * n + 12.0 * shape.n_layer * shape.n_embd * seq_len


class BackwardOp(NamedTuple):
    """One step of the backward pass: its forward FLOPs per token (backward costs 2x,
    uniformly, so only the proportions matter) and the gradients it completes."""

    flops_per_token: float
    completes: tuple[str, ...]


def backward_ops(shape: GPT2Shape, seq_len: int) -> list[BackwardOp]:
    """The backward pass in execution order (output layer first).

    Matmul FLOPs are 2 x weight elements per token; attention adds 4 T d per layer
    (QK^T and AV); layer norms, biases, GELU and embedding lookups are ~0. The tied
    lm_head runs first but its gradient lands in wte, which completes only when the
    embedding lookup's backward adds its share at the very end.
    """
    d, v = shape.n_embd, shape.vocab_size
    ops = [
        BackwardOp(2.0 * v * d, ()),
        BackwardOp(0.0, ("transformer.ln_f.bias", "transformer.ln_f.weight")),
    ]
    for i in reversed(range(shape.n_layer)):
        p = f"transformer.h.{i}."
        ops += [
            BackwardOp(2.0 * 4 * d * d, (p + "mlp.c_proj.bias", p + "mlp.c_proj.weight")),
            BackwardOp(2.0 * 4 * d * d, (p + "mlp.c_fc.bias", p + "mlp.c_fc.weight")),
            BackwardOp(0.0, (p + "ln_2.bias", p + "ln_2.weight")),
            BackwardOp(2.0 * d * d, (p + "attn.c_proj.bias", p + "attn.c_proj.weight")),
            BackwardOp(4.0 * seq_len * d, ()),
            BackwardOp(2.0 * 3 * d * d, (p + "attn.c_attn.bias", p + "attn.c_attn.weight")),
            BackwardOp(0.0, (p + "ln_1.bias", p + "ln_1.weight")),
        ]
    ops.append(BackwardOp(0.0, ("transformer.wpe.weight", "transformer.wte.weight")))
    return ops


def gradient_ready_order(shape: GPT2Shape, seq_len: int) -> list[tuple[str, float]]:
    """Each parameter with the fraction of backward FLOPs done when its gradient is ready,
    in ready order. This is the order DDP rebuilds its buckets in after step 1."""
    ops = backward_ops(shape, seq_len)
    total = sum(op.flops_per_token for op in ops)
    done = 0.0
    order = []
    for op in ops:
        done += op.flops_per_token
        order += [(name, done / total) for name in op.completes]
    return order


class ComputeShares(NamedTuple):
    """Shares of a micro-step's forward (and, uniformly, backward) FLOPs, as sim/gpt2.py's
    ``backward_ops`` counts them: matmuls 2 x weight elements per token, attention 4 T d per
    layer, embedding lookups, layer norms and biases ~0."""

    embedding: float
    block: float  # each of the n_layer blocks
    head: float  # ln_f + the tied lm_head


def compute_shares(shape: GPT2Shape, seq_len: int) -> ComputeShares:
    d = shape.n_embd
    block = 2.0 * 12 * d * d + 4.0 * seq_len * d  # qkv 3d^2 + proj d^2 + fc 4d^2 + proj 4d^2; QK^T, AV
    head = 2.0 * shape.vocab_size * d
    total = shape.n_layer * block + head
    return ComputeShares(0.0, block / total, head / total)
