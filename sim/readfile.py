"""Reading an input file the user named: a regular file only, of a bounded size (issue 25, D9).

A FIFO given as a scenario or ``--calib`` used to hang (open blocks until a writer comes), and
``/dev/zero`` was read until MemoryError. Here the open never blocks (O_NONBLOCK), anything but
a regular file is refused, and a file is read up to a cap (one byte more tells it is larger),
so a refusal is one line naming the file and the reason."""

import os
import stat
from pathlib import Path

MIB = 1 << 20
TEXT_CAP = 16 * MIB  # a scenario, models.toml or a model's config.json: kilobytes in practice


def read_bytes(path, cap: int = TEXT_CAP, what: str = "") -> bytes:
    """The whole of ``path``, or ValueError ``"{what}: {path}: <reason>"``."""
    where = f"{what}: {path}" if what else str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ValueError(f"{where}: cannot read ({e.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{where}: not a regular file (a FIFO, device or folder); name a file")
        chunks, got = [], 0
        while got <= cap:
            chunk = os.read(fd, min(cap + 1 - got, 8 * MIB))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > cap:
            raise ValueError(f"{where}: larger than {cap / MIB:g} MiB, more than a file of this kind holds")
        return b"".join(chunks)
    except OSError as e:
        raise ValueError(f"{where}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)


def read_text(path, cap: int = TEXT_CAP, what: str = "") -> str:
    """``read_bytes`` as UTF-8; bytes that are not UTF-8 are one line too."""
    data = read_bytes(path, cap, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what + ': ' if what else ''}{Path(path)}: not UTF-8 text") from None
