"""The raw event of a block trace, read from its one definition, the C header event.bpf.h.

blocks.bpf.c writes `struct event` into the ring buffer; RawSink copies the bytes to a file and
tracefile.py unpacks them with `EVENT`. Both sides read the same header, so a field added
there reaches Python without a second edit. The header keeps to what a `struct` format can say
exactly: u64 and u32 fields in an order that needs no padding, and `#define NAME number`;
anything else fails here, at import, rather than misreading a trace.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

HEADER = Path(__file__).with_name("event.bpf.h")
_CODES = {"u64": "Q", "u32": "I"}
_DEFINE = re.compile(r"#define\s+((?:OP|ST)_\w+)\s+(0x[0-9a-fA-F]+|\d+)\b")
_FIELD = re.compile(r"(u64|u32)\s+(\w+);")


def parse(text: str) -> tuple[dict[str, int], tuple[str, ...], struct.Struct]:
    """(OP_* and ST_* constants, field names, the little-endian struct) of a header's
    `struct event`."""
    consts = {m[1]: int(m[2], 0) for m in _DEFINE.finditer(text)}
    body = re.search(r"struct event\s*\{(.*?)\};", text, re.S)
    if body is None:
        raise ValueError(f"{HEADER.name}: no `struct event {{ ... }};`")
    lines = [ln.split("//")[0].strip() for ln in body[1].splitlines()]
    lines = [ln for ln in lines if ln]
    names, codes, offset = [], [], 0
    for ln in lines:
        m = _FIELD.fullmatch(ln)
        if m is None:
            raise ValueError(f"{HEADER.name}: field {ln!r} is not `u64 name;` or `u32 name;`")
        size = struct.calcsize(_CODES[m[1]])
        if offset % size:  # C would pad here; a packed struct format would not
            raise ValueError(f"{HEADER.name}: {m[2]} at offset {offset} needs padding")
        names.append(m[2])
        codes.append(_CODES[m[1]])
        offset += size
    if offset % 8:  # C rounds the size up to the largest member's alignment (u64)
        raise ValueError(f"{HEADER.name}: struct event is {offset} bytes, not a multiple of 8")
    return consts, tuple(names), struct.Struct("<" + "".join(codes))


CONSTS, FIELDS, EVENT = parse(HEADER.read_text())
OP_ALLOC, OP_FREE, OP_REALLOC, OP_RET = (CONSTS[k] for k in
                                         ("OP_ALLOC", "OP_FREE", "OP_REALLOC", "OP_RET"))
#: The per-CPU counters' names, by index: ST_RINGBUF_FULL is "ringbuf_full", ...
STAT_NAMES = tuple(k[3:].lower() for k, _ in sorted(
    ((k, v) for k, v in CONSTS.items() if k.startswith("ST_") and k != "ST_COUNT"),
    key=lambda kv: kv[1]))
if [CONSTS[f"ST_{n.upper()}"] for n in STAT_NAMES] != list(range(CONSTS["ST_COUNT"])):
    raise ValueError(f"{HEADER.name}: ST_* must number 0..ST_COUNT-1")


def layout() -> list[tuple[str, int, int]]:
    """(field, offset, size) of EVENT: what a C compiler must make of the header too (tests)."""
    out, offset = [], 0
    for name, code in zip(FIELDS, EVENT.format.lstrip("<"), strict=True):
        size = struct.calcsize(code)
        out.append((name, offset, size))
        offset += size
    return out
