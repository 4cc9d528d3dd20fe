"""Decoder of Erlang's external term format (what `term_to_binary/1` writes).

It yields the Python types of collector/terms.py, so a term that travelled as ETF and the same
term printed by `io_lib:format("~p", ...)` and parsed by terms.py compare equal:

    atom -> Atom; small/big integer -> int; float -> float; tuple -> tuple; list -> list
    string (a list of bytes that ~p would print as a string) -> str, else list of ints
    binary -> bytes; pid, port, reference, fun -> Opaque (text as ~p shows it, node index 0)
    map -> dict (terms.py has no map; the live agent never sends one)

The input comes from another process, so the decoder is bounded: it refuses inputs, nesting,
integers, compressed payloads and what a term would build (MAX_WORDS, docs/robustness.md "What
a term may build") beyond the limits below with ETFError instead of spending memory or time
on them.
"""

from __future__ import annotations

import gc
import struct
import zlib
from typing import Any

from beamalloc.collector.terms import Atom, Opaque

#: Largest encoded (or decompressed) input accepted. A +S 1024 node's snippet file (all its
#: allocator data in one term) is 11.6 MB of ETF once inflated, a +S 64 node's 0.74 MB; the
#: largest distribution message is one allocator's reply, a fraction of that.
MAX_BYTES = 32 << 20
#: Deepest nesting accepted (allocator data nests about 8 deep, docs/erts/recon-formulas.md §3.1).
MAX_DEPTH = 256
#: Largest bignum accepted, in bytes of magnitude (mmmbc, 2^64-1, needs 8).
MAX_BIG_BYTES = 32
#: The most one term may build, in 8-byte words of Python objects (the costs: _Cost), checked
#: before each object is made: a byte limit alone let a 130 KB compressed list of 128 Mi NILs
#: build 9.6 GB (issue 25). A +S 64 node's snippet file builds 0.55 Mi words, a +S 1024 node's
#: 8.2 Mi (measured on OTP 25); 16 Mi words are about 128 MiB of objects.
MAX_WORDS = 16 << 20

VERSION = 131

try:  # the native decoder of the Rust extension; absent in a source tree never built
    from beamalloc._refalloc import etf_decode as _native
except ImportError:  # pragma: no cover - `make setup` builds it
    _native = None


class ETFError(ValueError):
    """Bytes that are not a well-formed external term of the kind beamalloc reads."""


class _Cost:
    """What each object costs in words (header and payload; an element's slot is charged by
    its container). refalloc/src/python_etf.rs charges the same (its `cost` module)."""

    CONTAINER = 8
    INT = 4
    FLOAT = 3
    MAP_ENTRY = 4
    OPAQUE = 10

    @staticmethod
    def bytes(k: int) -> int:
        return 5 + k // 8


def _over_budget() -> ETFError:
    return ETFError(f"a term that would build more than {MAX_WORDS * 8 >> 20} MiB of objects "
                    "(a decompression bomb, or not allocator data)")


def _native_failed(e: BaseException) -> ETFError | None:
    """What a failure of the native decoder means: None to let the Python decoder try (a
    decline), else the error to raise (over budget; a panic or no memory: never retried)."""
    if isinstance(e, MemoryError):
        return ETFError("out of memory while decoding the term")
    if str(e) == "over budget":
        return _over_budget()
    if str(e) == "panic":
        return ETFError("the native term decoder failed")
    return None


_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_I32 = struct.Struct(">i").unpack_from
_F64 = struct.Struct(">d").unpack_from

# What io_lib:printable_latin1_list/1 accepts, so STRING_EXT maps to str exactly when ~p would
# print the list as a string (the default +pc latin1).
_PRINTABLE = frozenset(range(32, 127)) | frozenset(range(160, 256)) | frozenset(b"\n\r\t\v\b\f\x1b")


def decode(data: bytes) -> Any:
    """Decode one term, `131` version byte first; the whole input must be that one term."""
    if len(data) > MAX_BYTES:
        raise ETFError(f"external term of {len(data)} bytes (limit {MAX_BYTES})")
    if not data or data[0] != VERSION:
        raise ETFError("not an external term (missing version byte 131)")
    if len(data) > 1 and data[1] == 80:  # COMPRESSED: u32 size, zlib stream
        data = _inflate(data)
        pos = 0
    else:
        pos = 1
    if _native is not None:
        # The Rust fast path (refalloc/src/python_etf.rs) builds the same objects; it declines
        # whatever it does not handle, malformed input included, and this decoder, the
        # reference, then decodes it and says what is wrong.
        try:
            term, end = _no_gc(_native, data, pos, Atom, Opaque, None, MAX_WORDS)
        except (ValueError, MemoryError) as e:
            if (err := _native_failed(e)) is not None:
                raise err from None
        else:
            if end == len(data):
                return term
    try:
        term, pos = _Decoder(data).term(pos, 0)
    except (IndexError, struct.error):  # a fixed-size field runs past the end
        raise ETFError("truncated term") from None
    except MemoryError:
        raise ETFError("out of memory while decoding the term") from None
    if pos != len(data):
        raise ETFError(f"{len(data) - pos} bytes after the end of the term")
    return term


def decode_at(data: bytes, pos: int, atoms: dict | None = None) -> tuple[Any, int]:
    """The term whose version byte is at `data[pos]`, and the position after it: a
    distribution message is a control term and a payload term back to back
    (collector/dist.py). The distribution never compresses a term. `atoms`: a dict kept by
    the caller across calls, where the native decoder keeps the atoms it built."""
    if len(data) > MAX_BYTES:
        raise ETFError(f"external term of {len(data)} bytes (limit {MAX_BYTES})")
    if pos >= len(data) or data[pos] != VERSION:
        raise ETFError("not an external term (missing version byte 131)")
    if _native is not None:
        try:
            return _no_gc(_native, data, pos + 1, Atom, Opaque, atoms, MAX_WORDS)
        except (ValueError, MemoryError) as e:
            if (err := _native_failed(e)) is not None:
                raise err from None
    try:
        return _Decoder(data).term(pos + 1, 0)
    except (IndexError, struct.error):
        raise ETFError("truncated term") from None
    except MemoryError:
        raise ETFError("out of memory while decoding the term") from None


def _no_gc(f: Any, *args: Any) -> Any:
    """f(*args) with the cyclic garbage collector paused: a reply of 136,000 fresh tuples and
    lists would otherwise set off collections that walk everything the process holds (the
    decode's median doubles with a few snapshots alive), and none of them can be garbage."""
    was = gc.isenabled()
    gc.disable()
    try:
        return f(*args)
    finally:
        if was:
            gc.enable()


def _inflate(data: bytes) -> bytes:
    if len(data) < 6:
        raise ETFError("truncated compressed term")
    size = _U32(data, 2)[0]
    if size > MAX_BYTES:
        raise ETFError(f"compressed term claims {size} bytes (limit {MAX_BYTES})")
    z = zlib.decompressobj()
    try:
        out = z.decompress(data[6:], size + 1)
    except zlib.error as e:
        raise ETFError(f"bad compressed term: {e}") from None
    if len(out) != size or not z.eof:
        raise ETFError("compressed term does not match its stated size")
    return out


class _Decoder:
    """Fixed-size fields raise IndexError/struct.error when cut off (decode() maps them);
    variable-size ones are checked against what is left before anything is allocated."""

    __slots__ = ("atoms", "data", "left", "n")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.n = len(data)
        self.left = MAX_WORDS  # words the term may still build (_Cost)
        # Allocator data repeats a few hundred atoms; keyed by tag, as the tag sets the encoding.
        self.atoms: dict[tuple[int, bytes], Atom] = {}

    def _need(self, pos: int, k: int) -> None:
        if pos + k > self.n:
            raise ETFError(f"truncated term at byte {pos} (need {k} more)")

    def _charge(self, words: int) -> None:
        self.left -= words
        if self.left < 0:
            raise _over_budget()

    def _items(self, pos: int, count: int, depth: int) -> tuple[list[Any], int]:
        """`count` terms in a row; small integers and small atoms inline (most of the data)."""
        self._need(pos, count)  # every element takes at least one byte
        self._charge(_Cost.CONTAINER + count)
        data, atoms = self.data, self.atoms
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            tag = data[pos]
            if tag == 97:  # SMALL_INTEGER_EXT
                append(data[pos + 1])
                pos += 2
            elif tag == 100 or tag == 119:  # ATOM_EXT (what OTP 25 writes), SMALL_ATOM_UTF8_EXT
                start = pos + 3 if tag == 100 else pos + 2
                end = start + (data[pos + 1] << 8 | data[pos + 2] if tag == 100 else data[pos + 1])
                if end > self.n:
                    raise ETFError(f"truncated atom at byte {pos}")
                atom = atoms.get((tag, data[start:end]))
                if atom is None:
                    atom, _ = self._atom(tag, pos + 1)
                append(atom)
                pos = end
            else:
                item, pos = self.term(pos, depth + 1)
                append(item)
        return items, pos

    def term(self, pos: int, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise ETFError(f"terms nested deeper than {MAX_DEPTH}")
        data = self.data
        tag = data[pos]
        pos += 1
        if tag == 97:  # SMALL_INTEGER_EXT
            return data[pos], pos + 1
        if tag == 98:  # INTEGER_EXT
            self._charge(_Cost.INT)
            return _I32(data, pos)[0], pos + 4
        if tag in (119, 115, 118, 100):  # SMALL_ATOM_UTF8, SMALL_ATOM, ATOM_UTF8, ATOM
            return self._atom(tag, pos)
        if tag == 104:  # SMALL_TUPLE_EXT
            items, pos = self._items(pos + 1, data[pos], depth)
            return tuple(items), pos
        if tag == 105:  # LARGE_TUPLE_EXT
            items, pos = self._items(pos + 4, _U32(data, pos)[0], depth)
            return tuple(items), pos
        if tag == 106:  # NIL_EXT
            self._charge(_Cost.CONTAINER)
            return [], pos
        if tag == 107:  # STRING_EXT: u16 length, bytes
            k = _U16(data, pos)[0]
            pos += 2
            self._need(pos, k)
            raw = data[pos : pos + k]
            if _PRINTABLE.issuperset(raw):
                self._charge(_Cost.bytes(k) + _Cost.CONTAINER)
                return raw.decode("latin-1"), pos + k
            self._charge(_Cost.CONTAINER + k)
            return list(raw), pos + k
        if tag == 108:  # LIST_EXT: u32 length, elements, tail
            items, pos = self._items(pos + 4, _U32(data, pos)[0], depth)
            if data[pos] != 106:
                raise ETFError("improper list")
            return items, pos + 1
        if tag == 109:  # BINARY_EXT
            self._need(pos, 4)
            k = _U32(data, pos)[0]
            pos += 4
            self._need(pos, k)
            self._charge(_Cost.bytes(k))
            return bytes(data[pos : pos + k]), pos + k
        if tag == 70:  # NEW_FLOAT_EXT
            self._need(pos, 8)
            self._charge(_Cost.FLOAT)
            return _F64(data, pos)[0], pos + 8
        if tag == 99:  # FLOAT_EXT: 31 bytes of "%.20e" text
            self._need(pos, 31)
            self._charge(_Cost.FLOAT)
            try:
                return float(data[pos : pos + 31].rstrip(b"\0")), pos + 31
            except ValueError:
                raise ETFError("bad FLOAT_EXT") from None
        if tag == 110 or tag == 111:  # SMALL_BIG_EXT, LARGE_BIG_EXT
            if tag == 110:
                self._need(pos, 1)
                k, pos = data[pos], pos + 1
            else:
                self._need(pos, 4)
                k, pos = _U32(data, pos)[0], pos + 4
            if k > MAX_BIG_BYTES:
                raise ETFError(f"integer of {k} bytes (allocator statistics never exceed "
                               f"{MAX_BIG_BYTES})")
            self._need(pos, 1 + k)
            self._charge(_Cost.INT + k // 8)
            sign = data[pos]
            n = int.from_bytes(data[pos + 1 : pos + 1 + k], "little")
            return (-n if sign else n), pos + 1 + k
        if tag == 116:  # MAP_EXT
            self._need(pos, 4)
            arity, pos = _U32(data, pos)[0], pos + 4
            self._need(pos, 2 * arity)
            self._charge(_Cost.CONTAINER + arity * _Cost.MAP_ENTRY)
            out: dict[Any, Any] = {}
            for _ in range(arity):
                key, pos = self.term(pos, depth + 1)
                val, pos = self.term(pos, depth + 1)
                try:
                    out[key] = val
                except TypeError:
                    raise ETFError("map key that Python cannot hash") from None
            return out, pos
        if tag == 77:  # BIT_BINARY_EXT: u32 length, bits used in the last byte, bytes
            self._need(pos, 5)
            k = _U32(data, pos)[0]
            pos += 5
            self._need(pos, k)
            self._charge(_Cost.bytes(k))
            return bytes(data[pos : pos + k]), pos + k
        return self._opaque(tag, pos, depth)

    def _atom(self, tag: int, pos: int) -> tuple[Atom, int]:
        data = self.data
        if tag in (119, 115):
            self._need(pos, 1)
            k, pos = data[pos], pos + 1
        else:
            self._need(pos, 2)
            k, pos = _U16(data, pos)[0], pos + 2
        self._need(pos, k)
        raw = data[pos : pos + k]
        self._charge(_Cost.bytes(k) + _Cost.CONTAINER)
        try:
            atom = Atom(raw.decode("utf-8" if tag in (119, 118) else "latin-1"))
        except UnicodeDecodeError:
            raise ETFError("atom that is not valid UTF-8") from None
        self.atoms[(tag, raw)] = atom
        return atom, pos + k

    def _node_and(self, pos: int, depth: int, fmt: str) -> tuple[tuple[int, ...], int]:
        node, pos = self.term(pos, depth + 1)
        if not isinstance(node, Atom):
            raise ETFError("pid, port or reference without a node atom")
        size = struct.calcsize(fmt)
        self._need(pos, size)
        return struct.unpack_from(fmt, self.data, pos), pos + size

    def _opaque(self, tag: int, pos: int, depth: int) -> tuple[Opaque, int]:
        self._charge(_Cost.OPAQUE)
        if tag in (88, 103):  # NEW_PID_EXT, PID_EXT: node, id, serial, creation
            (pid, serial, _), pos = self._node_and(pos, depth, ">IIB" if tag == 103 else ">III")
            return Opaque(f"<0.{pid}.{serial}>"), pos
        if tag in (89, 102, 120):  # NEW_PORT_EXT, PORT_EXT, V4_PORT_EXT
            fmt = {102: ">IB", 89: ">II", 120: ">QI"}[tag]
            (num, _), pos = self._node_and(pos, depth, fmt)
            return Opaque(f"#Port<0.{num}>"), pos
        if tag in (90, 114):  # NEWER_REFERENCE_EXT, NEW_REFERENCE_EXT
            self._need(pos, 2)
            k = _U16(self.data, pos)[0]
            if k > 5:
                raise ETFError(f"reference of {k} words")
            words, pos = self._node_and(pos + 2, depth, (">I" if tag == 90 else ">B") + "I" * k)
            return Opaque("#Ref<0." + ".".join(str(w) for w in reversed(words[1:])) + ">"), pos
        if tag == 113:  # EXPORT_EXT: fun M:F/A
            m, pos = self.term(pos, depth + 1)
            f, pos = self.term(pos, depth + 1)
            a, pos = self.term(pos, depth + 1)
            return Opaque(f"#Fun<{m}.{f}.{a}>"), pos
        if tag == 112:  # NEW_FUN_EXT: u32 size (covers the rest), arity, uniq, index, ...
            self._need(pos, 29)
            size, index = _U32(self.data, pos)[0], _U32(self.data, pos + 21)[0]
            if size < 29:
                raise ETFError("bad NEW_FUN_EXT size")
            self._need(pos, size)
            module, _ = self.term(pos + 29, depth + 1)
            return Opaque(f"#Fun<{module}.{index}.0>"), pos + size
        if tag == 80:
            raise ETFError("compressed term nested inside a term")
        if tag == 82 or tag == 68:
            raise ETFError("atom cache references only occur inside the distribution protocol")
        raise ETFError(f"unknown external term tag {tag}")
