"""A crash dump's own tables beside its allocators: the `=ets:` sections (every ETS table, its
owner and size) and, of the `=proc:` sections, the few processes that say who held the memory
when the node died (docs/erts/memory-categories.md §2).

collector/crashdump.py feeds these sections, each as one text, in the pass that reads the
allocators (collector/dumpscan.py), so the whole file is still read once. Read from a file, they
are counted and ranked natively (`native`, collector/native/src/procrecs.rs: the scan hands them
over) and only the few kept come back here, to be made rows as this class makes them. What
is kept is bounded whatever the dump holds: the TOP_ETS largest tables with the count and bytes
of all of them, the TOP_PROCS largest processes and up to MAX_ACTIVE that were running or
collecting garbage (the one that asked for memory at an out-of-memory crash is among them). A
malformed section (a size that is not a number, an absurd size) is left out of every total and
counted; the Snapshot gets one note per kind of fault, never a traceback.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from beamalloc.collector.procdump import KEYS, VALUES, SkipSection, printable, proc_of, proc_sink
from beamalloc.snapshot import UINT64_MAX

#: ETS tables kept by size (the count and total cover them all).
TOP_ETS = 50
#: Processes kept by memory, and running or garbage-collecting ones kept besides them.
TOP_PROCS = 8
MAX_ACTIVE = 4
_UINT = re.compile(r"[0-9]{1,20}\Z")
_PID = re.compile(r"<\d{1,10}\.\d{1,10}\.\d{1,10}>\Z")
#: Keys kept of a section: a section of a million lines costs no more than these.
def _keys(*keys: str) -> re.Pattern[str]:
    return re.compile("^(" + "|".join(re.escape(k) for k in keys) + "): (.{0,200})", re.M)


_ETS_KEYS = _keys("Table", "Name", "Objects", "Words", "Type", "Protection")
#: A =proc section's values as kept: the first 200 characters of each (as _keys reads them)
_PROC_MEMORY = KEYS.index("Memory")
#: States a process is in while it allocates (erl_process_dump.c prints these), lower case.
ACTIVE_STATES = ("running", "garbing")


@dataclass
class DumpTables:
    """The =ets and =proc sections of one dump, fed section by section."""

    #: The sections read (`=ets:<owner>`, `=proc:<pid>`; KIND before the first ':').
    KINDS: ClassVar[tuple[str, ...]] = ("ets", "proc")

    ets: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # min-heap by bytes
    ets_count: int = 0
    ets_words: int = 0
    ets_bad: int = 0
    procs: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    active: list[dict[str, Any]] = field(default_factory=list)
    proc_count: int = 0
    proc_bad: int = 0
    _kind: str | None = None
    _arg: str = ""
    #: the current section's text (joined with "\n" at close)
    lines: list[str] = field(default_factory=list)
    _seq: int = 0
    #: the native reader of the =proc sections (collector/native/src/procrecs.rs), `native`
    native: Any = None

    def native_procs(self, sink: Any = None) -> Any:
        """Have the =proc sections read natively, by `sink` (a ProcSections' own: one reader
        for both) or a reader of its own; that reader, or None without the extension. Its
        rows are made here, of the few processes it keeps (`store`)."""
        self.native = sink if sink is not None else proc_sink()
        if self.native is not None:
            self.native.tables = True
        return self.native

    def end(self) -> None:
        """=end is read: no section after it is this dump's (the native reader stops)."""
        if self.native is not None:
            self.native.tables = False

    def start(self, section: str) -> bool:
        """A new section begins (`section` without its '='); True if it is one of ours."""
        self.close()
        kind, _, arg = section.partition(":")
        if kind not in self.KINDS:
            return False
        self._kind, self._arg = kind, arg.strip()
        self.lines.clear()
        return True

    def section(self, section: str, text: str | None, complete: bool) -> bool:
        """start, the section's text and, where another header follows, close, in one call
        (a dump's =proc and =ets sections are most of those read); True if it is ours."""
        if self._kind is not None:
            self.close()
        kind, _, arg = section.partition(":")
        if kind not in self.KINDS:
            return False
        if complete:
            self._finish(kind, arg.strip(), text or "", False)
        else:
            self._kind, self._arg = kind, arg.strip()
            self.lines.clear()
            if text is not None:
                self.lines.append(text)
        return True

    def _parse(self, text: str) -> dict[str, str]:
        """The section's `Key: Value` lines of the keys kept, the first of each: one regex over
        the joined section, not a Python step per line."""
        kv: dict[str, str] = {}
        for k, v in _ETS_KEYS.findall(text):
            if k not in kv:
                kv[k] = v.strip()
        return kv

    def _passed_over(self, text: str) -> bool:
        """A process neither running nor collecting, whose Memory line ranks it below the
        TOP_PROCS kept: found with two str.find calls, no parse (most of a dump's lines are
        its =proc sections)."""
        if len(self.procs) < TOP_PROCS:
            return False
        # _value of each, inline (this runs for most processes of a dump)
        if (i := text.find("State: ")) < 0 or (k := text.find("\nMemory: ")) < 0:
            return False
        j = text.find("\n", i + 7)
        if text[i + 7:j if j >= 0 else len(text)].strip().lower() in ACTIVE_STATES:
            return False
        j = text.find("\n", k + 9)
        mem = text[k + 9:j if j >= 0 else len(text)].strip()
        return bool(_UINT.match(mem)) and (int(mem), -self._seq) <= self.procs[0][:2]

    def close(self, *, cut: bool = False) -> None:
        """The section ends; `cut`: the dump ended inside it (then it is counted as not read)."""
        kind = self._kind
        self._kind = None
        if kind is None:
            return
        text = "\n".join(self.lines)
        self.lines.clear()
        self._finish(kind, self._arg, text, cut)

    def _finish(self, kind: str, arg: str, text: str, cut: bool) -> None:
        """A section of `kind` ("ets" or "proc") read whole: counted, and kept if it ranks."""
        self._arg = arg
        self._seq += 1
        if kind == "ets" and self.native is not None:  # (as =proc below)
            self.native.feed_ets(arg.encode("latin-1", "replace"),
                                 text.encode("latin-1", "replace"), cut)
            return
        if kind == "ets":
            kv = self._parse(text)
            self.ets_count += 1
            words = kv.get("Words", "")
            if cut or not _UINT.match(words) or int(words) > UINT64_MAX // 8:
                self.ets_bad += 1
                return
            self.ets_words += int(words)
            self._ets(arg, kv, self._seq)
            return
        if self.native is not None:  # text decoded from the dump's bytes as latin-1 (dumpscan)
            self.native.feed_table(arg.encode("latin-1", "replace"),
                                   text.encode("latin-1", "replace"), cut)
            return
        self.proc_count += 1
        if cut or not _PID.match(self._arg):
            self.proc_bad += 1
            return
        if self._passed_over(text):
            return
        self._proc(self._arg, text, self._seq)

    def _ets(self, arg: str, kv: dict[str, str], seq: int) -> None:
        """An =ets section of a count of words ranked: its row kept among the largest."""
        w = int(kv["Words"])
        row = {"owner": printable(arg[:64]), "name": printable(kv.get("Name", "?")),
               "table": printable(kv.get("Table", "?")), "type": printable(kv.get("Type")),
               "protection": printable(kv.get("Protection")), "words": w,
               "objects": int(kv["Objects"]) if _UINT.match(kv.get("Objects", "")) else None}
        _push(self.ets, TOP_ETS, (w, -seq, row))

    def _proc(self, arg: str, text: str, seq: int) -> None:
        """A =proc section ranked: its row kept among the largest and the active ones."""
        vals = [None if v is None else v[:200] for v in VALUES.values(text)]
        try:
            p = proc_of(arg, vals, 1)  # words; bytes once the word size is known
        except SkipSection:
            self.proc_bad += 1
            return
        row = {"pid": p.pid, "name": p.name, "initial_call": printable(p.initial_call),
               "current_function": printable(p.current_function), "state": printable(p.status),
               "memory_words": vals[_PROC_MEMORY] is None,  # before OTP 17: heap words stand in
               "memory": p.memory, "total_heap": p.total_heap_bytes, "heap": p.heap_bytes,
               "binary": p.binary_bytes, "message_queue_len": p.message_queue_len}
        if p.status in ACTIVE_STATES and len(self.active) < MAX_ACTIVE:
            self.active.append(row)
        _push(self.procs, TOP_PROCS, (p.memory, -seq, row))

    def store(self, extra: dict[str, Any], notes: list[str], wordsize: int) -> None:
        """Write what was read into a Snapshot's `extra` (bytes, by the dump's word size)."""
        if self.native is not None:
            # the native reader's counts, and the rows of those it kept, in the dump's order
            # (the largest of them and the first active ones are the largest and first of all)
            self.proc_count, self.proc_bad, kept = self.native.table_result()
            for seq, arg, text in kept:
                self._proc(arg, text, seq)
            self.ets_count, self.ets_bad, self.ets_words, kept = self.native.ets_result()
            for seq, arg, text in kept:
                self._ets(arg, self._parse(text), seq)
            self.native = None
        if self.ets_count:
            tables = [dict(r, bytes=r.pop("words") * wordsize)
                      for _, _, r in sorted(self.ets, reverse=True)]
            extra["ets"] = {"count": self.ets_count, "read": self.ets_count - self.ets_bad,
                            "bytes": self.ets_words * wordsize, "tables": tables}
        if self.ets_bad:
            notes.append(f"{self.ets_bad} of {self.ets_count} =ets sections not read (a size "
                         "that is not a number, or cut off): ETS totals leave them out")
        if self.proc_count:
            seen: set[str] = set()
            rows = []
            for r in [*self.active, *(r for _, _, r in sorted(self.procs, reverse=True))]:
                if r["pid"] in seen:
                    continue
                seen.add(r["pid"])
                r = dict(r)
                words_only = r.pop("memory_words")
                for k in ("total_heap", "heap", "binary"):
                    r[k] = None if r[k] is None else r[k] * wordsize
                if words_only:  # no Memory line: the heap's bytes stand in (procdump)
                    r["memory"] = r["total_heap"]
                r["active"] = r["state"] in ACTIVE_STATES
                rows.append(r)
            extra["dump_procs"] = {"count": self.proc_count, "read": self.proc_count
                                   - self.proc_bad, "procs": rows}
        if self.proc_bad:
            notes.append(f"{self.proc_bad} of {self.proc_count} =proc sections not read "
                         "(malformed or cut off)")


def _push(heap: list[tuple[int, int, dict[str, Any]]], n: int,
          item: tuple[int, int, dict[str, Any]]) -> None:
    if len(heap) < n:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)
