"""Allocation traces: a versioned header and a stream of alloc/free/realloc events.

Two encodings of the same data (byte-by-byte description in docs/trace-format.md):

* **binary** (``.batr``): magic, version, a JSON header, then compact records (one tag byte and
  LEB128 varints, times and block ids delta-encoded) ending with an END record that carries the
  event count, so truncation is detected;
* **CSV**: ``t_ns,op,allocator,instance,type,size,id,new_id[,thread]`` with an optional
  ``# beamalloc-trace 1 {json header}`` first line, for hand-made and interop traces.

Both are read streaming (:func:`open_trace` detects the encoding) and never held in memory whole.
Malformed input raises :class:`TraceError` with one line that says what and where.
"""

from __future__ import annotations

import csv
import io
import json
import struct
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

# Record tag byte (docs/trace-format.md, "Records").
_OP_MASK = 0x03
_CTX = 0x04
_TYPE = 0x08
_RESERVED = 0xF0
_END = 0x03
_MAX_U64 = (1 << 64) - 1
#: The largest binary trace header (JSON: the source, thread names, type tables: a few kB).
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


# --- varints -----------------------------------------------------------------------------------


def _put_uvarint(buf: bytearray, v: int) -> None:
    while v >= 0x80:
        buf.append((v & 0x7F) | 0x80)
        v >>= 7
    buf.append(v)


def _zigzag(delta: int) -> int:
    """Zigzag of a difference of two u64 values taken modulo 2^64 as an i64 (fits in 64 bits)."""
    delta &= _MAX_U64
    if delta >= 1 << 63:
        delta -= 1 << 64
    return (delta << 1) if delta >= 0 else ((-delta) << 1) - 1


def _unzigzag(u: int) -> int:
    return (u >> 1) if not u & 1 else -((u + 1) >> 1)


# --- binary writer -----------------------------------------------------------------------------


class TraceWriter:
    """Write a binary trace. Use as a context manager; ``close()`` writes the END record."""

    FLUSH_AT = 1 << 16

    def __init__(self, path: str | Path | IO[bytes], header: TraceHeader | None = None) -> None:
        self.header = header or TraceHeader()
        self._own = not hasattr(path, "write")
        self._f: IO[bytes] = open(path, "wb") if self._own else path  # type: ignore[arg-type]  # noqa: SIM115
        blob = json.dumps(self.header.to_json(), separators=(",", ":")).encode()
        self._f.write(MAGIC + struct.pack("<HHI", FORMAT_VERSION, 0, len(blob)) + blob)
        self._buf = bytearray()
        self._t = 0
        self._id = 0
        self._ctx: tuple[int, int, int] | None = None
        self._type: int | None = None
        self.count = 0
        self._closed = False

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
        buf = self._buf
        tag = ev.op
        ctx = (ev.allocator, ev.instance, ev.thread)
        if ctx != self._ctx:
            tag |= _CTX
        if ev.type != self._type:
            tag |= _TYPE
        buf.append(tag)
        _put_uvarint(buf, _zigzag(ev.t_ns - self._t))
        if tag & _CTX:
            _put_uvarint(buf, ev.allocator)
            _put_uvarint(buf, ev.instance)
            _put_uvarint(buf, ev.thread)
            self._ctx = ctx
        if tag & _TYPE:
            _put_uvarint(buf, ev.type)
            self._type = ev.type
        _put_uvarint(buf, ev.size)
        _put_uvarint(buf, _zigzag(ev.id - self._id))
        if ev.op == Op.REALLOC:
            _put_uvarint(buf, _zigzag(ev.new_id - ev.id))
        self._t = ev.t_ns
        self._id = ev.id
        self.count += 1
        if len(buf) >= self.FLUSH_AT:
            self._f.write(buf)
            buf.clear()

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
        self._buf.append(_END)
        _put_uvarint(self._buf, self.count)
        self._f.write(self._buf)
        self._buf.clear()
        if self._own:
            self._f.close()
        else:
            self._f.flush()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- readers -----------------------------------------------------------------------------------


class TraceReader:
    """Iterate the events of a trace file (binary or CSV), streaming. ``header`` is read first."""

    header: TraceHeader

    def __iter__(self) -> Iterator[Event]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BinaryReader(TraceReader):
    CHUNK = 1 << 20
    MAX_RECORD = 1 + 6 * 10  # tag + at most six 10-byte varints

    def __init__(self, f: IO[bytes], where: str, allow_truncated: bool) -> None:
        self._f = f
        self._where = where
        self._allow_truncated = allow_truncated
        fixed = f.read(16)
        if len(fixed) < 16 or fixed[:8] != MAGIC:
            raise TraceError(f"{where}: not a beamalloc trace (bad magic)")
        version, flags, hlen = struct.unpack("<HHI", fixed[8:16])
        if version != FORMAT_VERSION:
            raise TraceError(
                f"{where}: trace format version {version} is not supported (this reader: "
                f"{FORMAT_VERSION})"
            )
        if flags != 0:
            raise TraceError(f"{where}: unknown header flags 0x{flags:04x}")
        if hlen > MAX_HEADER:  # read whole and parsed: bounded before (issue 25)
            raise TraceError(f"{where}: a header of {hlen} bytes (at most {MAX_HEADER})")
        blob = f.read(hlen)
        if len(blob) < hlen:
            raise TraceError(f"{where}: truncated header ({len(blob)} of {hlen} bytes)")
        try:
            d = json.loads(blob)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TraceError(f"{where}: header is not valid JSON ({exc})") from None
        except RecursionError:
            raise TraceError(f"{where}: header nested too deeply") from None
        self.header = TraceHeader.from_json(d, where)
        self._offset = 16 + hlen  # file offset of the start of the buffer

    def close(self) -> None:
        self._f.close()

    def __iter__(self) -> Iterator[Event]:
        f, where = self._f, self._where
        buf = f.read(self.CHUNK)
        eof = len(buf) < self.CHUNK
        pos = 0
        t = last_id = 0
        alloc = inst = thread = typ = 0
        have_ctx = have_type = False
        count = 0
        while True:
            if not eof and len(buf) - pos < self.MAX_RECORD:
                self._offset += pos
                more = f.read(self.CHUNK)
                eof = len(more) < self.CHUNK
                buf = buf[pos:] + more
                pos = 0
            if pos >= len(buf):
                if self._allow_truncated:
                    return
                raise TraceError(
                    f"{where}: truncated after {count} events (no END record at byte "
                    f"{self._offset + pos})"
                )
            start = pos
            tag = buf[pos]
            pos += 1
            try:
                if tag == _END:
                    total, pos = _uvarint(buf, pos)
                    if total != count:
                        raise TraceError(
                            f"{where}: END record says {total} events but {count} were read"
                        )
                    if pos != len(buf) or f.read(1):
                        raise TraceError(
                            f"{where}: data after END record at byte {self._offset + pos}"
                        )
                    return
                if tag & _RESERVED or tag & _OP_MASK == 3:
                    raise TraceError(
                        f"{where}: bad record tag 0x{tag:02x} at byte {self._offset + start}"
                    )
                u, pos = _uvarint(buf, pos)
                t = (t + _unzigzag(u)) & _MAX_U64
                if tag & _CTX:
                    alloc, pos = _uvarint(buf, pos)
                    inst, pos = _uvarint(buf, pos)
                    thread, pos = _uvarint(buf, pos)
                    have_ctx = True
                if tag & _TYPE:
                    typ, pos = _uvarint(buf, pos)
                    have_type = True
                if not (have_ctx and have_type):
                    raise TraceError(
                        f"{where}: record at byte {self._offset + start} lacks allocator/type "
                        "context"
                    )
                size, pos = _uvarint(buf, pos)
                u, pos = _uvarint(buf, pos)
                last_id = (last_id + _unzigzag(u)) & _MAX_U64
                new_id = 0
                op = tag & _OP_MASK
                if op == Op.REALLOC:
                    u, pos = _uvarint(buf, pos)
                    new_id = (last_id + _unzigzag(u)) & _MAX_U64
            except IndexError:
                if self._allow_truncated:
                    return
                raise TraceError(
                    f"{where}: truncated record at byte {self._offset + start} after {count} events"
                ) from None
            count += 1
            yield Event(t, op, alloc, inst, typ, size, last_id, new_id, thread)


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > _MAX_U64:
                raise TraceError(f"varint above 2^64-1 ending at byte {pos}")
            return result, pos + 1
        shift += 7
        if shift > 63:
            raise TraceError(f"varint longer than 10 bytes ending at byte {pos}")


class _CsvReader(TraceReader):
    def __init__(self, f: IO[bytes], where: str) -> None:
        self._raw = f
        self._where = where
        # Bytes that are not UTF-8 become lone surrogates, so that the error can name its line.
        self._text = io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape", newline="")
        self._line = 0
        first = self._readline()
        header = TraceHeader(source="csv")
        if first.startswith(CSV_MARKER):
            self._line += 1
            parts = first[len(CSV_MARKER) :].strip().split(None, 1)
            if not parts or parts[0] != str(FORMAT_VERSION):
                raise TraceError(f"{where}:1: CSV trace version is not supported (this reader: "
                                 f"{FORMAT_VERSION})")
            if len(parts) == 2:
                try:
                    header = TraceHeader.from_json(json.loads(parts[1]), f"{where}:1")
                except json.JSONDecodeError as exc:
                    raise TraceError(f"{where}:1: header is not valid JSON ({exc})") from None
                except RecursionError:
                    raise TraceError(f"{where}:1: header nested too deeply") from None
            first = self._readline()
        self._line += 1
        columns = [c.strip() for c in first.strip().split(",")]
        if tuple(columns[:8]) != CSV_COLUMNS or columns[8:] not in ([], ["thread"]):
            raise TraceError(
                f"{where}:{self._line}: expected CSV columns {','.join(CSV_COLUMNS)}[,thread], "
                f"got {len(columns)} column(s) that differ"
            )
        self.header = header
        self._types = {t.name: t.n for t in header.types}
        self._next_type = SYNTHETIC_TYPE_BASE

    def close(self) -> None:
        self._text.close()

    def _type(self, text: str, allocator: int, at: str) -> int:
        if text[:1].isascii() and text[:1].isdigit():  # a number (range-checked), not a name
            return _int(text, "type", at)
        n = self._types.get(text)
        if n is None:  # a hand-made type name: give it a number and record it in the header
            n = self._types[text] = self._next_type
            self._next_type += 1
            self.header.types.append(TypeInfo(n, text, allocator))
        return n

    def _readline(self) -> str:
        line = self._text.readline()
        _check_utf8(line, f"{self._where}:{self._line + 1}")
        return line

    def __iter__(self) -> Iterator[Event]:
        try:
            yield from self._rows()
        except csv.Error as exc:
            raise TraceError(f"{self._where}:{self._line + 1}: {exc}") from None

    def _rows(self) -> Iterator[Event]:
        where = self._where
        for row in csv.reader(self._text):
            self._line += 1
            if not row or row[0].startswith("#"):
                continue
            at = f"{where}:{self._line}"
            _check_utf8("".join(row), at)
            if len(row) not in (8, 9):
                raise TraceError(f"{at}: expected 8 or 9 fields, got {len(row)}")
            try:
                op = Op.NAMES.index(row[1].strip())
            except ValueError:
                raise TraceError(f"{at}: op is not alloc, free or realloc "
                                 f"({_describe(row[1])})") from None
            a = row[2].strip()
            allocator = ALLOCATOR_NUMBERS.get(a)
            if allocator is None:
                if not a[:1].isdigit():
                    raise TraceError(f"{at}: unknown allocator ({_describe(a)}; a name such as "
                                     "binary_alloc, or a number)")  # fmt: skip
                # Any number, as in binary traces (another OTP's numbering): the replay counts
                # events of allocators it does not model as anomalies.
                allocator = _int(a, "allocator", at)
            new_id = row[7].strip()
            if op == Op.REALLOC and not new_id:
                raise TraceError(f"{at}: realloc needs new_id")
            if op != Op.REALLOC and new_id:
                raise TraceError(f"{at}: new_id is for realloc only (empty on {row[1].strip()})")
            yield Event(
                _int(row[0], "t_ns", at),
                op,
                allocator,
                _int(row[3], "instance", at),
                self._type(row[4].strip(), allocator, at),
                _int(row[5], "size", at) if row[5].strip() else 0,
                _int(row[6], "id", at),
                _int(new_id, "new_id", at) if new_id else 0,
                _int(row[8], "thread", at) if len(row) == 9 and row[8].strip() else 0,
            )


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


def _check_utf8(text: str, at: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise TraceError(f"{at}: not UTF-8 text") from None


def _int(text: str, what: str, at: str) -> int:
    text = text.strip()
    try:
        v = int(text, 16) if text[:2].lower() == "0x" else int(text)
    except ValueError:
        raise TraceError(f"{at}: {what} is not an integer ({_describe(text)})") from None
    if not 0 <= v <= _MAX_U64:
        kind = "a negative number" if v < 0 else f"a number of {len(str(v))} digits"
        raise TraceError(f"{at}: {what} is outside 0..2^64-1 ({kind})")
    return v


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
    f: io.BufferedReader, where: str, *, allow_truncated: bool = False
) -> TraceReader:
    """`open_trace` on an open buffered stream (``where`` names it in errors); the reader owns
    and closes it."""
    try:
        head = f.peek(len(MAGIC))[: len(MAGIC)]
        if head == MAGIC:
            return _BinaryReader(f, where, allow_truncated)
        if head.startswith(b"\x89BATR"):
            raise TraceError(f"{where}: damaged magic (file transferred in text mode?)")
        if head[:1] in (b"#", b"t"):
            return _CsvReader(f, where)
        raise TraceError(f"{where}: not a beamalloc trace (neither binary magic nor CSV header)")
    except BaseException:
        f.close()
        raise


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


def _csv_rows_at(path: str | Path) -> tuple[int, int] | None:
    """Byte offset and line number where a CSV trace's rows start (after the marker line, if
    any, and the column line), or None when a header line ends in a lone CR, which Python's
    text reader splits differently from bytes."""
    offset = line = 0
    with open(path, "rb") as f:
        for _ in range(2):
            text = f.readline()
            if b"\r" in text.removesuffix(b"\r\n"):
                return None
            offset += len(text)
            line += 1
            if not text.startswith(CSV_MARKER.encode()):
                return offset, line
    return None


def native_csv_rows(path: str | Path, r: TraceReader | None = None
                    ) -> tuple[int, int, dict[str, int], int] | None:
    """What refalloc's CSV fast path needs to read a CSV trace's rows (refalloc/src/csv.rs):
    (byte offset and line number where the rows start, the header's type table, the next
    synthetic type number); None for a binary trace or a header the fast path does not take.
    The header is read (and checked) here, by this module's reader."""
    if r is None:
        with open_trace(path) as opened:
            return native_csv_rows(path, opened)
    if not isinstance(r, _CsvReader):
        return None
    start = _csv_rows_at(path)
    if start is None:
        return None
    return start[0], start[1], dict(r._types), r._next_type


def _native_csv_to_binary(src: str | Path, dst: str | Path, r: _CsvReader) -> int | None:
    """Convert the rows of a CSV trace with refalloc's fast path, which reads plain rows only
    and declines anything else; None when it declined (or is not built), and then the caller
    converts with this module's reader, whose messages are the reference. Both give the same
    file: the fuzzer tests/fuzz/csv_props.py compares them."""
    try:
        from beamalloc._refalloc import csv_rows
    except ImportError:
        return None
    rows = native_csv_rows(src, r)
    if rows is None:
        return None
    scan = csv_rows(str(src), rows)
    if scan["declined"] is not None:
        return None
    header = r.header
    header.types.extend(TypeInfo(n, name, allocator) for name, n, allocator in scan["types"])
    blob = json.dumps(header.to_json(), separators=(",", ":"))
    done = csv_rows(str(src), rows, str(dst), blob)
    if done["events"] != scan["events"]:
        raise TraceError(f"{src}: the file changed while it was converted")
    return int(done["events"])


def convert(src: str | Path, dst: str | Path, *, to: str | None = None,
            native: bool = True) -> int:
    """Convert a trace between binary and CSV (``to`` = "binary"/"csv", else by dst suffix).
    A CSV's plain rows go through refalloc's reader unless ``native`` is False."""
    fmt = to or ("csv" if str(dst).endswith(".csv") else "binary")
    with open_trace(src) as r:
        if fmt == "csv":
            return write_csv(dst, r.header, r)
        header = r.header
        if isinstance(r, _CsvReader):
            n = _native_csv_to_binary(src, dst, r) if native else None
            if n is not None:
                return n
            # Type names get numbers while reading (deterministically); a first streaming pass
            # completes the table so the binary header can be written before the records.
            for _ in r:
                pass
    with open_trace(src) as r, TraceWriter(dst, header) as w:
        for ev in r:
            w.write(ev)
        return w.count

