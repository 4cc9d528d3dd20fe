"""The tag of the store's zlib blobs (docs/store.md "Schema"): three letters naming the kind of
row, its format version as one byte, then the zlib stream. A zlib stream starts with 0x78,
which no tag does, so a blob written before tags is told apart and read as format 1, its
layout; a newer format is refused with its number, never read as this layout.

One codec for every kind: the store's chunks, rollups, usage rows and shapes
(timeseries/store.py) and the process scans (timeseries/scans.py, which the store imports).
"""

from __future__ import annotations

import zlib
from typing import Any

from beamalloc.timeseries.frames import NewerFormat


def magic(prefix: bytes, version: int) -> bytes:
    """A kind's tag: its three letters and its format version."""
    assert len(prefix) == 3 and prefix[:1] != b"\x78" and 0 < version < 256
    return prefix + bytes([version])


def pack(kind: bytes, payload: bytes, level: int = 9) -> bytes:
    """`payload` zlib-compressed behind its kind's tag (`magic`)."""
    return kind + zlib.compress(payload, level)


def unpack(blob: Any, kind: bytes, what: str) -> bytes:
    """The zlib stream of a blob `pack` wrote with `kind`, or the whole blob where it was
    written before tags (format 1). NewerFormat for a newer format of the kind, ValueError for
    its letters with no format or an older one that never existed, TypeError for no blob."""
    if not isinstance(blob, bytes):
        raise TypeError("a blob that is not bytes")
    if not blob.startswith(kind[:-1]):
        return blob
    version = blob[len(kind) - 1:len(kind)]
    if version and version[0] > kind[-1]:
        raise NewerFormat(f"{what} of format {version[0]} (this beamalloc reads format "
                          f"{kind[-1]})")
    if version != kind[-1:]:
        raise ValueError(f"{what} of no format")
    return blob[len(kind):]
