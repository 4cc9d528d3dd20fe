"""The ETS tables of a live node, read-only (docs/erts/memory-categories.md §2): what a crash
dump's `=ets` sections give. One scan (scan_direct) over either transport (collector/transport.py:
our own client over plain TCP, the hidden node's relay over TLS and other -proto_dist), like the
process scan. Only ets:all/0, ets:info/1 (through lists:map with an external fun)
and a few system_info calls run on the target; no table is written, fixed or traversed.

The result has the shape collector/dumptables.py stores for a dump (`Snapshot.extra["ets"]`),
so analyzer/categories.py reads both alike: the count, the tables read, their bytes, and the
TOP largest with name, owner, type and object count.
"""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any

from beamalloc.collector import dist
from beamalloc.collector.access import Access
from beamalloc.collector.procdump import printable
from beamalloc.collector.session import with_transport
from beamalloc.collector.terms import Atom, format_term, proplist
from beamalloc.collector.transport import Transport, result
from beamalloc.snapshot import UINT64_MAX

#: Tables read at most, and reported by size (the count and the bytes cover those read).
MAX_TABLES = 100_000
TOP = 50
#: Tables per ets:info request and a name's or id's text at most.
CHUNK, TEXT = 2000, 100


def _n(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= UINT64_MAX else None


def _s(v: Any) -> str:
    """A name the target sent, as the outputs may show it (printable only, bounded)."""
    return printable(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) or ""


def scan_ets(node: str, cookie: str, timeout: float = 10.0, max_tables: int = MAX_TABLES,
             top: int = TOP, access: Access | None = None) -> dict[str, Any]:
    """`node`'s ETS tables as Snapshot.extra["ets"]; NodeError (exit 3) within `timeout`."""
    p = with_transport(node, cookie, timeout, access, lambda conn, deadline:
                       scan_direct(conn, max_tables, top, deadline), "processes")
    return tables_from_props(p)


def tables_from_props(p: dict[str, Any]) -> dict[str, Any]:
    """The scan's answer (scan_direct's props) as Snapshot.extra["ets"]."""
    ws = _n(p.get("wordsize")) or 8
    tables = []
    for t in p.get("tables") or []:
        if not (isinstance(t, tuple) and len(t) == 7) or _n(t[4]) is None:
            continue
        name, tid, owner, typ, words, objects, prot = t
        tables.append({"owner": _s(owner), "name": _s(name), "table": _s(tid),
                       "type": _s(typ), "protection": _s(prot), "objects": _n(objects),
                       "bytes": words * ws})
    count, read = _n(p.get("count")) or 0, _n(p.get("read")) or 0
    out: dict[str, Any] = {"count": count, "read": read,
                           "bytes": (_n(p.get("words")) or 0) * ws, "tables": tables,
                           "memory_ets": _n(p.get("memory_ets"))}
    return out


def _raw_tables(r: Any) -> list[bytes]:
    """ets:all/0's reply as it came (dist.RawReply): each table, a name (an atom) or an id (a
    reference), as its own encoding, to be sent back as it came."""
    if not isinstance(r, dist.RawReply):
        raise dist.DistError("bad_reply", b"ets:all() is not a list of tables")
    data, pos = r.data, r.pos
    if data[pos:pos + 1] == b"\x6a":
        return []
    bad = dist.DistError("bad_reply", b"ets:all() is not a list of tables")
    if data[pos:pos + 1] != b"\x6c":
        raise bad
    try:
        n = struct.unpack_from(">I", data, pos + 1)[0]
        at, out = pos + 5, []
        for _ in range(min(n, MAX_TABLES * 16)):
            start = at
            tag = data[at]
            if tag == 90:  # NEWER_REFERENCE_EXT: u16 words, node atom, u32 creation, words
                words = struct.unpack_from(">H", data, at + 1)[0]
                at = _skip_atom(data, at + 3) + 4 + 4 * words
            elif tag in (118, 119, 100, 115):
                at = _skip_atom(data, at)
            else:
                raise bad
            out.append(data[start:at])
        if len(out) != n or at >= len(data) or data[at] != 0x6a:
            raise bad
        return out
    except (IndexError, struct.error):
        raise bad from None


def _skip_atom(data: bytes, at: int) -> int:
    tag = data[at]
    if tag in (118, 100):  # ATOM_UTF8_EXT, ATOM_EXT: u16 length
        return at + 3 + struct.unpack_from(">H", data, at + 1)[0]
    if tag in (119, 115):  # SMALL_ATOM_UTF8_EXT, SMALL_ATOM_EXT: u8 length
        return at + 2 + data[at + 1]
    raise IndexError


def _text(v: Any) -> str:
    """A name or id as ~0p writes it, bounded (an id reads as the target
    writes it, #Ref<0...>)."""
    try:
        return format_term(v)[:TEXT]
    except TypeError:
        return "?"


def scan_direct(conn: Transport, max_tables: int, top: int,
                deadline: float) -> dict[str, Any]:
    """The tables' props over `conn` (the reported tables' owners as the target writes them,
    without its pid_to_list/1): ets:all/0 once, then ets:info/1 of CHUNK tables per request."""
    ws_k = conn.send("erlang", "system_info", [Atom("wordsize")])
    mem_k = conn.send("erlang", "memory", [Atom("ets")])
    every = _raw_tables(result(conn.receive(conn.send_raw("ets", "all", []), deadline)))
    read = every[:max_tables]
    fun = dist.Export("ets", "info", 1)
    keys = [conn.send("lists", "map", [fun, dist.RawTerm(
        b"\x6c" + struct.pack(">I", len(c)) + b"".join(c) + b"\x6a")])
        for c in (read[i:i + CHUNK] for i in range(0, len(read), CHUNK))]
    rows = []
    for key in keys:
        infos = result(conn.receive(key, deadline))
        if not isinstance(infos, list):
            raise dist.DistError("bad_reply", b"ets:info answers are not a list")
        for i in infos:
            if isinstance(i, list):
                p = proplist(i)
                rows.append((_text(p.get("name")), _text(p.get("id")), p.get("owner"),
                             p.get("type"), p.get("memory"), p.get("size"),
                             p.get("protection")))
    words = [r[4] for r in rows]
    if not all(type(w) is int and 0 <= w <= UINT64_MAX for w in words):
        raise dist.DistError("bad_reply", b"an ets:info memory is not a word count")
    # a keysort on the words, reversed (of equal ones, the last read first), as the Erlang
    # scan this replaced did
    largest = sorted(rows, key=itemgetter(4))[::-1][:top]
    return {"count": len(every), "read": len(rows), "words": sum(words),
            "wordsize": result(conn.receive(ws_k, deadline)),
            "memory_ets": result(conn.receive(mem_k, deadline)), "tables": largest}
