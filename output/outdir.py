"""Folders ddplab writes simulation output into (``simulate --out`` and the other ``--out``s).

A folder ddplab makes carries a marker file (output/ownfiles.py OUT_MARKER), so a rerun may
replace what is in it (output/atomic.py) and ``--force`` knows whose files it moves. ``claim`` is
for ``simulate --out`` (issue 25, D7): a reused folder once mixed an earlier run's records with
this run's, and ``ddplab stragglers`` read the stale ones, so a folder that holds anything is
refused unless ``--force``, which moves an earlier ddplab output aside (never deletes it) and
refuses a folder of someone else's files."""

import datetime
from pathlib import Path

from output.ownfiles import MARKERS, OUT_MARKER, folder_is_ours


def ensure(path: Path) -> Path:
    """``path`` as an output folder: made (with parents) if missing, and marked as ddplab's when
    it is new or empty. A folder already holding other files stays unmarked, so its files are
    not replaced (output/ownfiles.py) while new ones are written beside them."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path}: exists and is not a folder")
    path.mkdir(parents=True, exist_ok=True)
    if not folder_is_ours(path) and not _entries(path):
        (path / OUT_MARKER).write_text("a folder ddplab made for its output\n")
    return path


def claim(path: Path, *, force: bool = False, flag: str = "--out") -> tuple[Path, Path | None]:
    """An empty output folder for one run, and where an earlier run was moved (or None)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path}: exists and is not a folder")
    moved = None
    earlier = _entries(path) if path.is_dir() else []
    if earlier:
        names = ", ".join(p.name for p in earlier[:3]) + (", ..." if len(earlier) > 3 else "")
        what = f"{len(earlier)} entries: {names}"
        if not folder_is_ours(path):
            raise ValueError(f"{flag} {path}: holds files ddplab did not write ({what}); pick a new or empty folder")
        if not force:
            raise ValueError(
                f"{flag} {path}: holds an earlier run ({what}), which a reader would mix with this one;"
                " pick a new folder, or --force to move that run aside"
            )
        moved = _aside(path)
    return ensure(path), moved


def _entries(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name not in MARKERS)


def _aside(path: Path) -> Path:
    """Rename the whole folder to a free sibling ``<name>.old-<time>[-n]``: one rename, so a
    reader never sees half of the earlier run moved."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    aside, n = path.with_name(f"{path.name}.old-{stamp}"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.old-{stamp}-{n}")
    path.rename(aside)
    return aside
