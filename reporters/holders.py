"""The terminal section "who holds the memory" (advice/holders.py's `processes` dict).

As the other reporters: each table says in one line what its numbers mean. Sizes are what the
node itself reports (process_info), binaries counted once per address (docs/processes.md).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from beamalloc.reporters.table import Col, print_table, prose
from beamalloc.units import around, count, human


def _h(v: int | None) -> str:
    return "-" if v is None else human(v)


def _who(row: dict[str, Any]) -> str:
    return row["name"] or row["pid"]


def summary_line(p: dict[str, Any]) -> str:
    read = (f"all {count(p['count'])} processes" if p["complete"]
            else f"{count(p['scanned'])} of {count(p['count'])} processes (a fair sample)")
    bins = ("" if p.get("binary_bytes") is None else
            f"; they reference {_h(p['binary_bytes'])} of refc binaries"
            + (f" ({count(p['binary_count'])} distinct)"
               if p.get("binary_count") is not None else "")
            + (f", of {_h(p['memory_binary'])} the node counts"
               if p.get("memory_binary") is not None else ""))
    return (f"Processes ({p['source']}): read {read}; {_h(p['memory'])} in them, "
            f"{_h(p['total_heap_bytes'])} of it heap{bins}.")


def render(p: dict[str, Any], console: Console, top: int = 10) -> None:
    """The section, for `analyze` and `recommend` in a terminal."""
    console.print(Text("Who holds the memory", style="bold"))
    prose(console, summary_line(p), indent="")
    for note in p.get("notes") or []:
        prose(console, f"note: {note}", "dim", indent="")
    for f in p.get("findings") or []:
        style = "bold" if f["level"] == "action" else ""
        console.print(Text(f"{f['rule']} ", style="cyan") + Text(f["title"], style=style))
        prose(console, f['message'], "dim", indent="   ")
    _table(console, "Refc binaries by holder: bytes of the distinct binaries each references; "
           "exclusive: referenced by nothing else, freed when it collects them dead",
           p.get("top_binary") or [], top,
           [("binary", "binary_bytes", _h), ("count", "binary_count", count),
            ("exclusive", "binary_exclusive_bytes", _h), ("heap", "total_heap_bytes", _h)])
    _table(console, "Heaps by holder: total heap (young + old + fragments) and the words in use; "
           "an idle process keeps its heap until it collects or hibernates",
           p.get("top_heap") or [], top,
           [("heap", "total_heap_bytes", _h), ("in use", "heap_used_bytes", _h),
            ("memory", "memory", _h), ("status", "status", str)])
    boxes = [r for r in p.get("mailboxes") or [] if r["message_queue_len"]]
    if boxes:
        _table(console, "Mailboxes: messages not yet handled", boxes, top,
               [("messages", "message_queue_len", count), ("memory", "memory", _h)])
    _idle_table(console, p.get("idle_heaps"), top)
    groups = p.get("groups") or []
    if groups:
        rows = []
        for g in groups[:top]:
            names = g["names"][0] + (f" +{len(g['names']) - 1}" if len(g["names"]) > 1 else "") \
                if g["names"] else ""
            rows.append([g["initial_call"], count(g["count"]), _h(g["memory"]),
                         _h(g["total_heap_bytes"]), count(g.get("idle_count")),
                         _h(g["binary_bytes"]), names])
        print_table(console, "By initial call (groups; binaries summed per member)", [
            Col("initial call", "left", key=True, wrap=True), Col("count"), Col("memory"),
            Col("heap"), Col("idle"), Col("binary"), Col("names", "left", optional=True)],
            rows, box=None)
    probe = p.get("gc_probe")
    if probe:
        rows = []
        for r in probe:
            if r["dead"]:
                rows.append([r["pid"], "dead", "", "", "", ""])
                continue
            rows.append([r["name"] or r["pid"], _h(r["released_binary_bytes"]),
                         _h(r["released_heap_bytes"]), _h(r["memory_binary_before"]),
                         _h(r["memory_binary_after"]), f"{r['gc_ms']:.1f}"])
        print_table(console, "GC probe: each process collected once, measured before and after", [
            Col("process", "left", key=True, wrap=True), Col("binary released"),
            Col("heap released"), Col("node binary before"), Col("after"), Col("gc ms")],
            rows, box=None)
    for x in p.get("h_flags") or []:
        console.print(Text(f"{x['flag']}: not advised ({x['for']}): ", style="yellow")
                      + Text(f"{x['why']}. Cost: {x['cost']}.", style="dim"))
    console.print()


def _table(console: Console, title: str, rows: list[dict[str, Any]], top: int,
           cols: list[tuple[str, str, Any]]) -> None:
    if not rows:
        return
    out = []
    for r in rows[:top]:
        where = f"{r['initial_call'] or '?'}"
        if r.get("current_function"):
            where += f" / {r['current_function']}"
        out.append([_who(r), where, *[fmt(r[k]) if r[k] is not None else "-"
                                      for _, k, fmt in cols]])
    print_table(console, title, [
        Col("process", "left", key=True, wrap=True),
        Col("initial call / current", "left", wrap=True),
        *[Col(c) for c, _, _ in cols]], out, box=None)


def _idle_table(console: Console, ih: dict[str, Any] | None, top: int) -> None:
    """What collecting the idle processes would release, per initial call, and how it is known
    (advice/holders.py idle_heaps): `probe` measured on members, `bound` at most."""
    rows = [g for g in (ih or {}).get("groups") or [] if g["releases"]]
    if not ih or not rows:
        return
    idle = ("idle between two reads" if ih["idle_by"] == "two reads"
            else "idle at one instant (one read)")
    out = [[g["initial_call"], count(g["count"]), _h(g["total_heap_bytes"]),
            around("~" if g["how"] == "probe" else "up to ", human(g["releases"])),
            f"GC probe on {g['probed']}" if g["how"] == "probe" else "bound"]
           for g in rows[:top]]
    print_table(console, f"Idle heaps by initial call ({idle}; OTP's own apart): what a "
                "collection or hibernation releases", [
        Col("initial call", "left", key=True, wrap=True), Col("idle"), Col("heap"),
        Col("releases"), Col("how", "left")], out, box=None)
