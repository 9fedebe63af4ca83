"""The one scenario resolver: a preset or TOML file (with its ``base`` preset underneath), then
the layers of typed patches above it (sim/patches.py: a calibration, ``--set``, a command's own
keys, its flags), each value coerced to its field's type or refused naming the key, built into
a checked ``Scenario`` once, with the source of every key. The one place sim/ reads files for a
scenario; sim/config.py is the schema it fills.
"""

import dataclasses
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import NamedTuple

from sim.config import Scenario, inert_key
from sim.patches import Patch, apply_patches, flag_patches, hf_config_from, parse_sets
from sim.precision import PRECISIONS
from sim.readfile import read_text

SECTIONS = {f.name: f.type for f in dataclasses.fields(Scenario) if dataclasses.is_dataclass(f.type)}
# TOML's integers are 64-bit signed (toml.io, "Integer"); tomllib and --set's parse do not
# enforce it, and numpy fails past it without naming the key.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# Every float key is a physical quantity in ddplab's units (seconds, GB/s, TFLOP/s, GiB, a
# ratio): none is legitimately past 1e12 or, unless 0, under 1e-12. Beyond these, the
# arithmetic downstream overflows (1e308 x 8 bits is inf) and a result becomes inf or NaN
# (issue 25, D6), so such a value is refused where it enters, naming the key.
FLOAT_MAX, FLOAT_MIN = 1e12, 1e-12


def _number(key: str, value, t):
    """An int in TOML's range, or a finite float: NaN and inf pass every `> 0` check and
    then turn every result into NaN, so no key takes them (`nan`, `inf` are TOML floats)."""
    if t is int and not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"{key}: must fit in a 64-bit integer (TOML's range), got {value!r}")
    if t is float and not math.isfinite(value):
        raise ValueError(f"{key}: must be a finite number, got {value!r}")
    if t is float and value != 0 and not FLOAT_MIN <= abs(value) <= FLOAT_MAX:
        raise ValueError(f"{key}: must be 0 or between {FLOAT_MIN:g} and {FLOAT_MAX:g} in size, got {value!r}")
    return t(value)


def _check_type(key: str, value, hint):
    """Coerce a TOML/CLI value to the field's declared type, or raise naming the key."""
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if type(None) in allowed and (value is None or (value == "none" and str not in allowed)):
        return None  # TOML has no null: `--set compute.mfu=none` unsets an optional key
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
    names = " or ".join(getattr(t, "__name__", "table") if t is not type(None) else "none" for t in allowed)
    raise ValueError(f"{key}: expected {names}, got {value!r}")


# Keys older scenario files may still carry, and what decides them now.
_REPLACED = {
    f"training.{k}": f"training.precision ({' | '.join(PRECISIONS)}; sim/precision.py)"
    for k in ("grad_bytes_per_param", "param_bytes_per_param", "optimizer_state_bytes_per_param")
}
_REPLACED["compute.dataloader_s"] = (
    "compute.dataloader_batch_s (one worker's time per micro-batch) with compute.dataloader_workers and"
    " compute.dataloader_prefetch_factor: the loader runs ahead as PyTorch's DataLoader (docs/loader.md)"
)


def _coerce(cls, data: dict, prefix: str) -> dict:
    """``data``'s keys checked against ``cls``'s fields and each value coerced to its type,
    a section's table in turn (still a dict): every key and type error before any value's."""
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
        if key in SECTIONS and not prefix:
            if not isinstance(value, dict):
                raise ValueError(f"{full}: expected a [{key}] table, got {value!r}")
            kwargs[key] = _coerce(SECTIONS[key], value, f"{key}.")
        else:
            kwargs[key] = _check_type(full, value, hints[key])
    return kwargs


def scenario_from_dict(data: dict) -> Scenario:
    kwargs = _coerce(Scenario, data, "")
    sections = {key: SECTIONS[key](**value) for key, value in kwargs.items() if key in SECTIONS}
    return Scenario(**{**kwargs, **sections})


# What a scenario without ``base`` must set itself, each with the keys that may stand in for
# it: the defaults in sim/config.py are one H100 with no noise, so a
# file that leaves these out would be predicted as that, silently (issue 16).
MUST_SET = {
    "ranks": (),
    "model.preset": ("model.hf_config", "model.n_layer"),  # or a whole shape (sim/model_source.py)
    "compute.peak_tflop_s": ("compute.step_compute_s",),  # the compute speed, or the time itself
    "compute.hbm_tb_s": ("compute.optimizer_s",),  # the optimizer step's bandwidth, or its time
    "network.gpus_per_node": (),
    "network.nics_per_node": (),
    "network.nic_gbit_s": (),
    "noise.distribution": (),
}
BASE_HINT = 'base = "h100-1024"'


def _has(data: dict, key: str) -> bool:
    section, _, name = key.rpartition(".")
    table = data.get(section, {}) if section else data
    return isinstance(table, dict) and name in table


def missing_keys(data: dict) -> list[str]:
    """The MUST_SET keys a scenario without ``base`` leaves to the defaults, each named
    with what may stand in for it."""
    return [
        " or ".join((key, *alternatives))
        for key, alternatives in MUST_SET.items()
        if not any(_has(data, k) for k in (key, *alternatives))
    ]


def _check_complete(path: Path, data: dict) -> None:
    """A from-scratch file (no ``base``) names every key a prediction rests on, or is refused."""
    _coerce(Scenario, data, "")  # a wrong key or type is the first thing to say
    missing = missing_keys(data)
    if missing:
        raise ValueError(
            f"{path}: no base, and not set: {', '.join(missing)} (set them, or start from a preset: {BASE_HINT})"
        )


def load_toml(path: Path) -> dict:
    text = read_text(path)  # a regular file of bounded size: a FIFO or /dev/zero is one line (sim/readfile.py)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: malformed TOML ({e})") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise ValueError(f"{path}: nested too deeply to read (arrays or tables inside each other)") from None


def load_scenario_data(path: Path, _seen: tuple = ()) -> dict:
    """A scenario file's data with its ``base`` (a preset, or a file relative to this one)
    filled in underneath: a straggler preset is the cluster preset plus what it changes.
    A file without ``base`` must set the MUST_SET keys itself."""
    from scenarios import base_path

    data = load_toml(path)
    hf_config_from(data, path.parent)
    base = data.pop("base", None)
    if base is None:
        _check_complete(path, data)
        return data
    if not isinstance(base, str):
        raise ValueError(f"{path}: base: expected a preset's name or a .toml path, not {base!r}")
    under, chain = base_path(base, path), (*_seen, path.resolve())
    if under.resolve() in chain:
        raise ValueError(f"{path}: base {base!r}: a cycle ({under} is already in this file's chain of bases)")
    merged = load_scenario_data(under, chain)
    for key, value in data.items():
        # A [model] table is one model, never half the base's and half this file's: a shape
        # key's partner (layout, vocab_size...) must not come from another model unseen.
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "model":
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class Resolved(NamedTuple):
    scenario: Scenario
    data: dict  # what it was built from: a worker rebuilds the same Scenario from it
    origin: dict[str, Patch]  # each key a patch set, with the patch that set it last
    path: Path  # the scenario file
    file_data: dict  # the file's own data, its base filled in underneath

    def source(self, key: str) -> str:
        """Who set ``key``: the patch's source ("--set", "--ranks", "calibration"...), else the
        scenario file's name (it or its base), else "default" (sim/config.py)."""
        if key in self.origin:
            return self.origin[key].source
        return self.path.name if _has(self.file_data, key) else "default"


class Refused(ValueError):
    """A value the dataclasses refused, with the patch that set it (None: the file's own), so a
    caller can name where it came from (calibrate/refusal.py: a calibration's file and fix)."""

    def __init__(self, error: ValueError, patch: Patch | None):
        super().__init__(str(error))
        self.patch = patch


def resolve(name_or_path: str, *layers, inert: bool = True) -> Resolved:
    """The scenario of a preset or TOML file with each layer of patches applied in order, lowest
    first: calibration < --set < flags (sweep's --vary under the flags, whatif's --try over the
    scenario they made). Built (and so checked) once; a refused value raises Refused, naming the
    key as ever, with the patch that set it, and so does a key the user set that changes nothing
    (``inert`` False: the caller judges that itself, as a sweep does over its whole grid)."""
    from scenarios import scenario_path

    path = scenario_path(name_or_path)
    file_data = load_scenario_data(path)
    data, origin = apply_patches(file_data, *layers)
    try:
        sc = scenario_from_dict(data)
    except ValueError as e:
        raise Refused(e, origin.get(str(e).partition(":")[0])) from None
    if inert:
        check_inert(sc, origin.values())
    return Resolved(sc, data, origin, path, file_data)


USER_SOURCES = ("--set", "--vary", "--try")  # what a person typed, not a file or a calibration


def check_inert(sc: Scenario, patches) -> None:
    """A key the user set that changes nothing in ``sc`` (sim/config.py inert_key) is refused in
    one line rather than taken without a word."""
    for p in patches:
        why = inert_key(sc, p.key) if p.source in USER_SOURCES else None
        if why:
            raise Refused(ValueError(f"{p.key}: {why}, got {p.value!r}"), p)


def scenario_data(name_or_path: str, sets=(), **flags) -> dict:
    """A preset's or TOML file's data with the user's ``--set`` texts and the flags given
    (ranks, steps, seed; None: the file's), before the dataclasses check it."""
    from scenarios import scenario_path

    return apply_patches(load_scenario_data(scenario_path(name_or_path)), parse_sets(sets), flag_patches(**flags))[0]


def load_scenario(name_or_path: str, sets=(), **flags) -> Scenario:
    """A preset or TOML file, with the user's ``--set`` texts and flags (ranks, steps, seed)."""
    return resolve(name_or_path, parse_sets(sets), flag_patches(**flags)).scenario
