"""Loader of blocks.bpf.c: attach to / detach from alloc_util's entry points in one beam.smp.

Two builds of the same program: ``trace`` (every call as a raw event of event.bpf.h, batched
per thread into a ring buffer; RawSink writes the batches to a file untouched, so the reader
keeps up with millions of calls a second) and ``summary`` (histograms and bytes summed in the
kernel). Probes can be detached and re-attached (time-sliced sampling) without reloading
the program.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from beamalloc.ebpf import beam
from beamalloc.ebpf.errors import EbpfUnavailable
from beamalloc.ebpf.event import EVENT, STAT_NAMES
from beamalloc.ebpf.placement import entry_addrs
from beamalloc.ebpf.procmem import Symbol, symbol_table

SOURCE = Path(__file__).with_name("blocks.bpf.c")
#: Events per ring-buffer record; a power of two (the C masks the index with it). The reader's
#: cost is per record (a callback into Python): 128 events make it ~1/4 of what 32 did.
BATCH = 128


#: The entry points most calls go through (docs/erts/alloc_util.md §7: every thread-preferred
#: allocator
#: reaches *_thr_pref, temp_alloc *_thr_spec), detached first.
HOT = ("erts_alcu_alloc_thr_pref", "erts_alcu_free_thr_pref", "erts_alcu_alloc_thr_spec",
       "erts_alcu_free_thr_spec", "erts_alcu_realloc_thr_pref")


def _heat(p: Probe) -> tuple[int, int]:
    return (HOT.index(p.sym) if p.sym in HOT else len(HOT), p.kind != "return")


@dataclass(frozen=True)
class Probe:
    kind: str  # "entry" or "return"
    sym: str
    fn: str


def probes(returns: bool = True) -> list[Probe]:
    """Every entry point of every family (docs/erts/alloc_util.md §7): alloc and realloc need their
    return value (the block), free only its entry (the header is read before it changes).
    Without returns (sampling) calls and requested sizes are still counted, at entry."""
    out = []
    for sym in beam.ALLOC_FUNCS:
        out += [Probe("entry", sym, "alloc_entry")]
        out += [Probe("return", sym, "any_return")] if returns else []
    for sym in beam.FREE_FUNCS:
        out.append(Probe("entry", sym, "free_entry"))
    for sym in beam.REALLOC_FUNCS:
        out += [Probe("entry", sym, "realloc_entry")]
        out += [Probe("return", sym, "any_return")] if returns else []
    return out


def placement(binary: str, returns: bool = True,
              syms: dict[str, Symbol] | None = None) -> list[tuple[Probe, int]]:
    """Each probe with its link-time address: the symbol, except for an entry probe of a
    function without a return probe, which may sit past a leading flags-only test (one trap
    instead of a trap and a single-step: placement.py). `syms`: the binary's symbols
    (procmem.symbol_table, read again when not given)."""
    syms = syms if syms is not None else symbol_table(binary).symbols
    todo = probes(returns)
    with_return = {p.sym for p in todo if p.kind == "return"}
    moved = entry_addrs(binary, syms, [p.sym for p in todo
                                       if p.kind == "entry" and p.sym not in with_return])
    return [(p, moved.get(p.sym, syms[p.sym].value) if p.kind == "entry"
             else syms[p.sym].value) for p in todo]


class BlockProbes:
    """The compiled program and its probes on one process."""

    def __init__(self, bcc: ModuleType, proc: beam.BeamProcess, *, trace: bool,
                 returns: bool = True, ringbuf_mb: int = 64, max_threads: int = 4096) -> None:
        if proc.blind:
            raise EbpfUnavailable(f"cannot follow alloc_util in pid {proc.pid}: {proc.blind}")
        self.proc = proc
        self.trace = trace
        self.returns = returns or trace
        pages = 1 << max(0, (ringbuf_mb * 256 - 1).bit_length())  # a power of two of 4K pages
        # -I: bcc compiles the source as /virtual/main.c, so its #include "bits.bpf.h" needs it.
        cflags = [f"-I{SOURCE.parent}", f"-DBATCH={BATCH}", f"-DMAX_THREADS={max_threads}",
                  f"-DRINGBUF_PAGES={pages}", "-Wno-macro-redefined"]
        if trace:
            cflags.append("-DTRACE_EVENTS")
        if not self.returns:
            cflags.append("-DENTRIES_ONLY")
        try:
            self.bpf = bcc.BPF(src_file=str(SOURCE).encode(), cflags=cflags)
        except Exception as e:  # bcc raises bare Exception on compile/load failures
            raise EbpfUnavailable(f"cannot load the block-level BPF program: {e}") from None
        self._attached: list[Probe] = []
        syms = proc.symbols.symbols if proc.symbols else None
        self._addr = {(p.kind, p.sym): addr
                      for p, addr in placement(proc.binary, self.returns, syms)}

    def address(self, p: Probe) -> int:
        """Link-time address of probe `p` (its symbol, or a few bytes in: placement.py)."""
        return self._addr[(p.kind, p.sym)]

    @property
    def attached(self) -> bool:
        return bool(self._attached)

    def attach(self) -> None:
        if self._attached:
            return
        try:
            p = None
            for p in probes(self.returns):
                addr = self.address(p)
                attach = (self.bpf.attach_uprobe if p.kind == "entry"
                          else self.bpf.attach_uretprobe)
                attach(name=self.proc.binary.encode(), addr=addr, fn_name=p.fn.encode(),
                       pid=self.proc.pid)
                self._attached.append(p)
            self._enable(True)
        except Exception as e:
            self.detach()
            where = f"{p.kind} {p.sym}" if p else "?"
            raise EbpfUnavailable(f"cannot attach uprobes to pid {self.proc.pid} ({where}): "
                                  f"{e}") from None

    def detach(self) -> float:
        """Remove every probe of ours; safe to call twice and after the target died. Returns
        the seconds until the hot probes (HOT) were gone, from the call.

        Each removal waits for a kernel grace period (~100 ms on this VM) under a lock that
        serialises them (tests/bench/bench_ebpf.py: threads do not overlap them), and a probe
        traps until its own removal: so one by one, the hottest first, and the target runs
        at full speed again after the first few (~0.3 s) while the rest (~1.5 s) go."""
        todo, self._attached = self._attached, []
        if not todo:
            return 0.0
        self._enable(False)
        t0 = time.monotonic()
        hot_gone = 0.0
        for p in sorted(todo, key=_heat):
            # Failing means already gone with its process; bpf.cleanup() closes the rest.
            detach = self.bpf.detach_uprobe if p.kind == "entry" else self.bpf.detach_uretprobe
            with contextlib.suppress(Exception):
                detach(name=self.proc.binary.encode(), addr=self.address(p), pid=self.proc.pid)
            if p.sym in HOT:
                hot_gone = time.monotonic() - t0
        return hot_gone

    def _enable(self, on: bool) -> None:
        if not self.trace:  # a trace counts from the first probe to the last: no gaps
            table = self.bpf["enabled"]
            table[table.Key(0)] = table.Leaf(1 if on else 0)

    def close(self) -> None:
        self.detach()
        self.bpf.cleanup()

    def stats(self) -> dict[str, int]:
        table = self.bpf["stats"]
        return {name: sum(table[table.Key(i)]) for i, name in enumerate(STAT_NAMES)}

    # --- trace mode ---------------------------------------------------------------------

    def open_sink(self, out: IO[bytes]) -> RawSink:
        sink = RawSink(out)
        self.bpf["events"].open_ring_buffer(sink.callback)
        return sink

    def poll(self, timeout_ms: int) -> None:
        """Wait, then copy out what the ring buffer holds. The program asks for no wakeups
        (blocks.bpf.c, push): the reader runs ten times a second, not once per record."""
        time.sleep(timeout_ms / 1000)
        self.bpf.ring_buffer_consume()

    def drain(self, sink: RawSink) -> None:
        """After detach: what the ring buffer still holds, then every thread's partial batch."""
        self.bpf.ring_buffer_consume()
        for _tid, b in self.bpf["batches"].items():  # bcc's ctypes view of struct batch
            sink.write(bytes(b.ev)[:b.n * EVENT.size])

    # --- summary mode -------------------------------------------------------------------

    def histogram(self) -> list[tuple[int, int, int, int, int, int, int, int]]:
        """(allctr, type, op, slot, count, bytes, blk, old_blk), summed over CPUs."""
        out = []
        for k, vals in self.bpf["hist"].items():
            tot = [0, 0, 0, 0]
            for v in vals:
                tot[0] += v.count
                tot[1] += v.bytes
                tot[2] += v.blk
                tot[3] += v.old_blk
            out.append((k.allctr, k.type, k.op, k.slot, *tot))
        return out

    def clear_pending(self) -> None:
        """Between slices: an entry whose return fell outside the slice is no longer pending."""
        self.bpf["pend"].clear()


class RawSink:
    """Appends ring-buffer records (batches of raw events) to a file; counts them."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.events = 0
        self.callback: Callable[[Any, Any, int], None] = self._on_record

    def _on_record(self, _ctx: Any, data: Any, size: int) -> None:
        self.write(ctypes.string_at(data, size))

    def write(self, chunk: bytes) -> None:
        self.out.write(chunk)
        self.events += len(chunk) // EVENT.size
