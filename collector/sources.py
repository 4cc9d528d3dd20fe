"""Turn a SOURCE argument into a Snapshot (docs/design.md, "Conventions").

A SOURCE with `@` is a node name; anything else is a file (or `-` for standard input) whose
format is detected from its first bytes: an `=erl_crash_dump:` header, a beamalloc JSON document
(`{"schema": ...`), or an Erlang term (a recon snapshot or an allocator dump).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, BinaryIO

from beamalloc.errors import InputError
from beamalloc.files import open_input
from beamalloc.snapshot import MAX_TIME, Snapshot, check_text_cost
from beamalloc.units import human as _human

if TYPE_CHECKING:
    from beamalloc.collector.procdump import ProcSections

#: recon snapshot files and beamalloc JSON are read whole (and held twice: bytes, then text); a
#: +S 1024 node's JSON is 22 MB and its term text 10 MB, so anything this large is not one of
#: them (256 MiB let a file of `[],` reach 400 MB before its count was refused). Crash dumps
#: are streamed and have no limit.
MAX_TERM_FILE = 64 << 20


def is_node_name(source: str) -> bool:
    return "@" in source and not os.path.exists(source)


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data[:65536]:
        raise InputError(f"{name}: binary data, not a snapshot, recon file or crash dump")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # ~p writes latin-1 for non-ASCII atoms and strings


def read_file(path: str, procs: ProcSections | None = None) -> Snapshot:
    """The Snapshot of the file at `path` ('-': standard input); a crash dump's =proc sections
    are fed to `procs` in the same pass (cli/inputs.py: its holders)."""
    # The readers are imported here, not with this module: a command given a node name asks
    # is_node_name and reads no file (cli/main.py, "Startup").
    from beamalloc.collector.crashdump import MAGIC, read_crashdump_file
    from beamalloc.collector.recon import read_recon
    from beamalloc.collector.snippet import is_snippet, read_snippet

    name = "standard input" if path == "-" else path
    f: BinaryIO = sys.stdin.buffer if path == "-" else _open(path)
    with f:
        head = _head(f)
        if not head.strip():
            raise InputError(f"{name}: empty file")
        if head.lstrip().startswith(MAGIC.encode()):
            snap = read_crashdump_file(f, name, head.lstrip(), procs)
            _check(snap, name)
            return snap
        if is_snippet(head):  # an external term: a `beamalloc snippet` file (docs/access.md)
            mtime = os.fstat(f.fileno()).st_mtime if path != "-" else None
            snap = read_snippet(head + f.read(MAX_TERM_FILE), name,
                                mtime if mtime is not None and 0 < mtime <= MAX_TIME else None)
            _check(snap, name)
            return snap
        if path != "-":
            size = os.fstat(f.fileno()).st_size
            if size > MAX_TERM_FILE:
                raise InputError(
                    f"{name}: {_human(size)} is too large for a recon snapshot or beamalloc JSON "
                    f"(at most {_human(MAX_TERM_FILE)}), and it is not a crash dump"
                )
        data = head + f.read(MAX_TERM_FILE + 1 - len(head))
        if len(data) > MAX_TERM_FILE:
            raise InputError(
                f"{name}: more than {_human(MAX_TERM_FILE)} of input; "
                "not a recon snapshot or beamalloc JSON"
            )
        taken_at = os.fstat(f.fileno()).st_mtime if path != "-" else None
        if taken_at is not None and not 0 < taken_at <= MAX_TIME:
            taken_at = None  # a file time set by hand to before 1970 or after 9999
    text = _decode(data, name)
    del data  # the text alone from here: the bytes would double what a large file holds
    stripped = text.lstrip()
    try:
        if stripped.startswith("{") and stripped[1:].lstrip().startswith('"'):
            snap = Snapshot.from_json(text)
        else:
            check_text_cost(text)  # before parsing: what the text would build
            snap = read_recon(text, node=_node_from_name(path), taken_at=taken_at)
            snap.notes.append(
                "time taken from the file's modification time"
                if taken_at
                else "no time stamp in the file"
            )
            snap.check()
    except InputError as e:
        raise InputError(f"{name}: {e}") from None
    return snap


def _head(f: BinaryIO) -> bytes:
    """The first bytes, past any leading blank lines (a recon file pasted with 70 newlines
    before it is still one): 64 of them that are not all white space, or what there is."""
    head = f.read(64)
    if not head or head.strip():
        return head
    # White space so far: read on, looking only at what is new (stripping the whole head each
    # time was quadratic: 40 MB of spaces took 14 s, issue 25); the head is kept whole, so that
    # line numbers in messages stay right.
    chunks, size = [head], len(head)
    while size < MAX_TERM_FILE:
        more = f.read(1 << 16)
        if not more:
            break
        chunks.append(more)
        size += len(more)
        if more.strip():
            break
    return b"".join(chunks)


def _check(snap: Snapshot, name: str) -> None:
    try:
        snap.check()
    except InputError as e:
        raise InputError(f"{name}: {e}") from None


def _open(path: str) -> BinaryIO:
    if not os.path.lexists(path):
        raise InputError(f"{path}: no such file (a node name needs an '@', as in app@host)")
    return open_input(path)


def _node_from_name(path: str) -> str:
    """recon files do not name their node; the file name is the best label we have."""
    if path == "-":
        return "unknown"
    # A file name is bytes: shown as text it keeps no lone surrogate and no control character.
    raw = os.path.basename(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "".join(c if c.isprintable() else "?" for c in raw)[:255] or "unknown"
