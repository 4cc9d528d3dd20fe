"""The property of the CSV reader's fast paths (refalloc/src/csv.rs `fast_row`, `row`), for
atheris (atheris_csv.py) and for `make test` (tests/test_trace_csv_native.py, over mutations of
real traces).

Any bytes, converted from CSV to binary by the one reader with its fast paths and with its full
path alone (`convert(native=False)`: csv's excel dialect, str.strip and int() as Python 3.11 had
them): the same file, or the same one-line TraceError. The fast paths decline what they do not
read and the full path reads it, so the property fails only when a fast path takes a row the
full path reads differently or refuses.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from beamalloc.trace import TraceError, convert

_DIR = Path(tempfile.gettempdir()) / f"beamalloc-csvfuzz-{os.getpid()}"


def outcome(src: Path, dst: Path, native: bool) -> tuple[str, bytes | str]:
    try:
        convert(src, dst, to="binary", native=native)
    except TraceError as exc:
        return "error", str(exc).replace(str(src), "SRC")
    return "ok", dst.read_bytes()


def check(data: bytes) -> None:
    if data[:1] not in (b"#", b"t"):
        return  # not a CSV trace: the fast path never sees it
    _DIR.mkdir(exist_ok=True)
    src = _DIR / "in.csv"
    src.write_bytes(data)
    fast = outcome(src, _DIR / "fast.batr", native=True)
    ref = outcome(src, _DIR / "ref.batr", native=False)
    assert fast == ref, (fast, ref)
