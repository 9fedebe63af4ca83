"""A file written whole: to a temporary name beside it, then a rename, so a reader (or a rerun
after Ctrl-C or kill -9) never finds half of it. Every file ddplab writes at a final path goes
through here: text and CSV (sim/export.py, workflow/files.py), pictures (sim/plot.py) and
simulation records (sim/export.py). It replaces only a file ddplab wrote (sim/ownfiles.py)."""

import os
from collections.abc import Callable
from pathlib import Path

from sim.ownfiles import check_target


def write_atomic(path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` fills a temporary file beside ``path``, which then replaces ``path``; a
    failed write leaves ``path`` as it was and no temporary behind. A path ddplab may not write
    (a missing folder, someone else's file) is refused first."""
    path = check_target(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two writers never share one
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
