"""Transformer arithmetic without torch: parameter tensors, FLOPs, backward order, for the
two layouts of ``scenarios/models.toml``.

gpt2 (the default): GPT-2 as nanoGPT builds it: learned position embeddings, LayerNorm with
    a bias, biased linears, a GELU MLP of 4 d, lm_head tied to wte.
llama: Llama (Touvron et al. 2023; Llama 3: Grattafiori et al. 2024): rotary positions (no
    table), RMSNorm (a weight, no bias), no biases, a SwiGLU MLP of ``ffn_hidden``
    (Shazeer 2020), grouped-query attention with ``n_kv_head`` key/value heads (Ainslie et
    al. 2023) and, unless ``tied_embeddings``, an output layer of its own. ``qkv_bias``
    adds Qwen2's bias on Q, K and V (sim only: realrun builds models.toml's presets, which
    set none; a scenario's own shape comes through sim/model_source.py).

The tensor names and order follow realrun/model.py (the module realrun builds), so buckets
computed here are the buckets DDP builds there. That module fuses what Meta's reference keeps
apart: Q, K and V in one ``c_attn`` (d + 2 kv_dim outputs), SwiGLU's gate and up projections in
one ``c_fc`` (2 ffn_hidden outputs). Parameters and FLOPs are the same; DDP sees four matrices
per block instead of seven, so its buckets are fewer and larger than torchtitan's.
"""

from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from scenarios import load_models

LAYOUTS = ("gpt2", "llama")


@dataclass(frozen=True, kw_only=True)
class TransformerShape:
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    block_size: int
    vocab_size: int
    layout: str = "gpt2"
    n_kv_head: int | None = None  # llama: key/value heads (grouped-query attention); gpt2: n_head
    ffn_hidden: int | None = None  # llama: SwiGLU's hidden size; gpt2: 4 n_embd
    tied_embeddings: bool | None = None  # unset: gpt2 tied, llama untied
    rope_theta: float | None = None  # llama: RoPE's base (realrun reads it; no arithmetic here)
    qkv_bias: bool | None = None  # llama: a bias on Q, K and V (Qwen2's; sim only); gpt2: always

    def _refuse(self, key: str, why: str) -> None:
        """One line naming the key (as a scenario's [model] table and models.toml spell it)."""
        raise ValueError(f"model.{key}: {why}, got {getattr(self, key)!r} (model {self.name})")

    def __post_init__(self):
        for key in ("n_layer", "n_embd", "n_head", "block_size", "vocab_size"):
            if getattr(self, key) <= 0:
                self._refuse(key, "must be > 0")
        if self.layout not in LAYOUTS:
            self._refuse("layout", f"must be one of {', '.join(LAYOUTS)}")
        if self.n_embd % self.n_head:
            self._refuse("n_head", f"must divide n_embd {self.n_embd} (the head size is n_embd / n_head)")
        if self.layout == "gpt2":
            # realrun's GPT-2 has none of these: a shape it cannot build is refused here too.
            for key in ("n_kv_head", "ffn_hidden", "rope_theta"):
                if getattr(self, key) is not None:
                    self._refuse(key, 'needs layout = "llama"')
            if self.tied_embeddings is False:
                self._refuse("tied_embeddings", "layout gpt2 ties lm_head to wte (false needs llama)")
            if self.qkv_bias is False:
                self._refuse("qkv_bias", "layout gpt2 biases every linear (false needs llama)")
            defaults = {
                "n_kv_head": self.n_head,
                "ffn_hidden": 4 * self.n_embd,
                "tied_embeddings": True,
                "qkv_bias": True,
            }
        else:
            for key in ("n_kv_head", "ffn_hidden"):
                if getattr(self, key) is None:
                    self._refuse(key, "layout llama needs it")
                if getattr(self, key) <= 0:
                    self._refuse(key, "must be > 0")
            if self.n_head % self.n_kv_head:
                self._refuse("n_kv_head", f"must divide n_head {self.n_head}")
            if (self.n_embd // self.n_head) % 2:
                self._refuse("n_head", "RoPE rotates pairs: the head size n_embd / n_head must be even")
            if self.rope_theta is not None and not self.rope_theta > 0:
                self._refuse("rope_theta", "must be > 0")
            # RoPE's base of Su et al. 2021 and Llama 1 and 2; Llama 3's 500,000 is set in models.toml.
            defaults = {"tied_embeddings": False, "rope_theta": 10000.0, "qkv_bias": False}
        for key, value in defaults.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)  # frozen: resolved once, here

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): n_kv_head x head_dim, = n_embd without grouped-query attention."""
        return self.n_kv_head * self.head_dim

    @property
    def qkv_dim(self) -> int:
        """c_attn's outputs: Q (n_embd), K and V (kv_dim each)."""
        return self.n_embd + 2 * self.kv_dim

    @property
    def swiglu(self) -> bool:
        return self.layout == "llama"

    @property
    def fc_dim(self) -> int:
        """c_fc's outputs: the MLP's hidden size, twice for SwiGLU (gate and up)."""
        return 2 * self.ffn_hidden if self.swiglu else self.ffn_hidden

    @property
    def biases(self) -> bool:
        """Linears and norms with a bias (GPT-2); Llama has none, its RMSNorm only a weight."""
        return self.layout == "gpt2"

    @property
    def learned_positions(self) -> bool:
        """A wpe table (GPT-2); Llama rotates Q and K instead (RoPE, Su et al. 2021)."""
        return self.layout == "gpt2"

    @property
    def norm_stats(self) -> int:
        """fp32 values a norm keeps per token for backward: LayerNorm's mean and inverse
        deviation; RMSNorm's inverse root mean square only."""
        return 2 if self.layout == "gpt2" else 1

    @property
    def block_matmul_numel(self) -> int:
        """Elements of one block's four weight matrices: 12 d^2 for GPT-2."""
        d = self.n_embd
        return d * self.qkv_dim + d * d + d * self.fc_dim + self.ffn_hidden * d

    @property
    def embedding_numel(self) -> int:
        return self.vocab_size * self.n_embd


GPT2Shape = TransformerShape  # the name every caller knew before the llama layout


class ParamTensor(NamedTuple):
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@cache  # one read of models.toml per preset and process; the shape is frozen
def model_shape(preset: str) -> TransformerShape:
    models = load_models()
    if preset not in models:
        raise ValueError(f"model.preset: unknown preset {preset!r} (known: {', '.join(models)})")
    return TransformerShape(name=preset, **models[preset])


def _linear(name: str, d_in: int, d_out: int, bias: bool) -> list[ParamTensor]:
    # nn.Linear stores weight as (out_features, in_features).
    weight = [ParamTensor(name + ".weight", (d_out, d_in))]
    return weight + [ParamTensor(name + ".bias", (d_out,))] if bias else weight


def _norm(name: str, d: int, bias: bool) -> list[ParamTensor]:
    weight = [ParamTensor(name + ".weight", (d,))]
    return weight + [ParamTensor(name + ".bias", (d,))] if bias else weight


def _block_tensors(i: int, shape: TransformerShape) -> list[ParamTensor]:
    p, d, b = f"transformer.h.{i}.", shape.n_embd, shape.biases
    return [
        *_norm(p + "ln_1", d, b),
        *_linear(p + "attn.c_attn", d, shape.qkv_dim, shape.qkv_bias),
        *_linear(p + "attn.c_proj", d, d, b),
        *_norm(p + "ln_2", d, b),
        *_linear(p + "mlp.c_fc", d, shape.fc_dim, b),
        *_linear(p + "mlp.c_proj", shape.ffn_hidden, d, b),
    ]


def param_tensors(shape: TransformerShape) -> list[ParamTensor]:
    """Parameters in ``model.parameters()`` order; a tied lm_head is wte, so absent."""
    d = shape.n_embd
    tensors = [ParamTensor("transformer.wte.weight", (shape.vocab_size, d))]
    if shape.learned_positions:
        tensors.append(ParamTensor("transformer.wpe.weight", (shape.block_size, d)))
    for i in range(shape.n_layer):
        tensors += _block_tensors(i, shape)
    tensors += _norm("transformer.ln_f", d, shape.biases)
    if not shape.tied_embeddings:
        tensors.append(ParamTensor("lm_head.weight", (shape.vocab_size, d)))
    return tensors


def param_count(shape: TransformerShape) -> int:
    return sum(t.numel for t in param_tensors(shape))


def flops_per_token(shape: TransformerShape, seq_len: int) -> float:
    """Training FLOPs per token, forward + backward: 6N + 12 L H Q T.

    nanoGPT ``estimate_mfu`` after PaLM (Chowdhery et al. 2022) appendix B; N counts every
    parameter of a tied model (760M at T=2048: 5.47 GFLOP/token, docs/references.md "Models").
    An untied input embedding is a lookup, no matmul, so it is left out of N, as torchtitan's
    ``get_nparams_and_flops`` does. H Q = n_head x head_dim = n_embd whatever n_kv_head is:
    grouped-query attention shares K and V between heads but every query head still scores
    every key (Ainslie et al. 2023); the smaller K/V projections are in N already.
    """
    n = param_count(shape) - (0 if shape.tied_embeddings else shape.embedding_numel)
    return 6.0 * n + 12.0 * shape.n_layer * shape.n_embd * seq_len


class BackwardOp(NamedTuple):
    """One step of the backward pass: its forward FLOPs per token (backward costs 2x,
    uniformly, so only the proportions matter) and the gradients it completes."""

    flops_per_token: float
    completes: tuple[str, ...]


def _grads(name: str, bias: bool) -> tuple[str, ...]:
    """A layer's gradients in the order autograd completes them (the bias first)."""
    return (name + ".bias", name + ".weight") if bias else (name + ".weight",)


def backward_ops(shape: TransformerShape, seq_len: int) -> list[BackwardOp]:
    """The backward pass in execution order (output layer first).

    Matmul FLOPs are 2 x weight elements per token; attention adds 4 T d per layer
    (QK^T and AV); norms, biases, activations, RoPE and embedding lookups are ~0. A tied
    lm_head runs first but its gradient lands in wte, which completes only when the
    embedding lookup's backward adds its share at the very end; an untied one completes
    at once.
    """
    d, v, b = shape.n_embd, shape.vocab_size, shape.biases
    ops = [
        BackwardOp(2.0 * v * d, () if shape.tied_embeddings else ("lm_head.weight",)),
        BackwardOp(0.0, _grads("transformer.ln_f", b)),
    ]
    for i in reversed(range(shape.n_layer)):
        p = f"transformer.h.{i}."
        ops += [
            BackwardOp(2.0 * shape.ffn_hidden * d, _grads(p + "mlp.c_proj", b)),
            BackwardOp(2.0 * shape.fc_dim * d, _grads(p + "mlp.c_fc", b)),
            BackwardOp(0.0, _grads(p + "ln_2", b)),
            BackwardOp(2.0 * d * d, _grads(p + "attn.c_proj", b)),
            BackwardOp(4.0 * seq_len * d, ()),
            BackwardOp(2.0 * shape.qkv_dim * d, _grads(p + "attn.c_attn", shape.qkv_bias)),
            BackwardOp(0.0, _grads(p + "ln_1", b)),
        ]
    embeddings = ("transformer.wpe.weight",) if shape.learned_positions else ()
    ops.append(BackwardOp(0.0, (*embeddings, "transformer.wte.weight")))
    return ops


def gradient_ready_order(shape: TransformerShape, seq_len: int) -> list[tuple[str, float]]:
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
    """Shares of a micro-step's forward (and, uniformly, backward) FLOPs, as
    ``backward_ops`` counts them: matmuls 2 x weight elements per token, attention 4 T d per
    layer, embedding lookups, norms and biases ~0."""

    embedding: float
    block: float  # each of the n_layer blocks
    head: float  # ln_f + the output layer


def compute_shares(shape: TransformerShape, seq_len: int) -> ComputeShares:
    d = shape.n_embd
    block = 2.0 * shape.block_matmul_numel + 4.0 * seq_len * d  # the four matmuls; QK^T, AV
    head = 2.0 * shape.vocab_size * d
    total = shape.n_layer * block + head
    return ComputeShares(0.0, block / total, head / total)


def kv_heads_per_rank(shape: TransformerShape, tp: int) -> int:
    """The KV heads one of ``tp`` tensor-parallel ranks holds: its share, at least one (Megatron
    replicates KV heads when tp exceeds them; sim/config.py requires tp to divide them otherwise)."""
    return max(1, (shape.n_kv_head or shape.n_head) // tp)


def ulysses_kv_heads(shape: TransformerShape, tp: int, cp: int) -> int:
    """The KV heads a TP rank exchanges under Ulysses: its own, or cp when it has fewer (each
    repeated so that every CP rank gets the one its query heads read; sim/tp.py)."""
    kv = kv_heads_per_rank(shape, tp)
    return cp if kv < cp else kv


def ulysses_refusal(shape: TransformerShape, tp: int, cp: int) -> str | None:
    """Why these heads cannot be split over ``cp`` Ulysses ranks, or None when they can."""
    q, kv = shape.n_head // tp, kv_heads_per_rank(shape, tp)
    if q % cp:
        return f"must divide model.n_head / training.tp ({q} query heads a TP rank) for cp_comm a2a"
    if kv % cp and cp % kv:
        return f"must divide, or be a multiple of, the {kv} KV heads a TP rank holds (cp_comm a2a)"
    return None
