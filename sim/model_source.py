"""The model a scenario's ``[model]`` table describes, as one ``TransformerShape`` with the
name outputs call it by.

A model comes from a preset of scenarios/models.toml, a Hugging Face config.json
(sim/hf_config.py) or the shape keys alone; shape keys set beside a preset or a config.json
override theirs. Without a preset or a config.json every key a shape needs must be given:
nothing falls back to another model's value unseen (issue 16).
"""

from pathlib import Path

from scenarios import load_models
from sim.hf_config import read_hf_config
from sim.transformer import TransformerShape, model_shape

# The keys of a models.toml entry, in its order (sim/transformer.py documents each).
SHAPE_KEYS = (
    "layout",
    "n_layer",
    "n_embd",
    "n_head",
    "n_kv_head",
    "ffn_hidden",
    "block_size",
    "vocab_size",
    "tied_embeddings",
    "rope_theta",
    "qkv_bias",
)
# What a shape without a preset or a config.json cannot do without (llama adds n_kv_head and
# ffn_hidden, which TransformerShape asks for by name).
REQUIRED = ("n_layer", "n_embd", "n_head", "block_size", "vocab_size")
DEFAULT_PRESET = "gpt2-760m"
# A preset with more keys changed than this is named "custom", not "preset+key=value,...".
_MAX_NAMED_CHANGES = 2


def resolve_model(*, preset: str | None, hf_config: str | None, name: str | None, keys: dict) -> TransformerShape:
    """The shape of ``preset`` or ``hf_config`` (at most one), with ``keys`` (shape keys, None =
    unset) over it; with neither, ``keys`` alone; with nothing at all, DEFAULT_PRESET."""
    given = {k: v for k, v in keys.items() if v is not None}
    if preset is not None and hf_config is not None:
        raise ValueError(f"model.hf_config: {hf_config!r} and model.preset {preset!r} both name a model; give one")
    window = None
    if hf_config is not None:
        base, window = read_hf_config(hf_config)
    elif preset is not None:
        base = _preset_keys(preset)
    elif given:
        missing = [k for k in REQUIRED if k not in given]
        if missing:
            raise ValueError(
                f"model.{missing[0]}: not set (a model without model.preset or model.hf_config sets"
                f" {', '.join(REQUIRED)}; layout llama also n_kv_head and ffn_hidden)"
            )
        base = {}
    else:
        preset, base = DEFAULT_PRESET, _preset_keys(DEFAULT_PRESET)
    merged = {**base, **given}
    if window is not None and merged["block_size"] > window:
        raise ValueError(
            f"model.block_size: {merged['block_size']} exceeds the config's sliding_window {window}, past which"
            f" attention is not modelled (set model.block_size = {window} or less)"
        )
    shape = TransformerShape(name=name or _file_name(hf_config) or preset or "custom", **merged)
    return shape if name else TransformerShape(name=_auto_name(shape, preset, hf_config, base, given), **merged)


def same_as_preset(shape: TransformerShape, preset: str) -> bool:
    """Whether ``shape`` is ``preset``'s, whatever either is called (a calibration measured on
    the preset holds for it)."""
    try:
        theirs = model_shape(preset)
    except ValueError:  # not a preset
        return False
    return shape_keys_of(theirs) == shape_keys_of(shape)


def shape_keys_of(shape: TransformerShape) -> dict:
    """Every shape key of ``shape`` (its fields but the name), defaults resolved: what
    `simulate --json` reports as ``model_shape``."""
    return {key: getattr(shape, key) for key in SHAPE_KEYS}


def _preset_keys(preset: str) -> dict:
    model_shape(preset)  # an unknown preset is refused there, naming the known ones
    return load_models()[preset]


def _file_name(hf_config: str | None) -> str | None:
    """A config.json's model: its folder's name (Hugging Face's files are all config.json),
    else the file's stem."""
    if hf_config is None:
        return None
    p = Path(hf_config)
    return p.absolute().parent.name if p.stem == "config" else p.stem


def _auto_name(shape: TransformerShape, preset, hf_config, base: dict, given: dict) -> str:
    """The preset a shape is (so a preset written out by hand reads as the preset), else the
    preset's or config.json's name with what was changed (``llama3-8b+n_layer=40``), else
    "custom"."""
    if preset is not None and not given:
        return preset
    for candidate in ([preset] if preset else []) + list(load_models()):
        if same_as_preset(shape, candidate):
            return candidate
    source = preset or _file_name(hf_config)
    changed = {k: v for k, v in given.items() if base.get(k) != v}
    if source and not changed:
        return source
    if source and len(changed) <= _MAX_NAMED_CHANGES:
        return with_changes(source, changed)
    return "custom"


def with_changes(name: str, changed: dict) -> str:
    """``llama3-8b`` with {"n_layer": 40} -> ``llama3-8b+n_layer=40``: a model's name once keys
    are set over it, so no output calls a changed model by the unchanged one's name."""
    return f"{name}+" + ",".join(f"{k}={v}" for k, v in changed.items())
