"""Writing result files whole: to a temporary name beside the target, then a rename, so a
reader (or a rerun after Ctrl-C) never finds half a file."""

import json
import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
