"""Writing result files whole: to a temporary name beside the target, then a rename, so a
reader (or a rerun after Ctrl-C) never finds half a file."""

import json
import math
from pathlib import Path

from output.atomic import write_text_atomic


def nonfinite(value, where: str = "") -> str | None:
    """Where in ``value`` a NaN or infinity sits (``[0].seconds_per_step is nan``), or None:
    standard JSON (RFC 8259) has neither, and strict readers refuse Python's ``NaN``."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'the value'} is {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        found = nonfinite(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found:
            return found
    return None


def plain(data):
    """``data`` with every typed record in it (sim/summary.py Summary, workflow/compare.py's
    rows: anything with ``to_json_dict()``) as its JSON dict, lists and dicts walked."""
    if hasattr(data, "to_json_dict"):
        return plain(data.to_json_dict())
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [plain(v) for v in data]
    return data


def json_text(data, indent: int) -> str:
    """Standard JSON, or a ValueError naming the NaN or infinity that would break it."""
    data = plain(data)
    found = nonfinite(data)
    if found:
        raise ValueError(f"{found}, which standard JSON cannot hold")
    return json.dumps(data, indent=indent, allow_nan=False)


def write_json_atomic(path: Path, data) -> None:
    """Standard JSON only: a NaN or infinity raises ValueError (naming it) before anything is written."""
    try:
        text = json_text(data, indent=1)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    write_text_atomic(path, text + "\n")
