"""The settings of one `beamalloc` run, built once in main() and passed to the command (as
httpie's Environment): where output goes and how the command reaches a node. Commands read
them from here, not from module globals."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from beamalloc.collector.access import Access
    from beamalloc.collector.procdump import ProcSections
    from beamalloc.snapshot import Snapshot


class Context:
    """Immutable by convention but for what one stage hands the next (dump_procs). A plain
    class: a dataclass or NamedTuple would cost `beamalloc --version` several percent of its
    start (tests/bench/bench_startup.py)."""

    __slots__ = ("access", "dump_procs", "quiet", "stderr", "stdout")

    def __init__(self, stdout: TextIO, stderr: TextIO, *, quiet: bool = False,
                 access: Access | None = None) -> None:
        self.stdout = stdout
        self.stderr = stderr
        #: -q: no progress, notes or "wrote FILE" lines (beamalloc/console.py prints those)
        self.quiet = quiet
        #: how we reach the node (docs/access.md: our own client, a hidden node over TLS): the
        #: command line's options over the environment's; None for a command that never connects
        self.access = access
        #: the =proc sections of the crash dump cli/inputs.load() read last, gathered in the
        #: pass that read its allocators, until holders() takes them (issue 28 item 1: a dump is
        #: read once); one at a time, its Snapshot kept beside them
        self.dump_procs: tuple[Snapshot, ProcSections] | None = None

    def write(self, path: str | None, text: str) -> None:
        """`text` to stdout (None or '-'), with its final newline, or atomically into `path`."""
        if path in (None, "-"):
            self.stdout.write(text if text.endswith("\n") else text + "\n")
            return
        from beamalloc.files import atomic_write_text

        atomic_write_text(path, text)
