"""The few derived numbers kept per sample: what the store's series and the Prometheus gauges show.

A sample is a flat `{key: int}` (a Point): node-wide keys plus `<allocator>.<field>` per allocator
type. Only sums are stored; ratios (usage, sbcs share, hit rate) are computed when read, so
downsampling and summaries never average ratios. The numbers come from the same functions as
`analyze()`'s `totals_all`, `allocator_types` and `cache_hit_rates` (analysis.type_sums,
metrics.memory, metrics.cache_hit_rates) without running the whole analysis, so a series agrees
with `beamalloc analyze` of the same snapshot.
"""

from __future__ import annotations

import statistics
from typing import Any

from beamalloc.advice.findings import facts
from beamalloc.advice.lint import lint_in_force
from beamalloc.advice.rules import evaluate
from beamalloc.analyzer import metrics as m
from beamalloc.analyzer.analysis import type_sums
from beamalloc.analyzer.metrics import usage
from beamalloc.snapshot import Snapshot

Point = dict[str, int]

#: The carrier calls each allocator instance counts (mseg_alloc's segments, sys_alloc's malloc).
CARRIER_CALLS = ("mseg_alloc", "mseg_dealloc", "mseg_realloc", "sys_alloc", "sys_free",
                 "sys_realloc")  # fmt: skip
#: erlang:memory() categories kept per sample (the rest of system is system - the others).
MEMORY_CATEGORIES = ("processes", "system", "binary", "ets", "atom", "code")
#: Node-wide keys of a Point (`calls_<carrier call>` summed over every instance).
NODE_FIELDS = ("pid", "rss", "erlang_total", "allocated", "used", "mseg_hits", "mseg_calls",
               *(f"calls_{c}" for c in CARRIER_CALLS))  # fmt: skip
#: Per allocator type: carriers size, blocks size, single-block carriers size, pool carriers size,
#: and the calls of its block operations since the node started (counters, not gauges).
TYPE_FIELDS = ("allocated", "used", "sbcs", "pool", "calls_alloc", "calls_free", "calls_realloc")
#: How often the watcher evaluates the rules and the lint on a node's sample (seconds): the
#: alerts built on them wait for minutes, and an evaluation costs a few ms (docs/metrics.md).
FINDINGS_EVERY = 30.0


# The gauges: each is a key of view() (per node, or per allocator type) with its Prometheus name
# and help. A new gauge is a key here and in view() (and derive() if it needs a new sum); the
# exporter (prometheus.py) reads these tables, the store keeps derive()'s sums. A new counter is
# a Point key in derive() and an entry of TYPE_COUNTERS or NODE_COUNTERS.
#: (name, help, key in series.view()'s per-type dict)
TYPE_GAUGES = (
    ("beamalloc_allocated_bytes", "Bytes in carriers of this allocator type (mbcs, sbcs, pool).",
     "allocated"),
    ("beamalloc_used_bytes", "Bytes in blocks of this allocator type.", "used"),
    ("beamalloc_unused_bytes", "Allocated minus used: held by carriers, not by blocks.", "unused"),
    ("beamalloc_usage_ratio", "Used / allocated (recon_alloc's usage; 1 when both are 0).",
     "usage"),
    ("beamalloc_sbcs_share_ratio", "Share of allocated bytes in single-block carriers.",
     "sbcs_share"),
    ("beamalloc_pool_bytes", "Bytes of abandoned carriers in the carrier pool.", "pool"),
)
#: (name, help, key in series.view()'s node dict)
NODE_GAUGES = (
    ("beamalloc_node_allocated_bytes", "Bytes in carriers of all alloc_util allocators.",
     "allocated"),
    ("beamalloc_node_used_bytes", "Bytes in blocks of all alloc_util allocators.", "used"),
    ("beamalloc_erlang_memory_total_bytes", "erlang:memory(total).", "erlang_total"),
    ("beamalloc_rss_bytes", "Resident set size of the node's OS process (same host only).",
     "rss"),
    ("beamalloc_rss_gap_bytes", "RSS minus allocated: memory outside the alloc_util carriers "
     "(NIFs, drivers, mseg cache, code).", "rss_gap"),
    ("beamalloc_mseg_cache_hit_ratio", "mseg_alloc cache hits / mseg_alloc calls, all instances "
     "(recon_alloc's cache_hit_rates, since the node started).", "mseg_cache_hit_rate"),
    # every byte: the erlang:memory() categories (analyzer/categories.py)
    *((f"beamalloc_erlang_memory_{c}_bytes", f"erlang:memory({c}).", f"mem_{c}")
      for c in MEMORY_CATEGORIES),
    # the container (collector/cgroup.py): same host only
    ("beamalloc_cgroup_memory_bytes", "Bytes charged to the node's memory cgroup "
     "(memory.current / memory.usage_in_bytes), page cache included.", "cg_current"),
    ("beamalloc_cgroup_limit_bytes", "The node's memory cgroup limit (memory.max / "
     "memory.limit_in_bytes); absent without a limit.", "cg_limit"),
    ("beamalloc_cgroup_headroom_bytes", "Limit minus the working set (charge minus inactive "
     "file pages): what the OOM killer leaves.", "cg_headroom"),
    ("beamalloc_cgroup_working_set_bytes", "The cgroup's charge minus its inactive file pages "
     "(memory.stat), as the kubelet counts it.", "cg_working_set"),
    ("beamalloc_cgroup_anon_bytes", "Anonymous memory charged to the node's cgroup "
     "(memory.stat anon / total_rss).", "cg_anon"),
    ("beamalloc_cgroup_file_bytes", "Page cache charged to the node's cgroup (memory.stat "
     "file / total_cache).", "cg_file"),
    ("beamalloc_cgroup_inactive_file_bytes", "Inactive page cache of the node's cgroup, which "
     "the kernel reclaims first (memory.stat inactive_file / total_inactive_file).",
     "cg_inactive_file"),
)

#: Counters: (name without _total, help, Point key), per allocator type ("<type>.<key>") or per
#: node. The node's own counts since it started: rate() gives calls per second, and a restart
#: of the node is a counter reset, which rate() handles.
TYPE_COUNTERS = (
    ("beamalloc_allocator_calls", "Block operations of this allocator type (op: alloc, free, "
     "realloc), all instances.", ("calls_alloc", "calls_free", "calls_realloc")),
)
NODE_COUNTERS = (
    ("beamalloc_carrier_calls", "Carrier calls of all allocator instances (call: mseg_alloc, "
     "mseg_dealloc, mseg_realloc, sys_alloc, sys_free, sys_realloc).",
     tuple(f"calls_{c}" for c in CARRIER_CALLS)),
    ("beamalloc_mseg_cache_hits", "mseg_alloc calls served from its segment cache.",
     ("mseg_hits",)),
    ("beamalloc_mseg_alloc_calls", "mseg_alloc calls of mseg_alloc's own instances (the "
     "denominator of recon_alloc's cache_hit_rates).", ("mseg_calls",)),
)


def derive(snap: Snapshot) -> Point:
    every = m.util_instances(snap, recon_only=False)
    mseg = [vals for _, vals in m.cache_hit_rates(snap)]
    p: Point = {
        "allocated": int(m.memory(snap, "allocated", "current", every)),
        "used": int(m.memory(snap, "used", "current", every)),
        "erlang_total": snap.memory.get("total", 0),
        "mseg_hits": sum(int(r["hits"]) for r in mseg),
        "mseg_calls": sum(int(r["calls"]) for r in mseg),
    }
    for c in CARRIER_CALLS:
        p[f"calls_{c}"] = sum(i.calls.get(c, 0) for i in every)
    if snap.os_pid is not None:
        p["pid"] = snap.os_pid
    if snap.rss is not None:
        p["rss"] = snap.rss
    for c in MEMORY_CATEGORIES:
        if c in snap.memory:
            p[f"mem_{c}"] = snap.memory[c]
    cg = snap.extra.get("cgroup")
    if isinstance(cg, dict):
        for key, field in (("cg_current", "current"), ("cg_limit", "limit"),
                           ("cg_working_set", "working_set"), ("cg_anon", "anon"),
                           ("cg_file", "file"), ("cg_inactive_file", "inactive_file")):
            if isinstance(cg.get(field), int):
                p[key] = cg[field]
    sums = type_sums(snap)
    # Most unused first, as analyze()'s allocator_types: the order keys are first seen in.
    for name, t in sorted(sums.items(), key=lambda kv: kv[1]["allocated"] - kv[1]["used"],
                          reverse=True):
        p[f"{name}.allocated"] = t["allocated"]
        p[f"{name}.used"] = t["used"]
        p[f"{name}.sbcs"] = t["sbcs_carriers_size"]
        p[f"{name}.pool"] = t["pool_carriers_size"]
    # Block calls per type: an instance counts them as <prefix>_alloc/_free/_realloc, the
    # prefix being its allocator's name without "_alloc" (binary_alloc: binary_alloc, ...).
    for i in every:
        prefix = i.allocator.removesuffix("_alloc")
        for op in ("alloc", "free", "realloc"):
            key = f"{i.allocator}.calls_{op}"
            p[key] = p.get(key, 0) + i.calls.get(f"{prefix}_{op}", 0)
    return p


def active_findings(snap: Snapshot) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """What the rule base and the lint say of a sample, as the labels of their gauges:
    [(rule, allocator or "", level)] and [(lint check, allocator or "")] (docs/metrics.md)."""
    found = sorted({(f.rule, f.allocator or "", f.level) for f in evaluate(facts(snap))})
    lint = sorted({(i.check, i.allocator or "") for i in lint_in_force(snap)})
    return found, lint


def instance_usage(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Per allocator instance its usage (blocks / carriers, mbcs and sbcs), and per allocator
    type its block calls: what a node page charts over time. The store keeps it beside each
    snapshot it stores, so a page never decodes 32 snapshots to draw it."""
    use: dict[str, float] = {}
    calls: dict[str, int] = {}
    for inst in snap.allocators:
        # metrics.instance_fragmentation's current sizes, written out (the store computes
        # this for every snapshot it keeps): mbcs with the pool's carriers, as recon counts.
        mb, sb = inst.mbcs, inst.sbcs
        alloc = mb.carriers_size.current + sb.carriers_size.current
        used = (sum(b.size.current for b in mb.blocks.values())
                + sum(b.size.current for b in sb.blocks.values()))
        if inst.mbcs_pool is not None:
            alloc += inst.mbcs_pool.carriers_size
            used += inst.mbcs_pool.block_size
        if alloc:
            use[instance_key(inst.allocator, inst.instance)] = used / alloc
        # calls are keyed binary_alloc / binary_free / binary_realloc for binary_alloc.
        prefix = inst.allocator.removesuffix("_alloc")
        n = sum(inst.calls.get(f"{prefix}_{op}", 0) for op in ("alloc", "free", "realloc"))
        calls[inst.allocator] = calls.get(inst.allocator, 0) + n
    return {"usage": use, "calls": calls}


def instance_key(allocator: str, instance: int) -> str:
    """An instance's key in `instance_usage`: "binary_alloc[3]" (the store keeps it as JSON,
    whose keys are text)."""
    return f"{allocator}[{instance}]"


def instance_of(key: str) -> tuple[str, int]:
    """`instance_key` read back into (allocator, instance): the one reader of the stored key,
    beside its writer; a reader of the store hands the pair on, never the text."""
    name, _, n = key.removesuffix("]").partition("[")
    return name, int(n) if n.isdigit() else 0


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
        **{f"mem_{c}": p.get(f"mem_{c}") for c in MEMORY_CATEGORIES},
        "cg_current": p.get("cg_current"),
        "cg_limit": p.get("cg_limit"),
        **{k: p.get(k) for k in ("cg_anon", "cg_file", "cg_inactive_file", "cg_working_set")},
        "cg_headroom": p["cg_limit"] - p["cg_working_set"]
        if "cg_limit" in p and "cg_working_set" in p else None,
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
