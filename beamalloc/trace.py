"""Allocation traces: a versioned header and a stream of alloc/free/realloc events.

Two encodings of the same data (byte-by-byte description in docs/trace-format.md):

* **binary** (``.batr``): magic, version, a JSON header, then compact records (one tag byte and
  LEB128 varints, times and block ids delta-encoded) ending with an END record that carries the
  event count, so truncation is detected;
* **CSV**: ``t_ns,op,allocator,instance,type,size,id,new_id[,thread]`` with an optional
  ``# beamalloc-trace 1 {json header}`` first line, for hand-made and interop traces.

Both are read streaming and never held in memory whole, by one reader: refalloc's, in Rust
(refalloc/src/trace.rs, csv.rs; :func:`open_trace` hands it the file, it tells the encoding).
Binary traces are written by refalloc's encoder too (:class:`TraceWriter`); CSV by
:func:`write_csv`. This module holds the Python-facing types (:class:`Event`,
:class:`TraceHeader`, whose ``from_json`` checks the header the reader hands back) and the
entries. Malformed input raises :class:`TraceError` with one line that says what and where.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

__all__ = [
    "ALLOCATOR_NAMES",
    "ALLOCATOR_NUMBERS",
    "FORMAT_VERSION",
    "MAGIC",
    "Event",
    "Op",
    "TraceError",
    "TraceHeader",
    "TraceReader",
    "TraceWriter",
    "TypeInfo",
    "convert",
    "native_csv_rows",
    "open_trace",
    "read_header",
    "write_csv",
]

MAGIC = b"\x89BATR\r\n\x1a"  # \x89 and \r\n\x1a catch 7-bit and newline-mangling transfers
FORMAT_VERSION = 1
CSV_MARKER = "# beamalloc-trace"
CSV_COLUMNS = ("t_ns", "op", "allocator", "instance", "type", "size", "id", "new_id")

#: ERTS_ALC_A_* numbers (docs/erts/alloc_util.md §1); the trace stores numbers, CSV accepts names
#: too.
ALLOCATOR_NAMES: dict[int, str] = {
    1: "sys_alloc", 2: "temp_alloc", 3: "sl_alloc", 4: "std_alloc", 5: "ll_alloc",
    6: "eheap_alloc", 7: "ets_alloc", 8: "fix_alloc", 9: "literal_alloc", 10: "binary_alloc",
    11: "driver_alloc", 12: "test_alloc",
}  # fmt: skip
#: The other way round: an allocator's number by its name.
ALLOCATOR_NUMBERS = {name: n for n, name in ALLOCATOR_NAMES.items()}
#: Types named in a CSV but absent from its header's type table get numbers from here on.
SYNTHETIC_TYPE_BASE = 0x10000

_MAX_U64 = (1 << 64) - 1
#: The largest binary trace header (JSON: the source, thread names, type tables: a few kB);
#: refalloc/src/trace.rs MAX_HEADER, which the reader checks.
MAX_HEADER = 16 << 20


class TraceError(ValueError):
    """A trace file that cannot be read: wrong magic, bad header, truncated or bad record."""


class Op:
    ALLOC = 0
    FREE = 1
    REALLOC = 2
    NAMES = ("alloc", "free", "realloc")


class Event(NamedTuple):
    """One allocator call. ``size`` is the requested (user) size in bytes; for ``free`` it is the
    block's user size if the tracer knew it, else 0. ``new_id`` is only meaningful for realloc."""

    t_ns: int
    op: int
    allocator: int
    instance: int
    type: int
    size: int
    id: int
    new_id: int = 0
    thread: int = 0

    @property
    def op_name(self) -> str:
        return Op.NAMES[self.op]


@dataclass(frozen=True)
class TypeInfo:
    """One allocation type: ``n`` is ERTS_ALC_T2N, as in docs/erts/erts_types_otp25.tsv
    (docs/erts/alloc_util.md §7)."""

    n: int
    name: str
    allocator: int


@dataclass
class TraceHeader:
    """What is known about the traced node. Unknown fields stay None; extra keys survive."""

    node: str | None = None
    otp: str = "25"
    erts: str | None = None
    schedulers: int = 1
    dirty_cpu_schedulers: int | None = None
    word_size: int = 8
    flags: str = ""  # the +M flags the node ran with
    options: dict[str, Any] | None = None  # allocator -> instance -> system_info options
    types: list[TypeInfo] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)
    clock: dict[str, Any] = field(default_factory=lambda: {"source": "monotonic", "t0_ns": 0})
    source: str | None = None  # "ebpf", "synthetic", "csv", ...
    extra: dict[str, Any] = field(default_factory=dict)

    _KNOWN = (
        "node", "otp", "erts", "schedulers", "dirty_cpu_schedulers", "word_size", "flags",
        "options", "types", "threads", "clock", "source",
    )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": "beamalloc-trace", "version": FORMAT_VERSION}
        for key in self._KNOWN:
            d[key] = getattr(self, key)
        d["types"] = [asdict(t) for t in self.types]
        d["threads"] = {str(k): v for k, v in self.threads.items()}
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: Any, where: str) -> TraceHeader:
        """Validate a parsed header: a wrong type anywhere is one TraceError naming the field."""
        if not isinstance(d, dict):
            raise TraceError(f"{where}: header is not a JSON object")
        if d.get("format", "beamalloc-trace") != "beamalloc-trace":
            raise TraceError(f"{where}: header format is not beamalloc-trace "
                             f"({_describe(d.get('format'))})")

        def bad(key: str, want: str) -> TraceError:
            return TraceError(f"{where}: header field {key!r} is not {want} "
                              f"({_describe(d[key])})")

        def text(key: str, default: str | None) -> str | None:
            v = d.get(key, default)
            if not (v is None and default is None) and not isinstance(v, str):
                raise bad(key, "a string")
            return v

        def count(key: str, default: int | None, lo: int, hi: int) -> int | None:
            v = d.get(key, default)
            if v is None and default is None:
                return None
            if not _is_int(v) or not lo <= v <= hi:
                raise bad(key, f"an integer in {lo}..{hi}")
            return v

        otp = d.get("otp", "25")
        if _is_int(otp):
            otp = str(otp)
        if not isinstance(otp, str):
            raise bad("otp", "a string")
        types = d.get("types") or []
        ok = isinstance(types, list) and all(
            isinstance(t, dict) and _is_int(t.get("n")) and 0 <= t["n"] <= _MAX_U64
            and isinstance(t.get("name"), str)
            and _is_int(t.get("allocator")) and 0 <= t["allocator"] <= _MAX_U64
            for t in types
        )  # fmt: skip
        if not ok:
            raise bad("types", "a list of {n, name, allocator}")
        threads = d.get("threads") or {}
        if not isinstance(threads, dict) or not all(
            k.isascii() and k.isdigit() and int(k) <= _MAX_U64 and isinstance(v, str)
            for k, v in threads.items()
        ):
            raise bad("threads", "an object of thread number -> name")
        for key in ("options", "clock"):
            if d.get(key) is not None and not isinstance(d[key], dict):
                raise bad(key, "an object")
        word_size = d.get("word_size", 8)
        if not (_is_int(word_size) and word_size in (4, 8)):
            raise bad("word_size", "4 or 8")
        extra = {
            k: v for k, v in d.items() if k not in cls._KNOWN and k not in ("format", "version")
        }
        return cls(
            node=text("node", None),
            otp=otp,
            erts=text("erts", None),
            # ERTS runs at most 1024 schedulers of each kind.
            schedulers=count("schedulers", 1, 1, 1024),  # type: ignore[arg-type]
            dirty_cpu_schedulers=count("dirty_cpu_schedulers", None, 0, 1024),
            word_size=word_size,
            flags=text("flags", "") or "",
            options=d.get("options"),
            types=[TypeInfo(t["n"], t["name"], t["allocator"]) for t in types],
            threads={int(k): v for k, v in threads.items()},
            clock=d.get("clock") or {"source": "monotonic", "t0_ns": 0},
            source=text("source", None),
            extra=extra,
        )

    def type_by_name(self) -> dict[str, TypeInfo]:
        return {t.name: t for t in self.types}


# --- writer ----------------------------------------------------------------------------------


class TraceWriter:
    """Write a binary trace through refalloc's encoder (refalloc/src/trace.rs `TraceWriter`,
    docs/trace-format.md). Use as a context manager; ``close()`` writes the END record."""

    BATCH = 1 << 15

    def __init__(self, path: str | Path | IO[bytes], header: TraceHeader | None = None) -> None:
        from beamalloc import _refalloc

        self.header = header or TraceHeader()
        blob = json.dumps(self.header.to_json(), separators=(",", ":"))
        target = path if hasattr(path, "write") else str(path)
        try:
            self._w = _refalloc.TraceWriter(target, blob)
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        self._rows: list[Event] = []
        self._written = 0
        self._closed = False

    @property
    def count(self) -> int:
        return self._written + len(self._rows)

    def write(self, ev: Event) -> None:
        if not 0 <= ev.op <= 2:
            raise TraceError(f"event {self.count}: op {ev.op} is not alloc/free/realloc")
        for name in ("t_ns", "allocator", "instance", "type", "size", "id", "new_id", "thread"):
            v = getattr(ev, name)
            if not 0 <= v <= _MAX_U64:
                raise TraceError(f"event {self.count}: {name} {v} is outside 0..2^64-1")
        self.write_checked(ev)

    def write_checked(self, ev: Event) -> None:
        """`write` for an event its maker has range-checked (the generators, whose fields
        are counters and sizes they drew): the encoding without the checks."""
        self._rows.append(ev)
        if len(self._rows) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        try:
            self._w.write_many(self._rows)
        except (ValueError, OverflowError) as exc:
            raise TraceError(str(exc)) from None
        self._written += len(self._rows)
        self._rows.clear()

    def alloc(self, t_ns: int, allocator: int, instance: int, type: int, size: int, id: int,
              thread: int = 0) -> None:  # fmt: skip
        self.write(Event(t_ns, Op.ALLOC, allocator, instance, type, size, id, 0, thread))

    def free(self, t_ns: int, allocator: int, instance: int, type: int, id: int, size: int = 0,
             thread: int = 0) -> None:  # fmt: skip
        self.write(Event(t_ns, Op.FREE, allocator, instance, type, size, id, 0, thread))

    def realloc(self, t_ns: int, allocator: int, instance: int, type: int, size: int, id: int,
                new_id: int, thread: int = 0) -> None:  # fmt: skip
        self.write(Event(t_ns, Op.REALLOC, allocator, instance, type, size, id, new_id, thread))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._flush()
        try:
            self._w.finish()
        except ValueError as exc:
            raise TraceError(str(exc)) from None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- reader ------------------------------------------------------------------------------------


class TraceReader:
    """Iterate the events of a trace file (binary or CSV), streaming: refalloc's one reader
    (refalloc/src/trace.rs, csv.rs) through `_refalloc.TraceFile`; ``header`` is read first."""

    #: Bytes asked of the stream at a time.
    CHUNK = 1 << 20
    #: Events handed over from the native reader at a time.
    BATCH = 4096

    header: TraceHeader

    def __init__(self, native: Any, f: IO[bytes], header: TraceHeader) -> None:
        self._native = native
        self._f = f
        self.header = header

    def __iter__(self) -> Iterator[Event]:
        native, make, types = self._native, Event._make, self.header.types
        while True:
            try:
                batch = native.read(self.BATCH)
            except ValueError as exc:
                raise TraceError(str(exc)) from None
            # Type names CSV rows introduced, numbered in order of first appearance.
            types.extend(TypeInfo(n, name, a) for name, n, a in native.new_types())
            if not batch:
                return
            yield from map(make, batch)

    def _drain(self) -> int:
        """Read to the end without handing the events over; their count."""
        try:
            n = int(self._native.drain())
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        self.header.types.extend(TypeInfo(n, name, a) for name, n, a in self._native.new_types())
        return n

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BinaryReader(TraceReader):
    """A binary trace (refalloc/src/trace.rs)."""


class _CsvReader(TraceReader):
    """A CSV trace (refalloc/src/csv.rs: what Python's csv module, str.strip and int() read,
    with the same messages)."""


def _describe(v: Any) -> str:
    """What a bad value is, without its bytes: errors name the place and the kind, never the
    input (a cookie file passed by mistake must not reach the terminal, docs/robustness.md)."""
    if isinstance(v, str):
        return f"a field of {len(v)} characters" if v.strip() else "an empty field"
    if v is None:
        return "null"
    return f"a JSON {type(v).__name__.replace('dict', 'object').replace('str', 'string')}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def open_trace(path: str | Path, *, allow_truncated: bool = False) -> TraceReader:
    """Open a binary or CSV trace (detected by its first bytes) for streaming reading.

    ``allow_truncated`` accepts a binary trace that stops without its END record (a tracer that
    was killed), yielding the complete records.
    """
    where = str(path)
    from beamalloc.errors import InputError
    from beamalloc.files import open_input

    try:  # a FIFO, a device or a symlink loop is refused before open (beamalloc/files.py)
        f = open_input(path)
    except InputError as exc:
        raise TraceError(str(exc)) from None
    return open_trace_stream(f, where, allow_truncated=allow_truncated)


def open_trace_stream(
    f: io.BufferedReader, where: str, *, allow_truncated: bool = False, checked: bool = False
) -> TraceReader:
    """`open_trace` on an open buffered stream (``where`` names it in errors); the reader owns
    and closes it. ``checked``: every CSV row through the reader's full path, none through its
    fast paths (the reference they must agree with: tests/fuzz/csv_props.py)."""
    from beamalloc import _refalloc

    try:
        cls = _BinaryReader if f.peek(len(MAGIC))[: len(MAGIC)] == MAGIC else _CsvReader
        try:
            native = _refalloc.TraceFile(f, where, allow_truncated, cls.CHUNK, checked)
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        if native.format == "binary":
            return _BinaryReader(native, f, _binary_header(native.header(), where))
        return _CsvReader(native, f, _csv_header(native, where))
    except BaseException:
        f.close()
        raise


def _binary_header(blob: bytes, where: str) -> TraceHeader:
    try:
        d = json.loads(blob)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{where}: header is not valid JSON ({exc})") from None
    except RecursionError:
        raise TraceError(f"{where}: header nested too deeply") from None
    return TraceHeader.from_json(d, where)


def _csv_header(native: Any, where: str) -> TraceHeader:
    text = native.header()
    header = TraceHeader(source="csv")
    if text is not None:
        try:
            header = TraceHeader.from_json(json.loads(text), f"{where}:1")
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}:1: header is not valid JSON ({exc})") from None
        except RecursionError:
            raise TraceError(f"{where}:1: header nested too deeply") from None
    try:  # then the column line
        native.set_types({t.name: t.n for t in header.types})
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    return header


def read_header(path: str | Path) -> TraceHeader:
    with open_trace(path) as r:
        return r.header


def write_csv(path: str | Path, header: TraceHeader, events: Iterable[Event]) -> int:
    """Write events as CSV (allocator and type by name where known); return the count."""
    names = {t.n: t.name for t in header.types}
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write(
            f"{CSV_MARKER} {FORMAT_VERSION} {json.dumps(header.to_json(), separators=(',', ':'))}\n"
        )
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*CSV_COLUMNS, "thread"])
        for ev in events:
            w.writerow(
                [
                    ev.t_ns,
                    Op.NAMES[ev.op],
                    ALLOCATOR_NAMES.get(ev.allocator, ev.allocator),
                    ev.instance,
                    names.get(ev.type, ev.type),
                    ev.size,
                    ev.id,
                    ev.new_id if ev.op == Op.REALLOC else "",
                    ev.thread,
                ]
            )
            n += 1
    return n


def native_csv_rows(path: str | Path, r: TraceReader | None = None
                    ) -> tuple[int, int, dict[str, int], int] | None:
    """What the replay's straight-from-CSV path needs (refalloc/src/csv.rs `replay_rows`):
    (byte offset and line number where the rows start, the header's type table, the next
    synthetic type number); None for a binary trace. The header is read (and checked) here."""
    if r is None:
        with open_trace(path) as opened:
            return native_csv_rows(path, opened)
    at = r._native.rows_at()
    if at is None:
        return None
    return at[0], at[1], {t.name: t.n for t in r.header.types}, SYNTHETIC_TYPE_BASE


def _native_csv_to_binary(src: str | Path, dst: str | Path, r: TraceReader) -> int:
    """Convert the rows of the CSV trace `r` (just opened on `src`) to a binary trace: a first
    pass numbers the type names the rows introduce, so the header can be written before the
    records; the second writes them."""
    r._drain()
    return _write_binary(src, dst, r.header, checked=False)


def _write_binary(src: str | Path, dst: str | Path, header: TraceHeader, *,
                  checked: bool) -> int:  # fmt: skip
    blob = json.dumps(header.to_json(), separators=(",", ":"))
    with _open(src, checked) as r:
        try:
            return int(r._native.write_binary(str(dst), blob))
        except ValueError as exc:
            raise TraceError(str(exc)) from None


def _open(path: str | Path, checked: bool) -> TraceReader:
    from beamalloc.errors import InputError
    from beamalloc.files import open_input

    try:
        f = open_input(path)
    except InputError as exc:
        raise TraceError(str(exc)) from None
    return open_trace_stream(f, str(path), checked=checked)


def convert(src: str | Path, dst: str | Path, *, to: str | None = None,
            native: bool = True) -> int:
    """Convert a trace between binary and CSV (``to`` = "binary"/"csv", else by dst suffix).
    ``native`` False reads every CSV row through the reader's full path, none through its fast
    paths (the fuzzers compare both: tests/fuzz/csv_props.py)."""
    fmt = to or ("csv" if str(dst).endswith(".csv") else "binary")
    with _open(src, not native) as r:
        if fmt == "csv":
            return write_csv(dst, r.header, r)
        r._drain()  # a CSV's type names get their numbers: the header is complete
        header = r.header
    return _write_binary(src, dst, header, checked=not native)
