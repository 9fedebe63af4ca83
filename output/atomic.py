"""A file written whole: to a temporary name beside it, then a rename, so a reader (or a rerun
after Ctrl-C or kill -9) never finds half of it. Every file ddplab writes at a final path goes
through here: text and CSV (write_text_atomic, write_csv_atomic; JSON in output/jsonfile.py),
pictures (output/plot.py) and simulation records (output/export.py). It replaces only a file
ddplab wrote (output/ownfiles.py)."""

import csv
import io
import os
from collections.abc import Callable
from pathlib import Path

from output.ownfiles import check_target


def write_atomic(path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` fills a temporary file beside ``path``, which then replaces ``path``; a
    failed write leaves ``path`` as it was and no temporary behind. A path ddplab may not write
    (a missing folder, someone else's file) is refused first."""
    path = check_target(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two writers never share one
    _remove_orphans(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        # A full disk surfaces inside numpy, matplotlib or a file object that names no file (or
        # the temporary): say which output could not be written (issue 25, D16: "None: No space
        # left on device" before). ``path`` keeps what it held.
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str) -> None:
    """A text file written whole."""
    write_atomic(path, lambda tmp: tmp.write_text(text))


def write_csv_atomic(path: Path, header: list[str], rows: list[list]) -> Path:
    """A CSV table written whole (write_text_atomic)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    write_text_atomic(path, buf.getvalue())
    return Path(path)


def _remove_orphans(path: Path) -> None:
    """Temporaries of ``path`` whose writer is dead: a kill -9 (or the OOM killer) runs no
    cleanup, and `simulate --records` leaves hundreds of megabytes so. A live writer's (another
    process writing the same file now) is left alone."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
