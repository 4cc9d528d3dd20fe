"""A crash dump's process sections (`=proc:<pid>`) as a ProcessTable (issue 12 item 6).

Read separately from collector/crashdump.py (the allocator sections): the file is read in blocks
and only its =proc sections are decoded (collector/dumpscan.py), so a dump of any size costs one
pass at about the speed of reading it, and the memory of its processes' records.
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
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from beamalloc.collector.dumpscan import Headers, Section, Stats, line_of, line_sections, scan
from beamalloc.collector.processes import Group, Proc, ProcessTable

_PID = re.compile(r"<\d+\.\d+\.\d+>\Z")
# module and function names of printable characters only: a control character is no name
_PC = re.compile(r"\(([^()\s\x00-\x1f\x7f-\x9f]+:[^()\s\x00-\x1f\x7f-\x9f]+/\d+) \+ \d+\)")
_MFA = re.compile(r"[^\s:\x00-\x1f\x7f-\x9f]+:[^\s/\x00-\x1f\x7f-\x9f]+/\d+\Z")
_WORDSIZE = re.compile(r"\[(32|64)-bit\]")
_UINT = re.compile(r"[0-9]{1,20}\Z")
#: Sizes above 2^61 words (2^64 bytes) are no node's: a section claiming them is skipped.
MAX_WORDS = (1 << 61) - 1
#: Keys without which a section says nothing about who holds memory.
REQUIRED = ("Stack+heap", "OldHeap")
PROC_INTS = ("Stack+heap", "OldHeap", "Heap unused", "OldHeap unused", "Heap fragment data",
         "BinVHeap", "OldBinVHeap", "Memory", "Message queue length", "Reductions")
#: The `Key: Value` lines proc_of reads (the first of each counts; a line's key is what precedes
#: its first ": ").
_KEYS = re.compile("^(" + "|".join(re.escape(k) for k in (
    *PROC_INTS, "State", "Name", "Spawned as", "Program counter")
) + "): (.*)$", re.M)


def printable(s: str | None, limit: int = 100) -> str | None:
    """A name as the outputs may show it: printable characters only (an escape sequence in a
    name is data, never a command to the terminal), at most `limit` of them."""
    if s is None:
        return None
    s = s[:limit]
    return s if s.isprintable() else "".join(c if c.isprintable() else "?" for c in s)


class SkipSection(ValueError):
    """A =proc section that says nothing reliable (collector/dumptables.py skips it too)."""


def proc_of(pid: str, kv: dict[str, str], ws: int) -> Proc:
    for k in REQUIRED:
        if k not in kv:
            raise SkipSection(f"no {k!r} line")
    n: dict[str, int] = {}
    for k in PROC_INTS:
        v = kv.get(k)
        if v is None:
            continue
        if not _UINT.match(v) or (x := int(v)) > MAX_WORDS:
            raise SkipSection(f"{k!r} is not a number a node can hold")
        n[k] = x
    young, old, frag = n["Stack+heap"], n["OldHeap"], n.get("Heap fragment data", 0)
    unused = n.get("Heap unused", 0) + n.get("OldHeap unused", 0)
    if unused > young + old:
        raise SkipSection("more heap unused than the heap's size")
    spawned = kv.get("Spawned as")
    spawned = spawned if spawned and _MFA.match(spawned) else None
    pc = _PC.search(kv.get("Program counter", ""))
    name = kv.get("Name")
    return Proc(
        pid=pid, name=name if name and name.replace("_", "").isalnum() else None,
        initial_call=spawned, spawned_as=spawned,
        current_function=pc.group(1) if pc else None,
        status=printable((kv.get("State") or "").lower()) or None,
        # dumps before OTP 17 have no Memory line: the heap is most of it
        reductions=n.get("Reductions"), memory=n.get("Memory", (young + old + frag) * ws),
        heap_bytes=young * ws, total_heap_bytes=(young + old + frag) * ws,
        message_queue_len=n.get("Message queue length", 0),
        binary_bytes=(n.get("BinVHeap", 0) + n.get("OldBinVHeap", 0)) * ws,
        binary_count=None, binary_exclusive_bytes=None,
        heap_used_bytes=(young + old - unused) * ws, heap_unused_bytes=unused * ws,
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


class ProcSections:
    """A dump's =node, =proc and first sections fed as they are read (by read_proc_sections, or
    by the pass that reads the allocators: collector/crashdump.py), then its table. The skipped
    sections are said when the table is taken, so a caller that never takes it says nothing."""

    def __init__(self) -> None:
        self.node, self.ws = "?", 8
        self.procs: list[Proc] = []
        self.sections = 0
        self.fed = 0
        #: (where the section starts, what follows "the process section at line N")
        self.skipped: list[tuple[int, str]] = []

    def feed(self, sec: Section) -> None:
        header, body, start, _ = sec
        first = not self.fed
        self.fed += 1
        if header.startswith("=node:"):
            self.node = header[6:].strip().strip("'") or self.node
        if header.startswith("=proc:"):
            self.sections += 1
            pid = header[6:].strip()
            if not _PID.match(pid):
                self.skipped.append((start, ": not a pid after =proc:"))
                return
            kv: dict[str, str] = {}
            for k, v in _KEYS.findall(body or ""):  # one regex over the section, no step a line
                if k not in kv:
                    kv[k] = v.strip()
            try:
                self.procs.append(proc_of(pid, kv, self.ws))
            except SkipSection as e:
                self.skipped.append((start, f" ({pid}): {e}"))
        elif first and body is not None:  # the header block: "System version: ... [64-bit]"
            for line in body.split("\n")[:48]:  # lines 2 to 49
                if line.startswith("System version:"):
                    m = _WORDSIZE.search(line)
                    self.ws = int(m.group(1)) // 8 if m else self.ws

    def table(self, err: TextIO | None = None,
              line_at: Callable[[int], int] = int) -> ProcessTable:
        """The table, each skipped section said in one line on `err` (stderr)."""
        err = err or sys.stderr
        for start, why in self.skipped:
            print(f"beamalloc: skipped the process section at line {line_at(start)}{why}",
                  file=err)
        return _table(self.node, self.ws, self.procs, self.sections)


def _table(node: str, ws: int, procs: list[Proc], sections: int) -> ProcessTable:
    groups: dict[str, list[Proc]] = defaultdict(list)
    for p in procs:
        groups[p.initial_call or "?"].append(p)
    gs = [Group(initial_call=k, count=len(v), memory=sum(p.memory for p in v),
                total_heap_bytes=sum(p.total_heap_bytes for p in v),
                message_queue_len=sum(p.message_queue_len for p in v),
                binary_bytes=sum(p.binary_bytes or 0 for p in v),
                names=[p.name for p in v if p.name][:3],
                idle_count=sum(1 for p in v if p.idle),
                idle_total_heap_bytes=sum(p.total_heap_bytes for p in v if p.idle))
          for k, v in groups.items()]
    gs.sort(key=lambda g: (-g.memory, g.initial_call))
    t = ProcessTable(
        node=node, source="crashdump", count=sections, scanned=len(procs),
        complete=len(procs) == sections, procs=procs, groups=gs[:200], wordsize=ws,
        memory=sum(p.memory for p in procs),
        total_heap_bytes=sum(p.total_heap_bytes for p in procs),
        message_queue_len=sum(p.message_queue_len for p in procs),
        idle_count=sum(1 for p in procs if p.idle),
        idle_total_heap_bytes=sum(p.total_heap_bytes for p in procs if p.idle),
    )
    t.notes.append("from a crash dump: binaries are the words each process's binary virtual "
                   "heaps count (no addresses: not deduplicated, exclusivity unknown); no GC "
                   "counters, so whether a holder's references are dead is not known")
    if not t.complete:
        t.notes.append(f"{sections - len(procs)} of {sections} process sections skipped "
                       "(malformed or cut off)")
    return t
