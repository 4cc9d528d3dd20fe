"""What a snapshot or compare page says, computed once for the server and the report alike.

The verdict comes first and says what the terminal report says (advice/wording.py); then
the evidence: figures (figures.py), tables, the options in force. Templates only lay it out.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from beamalloc.advice import wording
from beamalloc.advice.records import HEALTHY, Prediction
from beamalloc.advice.rules import MIN_UNUSED, usage_level
from beamalloc.advice.wording import (
    analysis_lines,
    cause_of_death,
    holder_label,
    holder_sentence,
    picture_lines,
    read_lines,
)
from beamalloc.analyzer.analysis import Analysis
from beamalloc.analyzer.limits import Container
from beamalloc.analyzer.options import format_option
from beamalloc.reporters.analyze import CATEGORY_LABELS
from beamalloc.reporters.recommend import FORMATS, paste_of, predicted_line, said, verdict
from beamalloc.snapshot import Snapshot
from beamalloc.units import human, pct
from beamalloc.webui import figures
from beamalloc.webui.recommend_view import prediction_view, recommendations

if TYPE_CHECKING:
    from beamalloc.advice.recommend import Document, Recommended


def severity(unused: int, usage: float, state: str | None = None) -> str:
    """ok, warn or bad: the recommender's state where there is one (a HEALTHY verdict is never
    shown in red), else by usage and unused bytes (rules.usage_level: a few unused MiB are
    never worth a page)."""
    if state is not None:
        return {"HEALTHY": "ok", "CHANGE FLAGS": "warn", "FLAGS IN FORCE": "warn",
                "UNDECIDED": "warn"}.get(state, "bad")
    return usage_level(usage, unused)


def headline(a: Analysis, rec: Document | None) -> str:
    """The recommender's verdict line, as `beamalloc recommend` words its records; without a
    recommender, recon's totals, like the terminal report's verdict lines."""
    if rec is not None:
        return verdict(rec.records)
    t = a.totals
    return (f"{human(t.unused)} of {human(t.allocated)} allocated holds no data "
            f"(usage {pct(t.usage)}).")


def totals_note(a: Analysis) -> list[str]:
    """Why the page shows two allocated totals: recon_alloc counts some allocator types, the
    node has more (one line naming the others and what they add), or nothing when they agree."""
    t, all_ = a.totals.allocated, a.os.allocated_all
    if all_ == t:
        return []
    types = a.allocator_types
    inr = [r for r in types if r.in_recon]
    rest = [r for r in types if not r.in_recon and r.allocated]
    names = ", ".join(r.allocator for r in rest[:4]) + (", ..." if len(rest) > 4 else "")
    return [f"Two totals: {human(t)} is what recon_alloc counts (its {len(inr)} allocator types, "
            f"the usage and the rules use it); all allocators hold {human(all_)}: "
            + (f"the other type ({names}) adds" if len(rest) == 1 else
               f"the other {len(rest)} types ({names}) add") + f" {human(all_ - t)}."]


def _ratio(v: Any) -> str:
    return v if isinstance(v, str) else f"{v:.3g}"




def type_rows(a: Analysis) -> list[dict[str, Any]]:
    return [{
        "allocator": r.allocator, "in_recon": r.in_recon, "instances": r.instances,
        "allocated": human(r.allocated), "used": human(r.used),
        "unused": human(r.unused), "usage": pct(r.usage),
        "level": usage_level(r.usage, r.unused),
        "sbcs_share": pct(r.sbcs_share),
        "avg_mbcs": human(r.mbcs_average_block_size),
        "avg_sbcs": human(r.sbcs_average_block_size),
        "sbct": format_option("sbct", r.options.get("sbct")),
        "lmbcs": format_option("lmbcs", r.options.get("lmbcs")),
        "strategy": r.options.get("as", "-"), "pool": human(r.pool_carriers_size),
        "max_allocated": human(r.max_allocated),
    } for r in a.allocator_types]


def _nb(size: int) -> str:
    """human(size) that never wraps between number and unit (cells wrap at " / " and "(")."""
    return human(size, nb=True)


def instance_rows(a: Analysis) -> list[dict[str, Any]]:
    return [{
        "name": f"{r.allocator}[{r.instance}]", "unused": human(r.unused),
        "unused_v": r.unused,
        "mbcs_usage": pct(r.mbcs_usage),
        "level": usage_level(r.mbcs_usage, r.unused),
        "max_mbcs_usage": pct(r.max.mbcs_usage),
        "mbcs_carriers": f"{r.mbcs_carriers} / {r.max.mbcs_carriers} "
                         f"({_nb(r.mbcs_carriers_size)})",
        "mbcs_blocks": f"{r.mbcs_blocks} / {r.max.mbcs_blocks}",
        "sbcs_usage": pct(r.sbcs_usage) if r.sbcs_carriers else "-",
        "sbcs_carriers": f"{r.sbcs_carriers} ({_nb(r.sbcs_carriers_size)})"
                         if r.sbcs_carriers else "-",
        "pool": "-" if not r.pool or not r.pool.carriers else
                f"{r.pool.carriers} ({_nb(r.pool.carriers_size)})",
        "foreign": human(sum(r.foreign_blocks.values())) if r.foreign_blocks else "-",
        "sbcs_to_mbcs": _ratio(r.sbcs_to_mbcs),
    } for r in a.allocators]


def carrier_view(a: Analysis) -> dict[str, Any]:
    """The carrier section: why there is none, or per allocator shown (the same selection as
    figures.carrier_maps, so `cmap-<i>` is maps[i]'s figure) its class and fill bands."""
    c = a.carriers
    shown = figures.shown_carrier_maps(a)
    return {
        "available": c.available,
        "unavailable": c.unavailable or "the source has no per-carrier data (only a "
                                        "snapshot of a live node has)",
        "skipped": c.skipped,
        "compact": [m.allocator for m in c.allocators if m not in shown],
        "maps": [{
            "allocator": m.allocator,
            "kind": m.classification.kind,
            "reason": m.classification.reason,
            "largest_free": "-" if m.largest_free is None else wording.byte_range(m.largest_free),
            "sbct": format_option("sbct", m.sbct),
            "lmbcs": format_option("lmbcs", m.lmbcs),
            "bands": [{"fill": f"{pct(b.lo, 0)}-{pct(b.hi, 0)}", "owned": b.owned,
                       "owned_bytes": human(b.owned_bytes), "pooled": b.pooled,
                       "pooled_bytes": human(b.pooled_bytes)}
                      for b in m.bands if b.owned or b.pooled],
            "sparse_carriers": m.sparse,
            "sparse_size": human(m.sparse_size),
            "pinning_blocks": m.pinning_blocks,
            "pinning_bytes": human(m.pinning_bytes),
        } for m in shown],
    }


def category_view(a: Analysis) -> dict[str, Any] | None:
    """Every byte (analyzer/categories.py): each erlang:memory() category, the allocators that
    hold it and its holders; the ETS tables apart. None where the source has no categories."""
    c = a.categories
    if c.total is None:
        return None
    return {
        "total": human(c.total), "allocated_all": human(c.allocated_all),
        "notes": c.notes,
        "rows": [{
            "name": CATEGORY_LABELS[x.name], "bytes": human(x.bytes),
            "share": "-" if x.share is None else pct(x.share),
            "allocators": ", ".join(f"{n} {_nb(b)}" for n, b in x.allocators) or "-",
            "holders": [f"{holder_label(h)} {_nb(h.bytes)}" for h in x.holders[:3]],
        } for x in c.categories],
        "ets": [{"name": h.name, "bytes": human(h.bytes), "detail": h.detail}
                for x in c.categories if x.name == "ets" for h in x.holders],
    }


#: snapshot_view's `rec` when the caller has none: it asks the recommender itself.
ASK = object()


def _why_and_evidence(rec: Document | None, lines: list[str]) -> dict[str, list[str]]:
    """The verdict's why lines (the recommender's, as the terminal prints them; without it the
    analysis' first line) and the evidence lines shown under the verdict."""
    if rec is not None:
        return {"verdict": said(wording.why, rec.records.verdict)[:wording.WHY_MAX],
                "evidence": lines}
    return {"verdict": lines[:1], "evidence": lines[1:]}


def verdict_view(rec: Document | None) -> dict[str, Any]:
    """The verdict's state, no-flag-helps entries and reverts: the records (advice/records.py),
    each beside its words as `recommend` says them (advice/wording.py), never the JSON's."""
    if rec is None:
        return {"healthy": False, "no_flag_helps": [], "reverts": []}
    v = rec.records.verdict
    return {
        "healthy": v.state == HEALTHY,
        "no_flag_helps": [{
            "e": e, "held_back": [said(wording.reason, r) for r in e.held_back],
            "why": said(wording.entry_why, e), "in_force": wording.flags_text(e.flags_in_force),
            "remedies": [{"r": r, "action": said(wording.remedy, r)} for r in e.remedies],
        } for e in v.no_flag_helps],
        "reverts": [{"rv": rv, "text": said(wording.revert, rv)} for rv in v.reverts],
    }


def advised_rows(rec: Recommended) -> list[dict[str, Any]]:
    """The recommendations table: each advised flag (a Recommendation record) with its
    prediction's one line and table (recommend_view.prediction_view); flags predicted together
    share one replay, so its table shows once, under the first of them."""
    rows: list[dict[str, Any]] = []
    seen: list[tuple[Prediction, str]] = []
    for r in rec.verdict.advised:
        p = r.prediction
        first = next((label for q, label in seen if q == p), None) if p else None
        if p is not None and first is None:
            seen.append((p, f"{r.flag} {r.value}"))
        rows.append({"r": r,
                     "predicted": predicted_line(p) if p else r.not_predicted,
                     "prediction": {"same_as": first} if first else prediction_view(p)})
    return rows


def advice_view(rec: Document | None) -> dict[str, Any] | None:
    """The advice under the verdict, from the records only (never the JSON beside them): the
    flags with their predictions, the paste blocks, the findings and the lint issues."""
    if rec is None:
        return None
    r = rec.records
    return {"advised": advised_rows(r),
            "outputs": {f: paste_of(r, f) for f in FORMATS} if r.verdict.advised else {},
            "findings": [x.finding for x in r.findings], "lint": list(r.lint)}


def read_view(a: Analysis, holder: bool) -> list[dict[str, Any]]:
    """read_lines' lines, each with whether it is the partial read's note: the flag is the
    analysis' Coverage.partial (read_lines puts that line first), never the line's words."""
    note = a.coverage.partial
    return [{"text": line, "note": note and i == 0}
            for i, line in enumerate(read_lines(a, holder=holder))]


def largest_holder(a: Analysis) -> str | None:
    """The largest single holder in words (advice/wording.py holder_sentence), or None."""
    c = a.categories
    return holder_sentence(c.largest, c.largest_share) if c.largest is not None else None


def available_rows(host: int | None, c: Container | None) -> list[tuple[str, str]]:
    """What the node can still take: the host's MemAvailable, or, where a cgroup limits the
    node, the container's (its headroom, or the host's where that is less), the host's beside
    it: the host's alone would promise memory the cgroup's limit withholds."""
    if c is None or c.limit is None or c.available is None:
        return [("MemAvailable (host)", human(host))]
    return [("available in the container (cgroup headroom, or the host's MemAvailable "
             "where less)", human(c.available)),
            ("MemAvailable (host, beyond the cgroup's limit)", human(host))]


def container_rows(c: Container | None) -> list[tuple[str, str]]:
    """The node's memory cgroup (analyzer/limits.py container) as rows of the memory table."""
    if c is None:
        return []
    limit, charge = {1: (" (memory.limit_in_bytes)", " (memory.usage_in_bytes)"),
                     2: (" (memory.max)", " (memory.current)")}.get(c.version, ("", ""))
    return [
        (f"cgroup limit{limit}", "none" if c.limit is None else human(c.limit)),
        (f"cgroup charge{charge}", human(c.current)),
        ("cgroup anon · file · inactive file (memory.stat)",
         " · ".join(human(v) for v in (c.anon, c.file, c.inactive_file))),
        ("cgroup working set (charge − inactive file)", human(c.working_set)),
        ("cgroup headroom (limit − working set)", human(c.headroom)),
    ]


def snapshot_view(snap: Snapshot | None, a: Analysis, earlier: Snapshot | None = None,
                  rec: Any = ASK) -> dict[str, Any]:
    """The snapshot page's data; `earlier`, the node's previous stored sample (the turnover);
    `rec`, the recommender's answer where the caller has it (recommend_view.recommendations_of,
    shared with the node pages), None where it is not available."""
    if rec is ASK:
        rec = recommendations(snap, a.processes, earlier) if snap is not None else None
    t, os_ = a.totals, a.os
    return {
        "a": a,
        "severity": severity(t.unused, t.usage,
                             rec.records.verdict.state if rec is not None else None),
        "headline": headline(a, rec),
        # the cause of death and its why first, as the terminal's answer; then, under the
        # verdict, a partial read and the largest holder where the verdict does not name holders
        "death": cause_of_death(a),
        "read": read_view(a, holder=rec is None or not rec.records.verdict.holders),
        "death_kind": None if a.death is None else a.death.kind,
        "categories": category_view(a),
        "largest_holder": largest_holder(a),
        # under the one line its why (advice/wording.py: at most WHY_MAX lines), then, out of
        # the verdict's box, the analysis' own lines: the numbers it stands on
        **_why_and_evidence(rec, analysis_lines(a) + picture_lines(a) + totals_note(a) + (
            [f"Only {human(t.unused)} unused: little in absolute terms, whatever the usage "
             f"(the fragmentation rule weighs usage only above {human(MIN_UNUSED)} unused)."]
            if usage_level(t.usage, t.unused) != usage_level(t.usage) else [])),
        # the recommender's answer through its records only (never its JSON dict)
        "said": verdict_view(rec),
        "advice": advice_view(rec),
        "formats": FORMATS,
        "memory": [
            ("erlang:memory(total)", human(os_.erlang_memory_total)),
            (f"allocated (recon's {sum(r.in_recon for r in a.allocator_types)} "
             "types)", human(t.allocated)),
            ("allocated (all allocators)", human(os_.allocated_all)),
            ("used", human(t.used)),
            ("unused", human(t.unused)),
            ("usage", pct(t.usage)),
            ("RSS", human(os_.rss)),
            ("RSS − allocated", human(os_.rss_minus_allocated)),
            ("of RSS lazily freed (LazyFree)", human(os_.rss_lazyfree)),
            *available_rows(os_.mem_available, a.container),
            ("max allocated (peaks summed, an upper bound)", human(a.totals_max.allocated)),
            *container_rows(a.container),
        ],
        "types": type_rows(a),
        "instances": instance_rows(a),
        "cache": a.cache_hit_rates,
        "carriers": carrier_view(a),
        "figures": figures.snapshot_figures(a),
    }


def figures_json(figs: dict[str, Any]) -> str:
    """JSON safe inside <script type="application/json">: no `<`, `>` or `&` survives raw."""
    text = json.dumps(figs, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
