"""The settings of one `beamalloc` run, built once in main() and passed to the command (as
httpie's Environment): where output goes and how the command reaches a node. Commands read
them from here, not from module globals."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, TextIO

if TYPE_CHECKING:
    from beamalloc.collector.access import Access


class Context(NamedTuple):
    """A NamedTuple, not a dataclass: importing dataclasses would cost `beamalloc --version` a
    third of its start (tests/bench/bench_startup.py)."""

    stdout: TextIO
    stderr: TextIO
    #: -q: no progress, notes or "wrote FILE" lines (beamalloc/console.py prints those)
    quiet: bool = False
    #: how a hidden node reaches the node (docs/access.md): the command line's options over the
    #: environment's; None for a command that never connects
    access: Access | None = None

    def write(self, path: str | None, text: str) -> None:
        """`text` to stdout (None or '-'), with its final newline, or atomically into `path`."""
        if path in (None, "-"):
            self.stdout.write(text if text.endswith("\n") else text + "\n")
            return
        from beamalloc.files import atomic_write_text

        atomic_write_text(path, text)
