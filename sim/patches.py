"""Typed patches: what each layer above a scenario file sets, key by key, and who set it.

A scenario is its file (a preset or .toml, with its ``base`` underneath: sim/scenario_file.py),
then, in this order, a calibration's measured values (calibrate/apply.py), the user's ``--set``
and the flags (``--ranks``, ``--steps``, ``--seed``, ``--device-gib``); a command's own keys go
where it puts them (sweep's ``--vary`` under the flags, whatif's ``--try`` over the scenario
the flags made, as exclude-slowest changes its ranks). Each layer is a sequence of ``Patch``: a
``KEY=VALUE`` is parsed into one once, where it enters (``parse_sets``), and never turned back
into text; ``apply_patches`` lays them over the file's data and says which patch set each key,
so the provenance table credits whoever really set it (issue 27).
"""

import tomllib
from pathlib import Path
from typing import NamedTuple

from sim.config import NetworkConfig
from sim.describe import description_at
from sim.model_source import SHAPE_KEYS, with_changes


class Patch(NamedTuple):
    key: str  # "noise.sigma" (SECTION.FIELD) or "ranks" (a top-level field)
    value: object  # a TOML value; sim/scenario_file.py coerces it to the field's type
    source: str  # who set it: "--set", a flag ("--ranks"), "--try", "--vary", "calibration"
    detail: str = ""  # a calibration's: where and how the value was measured


def parse_set(text: str, source: str = "--set") -> Patch:
    """``noise.sigma=0.05`` -> Patch("noise.sigma", 0.05, source). The value is read as a TOML
    value when it is one (numbers, true/false, quoted strings), else as a bare string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"{source}: expected KEY=VALUE, got {text!r}")
    return Patch(key, parse_value(raw, f"{source} {key}"), source)


def parse_value(raw: str, where: str):
    """A value as typed: a TOML value when it is one, else the bare string (``where`` names it)."""
    try:
        return tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return raw.strip()
    except RecursionError:
        raise ValueError(f"{where}: value nested too deeply to read") from None


def value_text(value) -> str:
    """A value as --set takes it back (parse_value's inverse): ``none`` for an optional key unset
    (TOML has no null; sim/scenario_file.py reads it back), true/false for a bool."""
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_sets(texts, source: str = "--set") -> tuple[Patch, ...]:
    """Each text one assignment or several, ``a.b=1,c=2`` (split_assignments), as whatif's --try
    and what would fit (sim/memory_fit.py Alternative.text) write them."""
    return tuple(parse_set(piece, source) for t in texts for piece in split_assignments(t))


def flag_patches(**flags) -> tuple[Patch, ...]:
    """The top-level flags given (ranks, steps, seed; None: not given), as --FLAG patches."""
    return tuple(Patch(key, value, f"--{key}") for key, value in flags.items() if value is not None)


def split_assignments(text: str, words=()) -> list[str]:
    """Several KEY=VALUE in one argument: ``a.b=1,c=2`` -> ["a.b=1", "c=2"]. A piece with no
    ``=`` (and not one of ``words``, whatif's named fixes) continues the value before it, so
    ``stragglers=17:1.4,100:2.0`` stays one assignment."""
    out: list[str] = []
    for piece in text.split(","):
        if out and "=" not in piece and piece.strip() not in words:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def check_assigned_keys(assigned, owned: dict[str, str]) -> None:
    """The keys a command line assigns, as (option, key) pairs in order, e.g. ("--set",
    "noise.sigma"): refused, naming the option and key, when a key is one the command sets by
    an option of its own (``owned``: key -> that option, with why) or is assigned twice, where
    the last would silently win. `sweep` (--set, --vary) and `whatif` (each --try) share it."""
    seen: dict[str, str] = {}
    for option, key in assigned:
        if key in owned:
            raise ValueError(f"{option} {key}: {owned[key]}, not {option}")
        if key in seen:
            twice = "given twice" if seen[key] == option else f"also given by {seen[key]} {key}"
            raise ValueError(f"{option} {key}: {twice}; give it once")
        seen[key] = option


def hf_config_from(data: dict, folder: Path) -> None:
    """A relative ``model.hf_config`` made absolute against ``folder`` (the naming file's, as a
    ``base``; the working directory's for --set), so the data loads the same anywhere."""
    model = data.get("model")
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        model["hf_config"] = str(folder.absolute() / model["hf_config"])


# Keys that name a whole model: --set one and the scenario's other model keys go (a later --set
# model.n_layer=... then changes the model just named).
_MODEL_NAMERS = {"preset", "hf_config"}


def _rename_changed_model(table: dict, name: str, value) -> None:
    """A model the file names (``name = "llama3.2-3b"``) whose shape a patch changes is named
    for the change too: ``llama3.2-3b+n_layer=30``."""
    title = table.get("name")
    if name in SHAPE_KEYS and isinstance(title, str) and table.get(name) != value:
        table["name"] = with_changes(title, {name: value})


def apply_patches(data: dict, *layers) -> tuple[dict, dict[str, Patch]]:
    """(a copy of ``data`` with each layer's patches applied in order, {key: the patch that set
    it last}). Checked later by the dataclasses (sim/scenario_file.py)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    origin: dict[str, Patch] = {}
    for patch in (p for layer in layers for p in layer):
        path = patch.key.split(".")
        if len(path) > 2:
            raise ValueError(f"{patch.key}: unknown key (keys are SECTION.FIELD or FIELD)")
        if len(path) == 2:
            section, name = path
            out.setdefault(section, {})
            if not isinstance(out[section], dict):
                raise ValueError(f"{patch.key}: unknown key ({section} is not a section)")
            if section == "model" and name in _MODEL_NAMERS:
                out["model"] = {}
                origin = {k: v for k, v in origin.items() if not k.startswith("model.")}
            if section == "model":
                _rename_changed_model(out["model"], name, patch.value)
            out[section][name] = patch.value
            if patch.key == "model.hf_config":
                hf_config_from(out, Path.cwd())
        else:
            out[patch.key] = patch.value
        origin[patch.key] = patch
    _describe_run(data, out)
    _describe_sets(data, out, origin)
    return out, origin


def _describe_run(data: dict, out: dict) -> None:
    """A description that names the file's GPU count follows the ranks run (sim/describe.py),
    unless it was itself overridden."""
    file_ranks, ranks, text = data.get("ranks"), out.get("ranks"), out.get("description")
    network = out.get("network") if isinstance(out.get("network"), dict) else {}
    per_node = network.get("gpus_per_node", NetworkConfig.gpus_per_node)
    if text != data.get("description") or not all(isinstance(v, int) and v > 0 for v in (file_ranks, ranks, per_node)):
        return  # overridden, or a wrong type the dataclasses will name
    if isinstance(text, str):
        out["description"] = description_at(text, file_ranks, ranks, per_node)


SHOWN_SETS = 4  # --set keys a header names before "+N more"


def _describe_sets(data: dict, out: dict, origin: dict[str, "Patch"]) -> None:
    """A description is prose about the file ("seq 8192, micro-batch 1"): where --set changed a
    value of it, the header says which, so it never reads as the job that ran when it is not.
    The ranks, steps and seed have their own places in every header."""
    text = out.get("description")
    if not isinstance(text, str) or not text or "description" in origin:  # a description given says itself
        return
    changed = []
    for key, patch in origin.items():
        if patch.source != "--set" or key in ("ranks", "steps", "seed", "description", "name"):
            continue
        section, _, name = key.rpartition(".")
        table = data.get(section) if section else data
        before = table.get(name) if isinstance(table, dict) else None
        if isinstance(before, dict) or before != patch.value:
            changed.append(f"{key}={value_text(patch.value)}")
    if changed:
        more = f", +{len(changed) - SHOWN_SETS} more" if len(changed) > SHOWN_SETS else ""
        out["description"] = f"{text}; --set {', '.join(changed[:SHOWN_SETS])}{more}"
