"""A stored snapshot as columns: its shape once per node, its numbers as one vector (issue 28).

Encoding a snapshot as one JSON document cost the store ~2 ms for a `+S 8` node (json.dumps of
~12,000 numbers), 80-90 % of a sample. Between two samples of a node only the numbers of its
allocator and mseg_alloc instances move; their names, options, block types and call names (the
*shape*) stay until the node is restarted with other flags. So a frame holds:

- the shape: per allocator instance its allocator, number, options, block types, pool counter
  and call names, fix types and versions; per mseg_alloc instance its number, options and call
  names. Stored once in the store's `shapes` table and named by the rows that use it. The pool's
  blocks by type come and go from one sample to the next (a carrier with another type's blocks
  enters and leaves the pool): they are text, not shape;
- the numbers of those instances, in the order `_values` walks them, as unsigned 64-bit
  integers (every count and size the VM reports is a machine word, snapshot.UINT64_MAX): one
  array, XORed with its key snapshot's array when it has the same shape (an unchanged number
  is 8 zero bytes), split into its 8 byte planes (the high planes are all zeros) and zstd'd;
- the text: the rest of the snapshot as JSON (memory, the header fields, extra, notes,
  carriers), the pools' blocks as JSON and its `raw` term text, zstd'd against its key's text
  as a raw-content dictionary.

Splitting walks the instances once at C speed where it can (tuple building, array packing,
big-int XOR, strided bytes slices): ~0.3 ms for a `+S 8` node instead of ~3 ms to encode and
compress its JSON. Joining builds the document Snapshot.from_dict reads, so a stored snapshot
decodes through the same validation as any file (`Snapshot.check`).
"""

from __future__ import annotations

import json
import struct
from array import array
from dataclasses import dataclass, replace
from typing import Any

from beamalloc.snapshot import Snapshot

#: A frame's first bytes: "BAF" and its format version as one ASCII digit (a zstd frame, the
#: store's earlier format, starts 28 b5 2f fd). Format 1 is the only one so far.
PREFIX = b"BAF"
VERSION = 1
MAGIC = PREFIX + str(VERSION).encode()
#: flags, text length (compressed), numbers
_HEADER = struct.Struct("<BII")
_RAW_NONE = 1
#: A delta's numbers XORed with its key's (same shape); else compressed against them.
_XOR = 2
#: The most numbers a frame holds: a +S 1024 node has ~1,500 instances of ~150 numbers.
MAX_VALUES = 4 << 20

Shape = tuple[Any, ...]


@dataclass
class Frame:
    shape: Shape
    values: bytes  # array("Q") bytes, native little-endian
    text: bytes  # the head's JSON, b"\n", the pools' blocks' JSON, b"\n", raw (UTF-8)
    raw_none: bool


def _instance_shape(inst: Any) -> tuple[Any, ...]:
    p = inst.mbcs_pool
    return (inst.allocator, inst.instance, tuple(inst.options.items()),
            tuple(inst.mbcs.blocks), tuple(inst.sbcs.blocks),
            None if p is None else tuple(p.counters),
            tuple(inst.calls),
            None if inst.fix_types is None else tuple(f.type for f in inst.fix_types),
            None if inst.versions is None else tuple(inst.versions))


def _values(snap: Snapshot) -> list[int]:
    out: list[int] = []
    put = out.extend
    for inst in snap.allocators:
        for cs in (inst.mbcs, inst.sbcs):
            for b in cs.blocks.values():
                c, s = b.count, b.size
                put((c.current, c.last_max, c.max, s.current, s.last_max, s.max))
            c, s = cs.carriers, cs.carriers_size
            put((c.current, c.last_max, c.max, s.current, s.last_max, s.max, cs.mseg_carriers,
                 cs.sys_carriers, cs.mseg_carriers_size, cs.sys_carriers_size))
        p = inst.mbcs_pool
        if p is not None:
            put((p.carriers, p.carriers_size))
            put(p.counters.values())
        put(inst.calls.values())
        for f in inst.fix_types or ():
            put((f.allocated, f.used))
    for m in snap.mseg:
        g, z = m.segments, m.segments_size
        put((m.cached_segments, m.cache_hits, g.current, g.last_max, g.max, m.segments_watermark,
             z.current, z.last_max, z.max))
        put(m.calls.values())
    return out


def split(snap: Snapshot) -> Frame | None:
    """The frame of a snapshot, or None when one cannot hold it (a number that is not a
    machine word, an option JSON cannot write): the store then keeps its JSON document."""
    try:
        values = array("Q", _values(snap)).tobytes()
        shape = (tuple(_instance_shape(i) for i in snap.allocators),
                 tuple((m.instance, tuple(m.options.items()), tuple(m.calls))
                       for m in snap.mseg))
        # The rest, through Snapshot's own encoding: a copy without the instances and raw.
        head = replace(snap, allocators=[], mseg=[], raw=None).to_dict()
        text = json.dumps(head, separators=(",", ":")).encode()
        pools = {str(i): {t: list(v) for t, v in a.mbcs_pool.blocks.items()}
                 for i, a in enumerate(snap.allocators)
                 if a.mbcs_pool is not None and a.mbcs_pool.blocks}
        text += b"\n" + json.dumps(pools, separators=(",", ":")).encode()
        raw = (snap.raw or "").encode()
    except (OverflowError, TypeError, ValueError, UnicodeError):
        return None
    return Frame(shape, values, text + b"\n" + raw, snap.raw is None)


def shape_json(shape: Shape) -> bytes:
    return json.dumps(shape, separators=(",", ":")).encode()


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def shape_from_json(data: bytes) -> Shape:
    """A stored shape as split() makes it (JSON turns its tuples into lists)."""
    doc = json.loads(data)
    if not (isinstance(doc, list) and len(doc) == 2):
        raise ValueError("a shape that is not [instances, mseg]")
    return _freeze(doc)


# ---- bytes: XOR against the key, byte planes -----------------------------------------------

def xor(a: bytes, b: bytes) -> bytes:
    """a XOR b, bytes of equal length (one big-int operation, C speed)."""
    n = len(a)
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(n, "little")


def planes(values: bytes) -> bytes:
    """The 8 byte planes of an array of 8-byte numbers, one after another: small numbers and
    small changes leave the high planes all zeros, which compress to nothing."""
    return b"".join(values[i::8] for i in range(8))


def unplanes(data: bytes) -> bytes:
    n = len(data) // 8
    out = bytearray(len(data))
    for i in range(8):
        out[i::8] = data[i * n:(i + 1) * n]
    return bytes(out)


class NewerFormat(ValueError):
    """A stored blob (a frame, a rollup) of a format version this beamalloc does not read:
    a newer beamalloc wrote it."""


def pack(text_z: bytes, values_z: bytes, n: int, raw_none: bool, xored: bool = False) -> bytes:
    flags = (_RAW_NONE if raw_none else 0) | (_XOR if xored else 0)
    return MAGIC + _HEADER.pack(flags, len(text_z), n) + text_z + values_z


def unpack(blob: Any) -> tuple[bytes, bytes, int, bool, bool]:
    """(compressed text, compressed numbers, how many numbers, raw is None, numbers XORed) of
    a frame blob; ValueError for one that is not what pack() writes."""
    if not isinstance(blob, bytes):
        raise TypeError("a blob that is not bytes")
    start = len(MAGIC) + _HEADER.size
    if blob.startswith(PREFIX) and blob[3:4].isdigit() and int(blob[3:4]) > VERSION:
        raise NewerFormat(f"a snapshot frame of format {blob[3:4].decode()} (this beamalloc "
                          f"reads format {VERSION})")
    if len(blob) < start or not blob.startswith(MAGIC):
        raise ValueError("a frame cut short")
    flags, tlen, n = _HEADER.unpack_from(blob, len(MAGIC))
    if flags & ~(_RAW_NONE | _XOR) or start + tlen > len(blob) or n > MAX_VALUES:
        raise ValueError("a frame whose header does not fit it")
    return (blob[start:start + tlen], blob[start + tlen:], n, bool(flags & _RAW_NONE),
            bool(flags & _XOR))


# ---- joining: the document Snapshot.from_dict reads ----------------------------------------

def _triple(v: list[int], i: int) -> list[int]:
    return [v[i], v[i + 1], v[i + 2]]


def _carrier_stats(v: list[int], i: int, types: Any) -> tuple[dict[str, Any], int]:
    blocks = {}
    for t in types:
        blocks[t] = {"count": _triple(v, i), "size": _triple(v, i + 3)}
        i += 6
    return {"blocks": blocks, "carriers": _triple(v, i), "carriers_size": _triple(v, i + 3),
            "mseg_carriers": v[i + 6], "sys_carriers": v[i + 7],
            "mseg_carriers_size": v[i + 8], "sys_carriers_size": v[i + 9]}, i + 10


def join(shape: Shape, values: bytes, text: bytes, raw_none: bool) -> Snapshot:
    """The snapshot split() was given. ValueError (or KeyError, IndexError) for parts that
    do not fit together; Snapshot.from_dict and check() refuse what no node reports."""
    v = array("Q")
    v.frombytes(values)
    vals = v.tolist()
    head_json, _, rest = text.partition(b"\n")
    pools_json, _, raw = rest.partition(b"\n")
    doc, pools = json.loads(head_json), json.loads(pools_json)
    if not isinstance(doc, dict) or not isinstance(pools, dict):
        raise ValueError("a frame head that is not an object")
    allocators, mseg = shape
    i = 0
    insts = []
    for k, (name, num, opts, mtypes, stypes, pool, calls, fix, versions) in enumerate(allocators):
        mbcs, i = _carrier_stats(vals, i, mtypes)
        sbcs, i = _carrier_stats(vals, i, stypes)
        pool_doc = None
        if pool is not None:
            counters = pool
            carriers, size = vals[i], vals[i + 1]
            i += 2
            pool_doc = {"blocks": pools.get(str(k), {}), "carriers": carriers,
                        "carriers_size": size,
                        "counters": dict(zip(counters, vals[i:i + len(counters)], strict=True))}
            i += len(counters)
        calls_doc = dict(zip(calls, vals[i:i + len(calls)], strict=True))
        i += len(calls)
        fix_doc = None
        if fix is not None:
            fix_doc = [{"type": t, "allocated": vals[i + 2 * j], "used": vals[i + 2 * j + 1]}
                       for j, t in enumerate(fix)]
            i += 2 * len(fix)
        insts.append({"allocator": name, "instance": num, "options": dict(opts), "mbcs": mbcs,
                      "sbcs": sbcs, "mbcs_pool": pool_doc, "calls": calls_doc,
                      "fix_types": fix_doc, "versions": None if versions is None
                      else list(versions)})
    msegs = []
    for num, opts, calls in mseg:
        msegs.append({"instance": num, "options": dict(opts), "cached_segments": vals[i],
                      "cache_hits": vals[i + 1], "segments": _triple(vals, i + 2),
                      "segments_watermark": vals[i + 5], "segments_size": _triple(vals, i + 6),
                      "calls": dict(zip(calls, vals[i + 9:i + 9 + len(calls)], strict=True))})
        i += 9 + len(calls)
    if i != len(vals):
        raise ValueError("a frame whose numbers do not fit its shape")
    doc["allocators"], doc["mseg"] = insts, msegs
    doc["raw"] = None if raw_none else raw.decode()
    snap = Snapshot.from_dict(doc)
    snap.check()
    return snap
