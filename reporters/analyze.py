"""The terminal report of `beamalloc analyze`: a verdict first, then every number behind it.

Like recon_alloc's docs, the report teaches while it reports: each table says in one line what
its numbers mean and what to look at.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from beamalloc.analyzer.options import format_option
from beamalloc.analyzer.rules import usage_level
from beamalloc.reporters import holders
from beamalloc.reporters.table import Col, print_table, prose
from beamalloc.units import human, pct


def _usage_style(u: float, unused: int) -> str:
    """The usage's colour weighs the bytes it wastes too (rules.usage_level), as the web UI's:
    384 KiB of an idle temp_alloc never reads as red as 155 MiB of binary_alloc."""
    return {"bad": "red", "warn": "yellow", "ok": "green"}[usage_level(u, unused)]


def header_facts(a: dict[str, Any]) -> tuple[str, str]:
    """OTP, erts and schedulers as the source records them; what it does not record is said so
    (a recon file has none of the three), never shown as "?"."""
    facts = [("OTP", a["otp_release"], "OTP release"), ("erts", a["erts_version"], "erts version"),
             ("schedulers", a["schedulers"], "scheduler count")]
    known = "  ".join(f"{k} {v}" for k, v, _ in facts if v)
    missing = [what for _, v, what in facts if not v]
    gap = (f"The {a['source']} source does not record the {_and(missing)}."
           if missing else "")
    return known, gap


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def death_lines(a: dict[str, Any]) -> list[str]:
    """The cause of death and what was read, the first lines of every output (issue 24)."""
    lines = []
    d = a.get("death")
    if d:
        label = {"out_of_memory": "OUT OF MEMORY", "boot_failure": "DIED AT BOOT",
                 "crash": "CRASHED", "requested": "DUMP ON REQUEST",
                 "unknown": "CAUSE UNKNOWN"}[d["kind"]]
        lines.append(f"{label}: {d['meaning']}")
    cov = a.get("coverage") or {}
    if cov.get("partial"):
        lines.append("PARTIAL: the input is cut short. Read: " + "; ".join(cov["read"])
                     + ". Not read: " + ("; ".join(cov["not_read"]) or "the rest") + "."
                     + (" Flags in force are unknown for " + ", ".join(cov["flags_unknown"])
                        + "." if cov["flags_unknown"] else ""))
    c = a.get("categories") or {}
    said = ((d or {}).get("holder") or {}).get("pid")  # the dying process, named above
    if c.get("largest_notable") and not (said and c["largest"]["name"].startswith(said + " ")):
        lines.append(holder_sentence(c["largest"], c["largest_share"]))
    return lines


def picture_lines(a: dict[str, Any]) -> list[str]:
    """The container, the tables taken by limits and known VM defects: one line each."""
    lines = []
    if a.get("container"):
        lines.append(a["container"]["message"])
        lines += [f"note: {n}" for n in a["container"]["notes"]]
    lines += [x["message"] for x in a.get("limits") or ()]
    lines += [x["message"] for x in a.get("defects") or ()]
    return lines


def holder_sentence(h: dict[str, Any], share: float | None = None) -> str:
    """The largest holder in words: 'ETS table mnesia_transient_decision holds 156.2 MiB, 32.0%
    of erlang:memory(total), the largest single holder (3 tables of that name hold ...).'"""
    what = {"process": "Process", "ets_table": "ETS table", "atom": "The atom table",
            "code": "Loaded code", "binary": "Process", "origin": "NIF or driver"}[h["kind"]]
    s = (f"{what} holds {human(h['bytes'])}" if h["kind"] in ("atom", "code")
         else f"{what} {h['name']} holds {human(h['bytes'])}")
    if share is not None:
        s += f", {pct(share)} of erlang:memory(total), the largest single holder"
    if h.get("siblings", 0) > 1:
        s += (f" ({h['siblings']} tables of that name hold {human(h['siblings_bytes'])} "
              "together)")
    return s + "."


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
    facts, missing = header_facts(a)
    rest = f"{facts}  source {a['source']}  taken {a['taken_at'] or 'unknown'}".strip()
    head = Text(a["node"], style="bold")
    if len(a["node"]) + 2 + len(rest) <= console.width:
        console.print(head + Text(f"  {rest}"))
    else:  # the facts on a line of their own, under the name, rather than cut at any word
        console.print(head)
        prose(console, rest)
    for line in death_lines(a):  # the cause of death first, before any note
        prose(console, line, "bold", indent="")
    if missing:
        prose(console, missing, "dim", indent="")
    for note in a["notes"]:
        prose(console, f"note: {note}", "yellow" if a["truncated"] else "dim", indent="")
    console.print()
    for line in verdict_lines(a):
        prose(console, line, indent="")
    for line in picture_lines(a):
        prose(console, line, "yellow", indent="")
    console.print()
    _categories(a.get("categories"), console)

    t, os_ = a["totals"], a["os"]
    print_table(console, "Memory: erlang:memory(total) vs carriers vs the OS", [
        Col("erlang:memory(total)"), Col("allocated (recon)"), Col("allocated (all)"),
        Col("used"), Col("unused"), Col("usage"), Col("RSS"), Col("RSS - allocated"),
    ], [[
        human(os_["erlang_memory_total"]),
        human(t["allocated"]),
        human(os_["allocated_all"]),
        human(t["used"]),
        human(t["unused"]),
        Text(pct(t["usage"]), style=_usage_style(t["usage"], t["unused"])),
        human(os_["rss"]),
        human(os_["rss_minus_allocated"]),
    ]])
    prose(console, "recon counts 9 allocator types; 'all' adds literal_alloc. "
        "max (an upper bound: peaks summed across instances): "
        f"allocated {human(a['totals_max']['allocated'])}, "
        f"used {human(a['totals_max']['used'])}", "dim")
    console.print()

    rows = []
    for r in a["allocator_types"]:
        o = r["options"]
        rows.append([
            r["allocator"] + ("" if r["in_recon"] else " *"),
            str(r["instances"]),
            human(r["allocated"]),
            human(r["used"]),
            human(r["unused"]),
            Text(pct(r["usage"]), style=_usage_style(r["usage"], r["unused"])),
            pct(r["sbcs_share"]),
            human(r["mbcs_average_block_size"]),
            format_option("sbct", o["sbct"]) if isinstance(o.get("sbct"), int) else "∞",
            human(o.get("lmbcs")),
            str(o.get("as", "-")),
            human(r["pool_carriers_size"]),
            human(r["max_allocated"]),
        ])
    print_table(console, "Per allocator: where the unused bytes are (worst first)", [
        Col("allocator", "left", key=True), Col("inst"), Col("allocated"), Col("used"),
        Col("unused"), Col("usage"), Col("sbcs share"), Col("avg mbcs block"), Col("sbct"),
        Col("lmbcs"), Col("as", "left"), Col("pool"), Col("max allocated"),
    ], rows)
    prose(console, "* not counted by recon_alloc. A block at or above sbct gets its own "
        "single-block carrier; blocks near lmbcs fit badly in multiblock carriers.", "dim")
    console.print()

    rows = []
    for r in a["allocators"][:top]:
        pool = r["pool"]
        ratio = r["sbcs_to_mbcs"]
        rows.append([
            f"{r['allocator']}[{r['instance']}]",
            human(r["unused"]),
            Text(pct(r["mbcs_usage"]), style=_usage_style(r["mbcs_usage"], r["unused"])),
            f"{r['mbcs_carriers']} / {r['max']['mbcs_carriers']} "
            f"({human(r['mbcs_carriers_size'])})",
            f"{r['mbcs_blocks']} / {r['max']['mbcs_blocks']}",
            # recon counts an instance without single-block carriers as 100 % used
            "none" if not r["sbcs_carriers"] else pct(r["sbcs_usage"]),
            f"{r['sbcs_carriers']} ({human(r['sbcs_carriers_size'])})",
            "-" if pool is None else f"{pool['carriers']} ({human(pool['carriers_size'])})",
            pct(r["max"]["mbcs_usage"]),
            ratio if isinstance(ratio, str) else f"{ratio:.3g}",
        ])
    print_table(console, f"Per instance (current, with all-time max), worst {top} first", [
        Col("instance", "left", key=True), Col("unused"), Col("mbcs usage"),
        Col("mbcs carriers"), Col("mbcs blocks"), Col("sbcs usage"), Col("sbcs carriers"),
        Col("pool"), Col("max mbcs usage"), Col("sbcs:mbcs"),
    ], rows)
    prose(console, "Low current usage beside high max usage on the same carriers is the "
        "signature of a spike that left its carriers fragmented. Instance 0 serves "
        "non-scheduler threads and never uses the carrier pool.", "dim")
    console.print()

    _carriers(a.get("carriers"), console)

    if a["cache_hit_rates"]:
        print_table(console, "mseg_alloc segment cache (hit rate should be above 80% unless "
                    "the load is spiky)", [
            Col("mseg instance", key=True), Col("hit rate"), Col("hits"), Col("calls"),
            Col("cached segments")],
            [[str(r["instance"]), pct(r["hit_rate"]), str(r["hits"]), str(r["calls"]),
              str(r["cached_segments"])] for r in a["cache_hit_rates"]])
    if a.get("processes"):
        console.print()
        holders.render(a["processes"], console)


# ---- every byte: the erlang:memory() categories (analyzer/categories.py) ----------------------

CATEGORY_LABELS = {"processes": "processes", "binary": "binary", "ets": "ets", "atom": "atom",
             "code": "code", "other_system": "system (rest)"}


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


def _categories(c: dict[str, Any] | None, console: Console) -> None:
    if not c or c["total"] is None:
        for n in (c or {}).get("notes", ()):
            prose(console, f"note: {n}", "dim", indent="")
        return
    rows = []
    for cat in c["categories"]:
        top = cat["holders"][0] if cat["holders"] else None
        rows.append([
            CATEGORY_LABELS[cat["name"]],
            human(cat["bytes"]) + ("" if cat["share"] is None else f" ({pct(cat['share'])})"),
            ", ".join(f"{a} {human(b)}" for a, b in cat["allocators"][:1]) or "-",
            "-" if top is None else f"{_cut(top['name'], 26)} {human(top['bytes'])}",
        ])
    print_table(console, "Every byte: erlang:memory() by category, the allocators that hold "
                "it, its largest holder", [
                    Col("category", "left", key=True), Col("bytes (of total)"),
                    Col("held in", "left"), Col("largest holder", "left")], rows)
    prose(console, f"erlang:memory(total) {human(c['total'])}; the allocators' carriers "
          f"{human(c['allocated_all'])}. 'held in': the category's main allocator; it may serve "
          "others too (ll_alloc: atoms, code and tables), the JSON lists them all.", "dim")
    for n in c["notes"]:
        prose(console, f"note: {n}", "dim")
    ets = next((x for x in c["categories"] if x["name"] == "ets"), None)
    if ets and ets["holders"]:
        print_table(console, "ETS tables, largest first", [
            Col("table", "left", key=True), Col("bytes"), Col("owner, type, objects", "left")],
            [[h["name"], human(h["bytes"]), h["detail"]] for h in ets["holders"]])
    console.print()


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
        prose(console, f"no per-carrier data: {why}", "dim")
        console.print()
        return
    if c["skipped"]:
        prose(console, f"{c['skipped']} carriers were not read (the collector's cap); "
              "the maps below leave them out", "yellow")
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
            prose(console, f"largest free block {rng}; sbct {format_option('sbct', m['sbct'])}, "
                  f"lmbcs {format_option('lmbcs', m['lmbcs'])}", "dim")
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
        print_table(console, None, [
            Col("mbcs fill", "left", key=True), Col("owned"), Col("owned bytes"), Col("pooled"),
            Col("pooled bytes")],
            [[f"{b['lo']:.0%}-{b['hi']:.0%}", str(b["owned"]), human(b["owned_bytes"]),
              str(b["pooled"]), human(b["pooled_bytes"])]
             for b in m["fill_bands"] if b["owned"] or b["pooled"]],
            box=None, padding=(0, 1), show_edge=False)
        sp = m["sparse"]
        if sp["carriers"]:
            prose(console, f"to give back the {sp['carriers']} sparse carriers "
                  f"({human(sp['size'])}), {sp['pinning_blocks']} blocks "
                  f"({human(sp['pinning_bytes'])}) would have to move", "dim")
    if quiet:
        prose(console, f"compact (little unused in multiblock carriers): {', '.join(quiet)}",
              "dim")
    prose(console, "One mark per multiblock or single-block carrier, smallest carriers first; "
          "its height is its fill (red under 10 %). Pooled carriers were abandoned by "
          "their instance and wait for another to fetch them.", "dim")
    console.print()


