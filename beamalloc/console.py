"""The terminal every reporter writes to."""

from __future__ import annotations

import sys
from typing import Any


def wide_console(stderr: bool = False) -> Any:
    """A terminal keeps its width; a pipe or a file gets room for the widest table."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else 180)
