"""A Hugging Face ``config.json`` into the shape keys of scenarios/models.toml, or one line
naming the field that the model cannot express. Reads the file, hence an I/O module
(tests/test_layering.py).

Two layouts are read (sim/transformer.py): ``llama`` from LlamaForCausalLM,
MistralForCausalLM and Qwen2ForCausalLM (field names and defaults of transformers'
LlamaConfig, MistralConfig and Qwen2Config), ``gpt2`` from GPT2LMHeadModel (GPT2Config).
What changes parameters or FLOPs and has no key here is refused, never dropped: experts,
attention beyond a sliding window, biases other than Qwen2's on Q, K and V, another MLP
activation, a head size other than hidden_size / num_attention_heads.
"""

import json
import math
from pathlib import Path

from sim.readfile import read_text

LLAMA_LIKE = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2"}
GPT2_LIKE = {"GPT2LMHeadModel": "gpt2"}
KNOWN = {**LLAMA_LIKE, **GPT2_LIKE}

# Fields that mean a mixture of experts (Mixtral, Qwen2-MoE, DeepSeek, DBRX): the FLOPs per token
# follow the active experts, the memory every expert; neither is a dense transformer's.
MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")


def read_hf_config(path: str) -> tuple[dict, int | None]:
    """(models.toml shape keys, the sliding window beyond which attention is not modelled
    or None) of the config.json at ``path``."""
    where = f"model.hf_config {path}"
    try:
        if not Path(path).exists():
            raise ValueError(f"{where}: no such file")
        cfg = json.loads(read_text(path, what=where))  # a regular file of bounded size (sim/readfile.py)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    except RecursionError:  # json recurses once per level of nesting
        raise ValueError(f"{where}: nested too deeply to read") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: expected a JSON object (a config.json), got {type(cfg).__name__}")
    return shape_keys(cfg, where)


def _architecture(cfg: dict, where: str) -> str:
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs:
        arch = archs[0]
    else:  # a config without architectures: its model_type names the family
        by_type = {v: k for k, v in KNOWN.items()}
        arch = cfg.get("model_type")
        arch = by_type.get(arch, arch) if isinstance(arch, str) else arch
    if not isinstance(arch, str) or arch not in KNOWN:
        known = ", ".join(KNOWN)
        raise ValueError(f"{where}: architectures = {arch!r}: not a layout ddplab models (it reads {known})")
    return arch


def _int(cfg: dict, key: str, where: str, default=None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ValueError(f"{where}: {key} is not set")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {key} = {value!r}: expected a positive integer")
    return value


def _refuse_if(cond: bool, where: str, key: str, value, why: str) -> None:
    if cond:
        raise ValueError(f"{where}: {key} = {value!r}: {why}")


def _refuse_moe(cfg: dict, where: str) -> None:
    for key in MOE_FIELDS:
        value = cfg.get(key)
        _refuse_if(
            isinstance(value, int) and not isinstance(value, bool) and value > 1,
            where,
            key,
            value,
            "a mixture of experts; ddplab models dense transformers only",
        )


def shape_keys(cfg: dict, where: str) -> tuple[dict, int | None]:
    """The mapping itself, on a parsed config.json (``where`` begins every error)."""
    _refuse_moe(cfg, where)  # first: "a mixture of experts" says more than "MixtralForCausalLM"
    arch = _architecture(cfg, where)
    if arch in GPT2_LIKE:
        return _gpt2(cfg, where), None
    return _llama(cfg, where, LLAMA_LIKE[arch])


def _gpt2(cfg: dict, where: str) -> dict:
    # GPT2Config's defaults (transformers): n_positions 1024, n_inner None (= 4 n_embd), tied.
    n_embd = _int(cfg, "n_embd", where, 768)
    n_inner = cfg.get("n_inner")
    _refuse_if(
        n_inner not in (None, 4 * n_embd),
        where,
        "n_inner",
        n_inner,
        f"the gpt2 layout's MLP is 4 n_embd = {4 * n_embd}",
    )
    _refuse_if(
        cfg.get("tie_word_embeddings", True) is not True,
        where,
        "tie_word_embeddings",
        cfg.get("tie_word_embeddings"),
        "the gpt2 layout ties lm_head to wte",
    )
    _refuse_if(
        bool(cfg.get("add_cross_attention")), where, "add_cross_attention", True, "cross-attention is not modelled"
    )
    return {
        "layout": "gpt2",
        "n_layer": _int(cfg, "n_layer", where, 12),
        "n_embd": n_embd,
        "n_head": _int(cfg, "n_head", where, 12),
        # n_ctx is GPT2Config's older name for the context (both are 1024 in gpt2's config.json).
        "block_size": _int(cfg, "n_positions", where, cfg.get("n_ctx", 1024)),
        "vocab_size": _int(cfg, "vocab_size", where, 50257),
    }


def _llama(cfg: dict, where: str, family: str) -> tuple[dict, int | None]:
    d = _int(cfg, "hidden_size", where)
    n_head = _int(cfg, "num_attention_heads", where)
    act = cfg.get("hidden_act", "silu")
    _refuse_if(act != "silu", where, "hidden_act", act, "the llama layout's MLP is SwiGLU (silu)")
    head_dim = cfg.get("head_dim")
    _refuse_if(
        head_dim is not None and head_dim * n_head != d,
        where,
        "head_dim",
        head_dim,
        f"ddplab's heads are hidden_size / num_attention_heads = {d / n_head:g} wide",
    )
    for key in ("attention_bias", "mlp_bias"):  # LlamaConfig's; Qwen2's Q, K, V bias is built in
        _refuse_if(bool(cfg.get(key)), where, key, cfg.get(key), "biases beyond Qwen2's on Q, K and V are not modelled")
    # Newer transformers keep it under rope_parameters; LlamaConfig's default is 10,000.
    rope = cfg.get("rope_parameters")
    theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0) if isinstance(rope, dict) else 10000.0)
    _refuse_if(
        isinstance(theta, bool) or not isinstance(theta, int | float) or not math.isfinite(theta) or theta <= 0,
        where,
        "rope_theta",
        theta,
        "expected a positive number",
    )
    tied = cfg.get("tie_word_embeddings", False)  # False in LlamaConfig, MistralConfig and Qwen2Config
    _refuse_if(not isinstance(tied, bool), where, "tie_word_embeddings", tied, "expected true or false")
    keys = {
        "layout": "llama",
        "n_layer": _int(cfg, "num_hidden_layers", where),
        "n_embd": d,
        "n_head": n_head,
        "n_kv_head": _int(cfg, "num_key_value_heads", where, n_head),
        "ffn_hidden": _int(cfg, "intermediate_size", where),
        "block_size": _int(cfg, "max_position_embeddings", where),
        "vocab_size": _int(cfg, "vocab_size", where),
        "tied_embeddings": tied,
        "rope_theta": float(theta),
        # Qwen2 always biases its Q, K and V projections (transformers' Qwen2Attention).
        "qkv_bias": family == "qwen2",
    }
    # A window attends to the last sliding_window tokens only, so past it the attention FLOPs
    # are not 12 L d T per token; Qwen2 keeps the field but applies it only with use_sliding_window.
    window = cfg.get("sliding_window")
    if family == "qwen2" and not cfg.get("use_sliding_window", False):
        window = None
    if window is not None:
        _refuse_if(
            isinstance(window, bool) or not isinstance(window, int) or window <= 0,
            where,
            "sliding_window",
            window,
            "expected a positive integer or null",
        )
    return keys, window
