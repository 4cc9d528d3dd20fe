"""Decoder of Erlang's external term format (what `term_to_binary/1` writes): the Python entry
of the one decoder, collector/native/src/etf.rs (Rust), which builds the objects; here the
input's size, version byte and compression are checked and the errors become ETFError.

It yields the Python types of collector/terms.py, so a term that travelled as ETF and the same
term printed by `io_lib:format("~p", ...)` and parsed by terms.py compare equal:

    atom -> Atom; small/big integer -> int; float -> float; tuple -> tuple; list -> list
    string (a list of bytes that ~p would print as a string) -> str, else list of ints
    binary -> bytes; pid, port, reference, fun -> Opaque (text as ~p shows it, node index 0)
    map -> dict (terms.py has no map; the live agent never sends one)

The input comes from another process, so the decoder is bounded: it refuses inputs, nesting,
integers, compressed payloads and what a term would build (MAX_WORDS, docs/robustness.md "What
a term may build") beyond the limits below with ETFError instead of spending memory or time
on them. MAX_DEPTH and MAX_BIG_BYTES are the Rust decoder's (etf.rs states them), MAX_WORDS
is passed to it.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from beamalloc._refalloc import etf_decode
from beamalloc.collector.terms import Atom, Opaque
from beamalloc.gcpause import paused_gc

#: Largest encoded (or decompressed) input accepted. A +S 1024 node's snippet file (all its
#: allocator data in one term) is 11.6 MB of ETF once inflated, a +S 64 node's 0.74 MB; the
#: largest distribution message is one allocator's reply, a fraction of that.
MAX_BYTES = 32 << 20
#: Deepest nesting accepted (allocator data nests about 8 deep, docs/erts/recon-formulas.md §3.1).
MAX_DEPTH = 256  # etf.rs MAX_DEPTH
#: Largest bignum accepted, in bytes of magnitude (mmmbc, 2^64-1, needs 8).
MAX_BIG_BYTES = 32  # etf.rs MAX_BIG_BYTES
#: The most one term may build, in 8-byte words of Python objects (the costs: etf.rs `cost`),
#: checked before each object is made: a byte limit alone let a 130 KB compressed list of
#: 128 Mi NILs build 9.6 GB (issue 25). A +S 64 node's snippet file builds 0.55 Mi words, a
#: +S 1024 node's 8.2 Mi (measured on OTP 25); 16 Mi words are about 128 MiB of objects.
MAX_WORDS = 16 << 20

VERSION = 131

_U32 = struct.Struct(">I").unpack_from


class ETFError(ValueError):
    """Bytes that are not a well-formed external term of the kind beamalloc reads."""


def _native(data: bytes, pos: int, atoms: dict | None, depth: int = 0) -> tuple[Any, int]:
    """The term at data[pos] through the Rust decoder (collector/native/src/etf.rs), the one
    decoder: its ValueError is the input's one line, CPython's MemoryError no memory."""
    try:
        # a reply of 136,000 fresh tuples and lists would set off collections that walk
        # everything the process holds (the decode's median doubles with a few snapshots alive)
        with paused_gc():
            return etf_decode(data, pos, Atom, Opaque, atoms, MAX_WORDS, depth)
    except ValueError as e:
        raise ETFError(str(e)) from None
    except MemoryError:
        raise ETFError("out of memory while decoding the term") from None


def decode(data: bytes) -> Any:
    """Decode one term, `131` version byte first; the whole input must be that one term."""
    if len(data) > MAX_BYTES:
        raise ETFError(f"external term of {len(data)} bytes (limit {MAX_BYTES})")
    if not data or data[0] != VERSION:
        raise ETFError("not an external term (missing version byte 131)")
    if len(data) > 1 and data[1] == 80:  # COMPRESSED: u32 size, zlib stream
        data = inflate(data)
        pos = 0
    else:
        pos = 1
    term, pos = _native(data, pos, None)
    if pos != len(data):
        raise ETFError(f"{len(data) - pos} bytes after the end of the term")
    return term


def decode_at(data: bytes, pos: int, atoms: dict | None = None) -> tuple[Any, int]:
    """The term whose version byte is at `data[pos]`, and the position after it: a
    distribution message is a control term and a payload term back to back
    (collector/dist.py). The distribution never compresses a term. `atoms`: a dict kept by
    the caller across calls, where the decoder keeps the atoms it built."""
    if len(data) > MAX_BYTES:
        raise ETFError(f"external term of {len(data)} bytes (limit {MAX_BYTES})")
    if pos >= len(data) or data[pos] != VERSION:
        raise ETFError("not an external term (missing version byte 131)")
    return _native(data, pos + 1, atoms)


def term_at(data: bytes, pos: int, depth: int = 0) -> tuple[Any, int]:
    """The term whose tag (no version byte) is at `data[pos]`, inside a term `depth` deep,
    and the position after it: a part of a message its caller reads alone (collector/dist.py)."""
    if len(data) > MAX_BYTES:
        raise ETFError(f"external term of {len(data)} bytes (limit {MAX_BYTES})")
    return _native(data, pos, None, depth)


def inflate(data: bytes) -> bytes:
    """A compressed term's payload (`data`: 131, 80, u32 size, zlib stream), inflated by
    Python's zlib under MAX_BYTES (its errors are the lines); collector/relay.py uses it too."""
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
