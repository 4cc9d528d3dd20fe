"""The few derived numbers kept per sample: what the store's series and the Prometheus gauges show.

A sample is a flat `{key: int}` (a Point): node-wide keys plus `<allocator>.<field>` per allocator
type. Only sums are stored; ratios (usage, sbcs share, hit rate) are computed when read, so
downsampling and summaries never average ratios. The numbers are `analyze()`'s own
(`allocator_types`, `totals_all`, `cache_hit_rates`), so a series agrees with `beamalloc analyze`
of the same snapshot.
"""

from __future__ import annotations

import statistics
from typing import Any

from beamalloc.analyzer.analysis import analyze
from beamalloc.analyzer.metrics import usage
from beamalloc.snapshot import Snapshot

Point = dict[str, int]

#: Node-wide keys of a Point.
NODE_FIELDS = ("pid", "rss", "erlang_total", "allocated", "used", "mseg_hits", "mseg_calls")
#: Per allocator type: carriers size, blocks size, single-block carriers size, pool carriers size.
TYPE_FIELDS = ("allocated", "used", "sbcs", "pool")


def derive(snap: Snapshot) -> Point:
    a = analyze(snap)
    p: Point = {
        "allocated": a["totals_all"]["allocated"],
        "used": a["totals_all"]["used"],
        "erlang_total": snap.memory.get("total", 0),
        "mseg_hits": sum(r["hits"] for r in a["cache_hit_rates"]),
        "mseg_calls": sum(r["calls"] for r in a["cache_hit_rates"]),
    }
    if snap.os_pid is not None:
        p["pid"] = snap.os_pid
    if snap.rss is not None:
        p["rss"] = snap.rss
    for t in a["allocator_types"]:
        name = t["allocator"]
        p[f"{name}.allocated"] = t["allocated"]
        p[f"{name}.used"] = t["used"]
        p[f"{name}.sbcs"] = t["sbcs_carriers_size"]
        p[f"{name}.pool"] = t["pool_carriers_size"]
    return p


def types_of(keys: Any) -> list[str]:
    return sorted({k.partition(".")[0] for k in keys if "." in k})


def view(p: Point) -> dict[str, Any]:
    """A Point with the ratios the gauges show: per node and per allocator type."""
    types = {}
    for name in types_of(p):
        alloc, used = p.get(f"{name}.allocated", 0), p.get(f"{name}.used", 0)
        types[name] = {
            "allocated": alloc,
            "used": used,
            "unused": alloc - used,
            "usage": usage(used, alloc),
            "sbcs_share": p.get(f"{name}.sbcs", 0) / alloc if alloc else 0.0,
            "pool": p.get(f"{name}.pool", 0),
        }
    alloc, used = p.get("allocated", 0), p.get("used", 0)
    calls = p.get("mseg_calls", 0)
    return {
        "allocated": alloc,
        "used": used,
        "unused": alloc - used,
        "usage": usage(used, alloc),
        "erlang_total": p.get("erlang_total"),
        "rss": p.get("rss"),
        "rss_gap": p["rss"] - alloc if "rss" in p else None,
        "mseg_cache_hit_rate": usage(p.get("mseg_hits", 0), calls),
        "types": types,
    }


def summarize(series: dict[str, Any]) -> dict[str, Any]:
    """Per allocator type: usage min/median/max and peak unused (with its time); peak RSS gap.

    `series` is what Store.series() returns (columns of raw sums, one value per point).
    """
    t = series["t"]
    cols = series["columns"]
    out: dict[str, Any] = {"node": series["node"], "points": len(t), "types": {}}
    for name in types_of(cols):
        alloc = cols.get(f"{name}.allocated") or []
        used = cols.get(f"{name}.used") or []
        usages = [usage(u, a) for a, u in zip(alloc, used, strict=True)
                  if a is not None and u is not None]
        unused = [(a - u, i) for i, (a, u) in enumerate(zip(alloc, used, strict=True))
                  if a is not None and u is not None]
        if not usages:
            continue
        peak, at = max(unused)
        out["types"][name] = {
            "usage_min": min(usages),
            "usage_median": statistics.median(usages),
            "usage_max": max(usages),
            "peak_unused": peak,
            "peak_unused_at": t[at],
        }
    gaps = [(r - a, i) for i, (r, a) in enumerate(zip(cols.get("rss") or [None] * len(t),
                                                       cols.get("allocated") or [None] * len(t),
                                                       strict=True))
            if r is not None and a is not None]
    if gaps:
        out["peak_rss_gap"], i = max(gaps)
        out["peak_rss_gap_at"] = t[i]
    return out
