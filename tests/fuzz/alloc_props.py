"""The property of the native allocator-reply reader (collector/native/src/alloc_reply.rs),
shared by tests/test_alloc_reply.py (seeded mutations of real replies) and the fuzzer
tests/fuzz/atheris_alloc.py: any bytes given as the reply to system_info({allocator, A}) make
the same Snapshot, or the same error line, whether the native reader reads them (when it does
not decline) or the decoder and system_info.py do; and where it reads them, its text is the
term text of the decoded term.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

from beamalloc.collector import build, collect, etf, system_info
from beamalloc.collector.terms import Atom, format_term
from beamalloc.errors import InputError

#: Real replies of OTP 25, 27 and 29 nodes (+S 2, +Muatags true): `[{Release, Allocator,
#: Reply}]`, each reply's bytes from its tag on (tests/test_alloc_reply.py says how it was made).
DATA = Path(__file__).resolve().parents[1] / "data" / "alloc_replies.etf"


def replies() -> list[tuple[str, str, bytes]]:
    return [(str(r), str(a), b) for r, a, b in etf.decode(DATA.read_bytes())]


def _outcome(alloc: str, info: Any) -> str:
    """build_snapshot's JSON of a reply holding `info` for `alloc`, or its error line."""
    body = [(Atom("otp_release"), "25"), (Atom("allocators"), [(Atom(alloc), info)])]
    try:
        return build.build_snapshot("n@h", body, taken_at=1.0).to_json()
    except InputError as e:
        return f"error: {e}"


def check(data: bytes, alloc: str = "binary_alloc") -> bool:
    """Assert the property for `data` as `alloc`'s reply; True when the native reader read it."""
    try:
        native = system_info.native_info(alloc, data, 0, etf.MAX_WORDS)
    except ValueError as e:  # a panic caught in the reader: never
        raise AssertionError(f"the native reader failed: {e}") from None
    try:
        term, end = etf.term_at(data, 0, 1)
    except etf.ETFError:
        assert native is None, "read what the decoder refuses"
        return False
    if native is None:
        return False
    assert native.end == end
    assert native.text == format_term(term)
    # what the carrier scan reads of it (collect.py)
    assert collect._instance_carriers(native) == collect._instance_carriers(term)
    assert collect._blocks(native) == collect._blocks(term)
    assert collect._atags_on(native) == collect._atags_on(term)
    assert _outcome(alloc, native) == _outcome(alloc, term)
    return True


# ---- a term-level mutator: what byte flips rarely reach (a key twice, a bignum, a string) ----

def encode(t: Any) -> bytes:
    """The external term format of the terms the decoder makes (no version byte)."""
    if isinstance(t, Atom):
        b = str(t).encode()
        head = b"\x77" + bytes([len(b)]) if len(b) < 256 else b"\x76" + struct.pack(">H", len(b))
        return head + b
    if isinstance(t, bool):
        return encode(Atom(str(t).lower()))
    if isinstance(t, int):
        if 0 <= t < 256:
            return b"\x61" + bytes([t])
        if -(1 << 31) <= t < 1 << 31:
            return b"\x62" + struct.pack(">i", t)
        mag = abs(t).to_bytes((abs(t).bit_length() + 7) // 8, "little")
        return b"\x6e" + bytes([len(mag), t < 0]) + mag
    if isinstance(t, float):
        return b"\x46" + struct.pack(">d", t)
    if isinstance(t, str):
        b = t.encode("latin-1")
        return b"\x6b" + struct.pack(">H", len(b)) + b
    if isinstance(t, bytes):
        return b"\x6d" + struct.pack(">I", len(t)) + t
    if isinstance(t, tuple):
        head = b"\x68" + bytes([len(t)]) if len(t) < 256 else b"\x69" + struct.pack(">I", len(t))
        return head + b"".join(encode(x) for x in t)
    if isinstance(t, list):
        if not t:
            return b"\x6a"
        return b"\x6c" + struct.pack(">I", len(t)) + b"".join(encode(x) for x in t) + b"\x6a"
    raise TypeError(type(t).__name__)


_VALUES: list[Any] = [0, 1, 255, 256, -1, (1 << 31), (1 << 63), (1 << 64) - 1, 1 << 64,
                      Atom("true"), Atom("false"), Atom("instance"), Atom("mbcs"),
                      Atom("blocks"), Atom("count"), Atom("carriers"), Atom("atags"),
                      Atom("Quoted atom"), Atom("end"), "a string", "", "\x01\x02", b"\x01",
                      [], (), 1.5, [Atom("x")], (Atom("count"), 1, 2, 3), (1, 2)]


def _paths(t: Any, at: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    out = [at]
    if isinstance(t, tuple | list):
        for i, x in enumerate(t):
            out += _paths(x, (*at, i))
    return out


def _replace(t: Any, path: tuple[int, ...], f: Any) -> Any:
    if not path:
        return f(t)
    items = list(t)
    items[path[0]] = _replace(items[path[0]], path[1:], f)
    return tuple(items) if isinstance(t, tuple) else items


def mutate(term: Any, rng: random.Random, n: int = 1) -> Any:
    """`term` with `n` random changes: a value replaced, an item dropped or doubled, a
    container's kind swapped."""
    for _ in range(n):
        paths = _paths(term)
        path = rng.choice(paths[1:] or paths)
        kind = rng.randrange(5)
        if kind == 0:
            v = rng.choice(_VALUES)
            term = _replace(term, path, lambda _x, v=v: v)
        elif kind == 1 and path:
            parent, i = path[:-1], path[-1]
            term = _replace(term, parent, lambda c, i=i: type(c)([*c[:i], *c[i + 1:]]))
        elif kind == 2 and path:
            parent, i = path[:-1], path[-1]
            term = _replace(term, parent, lambda c, i=i: type(c)([*c[:i + 1], *c[i:]]))
        elif kind == 3:
            term = _replace(term, path, lambda x: tuple(x) if isinstance(x, list)
                            else list(x) if isinstance(x, tuple) else x)
        else:  # a small integer somewhere made large, or an atom made a string
            term = _replace(term, path, lambda x: x + (1 << 40) if type(x) is int
                            else str(x) if isinstance(x, Atom) else x)
    return term


def format_ok(t: Any) -> bool:
    """Can `encode` write `t` (latin-1 strings only)?"""
    try:
        encode(t)
    except (TypeError, UnicodeEncodeError, OverflowError):
        return False
    return True
