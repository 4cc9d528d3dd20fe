"""Who holds the memory on a node's page: the holders its latest snapshot's page names (the
watch's process scan at or before it, webui/data.py `stored_processes`), the few that hold the
most as the terminal's short output lists them (reporters/analyze.py `holder_rows`)."""

from __future__ import annotations

from typing import Any

from beamalloc.reporters.analyze import holder_rows
from beamalloc.units import count, human
from beamalloc.webui.data import Data, NotFound

#: Processes the node page lists (the snapshot page lists every table).
NODE_HOLDERS = 5


def node_holders(d: Data, ref: str | None) -> dict[str, Any] | None:
    """The node page's holders from the snapshot `ref` (its latest): its process scan's age
    and the NODE_HOLDERS largest holders; None without a snapshot or a scan."""
    if ref is None:
        return None
    try:
        _, a = d.analysis(ref)
    except NotFound:  # replaced by the writer since: shown on the next view
        return None
    p = a.processes
    if not p:
        return None
    return {
        "scan": p.get("scan"),
        "summary": f"{count(p['scanned'])} of {count(p['count'])} processes read; "
                   f"{human(p['memory'])} in them" + ("" if p.get("binary_bytes") is None else
                                f"; they reference {human(p['binary_bytes'])} of refc binaries"),
        "rows": [{"process": r["name"] or r["pid"], "initial_call": r["initial_call"] or "?",
                  "memory": human(r["memory"]), "heap": human(r["total_heap_bytes"]),
                  "binaries": human(r["binary_bytes"]), "status": r["status"] or "-"}
                 for r in holder_rows(p, NODE_HOLDERS)],
    }
