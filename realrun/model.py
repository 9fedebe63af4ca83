"""A readable GPT-2 in torch, after nanoGPT's model.py (Karpathy), with PyTorch's
fused scaled_dot_product_attention, and the Llama variant of the same block. Shapes come
from scenarios/models.toml, the table sim/ reads too; tensor names and order match
sim/transformer.py.

layout = "llama" (Touvron et al. 2023; Llama 3, Grattafiori et al. 2024) changes four things:
RMSNorm for LayerNorm and no biases anywhere; rotary positions on Q and K instead of a wpe
table (Su et al. 2021); grouped-query attention, n_kv_head K/V heads shared by the n_head
query heads (Ainslie et al. 2023; SDPA's enable_gqa, no repeated copies); a SwiGLU MLP
(Shazeer 2020) of ffn_hidden; and an output layer of its own (tied_embeddings = false).
Q, K and V stay fused in c_attn, and SwiGLU's gate and up in c_fc, nanoGPT's four matmuls
per block; Meta's reference keeps them apart (wq, wk, wv; w1, w3), same parameters.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from scenarios import load_models


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    n_layer: int
    n_embd: int
    n_head: int
    block_size: int
    vocab_size: int
    layout: str = "gpt2"  # or "llama"
    n_kv_head: int | None = None  # unset: n_head (no grouped-query attention)
    ffn_hidden: int | None = None  # unset: 4 n_embd (GPT-2)
    tied_embeddings: bool | None = None  # unset: GPT-2 tied, Llama untied
    rope_theta: float | None = None  # unset: 10,000 (Su et al. 2021)

    def __post_init__(self):
        if self.layout not in ("gpt2", "llama"):
            raise ValueError(f"layout must be gpt2 or llama, got {self.layout!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        defaults = {
            "n_kv_head": self.n_head,
            "ffn_hidden": 4 * self.n_embd,
            "tied_embeddings": self.layout == "gpt2",
            "rope_theta": 10000.0,
        }
        for key, value in defaults.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)  # frozen: resolved once, here

    @property
    def llama(self) -> bool:
        return self.layout == "llama"


def preset_config(name: str) -> GPTConfig:
    models = load_models()
    if name not in models:
        raise ValueError(f"--model: unknown preset {name!r} (known: {', '.join(models)})")
    return GPTConfig(**models[name])


def rope_tables(head_dim: int, block_size: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position x frequency, (block_size, head_dim): pair i of a head turns at
    theta^(-2i / head_dim) (Su et al. 2021, eq. 15), each angle repeated for both halves."""
    freqs = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(block_size, dtype=torch.float32), freqs)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """RoPE in the half-split form of GPT-NeoX and Hugging Face's Llama: element i of a head
    pairs with i + head_dim / 2 (Meta's reference pairs neighbours; a fixed permutation of
    the head's dimensions, the same model)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def norm(cfg: GPTConfig) -> nn.Module:
    # Llama's RMSNorm (Zhang & Sennrich 2019) has a weight only; eps 1e-5 as Llama 3's config.
    return nn.RMSNorm(cfg.n_embd, eps=1e-5) if cfg.llama else nn.LayerNorm(cfg.n_embd)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.n_embd // cfg.n_head
        kv = cfg.n_kv_head * self.head_dim
        # q, k, v in one matmul; with grouped-query attention K and V are kv wide.
        self.c_attn = nn.Linear(cfg.n_embd, cfg.n_embd + 2 * kv, bias=not cfg.llama)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=not cfg.llama)

    def forward(self, x, rope=None):
        b, t, _ = x.shape
        # Widths from this module's heads, not x: under tensor parallelism (realrun/tp.py) a
        # rank holds n_head / tp of them, and Q is narrower than the residual stream.
        c, kv = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        q, k, v = self.c_attn(x).split((c, kv, kv), dim=2)
        q = q.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k, v = (z.view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2) for z in (k, v))
        if rope is not None:  # the tables in the compute dtype (autocast's bf16), once per block
            cos, sin = (z.to(q.dtype) for z in rope)
            # RoPE makes new Q and K; V is copied out too, or its view would keep all of
            # c_attn's output alive for backward (d + kv more bytes a token than Q, K, V).
            q, k, v = rotate(q, cos, sin), rotate(k, cos, sin), v.contiguous()
        gqa = self.n_kv_head != self.n_head
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.ffn_hidden)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's GELU
        self.c_proj = nn.Linear(cfg.ffn_hidden, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class SwiGLU(nn.Module):
    """Llama's MLP: silu(x W_gate) * (x W_up), then W_down (Shazeer 2020), gate and up in one c_fc."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 2 * cfg.ffn_hidden, bias=False)
        self.c_proj = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)

    def forward(self, x):
        gate, up = self.c_fc(x).chunk(2, dim=-1)
        return self.c_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = norm(cfg)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = norm(cfg)
        self.mlp = SwiGLU(cfg) if cfg.llama else MLP(cfg)

    def forward(self, x, rope=None):
        x = x + self.attn(self.ln_1(x), rope)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict({"wte": nn.Embedding(cfg.vocab_size, cfg.n_embd)})
        if not cfg.llama:  # GPT-2 learns its positions; Llama rotates Q and K (rope_tables)
            self.transformer["wpe"] = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.transformer["h"] = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.transformer["ln_f"] = norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            # Weight tying (Press & Wolf 2017), as GPT-2: parameters() lists wte only.
            self.lm_head.weight = self.transformer.wte.weight
        if cfg.llama:  # buffers: they follow .to(), are not parameters, not saved
            cos, sin = rope_tables(cfg.n_embd // cfg.n_head, cfg.block_size, cfg.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        # GPT-2 scales residual projections by 1/sqrt(2 n_layer) (Radford et al. 2019, sec. 2.3).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        """Logits, and with targets the per-sequence mean cross-entropy (shape (B,)),
        so callers can weight samples (uneven micro-batches across ranks)."""
        b, t = idx.shape
        if t > self.cfg.block_size:
            raise ValueError(f"sequence of {t} tokens exceeds the context {self.cfg.block_size}")
        x = self.transformer.wte(idx)
        rope = None
        if self.cfg.llama:
            rope = (self.rope_cos[:t], self.rope_sin[:t])
        else:
            x = x + self.transformer.wpe(torch.arange(t, device=idx.device))
        for block in self.transformer.h:
            x = block(x, rope)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
        return logits, loss.view(b, t).mean(dim=1)


def build(name: str, device="cpu") -> GPT:
    """A preset on a device; ``device="meta"`` builds shapes only (no memory)."""
    with torch.device(device):
        return GPT(preset_config(name))
