"""Scenario presets and the shared model table, as data (TOML).

Both sim/ and realrun/ read these files; neither imports the other.
"""

import tomllib
from pathlib import Path

SCENARIO_DIR = Path(__file__).resolve().parent
MODELS_FILE = SCENARIO_DIR / "models.toml"


def load_models() -> dict[str, dict]:
    """The model preset shapes (GPT-2 and Llama layouts), keyed by preset name."""
    with MODELS_FILE.open("rb") as f:
        return tomllib.load(f)


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
