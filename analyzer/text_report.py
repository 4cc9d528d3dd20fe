"""The terminal report of `beamalloc analyze`: a verdict first, then every number behind it.

Like recon_alloc's docs, the report teaches while it reports: each table says in one line what
its numbers mean and what to look at.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from beamalloc.units import human, pct


def _usage_style(u: float) -> str:
    return "red" if u < 0.5 else "yellow" if u < 0.75 else "green"


def _verdict(a: dict[str, Any]) -> list[str]:
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
    for line in _verdict(a):
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
            human(o.get("sbct")) if isinstance(o.get("sbct"), int) and o["sbct"] < 1 << 60 else "∞",
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
