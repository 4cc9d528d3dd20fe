"""Raw kernel events -> a trace in refalloc's format (docs/trace-format.md).

The kernel side hands over batches, one thread's events each, in the order the batches filled;
the trace wants one stream ordered by time. Each thread's events are in time order already, so
the raw file is split per thread and the threads are merged (heapq), streaming, in bounded
memory. A block's owner (the `Allctr_t *` read from its carrier header) becomes (allocator,
instance) through the table read from the process (docs/erts/alloc_util.md §7).
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

from beamalloc.ebpf.beam import BeamProcess
from beamalloc.ebpf.event import EVENT, FIELDS, OP_ALLOC, OP_FREE, OP_REALLOC
from beamalloc.trace import Event, Op, TraceHeader, TraceWriter

RawEvent = tuple[int, ...]  # EVENT's fields, in FIELDS order (event.bpf.h)
_CHUNK = EVENT.size * 4096
_T, _TID = FIELDS.index("t_ns"), FIELDS.index("tid")
#: The fields a trace event is made of, by name: the header's order is its own business.
_USED = itemgetter(*(FIELDS.index(f) for f in
                     ("t_ns", "ptr", "new_ptr", "allctr", "size", "type", "tid", "op")))


@dataclass
class WriteStats:
    written: int = 0
    skipped_null: int = 0  # free(NULL), failed allocations: no block to follow
    unattributed: int = 0  # owner not an instance we know: instance taken from the calling thread
    calls: Counter[tuple[int, int]] = field(default_factory=Counter)  # (allocator, op) -> n


def _read_events(path: Path) -> Iterator[RawEvent]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield from EVENT.iter_unpack(chunk)


def split_by_thread(raw: Path, workdir: Path) -> list[Path]:
    files: dict[int, object] = {}
    try:
        for ev in _read_events(raw):
            f = files.get(ev[_TID])
            if f is None:
                f = files[ev[_TID]] = open(workdir / f"t{ev[_TID]}.raw", "wb")  # noqa: SIM115
            f.write(EVENT.pack(*ev))  # type: ignore[attr-defined]
    finally:
        for f in files.values():
            f.close()  # type: ignore[attr-defined]
    return [workdir / f"t{tid}.raw" for tid in files]


def merged(raw: Path) -> Iterator[RawEvent]:
    """All events of `raw`, ordered by time (each thread's own order kept)."""
    with tempfile.TemporaryDirectory(prefix="beamalloc-trace-") as tmp:
        parts = split_by_thread(raw, Path(tmp))
        yield from heapq.merge(*(_read_events(p) for p in parts), key=itemgetter(_T))


def to_trace_events(raw: Path, proc: BeamProcess, t0_ns: int,
                    stats: WriteStats) -> Iterator[Event]:
    mask, shift = proc.alloc_mask, proc.type_shift
    inst = proc.instances
    for t, ptr, new_ptr, allctr, size, typ, tid, op in map(_USED, merged(raw)):
        a = typ & mask
        n = typ >> shift
        owner = inst.get(allctr)
        if owner is None:
            stats.unattributed += 1
            ix = 0
        else:
            a, ix = owner  # the carrier's allocator and instance, not the caller's (§7)
        stats.calls[(a, op)] += 1
        ts = max(0, t - t0_ns)
        if op == OP_ALLOC:
            if not ptr:
                stats.skipped_null += 1
                continue
            yield Event(ts, Op.ALLOC, a, ix, n, size, ptr, 0, tid)
        elif op == OP_FREE:
            if not ptr:
                stats.skipped_null += 1
                continue
            yield Event(ts, Op.FREE, a, ix, n, 0, ptr, 0, tid)
        elif op == OP_REALLOC:
            if not new_ptr:
                stats.skipped_null += 1
                continue
            if not ptr:  # realloc(NULL, n) is an alloc
                yield Event(ts, Op.ALLOC, a, ix, n, size, new_ptr, 0, tid)
            else:
                yield Event(ts, Op.REALLOC, a, ix, n, size, ptr, new_ptr, tid)


def write_trace(raw: Path, out: Path, header: TraceHeader, proc: BeamProcess) -> WriteStats:
    """Write `out` atomically (a temp file renamed into place) and return what was written."""
    stats = WriteStats()
    t0 = int(header.clock.get("t0_ns", 0))
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        with TraceWriter(tmp, header) as w:
            for ev in to_trace_events(raw, proc, t0, stats):
                w.write(ev)
            stats.written = w.count
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return stats


def first_time(raw: Path) -> int | None:
    """The smallest timestamp in the raw file (the clock origin of the trace)."""
    best = None
    for ev in _read_events(raw):
        if best is None or ev[_T] < best:
            best = ev[_T]
    return best


__all__ = ["OP_FREE", "WriteStats", "first_time", "merged", "to_trace_events", "write_trace"]
