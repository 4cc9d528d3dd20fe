"""`beamalloc trace`'s terminal tables: the summary document of ebpf/summary.py (calls and bytes
per allocator and type at block level, syscalls and carrier calls at carrier level, libc malloc
outside erts_alloc) as rich tables."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from beamalloc.ebpf.summary import OPS
from beamalloc.reporters.table import Col, print_table
from beamalloc.units import human as human_bytes
from beamalloc.units import pct


def render(doc: dict[str, Any], console: Any) -> None:
    """Terminal tables (rich) of a summary document."""
    mode = doc["mode"]
    console.print(f"pid {doc['pid']} ({doc.get('node') or 'node unknown'}), "
                  f"{doc['elapsed_s']:.1f} s, level {mode['level']}"
                  + (f", sampled: probes attached {pct(mode['attached_fraction'], 0)} of the time, "
                     "calls scaled" if mode["attached_fraction"] < 1 else ""))
    if mode.get("unseen"):
        console.print(Text("not seen: ", style="bold yellow") + Text(mode["unseen"]))
    if doc["lost"]["total"]:
        console.print(Text(f"lost {doc['lost']['total']} events", style="bold red")
                      + Text(f": {doc['lost']}"))
    blocks = doc.get("blocks") or {}
    if blocks:
        rows = []
        for name, e in blocks.items():
            out = e["outstanding_bytes"]
            rows.append([name, "", *(str(e["calls"][o]) for o in OPS),
                         str(e["rates_per_s"]["alloc"]), human_bytes(e["requested_bytes"]),
                         "-" if out is None else human_bytes(out)])
            top = sorted(e["types"].items(), key=lambda kv: -kv[1]["alloc"])[:5]
            for tname, ty in top:
                o = ty["outstanding_bytes"]
                rows.append(["", tname, str(ty["alloc"]), str(ty["free"]), str(ty["realloc"]), "",
                             human_bytes(ty["requested_bytes"]),
                             "-" if o is None else human_bytes(o)])
        print_table(console, "alloc_util calls (block level)", [
            Col("allocator", "left", key=True), Col("type", "left", key=True),
            *(Col(c) for c in ("alloc", "free", "realloc", "alloc/s", "requested",
                               "outstanding"))], rows)
    carriers = doc.get("carriers") or {}
    if carriers:
        rows = []
        for src in ("syscalls", "mseg", "sys_alloc", "libc"):
            for k1, v1 in (carriers.get(src) or {}).items():
                for k2, v2 in v1.items():
                    if "count" in v2:
                        rows.append([src, k1, k2, str(v2["count"]), human_bytes(v2["bytes"])])
                    else:
                        for k3, v3 in v2.items():
                            rows.append([src, f"{k1} {k2}", k3, str(v3["count"]),
                                         human_bytes(v3["bytes"])])
        print_table(console, "carrier level", [
            Col("source", "left", key=True), Col("call", "left", key=True, wrap=True),
            Col("detail", "left", key=True, wrap=True), Col("count"), Col("bytes")], rows)
    foreign = doc.get("foreign_malloc")
    if foreign:
        console.print(f"libc malloc outside erts_alloc: {human_bytes(foreign['outstanding_bytes'])}"
                      f" outstanding in {foreign['outstanding_blocks']} blocks")
        for s in foreign["top_stacks"][:5]:
            console.print(f"  {human_bytes(s['bytes'])} in {s['blocks']} blocks:")
            for frame in s["stack"][:6]:
                console.print(f"      {frame}")
