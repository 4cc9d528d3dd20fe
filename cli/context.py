"""The settings of one `beamalloc` run, built once in main() and passed to the command (as
httpie's Environment): where output goes, the terminal it is drawn on, and how the command
reaches a node. Commands read them from here, never from module globals."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from beamalloc.console import Terminal

if TYPE_CHECKING:
    from beamalloc.collector.access import Access


class Context:
    """Immutable by convention. A plain class: a dataclass or NamedTuple would cost `beamalloc
    --version` several percent of its start (tests/bench/bench_startup.py)."""

    __slots__ = ("access", "stderr", "stdout", "term")

    def __init__(self, stdout: TextIO, stderr: TextIO, *, quiet: bool = False,
                 no_color: bool = False, access: Access | None = None) -> None:
        self.stdout = stdout
        self.stderr = stderr
        #: the terminal on these streams (beamalloc/console.py): its width, colours, notes and
        #: progress lines (-q: none), handed to the stages that say something and the reporters
        self.term = Terminal(stdout, stderr, quiet=quiet, no_color=no_color)
        #: how we reach the node (docs/access.md: our own client, a hidden node over TLS): the
        #: command line's options over the environment's; None for a command that never connects
        self.access = access

    def write(self, path: str | None, text: str) -> None:
        """`text` to stdout (None or '-'), with its final newline, or atomically into `path`."""
        if path in (None, "-"):
            self.stdout.write(text if text.endswith("\n") else text + "\n")
            return
        from beamalloc.files import atomic_write_text

        atomic_write_text(path, text)
