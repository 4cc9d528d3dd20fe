"""What a snapshot or compare page says, computed once for the server and the report alike.

The verdict comes first and says what the terminal report says (reporters/analyze.py); then
the evidence: figures (figures.py), tables, the options in force. Templates only lay it out.
"""

from __future__ import annotations

import json
from typing import Any

from beamalloc.analyzer.rules import usage_level
from beamalloc.flags import UINT_MAX
from beamalloc.reporters.analyze import verdict_lines
from beamalloc.reporters.recommend import FORMATS
from beamalloc.snapshot import Snapshot
from beamalloc.units import human, pct
from beamalloc.webui import figures
from beamalloc.webui.recommend_view import recommendations

#: Below this many unused bytes a low usage is not worth anyone's night.
SMALL = 64 << 20


def severity(unused: int, usage: float, state: str | None = None) -> str:
    """ok, warn or bad: the recommender's state where there is one (a HEALTHY verdict is never
    shown in red), else by usage, but a few unused MiB are never worth a page."""
    if state is not None:
        return {"HEALTHY": "ok", "CHANGE FLAGS": "warn", "FLAGS IN FORCE": "warn"}.get(state, "bad")
    if unused < SMALL:
        return "ok"
    return usage_level(usage)


def headline(a: dict[str, Any], rec: dict[str, Any] | None) -> str:
    # recon's totals, like the terminal report's verdict lines below the headline.
    t = a["totals"]
    if rec is not None and rec.get("headline"):
        return str(rec["headline"])  # the recommender's own words, as `beamalloc recommend`
    if rec is not None and rec.get("healthy"):
        return (f"Healthy: the allocators use {pct(t['usage'])} of what they hold; "
                "no flags recommended.")
    if rec is not None and rec.get("recommendations"):
        n = len(rec["recommendations"])
        return (f"{human(t['unused'])} of {human(t['allocated'])} allocated holds no data "
                f"(usage {pct(t['usage'])}): {n} flag{'s' if n != 1 else ''} recommended.")
    return (f"{human(t['unused'])} of {human(t['allocated'])} allocated holds no data "
            f"(usage {pct(t['usage'])}).")


def _ratio(v: Any) -> str:
    return v if isinstance(v, str) else f"{v:.3g}"


def _opt(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return "∞" if v >= UINT_MAX else human(v)
    return "-" if v is None else str(v)


def type_rows(a: dict[str, Any]) -> list[dict[str, Any]]:
    return [{
        "allocator": r["allocator"], "in_recon": r["in_recon"], "instances": r["instances"],
        "allocated": human(r["allocated"]), "used": human(r["used"]),
        "unused": human(r["unused"]), "usage": pct(r["usage"]), "usage_v": r["usage"],
        "sbcs_share": pct(r["sbcs_share"]),
        "avg_mbcs": human(r["mbcs_average_block_size"]),
        "avg_sbcs": human(r["sbcs_average_block_size"]),
        "sbct": _opt(r["options"].get("sbct")), "lmbcs": _opt(r["options"].get("lmbcs")),
        "strategy": r["options"].get("as", "-"), "pool": human(r["pool_carriers_size"]),
        "max_allocated": human(r["max_allocated"]),
    } for r in a["allocator_types"]]


def instance_rows(a: dict[str, Any]) -> list[dict[str, Any]]:
    return [{
        "name": f"{r['allocator']}[{r['instance']}]", "unused": human(r["unused"]),
        "unused_v": r["unused"],
        "mbcs_usage": pct(r["mbcs_usage"]), "mbcs_usage_v": r["mbcs_usage"],
        "max_mbcs_usage": pct(r["max"]["mbcs_usage"]),
        "mbcs_carriers": f"{r['mbcs_carriers']} / {r['max']['mbcs_carriers']} "
                         f"({human(r['mbcs_carriers_size'])})",
        "mbcs_blocks": f"{r['mbcs_blocks']} / {r['max']['mbcs_blocks']}",
        "sbcs_usage": pct(r["sbcs_usage"]),
        "sbcs_carriers": f"{r['sbcs_carriers']} ({human(r['sbcs_carriers_size'])})",
        "pool": "-" if r["pool"] is None else
                f"{r['pool']['carriers']} ({human(r['pool']['carriers_size'])})",
        "foreign": human(sum(r["foreign_blocks"].values())) if r["foreign_blocks"] else "-",
        "sbcs_to_mbcs": _ratio(r["sbcs_to_mbcs"]),
    } for r in a["allocators"]]


def carrier_view(a: dict[str, Any]) -> dict[str, Any]:
    """The carrier section: why there is none, or per allocator shown (the same selection as
    figures.carrier_maps, so `cmap-<i>` is maps[i]'s figure) its class and fill bands."""
    c = a.get("carriers") or {"available": False, "unavailable": None, "allocators": []}
    ms = c["allocators"]
    shown = figures.shown_carrier_maps(a)
    return {
        "available": c["available"],
        "unavailable": c.get("unavailable") or "the source has no per-carrier data (only a "
                                               "snapshot of a live node has)",
        "skipped": c.get("skipped", 0),
        "compact": [m["allocator"] for m in ms if m not in shown],
        "maps": [{
            "allocator": m["allocator"],
            "kind": m["classification"]["kind"],
            "reason": m["classification"]["reason"],
            "largest_free": "-" if m["largest_free"] is None else
            f"{human(m['largest_free'][0])} or more" if m["largest_free"][1] is None else
            f"{human(m['largest_free'][0])}-{human(m['largest_free'][1])}",
            "sbct": _opt(m["sbct"]),
            "lmbcs": _opt(m["lmbcs"]),
            "bands": [{"fill": f"{b['lo']:.0%}-{b['hi']:.0%}", "owned": b["owned"],
                       "owned_bytes": human(b["owned_bytes"]), "pooled": b["pooled"],
                       "pooled_bytes": human(b["pooled_bytes"])}
                      for b in m["fill_bands"] if b["owned"] or b["pooled"]],
            "sparse": m["sparse"],
            "sparse_size": human(m["sparse"]["size"]),
            "pinning_bytes": human(m["sparse"]["pinning_bytes"]),
        } for m in shown],
    }


def snapshot_view(snap: Snapshot | None, a: dict[str, Any]) -> dict[str, Any]:
    rec = recommendations(snap, a.get("processes")) if snap is not None else None
    t, os_ = a["totals"], a["os"]
    return {
        "a": a,
        "severity": severity(t["unused"], t["usage"],
                             rec["verdict"]["state"] if rec is not None else None),
        "headline": headline(a, rec),
        "verdict": verdict_lines(a) + ([f"Under {human(SMALL)} unused: little in absolute "
                                        "terms, whatever the usage."]
                                       if t["unused"] < SMALL and usage_level(t["usage"]) != "ok"
                                       else []),
        "rec": rec,
        "formats": FORMATS,
        "memory": [
            ("erlang:memory(total)", human(os_["erlang_memory_total"])),
            ("allocated (recon's 9 types)", human(t["allocated"])),
            ("allocated (all allocators)", human(os_["allocated_all"])),
            ("used", human(t["used"])),
            ("unused", human(t["unused"])),
            ("usage", pct(t["usage"])),
            ("RSS", human(os_["rss"])),
            ("RSS − allocated", human(os_["rss_minus_allocated"])),
            ("of RSS lazily freed (LazyFree)", human(os_.get("rss_lazyfree"))),
            ("MemAvailable (host)", human(os_.get("mem_available"))),
            ("max allocated (peaks summed, an upper bound)", human(a["totals_max"]["allocated"])),
        ],
        "types": type_rows(a),
        "instances": instance_rows(a),
        "cache": a["cache_hit_rates"],
        "carriers": carrier_view(a),
        "figures": figures.snapshot_figures(a),
    }


def figures_json(figs: dict[str, Any]) -> str:
    """JSON safe inside <script type="application/json">: no `<`, `>` or `&` survives raw."""
    text = json.dumps(figs, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
