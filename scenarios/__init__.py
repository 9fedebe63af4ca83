"""Scenario presets and the shared model table, as data (TOML).

Both sim/ and realrun/ read these files; neither imports the other.
"""

import tomllib
from pathlib import Path

SCENARIO_DIR = Path(__file__).resolve().parent
MODELS_FILE = SCENARIO_DIR / "models.toml"


def load_models() -> dict[str, dict[str, int]]:
    """The GPT-2 preset shapes, keyed by preset name."""
    with MODELS_FILE.open("rb") as f:
        return tomllib.load(f)


def scenario_names() -> list[str]:
    """Names of the shipped scenario presets (every *.toml but the model table)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml") if p != MODELS_FILE)


def scenario_path(name_or_path: str) -> Path:
    """A preset name (``h100-1024``) or a path to a TOML file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    if p.suffix == ".toml" or len(p.parts) > 1:  # a path, not a preset name: say what is missing
        raise ValueError(f"scenario {name_or_path!r}: no such file: {name_or_path}")
    candidate = SCENARIO_DIR / f"{name_or_path}.toml"
    if candidate.exists() and candidate != MODELS_FILE:
        return candidate
    raise ValueError(f"scenario {name_or_path!r}: not a preset ({', '.join(scenario_names())}) nor a .toml file")
