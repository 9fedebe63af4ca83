"""Which existing files ddplab may replace: only its own (issue 25, D2).

An output flag such as ``stragglers --plot PATH`` used to replace whatever PATH named, as root
a system file, and to create missing parent folders. Now a file is written only when it is
new, or when ddplab wrote it: a picture carrying the ``Software: ddplab`` PNG text chunk
that output/plot.py embeds, a text file opening with one of ddplab's own headers (a calib.json,
a Slurm script, a report), or any file inside a folder ddplab made for its output (one holding
the marker output/outdir.py or realrun/runfolder.py leaves). Everything else is refused, and a
missing parent folder is refused rather than created: a typo in a path should not build a
tree somewhere unexpected.
"""

import json
import os
import stat
from pathlib import Path

SOFTWARE = "ddplab"  # the PNG "Software" text chunk every picture carries (output/plot.py)
OUT_MARKER = ".ddplab.out"  # a folder ddplab made for simulation output (output/outdir.py)
RUN_MARKER = ".ddplab.lock"  # a real run's folder (realrun/runfolder.py CLAIM; realrun stands alone)
MARKERS = (OUT_MARKER, RUN_MARKER)
# The opening of ddplab's text files that live outside its folders (nodes.slurm_script, workflow/report.py).
TEXT_HEADERS = (
    b"#!/bin/bash\n# ddplab: ",
    b"<!doctype html><html><head><meta charset=utf-8><title>ddplab report</title>",
)
JSON_SCHEMA_PREFIX = "ddplab"  # calib.json's "schema": "ddplab-calib"
SNIFF_BYTES = 64 << 20  # a calib.json is kilobytes; past this it is not ours to parse


def folder_is_ours(folder: Path) -> bool:
    return any((Path(folder) / m).is_file() for m in MARKERS)


def written_by_ddplab(path: Path) -> bool:
    """True when ``path`` (an existing regular file) is one ddplab wrote."""
    path = Path(path)
    if folder_is_ours(path.parent):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if head == b"\x89PNG\r\n\x1a\n":
                return _png_software(f).startswith(SOFTWARE)
            f.seek(0)
            head = f.read(4096)
            if head.startswith(TEXT_HEADERS):
                return True
            if path.suffix == ".json" and os.fstat(f.fileno()).st_size <= SNIFF_BYTES:
                f.seek(0)
                data = json.loads(f.read())
                return isinstance(data, dict) and str(data.get("schema", "")).startswith(JSON_SCHEMA_PREFIX)
    except (OSError, ValueError, RecursionError):
        return False
    return False


def _png_software(f) -> str:
    """The value of the PNG's ``Software`` tEXt chunk ('' when none comes before the image data)."""
    while True:
        head = f.read(8)
        if len(head) < 8:
            return ""
        size, kind = int.from_bytes(head[:4], "big"), head[4:]
        if kind in (b"IDAT", b"IEND") or size > 1 << 20:
            return ""
        data = f.read(size + 4)[:size]  # the chunk and its CRC
        if kind == b"tEXt" and data.startswith(b"Software\x00"):
            return data[len(b"Software\x00") :].decode("latin-1")


def check_target(path, flag: str = "") -> Path:
    """Refuse (ValueError, one line naming ``flag`` and ``path``) a path ddplab must not write:
    a missing parent folder, something that is not a regular file, or a file it did not write."""
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    if not path.parent.is_dir():
        raise ValueError(f"{where}: {path.parent}: no such directory (ddplab does not create it); make it first")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{where}: exists and is not a regular file; ddplab writes only new files or its own")
    if not written_by_ddplab(path):
        raise ValueError(
            f"{where}: exists and ddplab did not write it; it replaces only its own files: pick a new name"
        )
    return path
