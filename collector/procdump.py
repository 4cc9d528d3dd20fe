"""A crash dump's process sections (`=proc:<pid>`) as a ProcessTable (issue 12 item 6).

Read separately from collector/crashdump.py (the allocator sections): the file is read in blocks
and only its =proc sections are decoded (collector/dumpscan.py), so a dump of any size costs one
pass, a section's keys found natively (dumpscan.Keys); its memory is its processes' records,
or, with a `keep` (advice/holders.DumpMembers: the analyze and recommend commands), what that
keeps of them and the groups summed as read. With DumpMembers the sections are read natively
(collector/native/src/procrecs.rs: the scan hands them over, no Python object or call per
process; the Python classes are its reference, tests/test_dump_native.py).
A section is `Key: Value` lines up to the next line that starts with `=`. What each key holds
(erts' own crash dump writer, OTP 20-27):

    State, Name, Spawned as, Message queue length, Reductions     as the words say
    Stack+heap, OldHeap              words: the young heap block (stack included), the old heap
    Heap unused, OldHeap unused      words of them not in use
    Heap fragment data               words in heap fragments (message data not yet collected)
    BinVHeap, OldBinVHeap            words of refc binary data referenced from each generation
    Memory                           bytes, what process_info(P, memory) gives (not before OTP
                                     17: the heap's bytes stand in)
    Program counter                  "0x... (Module:Function/Arity + Offset)"

A dump has no binary addresses, so binaries cannot be deduplicated across processes nor told
exclusive: those fields stay None. A section that is malformed (a required key missing, a value
that is not a number) is skipped with one line on stderr, never a traceback, and `complete`
says the table is short of it; a dump cut off in its last section is the same case.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TextIO

from beamalloc.collector.dumpscan import (
    Headers,
    Keys,
    Section,
    Stats,
    line_of,
    line_sections,
    parse,
    scan,
)
from beamalloc.collector.processes import MFA, Group, Proc, ProcessTable

_PID = re.compile(r"<\d+\.\d+\.\d+>\Z")
# module and function names of printable characters only: a control character is no name
_PC = re.compile(r"\(([^()\s\x00-\x1f\x7f-\x9f]+:[^()\s\x00-\x1f\x7f-\x9f]+/\d+) \+ \d+\)")
_MFA = re.compile(r"[^\s:\x00-\x1f\x7f-\x9f]+:[^\s/\x00-\x1f\x7f-\x9f]+/\d+\Z")
_WORDSIZE = re.compile(r"\[(32|64)-bit\]")
#: Sizes above 2^61 words (2^64 bytes) are no node's: a section claiming them is skipped.
MAX_WORDS = (1 << 61) - 1
#: Keys without which a section says nothing about who holds memory.
REQUIRED = ("Stack+heap", "OldHeap")
PROC_INTS = ("Stack+heap", "OldHeap", "Heap unused", "OldHeap unused", "Heap fragment data",
         "BinVHeap", "OldBinVHeap", "Memory", "Message queue length", "Reductions")
#: The `Key: Value` lines proc_of reads, in the order of its values (the first line of each
#: counts; a line's key is what precedes its first ": ").
KEYS = (*PROC_INTS, "State", "Name", "Spawned as", "Program counter")
VALUES = Keys(KEYS)
_STATE, _NAME, _SPAWNED, _PCX = range(len(PROC_INTS), len(KEYS))
#: Entries of a table's cache of values seen (ProcSections): past them it starts again.
MAX_CACHE = 1 << 16


def printable(s: str | None, limit: int = 100) -> str | None:
    """A name as the outputs may show it: printable characters only (an escape sequence in a
    name is data, never a command to the terminal), at most `limit` of them."""
    if s is None:
        return None
    s = s[:limit]
    return s if s.isprintable() else "".join(c if c.isprintable() else "?" for c in s)


class SkipSection(ValueError):
    """A =proc section that says nothing reliable (collector/dumptables.py skips it too)."""


def _derived(v: str | None) -> tuple[MFA | None, str | None, str | None]:
    """Of a `Spawned as`, `Program counter` or `State` value (stripped): what proc_of keeps of
    it as each."""
    if v is None:
        return None, None, None
    pc = _PC.search(v)
    return (MFA.read(v) if v and _MFA.match(v) else None, pc.group(1) if pc else None,
            printable(v.lower()) or None)


def valid_name(name: str | None) -> str | None:
    """A Name value as proc_of keeps it: a registered name's characters, or None."""
    return name if name and name.replace("_", "").isalnum() else None


def proc_sink(keep: Any = None) -> Any:
    """The native reader of a dump's =proc sections (collector/native/src/procrecs.rs), with
    `keep`'s part (DumpMembers.native()) where given; None where the extension is not built."""
    try:
        from beamalloc._refalloc import ProcSink
    except ImportError:  # pragma: no cover - `make setup` builds it
        return None
    return ProcSink(list(KEYS), _derived, valid_name, keep)


def proc_of(pid: str, vals: list[Any], ws: int, cache: dict[Any, Any] | None = None,
            bad: int | None = None) -> Proc:
    """A process from its section's values: VALUES.parsed's (KEYS' order, stripped, the sizes
    as ints where they are counts, `bad` the first that is not) or, with `bad` None, VALUES'
    raw values. `cache` keeps what was derived from a value seen before (a table's processes
    share their spawn calls, functions, states and sizes): work and memory once per distinct
    value. One function, no call per value: it runs once per process of a dump."""
    if bad is None:
        vals, bad = parse(vals, len(PROC_INTS), MAX_WORDS)
    if cache is None:
        cache = {}
    elif len(cache) > MAX_CACHE:
        cache.clear()
    (young, old, unused0, unused1, frag, bin0, bin1, memory, queue, reds, state, name, spawned,
     pcx) = vals
    if young is None:
        raise SkipSection(f"no {REQUIRED[0]!r} line")
    if old is None:
        raise SkipSection(f"no {REQUIRED[1]!r} line")
    if bad >= 0:
        raise SkipSection(f"{PROC_INTS[bad]!r} is not a number a node can hold")
    frag = frag or 0
    unused = (unused0 or 0) + (unused1 or 0)
    if unused > young + old:
        raise SkipSection("more heap unused than the heap's size")
    # what each string value gives (_derived), once per distinct value
    if (sp := cache.get(spawned)) is None:
        sp = cache[spawned] = _derived(spawned)
    if pcx is not None and (pcx := cache.get(pcx)) is None:
        pcx = cache[vals[_PCX]] = _derived(vals[_PCX])
    if state is not None and (state := cache.get(state)) is None:
        state = cache[vals[_STATE]] = _derived(vals[_STATE])
    total = (young + old + frag) * ws
    # the same size is one int object however many processes have it
    setdefault = cache.setdefault
    return Proc(
        pid, valid_name(name), sp[0], sp[0],
        pcx[1] if pcx is not None else None, state[2] if state is not None else None,
        # dumps before OTP 17 have no Memory line: the heap is most of it
        setdefault(reds, reds) if reds is not None else None,
        setdefault(m := memory if memory is not None else total, m),
        setdefault(h := young * ws, h), setdefault(total, total), queue or 0,
        setdefault(b := ((bin0 or 0) + (bin1 or 0)) * ws, b), None, None,
        heap_used_bytes=setdefault(hu := (young + old - unused) * ws, hu),
        heap_unused_bytes=setdefault(hn := unused * ws, hn),
    )


#: The sections read; the first lines are read too (the word size), the others are passed over
#: (collector/dumpscan.py).
WANT = Headers(("proc:", "node:"))


def read_procdump(path: str | Path, err: TextIO | None = None) -> ProcessTable:
    """The =proc sections of the crash dump at `path`. One line on `err` (stderr) per section
    skipped; OSError for a file that cannot be read (the caller's one-line message). The file is
    read in blocks and its other sections passed over unread (collector/dumpscan.py). A dump
    whose allocators are read too is read once: crashdump.read_crashdump_file(procs=)."""
    with open(path, "rb") as f:
        return read_proc_sections(scan(f, WANT, Stats()), err, lambda at: line_of(path, at))


def read_proc_lines(lines: Iterable[str], err: TextIO | None = None) -> ProcessTable:
    """The same from the dump's lines (an upload held in memory)."""
    return read_proc_sections(line_sections(lines, WANT, Stats()), err)


def read_proc_sections(secs: Iterable[Section], err: TextIO | None = None,
                       line_at: Callable[[int], int] = int) -> ProcessTable:
    """The table of a dump's sections; `line_at` turns where a section starts into the line
    number a message names."""
    procs = ProcSections()
    for sec in secs:
        procs.feed(sec)
    return procs.table(err, line_at)


class Keep(Protocol):
    """What keeps a dump's processes as they are read (advice/holders.DumpMembers): the
    table's `procs` are then what it kept."""

    def add(self, p: Proc) -> None: ...

    def kept(self) -> list[Proc]: ...


class ProcSections:
    """A dump's =node, =proc and first sections fed as they are read (by read_proc_sections, or
    by the pass that reads the allocators: collector/crashdump.py), then its table. The skipped
    sections are said when the table is taken, so a caller that never takes it says nothing.
    Groups and totals are summed as the sections come; every process is kept in `procs`, or
    given to `keep`, which keeps what it needs (the memory of a dump's processes is then what
    it keeps). A `keep` that has a native part (holders.DumpMembers) has the =proc sections read
    natively (`native`, collector/native/src/procrecs.rs: no Python step a process; the scan
    hands them over unseen here, collector/crashdump.py); the others are read here."""

    def __init__(self, keep: Keep | None = None, native: bool = True) -> None:
        self.node, self.ws = "?", 8
        self.procs: list[Proc] = []
        self.keep = keep
        self.sections = 0
        self.fed = 0
        self.read = 0
        #: (where the section starts, what follows "the process section at line N")
        self.skipped: list[tuple[int, str]] = []
        self._cache: dict[Any, Any] = {}
        self._groups: dict[str, Group] = {}
        #: memory, total heap, message queues, idle processes and their total heap
        self._sums = [0, 0, 0, 0, 0]
        self.native = None
        if native and keep is not None and hasattr(keep, "native"):  # (native=False: tests)
            self.native = proc_sink(keep.native())
        self._absorbed = False

    def feed(self, sec: Section) -> None:
        header, body, start, _ = sec
        first = not self.fed
        self.fed += 1
        if header.startswith("=node:"):
            self.node = header[6:].strip().strip("'") or self.node
        if header.startswith("=proc:") and self.native is not None:
            # text decoded from the dump's bytes as latin-1 (dumpscan): encoded back the same
            self.native.feed_proc(header.encode("latin-1", "replace"),
                                  None if body is None else body.encode("latin-1", "replace"),
                                  start)
        elif header.startswith("=proc:"):
            self.sections += 1
            pid = header[6:].strip()
            if not _PID.match(pid):
                self.skipped.append((start, ": not a pid after =proc:"))
                return
            try:  # the keys found natively (dumpscan.Keys), no step a line
                vals, bad = VALUES.parsed(body or "", len(PROC_INTS), MAX_WORDS)
                p = proc_of(pid, vals, self.ws, self._cache, bad)
            except SkipSection as e:
                self.skipped.append((start, f" ({pid}): {e}"))
                return
            self._add(p)
        elif first and body is not None:  # the header block: "System version: ... [64-bit]"
            for line in body.split("\n")[:48]:  # lines 2 to 49
                if line.startswith("System version:"):
                    m = _WORDSIZE.search(line)
                    self.ws = int(m.group(1)) // 8 if m else self.ws
            if self.native is not None:
                self.native.ws = self.ws

    def _add(self, p: Proc) -> None:
        self.read += 1
        key = p.initial_call or "?"
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = Group(initial_call=key, count=0, memory=0,
                                          total_heap_bytes=0, message_queue_len=0,
                                          binary_bytes=0, names=[], idle_count=0,
                                          idle_total_heap_bytes=0)
        g.count += 1
        g.memory += p.memory
        g.total_heap_bytes += p.total_heap_bytes
        g.message_queue_len += p.message_queue_len
        g.binary_bytes = (g.binary_bytes or 0) + (p.binary_bytes or 0)
        if p.name and len(g.names) < 3:
            g.names.append(p.name)
        sums = self._sums
        sums[0] += p.memory
        sums[1] += p.total_heap_bytes
        sums[2] += p.message_queue_len
        if p.idle:
            g.idle_count = (g.idle_count or 0) + 1
            g.idle_total_heap_bytes = (g.idle_total_heap_bytes or 0) + p.total_heap_bytes
            sums[3] += 1
            sums[4] += p.total_heap_bytes
        if self.keep is not None:
            self.keep.add(p)
        else:
            self.procs.append(p)

    def _absorb(self) -> None:
        """What the native reader read (once): the counts, skips, sums and groups here, what
        `keep` keeps in it."""
        if self.native is None or self._absorbed:
            return
        self._absorbed = True
        self.sections, self.read, skipped, sums, groups, members, kept = self.native.proc_result()
        self.skipped += skipped
        self._sums = sums
        for (key, count, memory, heap, queues, binary, names, idle, idle_heap) in groups:
            self._groups[key] = Group(initial_call=key, count=count, memory=memory,
                                      total_heap_bytes=heap, message_queue_len=queues,
                                      binary_bytes=binary, names=names, idle_count=idle,
                                      idle_total_heap_bytes=idle_heap)
        procs = [Proc(*s, r[0], r[1], r[2], r[3], r[4], r[5], None, None, heap_used_bytes=r[6],
                      heap_unused_bytes=r[7]) for s, r in kept]
        self.keep.absorb(members, procs)  # type: ignore[union-attr]

    def table(self, err: TextIO | None = None,
              line_at: Callable[[int], int] = int) -> ProcessTable:
        """The table, each skipped section said in one line on `err` (stderr)."""
        err = err or sys.stderr
        self._absorb()
        for start, why in self.skipped:
            print(f"beamalloc: skipped the process section at line {line_at(start)}{why}",
                  file=err)
        gs = sorted(self._groups.values(), key=lambda g: (-g.memory, g.initial_call))
        procs = self.keep.kept() if self.keep is not None else self.procs
        sections, read = self.sections, self.read
        memory, heap, queues, idle, idle_heap = self._sums
        t = ProcessTable(
            node=self.node, source="crashdump", count=sections, scanned=read,
            complete=read == sections, procs=procs, groups=gs[:200], wordsize=self.ws,
            memory=memory, total_heap_bytes=heap, message_queue_len=queues, idle_count=idle,
            idle_total_heap_bytes=idle_heap,
        )
        t.notes.append("from a crash dump: binaries are the words each process's binary "
                       "virtual heaps count (no addresses: not deduplicated, exclusivity "
                       "unknown); no GC counters, so whether a holder's references are dead is "
                       "not known")
        if not t.complete:
            t.notes.append(f"{sections - read} of {sections} process sections skipped "
                           "(malformed or cut off)")
        return t
