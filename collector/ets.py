"""The ETS tables of a live node, read-only (docs/erts/memory-categories.md §2): what a crash
dump's `=ets` sections give, from collector/erlang/beamalloc_ets.erl run on a hidden node of
ours like the process scan (only ets:all/0, ets:info/1 and a few system_info calls run on the
target; no table is written, fixed or traversed).

The result has the shape collector/dumptables.py stores for a dump (`Snapshot.extra["ets"]`),
so analyzer/categories.py reads both alike: the count, the tables read, their bytes, and the
TOP largest with name, owner, type and object count.
"""

from __future__ import annotations

from typing import Any

from beamalloc.collector import processes
from beamalloc.collector.access import Access
from beamalloc.collector.procdump import printable
from beamalloc.snapshot import UINT64_MAX

#: Tables read at most, and reported by size (the count and the bytes cover those read).
MAX_TABLES = 100_000
TOP = 50


def _n(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= UINT64_MAX else None


def _s(v: Any) -> str:
    """A name the target sent, as the outputs may show it (printable only, bounded)."""
    return printable(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) or ""


def scan_ets(node: str, cookie: str, timeout: float = 10.0, max_tables: int = MAX_TABLES,
             top: int = TOP, access: Access | None = None) -> dict[str, Any]:
    """`node`'s ETS tables as Snapshot.extra["ets"]; NodeError (exit 3) within `timeout`."""
    p = processes._run(node, cookie, timeout, [str(max_tables), str(top)], access,
                       module="beamalloc_ets")
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
