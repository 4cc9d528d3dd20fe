"""The terminal report of `beamalloc analyze`: a verdict first, then every number behind it.

Like recon_alloc's docs, the report teaches while it reports: each table says in one line what
its numbers mean and what to look at. By default it is short (issue 26 item 2: at most
DEFAULT_LINES at 80 columns): the answer (`answer`: a dump's cause of death, the verdict's line
and its why), the totals, the allocator types that carry the decision, the holders by
category; `details` prints every table.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from beamalloc.advice import wording
from beamalloc.advice.records import Verdict
from beamalloc.advice.rules import usage_level
from beamalloc.analyzer.analysis import Analysis
from beamalloc.analyzer.carriers import COMPACT, FREE_INSIDE, CarrierSection
from beamalloc.analyzer.categories import MemoryPicture
from beamalloc.analyzer.options import format_option
from beamalloc.reporters import holders
from beamalloc.reporters.table import Col, print_table, prose
from beamalloc.units import around, count, exact, exact_bytes, human, pct


def _usage_style(u: float, unused: int) -> str:
    """The usage's colour weighs the bytes it wastes too (rules.usage_level), as the web UI's:
    384 KiB of an idle temp_alloc never reads as red as 155 MiB of binary_alloc."""
    return {"bad": "red", "warn": "yellow", "ok": "green"}[usage_level(u, unused)]


def _usage_cell(u: float, unused: int, allocated: int) -> Text | str:
    """A usage, coloured; none where there are no carriers (recon's 100 % of nothing)."""
    return Text(pct(u), style=_usage_style(u, unused)) if allocated else "none"


def header_facts(a: Analysis) -> tuple[str, str]:
    """OTP, erts and schedulers as the source records them; what it does not record is said so
    (a recon file has none of the three), never shown as "?"."""
    facts = [("OTP", a.otp_release, "OTP release"), ("erts", a.erts_version, "erts version"),
             ("schedulers", a.schedulers, "scheduler count")]
    known = "  ".join(f"{k} {v}" for k, v, _ in facts if v)
    missing = [what for _, v, what in facts if not v]
    gap = (f"The {a.source} source does not record the {_and(missing)}."
           if missing else "")
    return known, gap


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


#: The most lines `analyze` and `recommend` print by default at 80 columns (issue 26 item 2).
DEFAULT_LINES = 40

#: Terminal style of each state: green only where nothing is to be done.
STATE_STYLE = {"HEALTHY": "green", "CHANGE FLAGS": "yellow", "FLAGS IN FORCE": "cyan",
               "NO FLAG HELPS": "red", "UNDECIDED": "magenta"}  # fmt: skip

#: Said at the end of a short output: what `--details` adds.
DETAILS_HINT = "--details prints every table"


def alone(console: Console, text: str, style: str = "") -> None:
    """A line that must stand alone: whole on one line where the width holds it; wrapped at its
    words, never cut, on a narrower terminal."""
    if len(text) <= console.width:
        console.print(Text(text, style=style), soft_wrap=True)
    else:
        prose(console, text, style, indent="", hang="  ")


def answer(a: wording.Answered, verdict: Verdict | None, console: Console) -> None:
    """The first lines of every command that judges (issue 26 item 1): a dump's cause of death
    first, then the verdict's line (its state, the bytes at stake, the one thing to do) in at
    most 100 characters and the terminal's width, each with its short lines of why."""
    with exact_bytes(False):  # `--bytes` leaves the answer as said: a line of 100 at most
        _answer(a, verdict, console)


def _answer(a: wording.Answered, verdict: Verdict | None, console: Console) -> None:
    width = min(console.width, wording.HEADLINE_MAX)
    death = wording.cause_of_death(a, width)
    if death:  # its line first, with its why
        alone(console, death[0], "bold")
        for line in death[1:]:
            prose(console, line, indent="  ", hang="  ")
    if verdict is not None:
        style = STATE_STYLE[verdict.state]
        alone(console, wording.fit(wording.headline_parts(verdict), width), f"bold {style}")
        for line in wording.why(verdict):
            prose(console, line, style, indent="  ", hang="  ")
    for line in wording.read_lines(a, holder=verdict is None or not verdict.holders):
        prose(console, line, indent="  ", hang="  ")  # under the answer


def holder_rows(p: dict[str, Any] | None, n: int) -> list[dict[str, Any]]:
    """The `n` processes that hold the most (their memory and the refc binaries they
    reference), largest first: the short output's holders, and the node page's."""
    if not p:
        return []
    rows = {r["pid"]: r for r in [*(p.get("top_heap") or []), *(p.get("top_binary") or [])]}
    return sorted(rows.values(),
                  key=lambda r: -((r["memory"] or 0) + (r["binary_bytes"] or 0)))[:n]


def top_holders(p: dict[str, Any] | None, console: Console, n: int = 3) -> None:
    """The processes that hold the most (their memory and the refc binaries they reference),
    `n` of them: the short output's holders (reporters/holders.py has every table)."""
    top = holder_rows(p, n)
    if not top or not p:
        return
    print_table(console, f"Top holders ({p['source']}): process memory and the refc binaries "
                "it references", [
                    Col("process", "left", key=True, wrap=True), Col("memory"), Col("heap"),
                    Col("binaries"), Col("status", "left")],
                [[r["name"] or r["pid"], human(r["memory"]),
                  "-" if r["total_heap_bytes"] is None else human(r["total_heap_bytes"]),
                  "-" if r["binary_bytes"] is None else human(r["binary_bytes"]),
                  r["status"] or "-"] for r in top], box=None)


def render(a: Analysis, console: Console, top: int = 20,
           verdict: Verdict | None = None, details: bool = False) -> None:
    """`verdict`: the recommender's (advice/recommend.py) on the same snapshot, whose line
    comes first; `details`: every table, else the short output (module docstring)."""
    answer(a, verdict, console)
    facts, missing = header_facts(a)
    if not details:  # one line: the release and the source (--details: erts, schedulers, time)
        facts = f"OTP {a.otp_release}" if a.otp_release else ""
    # the time only with --details, as the JSON says it (the short header keeps to a line)
    taken = f"  taken {a.taken_at or 'unknown'}" if details else ""
    rest = f"{facts}  source {a.source}{taken}".strip()
    head = Text(a.node, style="dim")
    if len(a.node) + 2 + len(rest) <= console.width:
        console.print(head + Text(f"  {rest}", style="dim"))
    else:  # the facts on a line of their own, under the name, rather than cut at any word
        console.print(head)
        prose(console, rest, "dim")
    if missing:
        prose(console, missing, "dim", indent="")
    for note in a.notes if details or a.truncated else ():
        prose(console, f"note: {note}", "yellow" if a.truncated else "dim", indent="")
    console.print()
    for line in wording.analysis_lines(a, short=not details):
        prose(console, line, indent="")
    picture = wording.picture_lines(a)
    for line in picture if details else picture[:SHORT_PICTURE]:
        prose(console, line, "yellow", indent="")
    if not details and len(picture) > SHORT_PICTURE:
        prose(console, f"{len(picture) - SHORT_PICTURE} more notes on the node's limits and "
              f"release: {DETAILS_HINT}", "yellow", indent="")
    console.print()
    if not details:
        _short(a, console)
        return
    _categories(a.categories, console)

    t, os_ = a.totals, a.os
    print_table(console, "Memory: erlang:memory(total) vs carriers vs the OS", [
        Col("erlang:memory(total)"), Col("allocated (recon)"), Col("allocated (all)"),
        Col("used"), Col("unused"), Col("usage"), Col("RSS"), Col("RSS - allocated"),
    ], [[
        human(os_.erlang_memory_total),
        human(t.allocated),
        human(os_.allocated_all),
        human(t.used),
        human(t.unused),
        Text(pct(t.usage), style=_usage_style(t.usage, t.unused)),
        human(os_.rss),
        human(os_.rss_minus_allocated),
    ]])
    in_bytes = [("erlang:memory(total)", os_.erlang_memory_total), ("allocated", t.allocated),
             ("used", t.used), ("unused", t.unused), ("RSS", os_.rss)]
    prose(console, "In bytes: " + ", ".join(f"{k} {exact(v)}" for k, v in in_bytes if v is not None)
          + ".", "dim")
    prose(console, "recon counts 9 allocator types; 'all' adds literal_alloc. "
        "max (an upper bound: peaks summed across instances): "
        f"allocated {human(a.totals_max.allocated)}, "
        f"used {human(a.totals_max.used)}", "dim")
    console.print()

    rows = []
    for ty in a.allocator_types:
        o = ty.options
        rows.append([
            ty.allocator + ("" if ty.in_recon else " *"),
            str(ty.instances),
            human(ty.allocated),
            human(ty.used),
            human(ty.unused),
            _usage_cell(ty.usage, ty.unused, ty.allocated),
            pct(ty.sbcs_share),
            human(ty.mbcs_average_block_size),
            format_option("sbct", o["sbct"]) if isinstance(o.get("sbct"), int) else "infinity",
            human(o.get("lmbcs")),
            str(o.get("as", "-")),
            human(ty.pool_carriers_size),
            human(ty.max_allocated),
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
    above = False  # a current count above its max: the pool's share (recon_alloc's formula)
    for r in a.allocators[:top]:
        pool = r.pool
        ratio = r.sbcs_to_mbcs
        mark = ""
        if r.mbcs_carriers > r.max.mbcs_carriers or r.mbcs_blocks > r.max.mbcs_blocks:
            above, mark = True, " +"
        rows.append([
            f"{r.allocator}[{r.instance}]",
            human(r.unused),
            # recon counts an instance without carriers as 100 % used: no usage to show
            Text(pct(r.mbcs_usage), style=_usage_style(r.mbcs_usage, r.unused))
            if r.mbcs_carriers else "none",
            around(f"{r.mbcs_carriers} / {r.max.mbcs_carriers} (",
                   human(r.mbcs_carriers_size), f"){mark}"),
            f"{r.mbcs_blocks} / {r.max.mbcs_blocks}{mark}",
            # recon counts an instance without single-block carriers as 100 % used
            "none" if not r.sbcs_carriers else pct(r.sbcs_usage),
            around(f"{r.sbcs_carriers} (", human(r.sbcs_carriers_size), ")"),
            "-" if pool is None else around(f"{pool.carriers} (", human(pool.carriers_size),
                                            ")"),
            pct(r.max.mbcs_usage) if r.max.mbcs_carriers else "none",
            ratio if isinstance(ratio, str) else f"{ratio:.3g}",
        ])
    print_table(console, f"Per instance (current, with all-time max), worst {top} first", [
        Col("instance", "left", key=True), Col("unused"), Col("mbcs usage"),
        Col("mbcs carriers"), Col("mbcs blocks"), Col("sbcs usage"), Col("sbcs carriers"),
        Col("pool"), Col("max mbcs usage"), Col("sbcs:mbcs"),
    ], rows)
    prose(console, "Low current usage beside high max usage on the same carriers is the "
        "signature of a spike that left its carriers fragmented. Instance 0 serves "
        "non-scheduler threads and never uses the carrier pool."
        + (" +: now above max, since now counts the carriers and blocks this instance has in "
           "the carrier pool (as recon_alloc does) and max does not." if above else ""), "dim")
    console.print()

    _carriers(a.carriers, console)

    if a.cache_hit_rates:
        print_table(console, "mseg_alloc segment cache (hit rate should be above 80% unless "
                    "the load is spiky)", [
            Col("mseg instance", key=True), Col("hit rate"), Col("hits"), Col("calls"),
            Col("cached segments")],
            # no rate of zero calls: a 100 % of nothing reads as a healthy cache
            [[str(r.instance), pct(r.hit_rate) if r.calls else "no calls",
              count(r.hits), count(r.calls), str(r.cached_segments)]
             for r in a.cache_hit_rates])
    if a.processes:
        console.print()
        holders.render(a.processes, console)


#: Allocator types the short output lists (worst first): the decision is about the first.
SHORT_TYPES = 4
#: Lines on the node's container, limits and release the short output keeps.
SHORT_PICTURE = 3


def _short(a: Analysis, console: Console) -> None:
    """The short output's tables: the allocator types that carry the decision, then the
    holders by category."""
    types = a.allocator_types
    print_table(console, "Per allocator: where the unused bytes are (worst first)", [
        Col("allocator", "left", key=True), Col("allocated"), Col("used"), Col("unused"),
        Col("usage"), Col("max allocated")], [[
            r.allocator + ("" if r.in_recon else " *"), human(r.allocated),
            human(r.used), human(r.unused),
            _usage_cell(r.usage, r.unused, r.allocated),
            human(r.max_allocated)] for r in types[:SHORT_TYPES]])
    if len(types) > SHORT_TYPES:
        star = any(not r.in_recon for r in types[:SHORT_TYPES])
        prose(console, f"{len(types) - SHORT_TYPES} more types below these"
              + ("; * not counted by recon_alloc" if star else ""), "dim")
    _categories(a.categories, console, short=True)
    if not a.categories.total:
        top_holders(a.processes, console)
        console.print()
    prose(console, f"{DETAILS_HINT} (memory against RSS, options, instances, carriers, mseg "
          "cache, ETS tables, every holder); --json every number.", "dim", indent="")


# ---- every byte: the erlang:memory() categories (analyzer/categories.py) ----------------------

CATEGORY_LABELS = {"processes": "processes", "binary": "binary", "ets": "ets", "atom": "atom",
             "code": "code", "other_system": "system (rest)"}


def _categories(c: MemoryPicture, console: Console, short: bool = False) -> None:
    if c.total is None:
        for n in c.notes if not short else ():
            prose(console, f"note: {n}", "dim", indent="")
        return
    rows = []
    for cat in c.categories:
        top = cat.holders[0] if cat.holders else None
        rows.append([
            CATEGORY_LABELS[cat.name],
            around("", human(cat.bytes),
                   "" if cat.share is None else f" ({pct(cat.share)})"),
            next((around(f"{a} ", human(b)) for a, b in cat.allocators[:1]), "-"),
            "-" if top is None else around(
                f"{wording.shorten(wording.holder_label(top, True), 26)} ", human(top.bytes)),
        ])
    cols = [Col("category", "left", key=True), Col("bytes (of total)"), Col("held in", "left"),
            Col("largest holder", "left")]
    if short:  # the holders, not the allocators behind them (--details has both)
        keep = [0, 1, 3] if any(r[3] != "-" for r in rows) else [0, 1, 2]
        cols, rows = [cols[i] for i in keep], [[r[i] for i in keep] for r in rows]
    print_table(console, "Every byte: erlang:memory() by category"
                + ((", its largest holder" if cols[-1].header == "largest holder"
                    else ", the allocator that holds it") if short else
                   ", the allocators that hold it, its largest holder"), cols, rows,
                **({"box": None} if short else {}))  # short: the lines for the answer
    if short:
        console.print()
        return
    prose(console, f"erlang:memory(total) {human(c.total)}; the allocators' carriers "
          f"{human(c.allocated_all)}. 'held in': the category's main allocator; it may serve "
          "others too (ll_alloc: atoms, code and tables), the JSON lists them all.", "dim")
    for n in c.notes:
        prose(console, f"note: {n}", "dim")
    ets = next((x for x in c.categories if x.name == "ets"), None)
    if ets and ets.holders:
        print_table(console, "ETS tables, largest first", [
            Col("table", "left", key=True), Col("bytes"), Col("owner, type, objects", "left")],
            [[h.name, human(h.bytes), h.detail] for h in ets.holders])
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


def _carriers(c: CarrierSection, console: Console) -> None:
    console.print(Text("Inside the carriers (instrument:carriers/1)", style="bold italic"))
    if not c.available:
        why = c.unavailable or "the source has no per-carrier data (only a live node does)"
        prose(console, f"no per-carrier data: {why}", "dim")
        console.print()
        return
    if c.skipped:
        prose(console, f"{c.skipped} carriers were not read (the collector's cap); "
              "the maps below leave them out", "yellow")
    shown = [m for m in c.allocators if m.classification.kind != COMPACT]
    quiet = [m.allocator for m in c.allocators if m.classification.kind == COMPACT]
    width = max(20, console.width - 16)
    for m in shown:
        cl = m.classification
        head = Text()
        head.append(f"{m.allocator}: ", style="bold")
        head.append(cl.kind, style="bold red" if cl.kind != FREE_INSIDE else "bold yellow")
        head.append(f" - {cl.reason}")
        console.print(head)
        if m.largest_free is not None:
            prose(console, f"largest free block {wording.byte_range(m.largest_free)}; sbct "
                  f"{format_option('sbct', m.sbct)}, lmbcs {format_option('lmbcs', m.lmbcs)}",
                  "dim")
        pts = m.points
        for pooled, label in ((False, "owned"), (True, "pooled")):
            fills = [f for f, p in zip(pts.fill, pts.in_pool, strict=True) if p == pooled]
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
            [[f"{pct(b.lo, 0)}-{pct(b.hi, 0)}", str(b.owned), human(b.owned_bytes),
              str(b.pooled), human(b.pooled_bytes)]
             for b in m.bands if b.owned or b.pooled],
            box=None, padding=(0, 1), show_edge=False)
        if m.sparse:
            prose(console, f"to give back the {m.sparse} sparse carriers "
                  f"({human(m.sparse_size)}), {m.pinning_blocks} blocks "
                  f"({human(m.pinning_bytes)}) would have to move", "dim")
    if quiet:
        prose(console, f"compact (little unused in multiblock carriers): {', '.join(quiet)}",
              "dim")
    prose(console, "One mark per multiblock or single-block carrier, smallest carriers first; "
          "its height is its fill (red under 10 %). Pooled carriers were abandoned by "
          "their instance and wait for another to fetch them.", "dim")
    console.print()


