"""JSON to typed records and back, checked against the records' type hints.

``load(cls, data, where)`` builds a dataclass (or NamedTuple) from parsed JSON: nested
records, ``list[X]``, ``tuple[...]``, ``dict[K, V]`` (JSON's string keys become ``int``
where ``K`` is), ``X | None`` and plain ``dict`` for free-form parts. A missing key, an
unknown key or a value of the wrong type is one ``ValueError`` naming its place
(``compute.step_s.r2``). A field whose default is None may be absent; ``dump`` leaves
it out again when it is None, so absent and null mean the same. A dataclass field made
with ``field(metadata=FLAT)`` is a record whose keys sit in its parent's table.
"""

import dataclasses
import math
import types
import typing

FLAT = {"flat": True}
# No measured quantity in a calibration (seconds, GB/s, bytes, a ratio) comes near 1e15 in its
# unit; a value past it (an edited intercept of 1e308) overflows the simulation into inf or NaN
# (issue 25, D6), and Python's json reads NaN and Infinity, so both are refused where read.
FLOAT_MAX = 1e15


def _record_fields(cls) -> dict[str, tuple[object, bool, bool]] | None:
    """{name: (type, required, flat)} of a dataclass or NamedTuple class; None for other types."""
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        return {
            f.name: (
                hints[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                bool(f.metadata.get("flat")),
            )
            for f in dataclasses.fields(cls)
            if f.init
        }
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return {name: (hints[name], name not in cls._field_defaults, False) for name in cls._fields}
    return None


def _keys(fields: dict) -> set[str]:
    """The keys a record's table holds: its own, and its flat fields' records' keys."""
    out = set()
    for name, (hint, _, flat) in fields.items():
        out |= _keys(_record_fields(hint)) if flat else {name}
    return out


def _at(where: str, key) -> str:
    """A key's place: ``compute.step_s`` under ``compute``; ``calib.json: compute`` at the top."""
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def _bad(where: str, what: str, value) -> ValueError:
    return ValueError(f"{where}: expected {what}, got {value!r:.60}")


def load(tp, value, where: str):
    fields = _record_fields(tp) if isinstance(tp, type) else None
    if fields is not None:
        if not isinstance(value, dict):
            raise _bad(where, "a table", value)
        unknown = sorted(set(value) - _keys(fields))
        if unknown:
            raise ValueError(f"{_at(where, unknown[0])}: unknown key")
        kwargs = {}
        for name, (hint, required, flat) in fields.items():
            if flat:
                kwargs[name] = load(hint, {k: value[k] for k in _keys(_record_fields(hint)) if k in value}, where)
            elif name in value:
                kwargs[name] = load(hint, value[name], _at(where, name))
            elif required:
                raise ValueError(f"{_at(where, name)}: missing")
        return tp(**kwargs)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return load(arg, value, where)
            except ValueError:
                if len(args) == 2:  # X | None: X's own message says more
                    raise
        raise _bad(where, " or ".join(getattr(a, "__name__", str(a)) for a in args), value)
    if origin is list:
        if not isinstance(value, list):
            raise _bad(where, "a list", value)
        return [load(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _bad(where, "a list", value)
        kinds = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        if len(kinds) != len(value):
            raise _bad(where, f"{len(kinds)} values", value)
        return tuple(load(k, v, f"{where}[{i}]") for i, (k, v) in enumerate(zip(kinds, value, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise _bad(where, "a table", value)
        key_type, value_type = args
        out = {}
        for k, v in value.items():
            try:
                key = key_type(k)
            except ValueError:
                raise _bad(_at(where, k), f"a key of type {key_type.__name__}", k) from None
            out[key] = load(value_type, v, _at(where, k))
        return out
    if tp is dict:
        if not isinstance(value, dict):
            raise _bad(where, "a table", value)
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        value = float(value)
        if not math.isfinite(value) or abs(value) > FLOAT_MAX:
            raise ValueError(f"{where}: must be a finite number within +-{FLOAT_MAX:g}, got {value!r}")
        return value
    if tp in (int, str, bool) and type(value) is tp:
        return value
    raise _bad(where, getattr(tp, "__name__", str(tp)), value)


def dump(value):
    """The JSON-ready form: records as objects (None-default fields left out when None),
    tuples as lists, dict keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.metadata.get("flat"):
                out |= dump(v)
            elif f.init and not (v is None and f.default is None):
                out[f.name] = dump(v)
        return out
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: dump(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): dump(v) for k, v in value.items()}
    return value
