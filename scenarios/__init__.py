"""Scenario presets and the shared model table, as data (TOML).

Both sim/ and realrun/ read these files; neither imports the other.
"""

import tomllib
from pathlib import Path

SCENARIO_DIR = Path(__file__).resolve().parent
MODELS_FILE = SCENARIO_DIR / "models.toml"


# Each key of a models.toml entry with its type and, for the sizes, the largest value taken:
# 10x or more past the largest published model (Llama 3 405B: 126 layers, width 16,384, SwiGLU
# 53,248; Gemma's 256k vocabulary; 10M-token contexts), so a typo is refused here, naming the
# preset and the key, rather than as a traceback from whichever reader met it first (issue 25,
# D15: an extra key, a float layer count, a huge width, or 0 layers that `train` then built).
WIDTH_MAX = 1 << 18
MODEL_KEYS: dict[str, tuple[type, int | None]] = {
    "layout": (str, None),
    "n_layer": (int, 4096),
    "n_embd": (int, WIDTH_MAX),
    "n_head": (int, 4096),
    "n_kv_head": (int, 4096),
    "ffn_hidden": (int, 4 * WIDTH_MAX),
    "block_size": (int, 1 << 27),
    "vocab_size": (int, 1 << 24),
    "tied_embeddings": (bool, None),
    "rope_theta": (float, None),
    "qkv_bias": (bool, None),
}


def load_models() -> dict[str, dict]:
    """The model preset shapes (GPT-2 and Llama layouts), keyed by preset name, each key checked."""
    try:
        with MODELS_FILE.open("rb") as f:
            models = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{MODELS_FILE}: malformed TOML ({e})") from None
    for name, entry in models.items():
        _check_model(name, entry)
    return models


def _check_model(name: str, entry) -> None:
    where = f"{MODELS_FILE}: [{name}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a table of shape keys, got {entry!r:.40}")
    for key, value in entry.items():
        if key not in MODEL_KEYS:
            raise ValueError(f"{where} {key}: unknown key (known: {', '.join(MODEL_KEYS)})")
        kind, largest = MODEL_KEYS[key]
        if kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")
        else:
            ok = type(value) is kind and (largest is None or 1 <= value <= largest)
        if not ok:
            what = f"an integer 1 to {largest:,}" if largest else ("a number > 0" if kind is float else kind.__name__)
            raise ValueError(f"{where} {key}: expected {what}, got {value!r:.40}")


def scenario_names() -> list[str]:
    """Names of the shipped scenario presets (every *.toml but the model table)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml") if p != MODELS_FILE)


def _is_path(p: Path) -> bool:
    """A .toml name or anything with a folder in it is a file path, never a preset's name."""
    return p.suffix == ".toml" or len(p.parts) > 1


def _preset(name: str) -> Path | None:
    candidate = SCENARIO_DIR / f"{name}.toml"
    return candidate if candidate.exists() and candidate != MODELS_FILE else None


def scenario_path(name_or_path: str) -> Path:
    """A preset name (``h100-1024``) or a path to a TOML file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    if _is_path(p):  # a path, not a preset name: say what is missing
        if p.exists():  # /dev/zero, a FIFO: the reader refuses what is not a regular file, in one line
            return p
        raise ValueError(f"scenario {name_or_path!r}: no such file: {name_or_path}")
    preset = _preset(name_or_path)
    if preset:
        return preset
    raise ValueError(f"scenario {name_or_path!r}: not a preset ({', '.join(scenario_names())}) nor a .toml file")


def base_path(base: str, naming_file: Path) -> Path:
    """The file a scenario's ``base`` names: a preset name (``h100-1024``), or a path
    (``../h100-1024.toml``, ``x.toml``) relative to the folder of the file that names it,
    as an #include is, so a file loads the same from any working directory."""
    p = Path(base)
    if _is_path(p):
        p = naming_file.parent / p
        if not p.is_file():
            raise ValueError(f"{naming_file}: base {base!r}: no such file: {p}")
        return p
    preset = _preset(base)
    if preset:
        return preset
    raise ValueError(f"{naming_file}: base {base!r}: not a preset ({', '.join(scenario_names())}) nor a .toml path")
