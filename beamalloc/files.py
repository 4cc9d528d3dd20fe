"""Writing output files so that nothing already stored is lost."""

from __future__ import annotations

import os
from pathlib import Path

from beamalloc.errors import InputError


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place: a failed or
    interrupted write never leaves half a file where a good one was. Errors are one line."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
