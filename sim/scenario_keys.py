"""Every scenario key with its unit, default and meaning (`ddplab scenarios --keys`), read
from the schema itself: the fields of sim/config.py's dataclasses, their defaults, and the
docstring under each field (so the list cannot drift from what the loader accepts). Reads
sim/config.py's source for those docstrings, hence an I/O module (tests/test_layering.py).
"""

import ast
import dataclasses
import itertools
from pathlib import Path

from sim import config
from sim.config import Scenario
from sim.scenario_file import MUST_SET

# House style puts the unit in the key's name (sim/config.py); longest suffix first.
UNITS = (
    ("_s_per_gb", "s/GB"),
    ("_gbit_s", "Gbit/s"),
    ("_tflop_s", "TFLOP/s"),
    ("_gb_s", "GB/s"),
    ("_tb_s", "TB/s"),
    ("_per_h", "1/h"),
    ("_steps", "steps"),
    ("_gib", "GiB"),
    ("_mb", "MiB"),
    ("_us", "us"),
    ("_s", "s"),
    ("_h", "h"),
)
BASE_KEY = {
    "key": "base",
    "unit": "",
    "default": None,
    "meaning": "(file only) A preset name, or a .toml path relative to this file, filled in underneath: "
    "this file's keys win, table by table ([model] whole: one model, not two halves).",
    "must_set_without_base": False,
}


def unit_of(name: str) -> str:
    """The unit a key's name carries (`nic_gbit_s` -> Gbit/s), or "" for a count or a ratio."""
    return next((unit for suffix, unit in UNITS if name.endswith(suffix)), "")


def field_docs() -> dict[str, str]:
    """{"Class.field": its docstring on one line} for every documented field of sim/config.py."""
    tree = ast.parse(Path(config.__file__).read_text())
    out = {}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        for field, doc in itertools.pairwise(cls.body):
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                out[f"{cls.name}.{field.target.id}"] = " ".join(str(doc.value.value).split())
    return out


def _rows(cls, prefix: str, docs: dict[str, str]) -> list[dict]:
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init:  # derived (model.shape), not a key
            continue
        if dataclasses.is_dataclass(f.type):
            rows += _rows(f.type, f"{f.name}.", docs)
            continue
        key = prefix + f.name
        rows.append(
            {
                "key": key,
                "unit": unit_of(f.name),
                "default": f.default,
                "meaning": docs.get(f"{cls.__name__}.{f.name}", ""),
                "must_set_without_base": key in MUST_SET,
            }
        )
    return rows


def scenario_keys() -> list[dict]:
    """One row per key a scenario file may set: key (section.field), unit, default (None =
    unset), meaning, and whether a file without ``base`` must set it."""
    return [BASE_KEY, *_rows(Scenario, "", field_docs())]
