"""The terminal report of `beamalloc analyze`: a verdict first, then every number behind it.

Like recon_alloc's docs, the report teaches while it reports: each table says in one line what
its numbers mean and what to look at.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from beamalloc.analyzer.rules import usage_level
from beamalloc.flags import UINT_MAX
from beamalloc.reporters import holders
from beamalloc.units import human, pct


def _usage_style(u: float) -> str:
    return {"bad": "red", "warn": "yellow", "ok": "green"}[usage_level(u)]


def verdict_lines(a: dict[str, Any]) -> list[str]:
    t, os_ = a["totals"], a["os"]
    lines = [
        f"The allocators hold {human(t['allocated'])} of carriers and use "
        f"{human(t['used'])} of them "
        f"(usage {pct(t['usage'])}): {human(t['unused'])} is reserved but holds no data."
    ]
    types = a["allocator_types"]
    if types and types[0]["unused"] > 0:
        w = types[0]
        lines.append(
            f"Most of the unused space is in {w['allocator']}: {human(w['unused'])} unused of "
            f"{human(w['allocated'])} (usage {pct(w['usage'])})."
        )
    c = a.get("carriers") or {}
    worst = next((m for m in c.get("allocators", ())
                  if m["classification"]["kind"] != "compact"), None)
    if worst is not None:
        cl = worst["classification"]
        lines.append(f"Inside {worst['allocator']}'s carriers: {cl['kind']}: {cl['reason']}.")
    if os_["rss"] is not None:
        gap = os_["rss_minus_allocated"]
        lines.append(
            f"The OS sees {human(os_['rss'])} resident; the allocators account for "
            f"{human(os_['allocated_all'])} of it"
            + (
                f", so {human(gap)} is outside them (NIFs, drivers, the mseg cache, code)."
                if gap > 0
                else "."
            )
        )
        if os_.get("rss_lazyfree"):
            lines.append(
                f"Of that resident memory, {human(os_['rss_lazyfree'])} is lazily freed "
                "(MADV_FREE, e.g. by acful): the OS takes it back when it needs memory, so it "
                "counts in MemAvailable"
                + (f" ({human(os_['mem_available'])} on this host)" if os_["mem_available"] else "")
                + " while VmRSS still shows it."
            )
    return lines


def render(a: dict[str, Any], console: Console, top: int = 20) -> None:
    head = Text()
    head.append(f"{a['node']}", style="bold")
    head.append(
        f"  OTP {a['otp_release'] or '?'}  erts {a['erts_version'] or '?'}  "
        f"schedulers {a['schedulers'] or '?'}  source {a['source']}  "
        f"taken {a['taken_at'] or 'unknown'}"
    )
    console.print(head)
    for note in a["notes"]:
        console.print(Text(f"note: {note}", style="yellow" if a["truncated"] else "dim"))
    console.print()
    for line in verdict_lines(a):
        console.print(line)
    console.print()

    mem = Table(title="Memory: erlang:memory(total) vs carriers vs the OS", title_justify="left")
    for col in (
        "erlang:memory(total)",
        "allocated (recon)",
        "allocated (all)",
        "used",
        "unused",
        "usage",
        "RSS",
        "RSS - allocated",
    ):
        mem.add_column(col, justify="right", no_wrap=True)
    t, os_ = a["totals"], a["os"]
    mem.add_row(
        human(os_["erlang_memory_total"]),
        human(t["allocated"]),
        human(os_["allocated_all"]),
        human(t["used"]),
        human(t["unused"]),
        Text(pct(t["usage"]), style=_usage_style(t["usage"])),
        human(os_["rss"]),
        human(os_["rss_minus_allocated"]),
    )
    console.print(mem)
    console.print(
        "  recon counts 9 allocator types; 'all' adds literal_alloc. "
        "max (an upper bound: peaks summed across instances): "
        f"allocated {human(a['totals_max']['allocated'])}, "
        f"used {human(a['totals_max']['used'])}",
        style="dim",
    )
    console.print()

    types = Table(
        title="Per allocator: where the unused bytes are (worst first)", title_justify="left"
    )
    for col, j in (
        ("allocator", "left"),
        ("inst", "right"),
        ("allocated", "right"),
        ("used", "right"),
        ("unused", "right"),
        ("usage", "right"),
        ("sbcs share", "right"),
        ("avg mbcs block", "right"),
        ("sbct", "right"),
        ("lmbcs", "right"),
        ("as", "left"),
        ("pool", "right"),
        ("max allocated", "right"),
    ):
        types.add_column(col, justify=j, no_wrap=True)
    for r in a["allocator_types"]:
        o = r["options"]
        types.add_row(
            r["allocator"] + ("" if r["in_recon"] else " *"),
            str(r["instances"]),
            human(r["allocated"]),
            human(r["used"]),
            human(r["unused"]),
            Text(pct(r["usage"]), style=_usage_style(r["usage"])),
            pct(r["sbcs_share"]),
            human(r["mbcs_average_block_size"]),
            _size_opt(o["sbct"]) if isinstance(o.get("sbct"), int) else "∞",
            human(o.get("lmbcs")),
            str(o.get("as", "-")),
            human(r["pool_carriers_size"]),
            human(r["max_allocated"]),
        )
    console.print(types)
    console.print(
        "  * not counted by recon_alloc. A block at or above sbct gets its own "
        "single-block carrier; blocks near lmbcs fit badly in multiblock carriers.",
        style="dim",
    )
    console.print()

    inst = Table(
        title=f"Per instance (current, with all-time max), worst {top} first", title_justify="left"
    )
    for col in (
        "instance",
        "unused",
        "mbcs usage",
        "mbcs carriers",
        "mbcs blocks",
        "sbcs usage",
        "sbcs carriers",
        "pool",
        "max mbcs usage",
        "sbcs:mbcs",
    ):
        inst.add_column(col, justify="left" if col == "instance" else "right", no_wrap=True)
    for r in a["allocators"][:top]:
        pool = r["pool"]
        ratio = r["sbcs_to_mbcs"]
        inst.add_row(
            f"{r['allocator']}[{r['instance']}]",
            human(r["unused"]),
            Text(pct(r["mbcs_usage"]), style=_usage_style(r["mbcs_usage"])),
            f"{r['mbcs_carriers']} / {r['max']['mbcs_carriers']} "
            f"({human(r['mbcs_carriers_size'])})",
            f"{r['mbcs_blocks']} / {r['max']['mbcs_blocks']}",
            pct(r["sbcs_usage"]),
            f"{r['sbcs_carriers']} ({human(r['sbcs_carriers_size'])})",
            "-" if pool is None else f"{pool['carriers']} ({human(pool['carriers_size'])})",
            pct(r["max"]["mbcs_usage"]),
            ratio if isinstance(ratio, str) else f"{ratio:.3g}",
        )
    console.print(inst)
    console.print(
        "  Low current usage beside high max usage on the same carriers is the "
        "signature of a spike that left its carriers fragmented. Instance 0 serves "
        "non-scheduler threads and never uses the carrier pool.",
        style="dim",
    )
    console.print()

    _carriers(a.get("carriers"), console)

    if a["cache_hit_rates"]:
        cache = Table(
            title="mseg_alloc segment cache (hit rate should be above 80% "
            "unless the load is spiky)",
            title_justify="left",
        )
        for col in ("mseg instance", "hit rate", "hits", "calls", "cached segments"):
            cache.add_column(col, justify="right")
        for r in a["cache_hit_rates"]:
            cache.add_row(
                str(r["instance"]),
                pct(r["hit_rate"]),
                str(r["hits"]),
                str(r["calls"]),
                str(r["cached_segments"]),
            )
        console.print(cache)
    if a.get("processes"):
        console.print()
        holders.render(a["processes"], console)


# ---- inside the carriers (analyzer/carriers.py) -------------------------------------------------

_MARKS = "▁▂▃▄▅▆▇█"
#: Lines of marks per strip before one mark stands for several carriers.
_STRIP_LINES = 2


def _mark(fill: float) -> Text:
    ch = _MARKS[min(len(_MARKS) - 1, int(fill * len(_MARKS)))]
    return Text(ch, style="red" if fill < 0.10 else "yellow" if fill < 0.75 else "green")


def _strip(fills: list[float], width: int) -> tuple[list[Text], int]:
    """Marks for carriers (one each while they fit in _STRIP_LINES lines of `width`, else each
    mark the mean fill of k carriers in order), as lines, and k."""
    k = max(1, -(-len(fills) // (width * _STRIP_LINES)))
    marks = [sum(fills[i:i + k]) / len(fills[i:i + k]) for i in range(0, len(fills), k)]
    lines = []
    for i in range(0, len(marks), width):
        t = Text()
        for f in marks[i:i + width]:
            t.append_text(_mark(f))
        lines.append(t)
    return lines, k


def _carriers(c: dict[str, Any] | None, console: Console) -> None:
    if c is None:
        return
    console.print(Text("Inside the carriers (instrument:carriers/1)", style="bold italic"))
    if not c["available"]:
        why = c["unavailable"] or "the source has no per-carrier data (only a live node does)"
        console.print(f"  no per-carrier data: {why}", style="dim")
        console.print()
        return
    if c["skipped"]:
        console.print(f"  {c['skipped']} carriers were not read (the collector's cap); "
                      "the maps below leave them out", style="yellow")
    shown = [m for m in c["allocators"] if m["classification"]["kind"] != "compact"]
    quiet = [m["allocator"] for m in c["allocators"] if m["classification"]["kind"] == "compact"]
    width = max(20, console.width - 16)
    for m in shown:
        cl = m["classification"]
        head = Text()
        head.append(f"{m['allocator']}: ", style="bold")
        head.append(cl["kind"], style="bold red" if cl["kind"] != "free inside carriers"
                    else "bold yellow")
        head.append(f" - {cl['reason']}")
        console.print(head)
        lf = m["largest_free"]
        if lf is not None:
            rng = f"{human(lf[0])} or more" if lf[1] is None else f"{human(lf[0])}-{human(lf[1])}"
            console.print(f"  largest free block {rng}; sbct {_size_opt(m['sbct'])}, "
                          f"lmbcs {_size_opt(m['lmbcs'])}", style="dim")
        pts = m["map"]
        for pooled, label in ((False, "owned"), (True, "pooled")):
            fills = [f for f, p in zip(pts["fill"], pts["in_pool"], strict=True) if p == pooled]
            if not fills:
                continue
            lines, k = _strip(fills, width)
            tag = f"  {label:<6} {len(fills):>5} "
            for i, line in enumerate(lines):
                row = Text(tag if i == 0 else " " * len(tag))
                row.append_text(line)
                console.print(row, no_wrap=True, overflow="crop")
            if k > 1:
                console.print(" " * len(tag) + f"(each mark: the mean fill of {k} carriers)",
                              style="dim")
        bands = Table(box=None, padding=(0, 1), show_edge=False)
        for col in ("mbcs fill", "owned", "owned bytes", "pooled", "pooled bytes"):
            bands.add_column(col, justify="left" if col == "mbcs fill" else "right",
                             no_wrap=True)
        for b in m["fill_bands"]:
            if b["owned"] or b["pooled"]:
                bands.add_row(f"{b['lo']:.0%}-{b['hi']:.0%}", str(b["owned"]),
                              human(b["owned_bytes"]), str(b["pooled"]), human(b["pooled_bytes"]))
        console.print(bands)
        sp = m["sparse"]
        if sp["carriers"]:
            console.print(f"  to give back the {sp['carriers']} sparse carriers "
                          f"({human(sp['size'])}), {sp['pinning_blocks']} blocks "
                          f"({human(sp['pinning_bytes'])}) would have to move", style="dim")
    if quiet:
        console.print(f"  compact (little unused in multiblock carriers): {', '.join(quiet)}",
                      style="dim")
    console.print("  One mark per multiblock or single-block carrier, smallest carriers first; "
                  "its height is its fill (red under 10 %). Pooled carriers were abandoned by "
                  "their instance and wait for another to fetch them.", style="dim")
    console.print()


def _size_opt(v: int | None) -> str:
    """An option in bytes; ~0 (beamalloc.flags.UINT_MAX) is how erts says "infinite"."""
    return "-" if v is None else "∞" if v >= UINT_MAX else human(v)
