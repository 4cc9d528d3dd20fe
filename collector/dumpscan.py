"""A crash dump's sections, found at byte level (issue 28 item 1).

A dump is `=header` lines each followed by the lines of its section, and a reader needs only a
few kinds of them (the allocators, =memory, =ets, =proc); most of a large dump's bytes are the
heaps, binaries and literals nobody here reads. The scanner reads the file in CHUNK-sized blocks,
finds the next header the caller keeps natively (collector/native/src/dumpscan.rs: one SIMD
search for "\\n=" and a first-byte test per header, no Python step per line, per block or per
header passed over; a regular file is read at its offsets into one buffer) and decodes only the
header line and the sections the caller keeps. Memory is bounded by what is kept: a block, plus
one kept section of at most MAX_SECTION bytes (the rest of a longer one is passed over).

Lines are split at "\\n" only, as the line readers always did; a section's text is its lines
with trailing "\\r" removed and lines over MAX_LINE left out (they are never allocator data).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

#: Bytes read at a time: a block costs one read, and 1 MiB read and joined costs 0.6 of 4 MiB's
#: CPU (tests/bench/bench_crashdump.py's dump; a smaller block stays in the caches).
CHUNK = 1 << 20
#: Longer lines are not dump data a reader uses; they are skipped unread.
MAX_LINE = 1 << 20
#: A kept section's bytes; past them the section is passed over (real sections are kilobytes).
MAX_SECTION = 4 << 20

#: (header line, body text or None when it has no line, where the header starts (scan: its byte
#: offset; line_sections: its line number), whether another header follows). The first item is
#: the dump's first line and the lines before the first header; the others are the sections
#: `want` matches.
Section = tuple[str, "str | None", int, bool]
#: What is kept of a passed-over header (the last one read is named when a dump is cut there).
MAX_HEADER = 256
#: A match this close to the end of a block is tried again with the next block (a header can
#: straddle two blocks; `$` matches at a block's end).
_EDGE = 64


@dataclass
class Stats:
    """What a scan passed by: the sections it read (after the first line), and the last header
    (kept or not: a dump cut short names where it was cut). The headers passed over are not
    counted: bytes.count of b"\\n=" would cost a second pass."""

    sections: int = 0
    last: str = ""


class Headers:
    """The section headers a reader keeps: `prefixes` (a name and anything after it, as
    "allocator:"), `lines` (a name alone on its header line, '\\r's allowed after it).
    `search` finds the next one natively (collector/native/src/dumpscan.rs) where the extension is
    built, else with `pattern`, the reference it is fuzzed against (tests/fuzz/reader_props.py:
    the block reader against the line reader, which matches with `pattern`)."""

    def __init__(self, prefixes: tuple[str, ...], lines: tuple[str, ...] = ()) -> None:
        self.prefixes, self.lines = prefixes, lines
        names = [re.escape(n.encode()) for n in prefixes]
        names += [re.escape(n.encode()) + rb"\r*(?:\n|\Z)" for n in lines]
        #: over the bytes "\\n=HEADER\\n" (`\\Z`: the end of the data ends a header line)
        self.pattern = re.compile(rb"\n=(?:" + b"|".join(names) + rb")")
        self.specs = [(n.encode(), False) for n in prefixes] + [(n.encode(), True) for n in lines]
        self._native = None
        try:  # the native search of the Rust extension; absent in a source tree never built
            from beamalloc._refalloc import DumpWant

            self._native = DumpWant(self.specs)
        except ImportError:  # pragma: no cover - `make setup` builds it
            pass

    def search(self, data: bytes, start: int) -> int:
        """Where the first kept "\\n=HEADER" at or after `start` begins (its "\\n"), or -1."""
        if self._native is not None:
            return int(self._native.search(data, start))
        m = self.pattern.search(data, start)
        return m.start() if m is not None else -1


class Keys:
    """The `KEY: value` lines of a section a reader reads: `values(text)` gives, for each key,
    the rest of the first line of `text` that starts with "KEY: " (None where none does), as
    `pattern` (`^(KEY|...): (.*)$`, re.M) finds first; natively (collector/native/src/dumpscan.rs
    `line_values`: no regex step a byte, no dict a section) where the extension is built."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.pattern = re.compile("^(" + "|".join(re.escape(k) for k in keys) + "): (.*)$", re.M)
        self._index = {k: i for i, k in enumerate(keys)}
        self._native = None
        try:
            from beamalloc._refalloc import DumpWant

            self._native = DumpWant([((k + ": ").encode(), False) for k in keys])
        except ImportError:  # pragma: no cover - `make setup` builds it
            pass

    def values(self, text: str) -> list[str | None]:
        if self._native is not None:
            try:
                return self._native.values(text)  # type: ignore[no-any-return]
            except UnicodeEncodeError:  # a lone surrogate (text not decoded from bytes)
                pass
        return self.reference(text)

    def parsed(self, text: str, ints: int, most: int) -> tuple[list[Any], int]:
        """`values` stripped, the first `ints` of them as ints where they are counts
        (`[0-9]{1,20}`, at most `most`); and the index of the first of those present that is
        not, or -1."""
        if self._native is not None:
            try:
                return self._native.parsed(text, ints, most)  # type: ignore[no-any-return]
            except UnicodeEncodeError:
                pass
        return parse(self.reference(text), ints, most)

    def reference(self, text: str) -> list[str | None]:
        """The same with `pattern` (the native search is tested against it)."""
        out: list[str | None] = [None] * len(self.keys)
        for k, v in self.pattern.findall(text):
            i = self._index[k]
            if out[i] is None:
                out[i] = v
        return out


def parse(values: list[str | None], ints: int, most: int) -> tuple[list[Any], int]:
    """Keys.parsed of raw values (the reference of the native one)."""
    out: list[Any] = []
    bad = -1
    for i, v in enumerate(values):
        if v is not None:
            v = v.strip()
            if i < ints:
                # [0-9]{1,20}: isdigit alone takes other scripts' digits
                if v.isascii() and v.isdigit() and len(v) <= 20 and int(v) <= most:
                    v = int(v)
                elif bad < 0:
                    bad = i
        out.append(v)
    return out, bad


def keeps(want: Headers, header: str) -> bool:
    """Whether `want` keeps a header line (matched with its pattern: the reference)."""
    return want.pattern.match(b"\n" + header.encode("latin-1", "replace") + b"\n") is not None


def _text(body: bytes) -> str | None:
    """A section's lines as one text: trailing '\\r' of each line removed, long lines left out."""
    s = body.decode("latin-1")
    if "\r" not in s and len(s) <= MAX_LINE:
        return s
    lines = [x for x in (line.rstrip("\r") for line in s.split("\n")) if len(x) <= MAX_LINE]
    return "\n".join(lines) if lines else None


def scan(f: BinaryIO, want: Headers, stats: Stats,
         head: bytes = b"", sink: Any = None) -> Iterator[Section]:
    """The sections of the dump read from `f` (after the bytes `head` already read from it)
    whose header `want` keeps, and its first one. The others are passed over by `want.search`,
    the last of them noted in `stats`, never decoded. Where a section starts is given as its
    header's byte offset in the file (`head` included): a line number would cost a count of
    every line (line_of gives it when it is needed).

    Natively where the extension is built (collector/native/src/dumpscan.rs `Scanner`: the
    loop, the reads and the search with no Python step a block or a section passed over; a
    regular file read at its offsets into one buffer), else scan_py, its reference. `sink`
    (procdump.proc_sink), where given, is handed the complete =proc sections instead of them
    being given (natively only: the caller still reads what scan_py gives)."""
    try:
        from beamalloc._refalloc import DumpScan
    except ImportError:  # pragma: no cover - `make setup` builds it
        return scan_py(f, want, stats, head)
    fd, offset = -1, 0
    try:  # a regular file is read by the native side at its offsets, from where `f` is
        if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            fd, offset = f.fileno(), f.tell()
    except (OSError, ValueError, AttributeError):  # io.BytesIO, a pipe: read through f.read
        pass
    it = DumpScan(want.specs, f, fd, offset, head, stats,
                  (CHUNK, MAX_LINE, MAX_SECTION, MAX_HEADER, _EDGE))
    if sink is not None:
        it.attach(sink)
    return it  # type: ignore[no-any-return]


def scan_py(f: BinaryIO, want: Headers, stats: Stats,
            head: bytes = b"") -> Iterator[Section]:
    """scan in Python: the reference the native scanner is tested against."""
    data = head
    eof = False
    base = 0  # the file offset of data[0]

    def more(drop: int) -> int:
        """Read a block; the bytes before `drop` are dropped. The shift, or -1 at the end."""
        nonlocal data, eof, base
        if eof:
            return -1
        block = f.read(CHUNK)
        if not block:
            eof = True
            return -1
        data = data[drop:] + block
        base += drop
        return drop

    def passed(a: int, b: int) -> int:
        """Note the last header whose line starts in data[a + 1:b + 1] (none of them kept).
        Where the data may be dropped up to: `b`, or that header's "\\n" when the block ends
        inside its first MAX_HEADER bytes (the next block completes it: noted cut, it named
        a cut dump's last section short of what the line reader names)."""
        if (r := data.rfind(b"\n=", a, min(b + 1, len(data))) + 1) > 0:
            e = data.find(b"\n", r, r + MAX_HEADER)
            if e < 0 and len(data) < r + MAX_HEADER and not eof:
                return r - 1
            stats.last = data[r:e if e >= 0 else r + MAX_HEADER].decode("latin-1").rstrip("\r")
        return b

    if not data and more(0) < 0:
        return
    pos = 0  # where the current header line starts
    first = True
    while True:
        # the header line, at most MAX_LINE of it
        e = data.find(b"\n", pos)
        while e < 0 and len(data) - pos <= MAX_LINE and (s := more(pos)) >= 0:
            pos -= s
            e = data.find(b"\n", pos)
        stop = e if e >= 0 else len(data)
        header = data[pos:min(stop, pos + MAX_LINE)].decode("latin-1").rstrip("\r")
        offset = base + pos
        if not first:
            stats.last = header[:MAX_HEADER]
        if not first and not keeps(want, header):
            # pass over to the next header `want` matches, counting the others
            a = pos
            while True:
                m = want.search(data, a)
                if m >= 0 and (eof or m <= len(data) - _EDGE):
                    break
                if eof:
                    break
                drop = max(a, len(data) - _EDGE)
                # (a match at the block's end may be no header a reader keeps)
                drop = passed(a, drop)
                a = 0 if (s := more(drop)) >= 0 else drop
                pos = min(pos, a)
            if m < 0:
                passed(a, len(data))
                return
            pos = m + 1  # its header is noted in `stats` at the loop's top, kept or not
            continue
        stats.sections += not first
        first = False
        body: str | None = None
        if e < 0:  # the last line, or a header line longer than MAX_LINE: nothing kept of it
            n = data.find(b"\n=", pos)
        else:
            # the section's lines run from e + 1 up to the next "\n=" or the end of the file
            n = data.find(b"\n=", e)
            while n < 0 and len(data) - e <= MAX_SECTION + 1 and (s := more(pos)) >= 0:
                pos, e = pos - s, e - s
                n = data.find(b"\n=", e)
            if n >= 0 and n - e <= MAX_SECTION + 1:
                body = _text(data[e + 1:n]) if n > e else None
            elif n < 0 and eof:  # the file ends inside the section
                raw = data[e + 1:]
                body = _text(raw[:-1] if raw.endswith(b"\n") else raw) if raw else None
            else:  # longer than MAX_SECTION: its first lines only
                raw = data[e + 1:e + 1 + MAX_SECTION]
                k = raw.rfind(b"\n")
                body = _text(raw[:k]) if k >= 0 else None
        while n < 0 and (s := more(max(pos, len(data) - 1))) >= 0:  # pass over the rest
            pos = max(pos - s, 0)
            n = data.find(b"\n=", max(pos, len(data) - CHUNK - 1))
        yield header, body, offset, n >= 0
        if n < 0:
            return
        pos = n + 1


def line_sections(lines: Iterable[str], want: Headers,
                  stats: Stats) -> Iterator[Section]:
    """The same from lines already split (a dump held as text: tests, the fuzzers)."""
    header: str | None = None
    lineno = 0
    body: list[str] | None = None
    for i, raw in enumerate(lines, 1):
        text = raw.rstrip("\r\n")
        if header is None or text.startswith("="):
            if header is not None and body is not None:
                yield header, "\n".join(body) if body else None, lineno, True
            if header is not None:
                stats.last = text[:MAX_HEADER]
            header, lineno = text[:MAX_LINE], i
            body = [] if i == 1 or keeps(want, text) else None
            stats.sections += i > 1 and body is not None
            continue
        if body is not None and len(text) <= MAX_LINE:
            body.append(text)
    if header is not None and body is not None:
        yield header, "\n".join(body) if body else None, lineno, False


def line_of(path: str | Path, offset: int) -> int:
    """The number of the line at byte `offset` of the file (for a message: read again up to it,
    once, instead of counting every line of every dump)."""
    line = 1
    with open(path, "rb") as f:
        while offset > 0 and (block := f.read(min(CHUNK, offset))):
            line += block.count(b"\n")
            offset -= len(block)
    return line
