"""Scenario data into a checked ``Scenario``: a preset or TOML file (with its ``base`` preset
underneath), ``--set KEY=VALUE`` overrides and top-level fields (ranks, steps, seed), each
value coerced to its field's type or refused naming the key. The one place sim/ reads files
for a scenario; sim/config.py is the schema it fills.
"""

import dataclasses
import math
import tomllib
import types
import typing
from pathlib import Path

from sim.config import Scenario
from sim.precision import PRECISIONS

_SECTIONS = {f.name: f.type for f in dataclasses.fields(Scenario) if dataclasses.is_dataclass(f.type)}
# TOML's integers are 64-bit signed (toml.io, "Integer"); tomllib and --set's parse do not
# enforce it, and numpy fails past it without naming the key.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def _number(key: str, value, t):
    """An int in TOML's range, or a finite float: NaN and inf pass every `> 0` check and
    then turn every result into NaN, so no key takes them (`nan`, `inf` are TOML floats)."""
    if t is int and not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"{key}: must fit in a 64-bit integer (TOML's range), got {value!r}")
    if t is float and not math.isfinite(value):
        raise ValueError(f"{key}: must be a finite number, got {value!r}")
    return t(value)


def _check_type(key: str, value, hint):
    """Coerce a TOML/CLI value to the field's declared type, or raise naming the key."""
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    for t in allowed:
        if typing.get_origin(t) is list and isinstance(value, list):
            (item_t,) = typing.get_args(t)
            return [_check_type(f"{key}[{i}]", v, item_t) for i, v in enumerate(value)]
        if typing.get_origin(t) is dict and isinstance(value, dict):
            key_t, value_t = typing.get_args(t)
            return {
                _check_type(f"{key}.{k}", k, key_t): _check_type(f"{key}.{k}", v, value_t) for k, v in value.items()
            }
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return _number(key, value, int)
        if t is float and isinstance(value, int | float) and not isinstance(value, bool):
            return _number(key, value, float)
        if t is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(t, "__name__", "table") for t in allowed if t is not type(None))
    raise ValueError(f"{key}: expected {names}, got {value!r}")


# Keys older scenario files may still carry, and what decides them now.
_REPLACED = {
    f"training.{k}": f"training.precision ({' | '.join(PRECISIONS)}; sim/precision.py)"
    for k in ("grad_bytes_per_param", "param_bytes_per_param", "optimizer_state_bytes_per_param")
}


def _build(cls, data: dict, prefix: str):
    settable = {f.name for f in dataclasses.fields(cls) if f.init}
    hints = {k: v for k, v in typing.get_type_hints(cls).items() if k in settable}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if full in _REPLACED:
            raise ValueError(f"{full}: replaced by {_REPLACED[full]}")
        if key not in hints:
            known = ", ".join(f"{prefix}{k}" for k in hints)
            raise ValueError(f"{full}: unknown key (known: {known})")
        if key in _SECTIONS and not prefix:
            if not isinstance(value, dict):
                raise ValueError(f"{full}: expected a [{key}] table, got {value!r}")
            kwargs[key] = _build(_SECTIONS[key], value, f"{key}.")
        else:
            kwargs[key] = _check_type(full, value, hints[key])
    return cls(**kwargs)


def scenario_from_dict(data: dict) -> Scenario:
    return _build(Scenario, data, "")


def load_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: malformed TOML ({e})") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise ValueError(f"{path}: nested too deeply to read (arrays or tables inside each other)") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None


def load_scenario_data(path: Path, _seen: tuple = ()) -> dict:
    """A scenario file's data with its ``base`` (another preset or file) filled in
    underneath: a straggler preset is the cluster preset plus what it changes."""
    from scenarios import scenario_path

    data = load_toml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or base in _seen:
        raise ValueError(f"{path}: base: expected another preset's name, not {base!r} (or a cycle)")
    merged = load_scenario_data(scenario_path(base), (*_seen, base))
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def parse_override(text: str) -> tuple[list[str], object]:
    """``noise.sigma=0.05`` -> (["noise", "sigma"], 0.05). The value is read as a TOML
    value when it is one (numbers, true/false, quoted strings), else as a bare string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"--set: expected KEY=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    except RecursionError:
        raise ValueError(f"--set {key}: value nested too deeply to read") from None
    return key.split("."), value


def apply_overrides(data: dict, overrides=(), **top_level) -> dict:
    """A deep copy of ``data`` with each KEY=VALUE applied, then the top-level fields given
    (ranks, steps, seed; None leaves one as it is). Checked later by the dataclasses."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for text in overrides:
        path, value = parse_override(text)
        if len(path) > 2:
            raise ValueError(f"{'.'.join(path)}: unknown key (keys are SECTION.FIELD or FIELD)")
        if len(path) == 2:
            out.setdefault(path[0], {})
            if not isinstance(out[path[0]], dict):
                raise ValueError(f"{'.'.join(path)}: unknown key ({path[0]} is not a section)")
            out[path[0]][path[1]] = value
        else:
            out[path[0]] = value
    out.update({k: v for k, v in top_level.items() if v is not None})
    return out


def scenario_data(name_or_path: str, overrides=(), **top_level) -> dict:
    """A preset's or TOML file's data with ``--set`` overrides and top-level fields applied:
    what every command simulates, before the dataclasses check it."""
    from scenarios import scenario_path

    return apply_overrides(load_scenario_data(scenario_path(name_or_path)), overrides, **top_level)


def load_scenario(name_or_path: str, overrides=(), **top_level) -> Scenario:
    """A preset or TOML file, with ``--set`` overrides and top-level fields (ranks, steps, seed)."""
    return scenario_from_dict(scenario_data(name_or_path, overrides, **top_level))
