"""The compare page: `beamalloc diff` in the browser (advice/diff.py's Diff record, laid out),
with a picker across the store's nodes and their stored snapshots and this server's uploads.

`/compare?a=REF&b=REF` compares two snapshots (A before, B after); `/compare?r=REF&r=REF...`
(the node page's ticks, a multi-file upload) compares the earliest and the latest of two to
MAX_COMPARE and shows the totals of every one. The static report (htmlreport/html.py) renders the
same partial from `compare_view`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, abort, current_app, render_template, request

from beamalloc.advice.diff import diff
from beamalloc.advice.diff_records import Numbers, TypeDiff
from beamalloc.advice.rules import MIN_UNUSED
from beamalloc.analyzer.analysis import Analysis
from beamalloc.reporters.diff import count_delta, signed_bytes, usage_delta
from beamalloc.snapshot import Snapshot
from beamalloc.units import count, human, pct
from beamalloc.webui import figures
from beamalloc.webui.data import Data, NotFound
from beamalloc.webui.pagedata import figures_json

bp = Blueprint("compare", __name__)

MAX_COMPARE = 8
#: The picker lists at most this many stored snapshots per node (the newest; the first is
#: always kept so that "first against last" stays one pick away).
PICKER_PER_NODE = 200


def data() -> Data:
    return current_app.extensions["beamalloc"]


def _when(t: float | None) -> str:
    return "no time" if t is None else datetime.fromtimestamp(t, UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


def label(i: int, a: Analysis) -> str:
    return f"{chr(ord('A') + i) if i < 26 else i + 1}: {a.node} ({a.source}, " \
           f"{a.taken_at or 'no time'})"


def _signed(n: int | None) -> str:
    return signed_bytes(n, missing="")


def _side_cells(s: Numbers | None) -> dict[str, str]:
    if s is None:
        return dict.fromkeys(("mbcs", "sbcs", "size", "used", "unused", "usage"), "-")
    return {"mbcs": count(s.mbcs_carriers), "sbcs": count(s.sbcs_carriers),
            "size": human(s.carriers_size), "used": human(s.used),
            "unused": human(s.unused), "usage": pct(s.usage)}


def _delta_cells(d: Numbers | None) -> dict[str, str]:
    if d is None:
        return dict.fromkeys(("mbcs", "sbcs", "size", "used", "unused", "usage"), "")
    return {"mbcs": count_delta(d.mbcs_carriers), "sbcs": count_delta(d.sbcs_carriers),
            "size": _signed(d.carriers_size), "used": _signed(d.used),
            "unused": _signed(d.unused), "usage": usage_delta(d.usage, missing="")}


def _type_row(r: TypeDiff) -> dict[str, Any]:
    """One allocator's A, B and change, B's cells coloured by what B still holds unused
    (advice/diff.py's level), so 384 KiB unused is never as red as 155 MiB."""
    return {"allocator": "all allocators" if r.allocator == "total" else r.allocator,
            "a": _side_cells(r.a), "b": _side_cells(r.b), "d": _delta_cells(r.delta),
            "level": r.level}


def _totals_table(analyses: list[Analysis]) -> list[dict[str, Any]]:
    """Three or more snapshots: each one's totals, with its change against A."""
    metrics: tuple[tuple[str, Callable[[Analysis], int | None]], ...] = (
        ("RSS", lambda a: a.os.rss),
        ("carriers (all allocators)", lambda a: a.totals_all.allocated),
        ("used", lambda a: a.totals_all.used),
        ("unused", lambda a: a.totals_all.unused))
    rows = []
    for name, get in metrics:
        base = get(analyses[0])
        rows.append({"name": name, "cells": [
            {"v": human(get(a)), "d": "" if i == 0 or base is None or get(a) is None
             else _signed(get(a) - base)} for i, a in enumerate(analyses)]})
    return rows


def compare_view(snaps: list[Snapshot] | None, analyses: list[Analysis],
                 refs: list[str | None]) -> dict[str, Any]:
    """What the compare partial shows: A is the first snapshot, B the last (a report of three
    sources compares the first with the last and lists every one's totals)."""
    labels = [label(i, a) for i, a in enumerate(analyses)]
    first, last = analyses[0], analyses[-1]
    d = None
    if snaps:
        d = diff(snaps[0], snaps[-1], (labels[0], labels[-1]), analyses=(first, last))
    ta, tb = first.totals_all, last.totals_all
    grow = tb.allocated - ta.allocated
    how = f"{human(abs(grow))} {'less' if grow < 0 else 'more'}" if grow else "as much"
    summary = (f"B holds {how} carrier memory as A" if not grow else
               f"B holds {how} carrier memory than A")
    summary += (f" ({human(ta.allocated)} → {human(tb.allocated)}); unused "
               f"{human(ta.unused)} → {human(tb.unused)}, usage "
               f"{pct(ta.usage)} → {pct(tb.usage)}.")
    rss = None
    if d is not None and d.rss is not None:
        rss = f"RSS {human(d.rss.a)} → {human(d.rss.b)} ({_signed(d.rss.delta)})"
    return {
        "labels": labels, "refs": refs, "summary": summary, "diff": d,
        "verdict": d.verdict if d else None,
        "notes": d.notes if d else [],
        "rss": rss,
        "flags": d.flags if d else [],
        "rows": [_type_row(r) for r in ([d.total, *d.types] if d else [])],
        "small": human(MIN_UNUSED),
        "totals": _totals_table(analyses) if len(analyses) > 2 else [],
        "figures": figures.compare_figures(analyses, labels),
    }


# ---- the picker ------------------------------------------------------------------------------


def picker() -> list[dict[str, Any]]:
    """Groups of choices for A and B: each stored node's snapshots (oldest first), then the
    uploads this server holds. Each choice: ref and label."""
    groups = []
    st = data().store()
    if st is not None:
        for n in st.list_nodes():
            rows = st.snapshots(n["node"])
            if len(rows) > PICKER_PER_NODE:
                rows = [rows[0], *rows[-(PICKER_PER_NODE - 1):]]
            if rows:
                groups.append({"name": n["node"], "store": True,
                               "first_last": len(rows) > 1, "choices": [
                    {"ref": f"s{r['id']}", "label": f"{_when(r['t'])}"
                     + ("" if r["kept"] else " (latest)")} for r in rows]})
    with data().uploads.lock:
        uploads = list(data().uploads.items())
    if uploads:
        groups.append({"name": "uploaded files", "store": False, "first_last": False,
                       "choices": [
            {"ref": ref, "label": f"{s.node} ({s.source}, {_when(s.taken_at)})"}
            for ref, s in uploads]})
    return groups


def _load(ref: str) -> tuple[Snapshot, Analysis]:
    try:
        return data().analysis(ref)
    except NotFound as e:
        abort(404, description=str(e))


@bp.get("/compare")
def compare_page() -> str:
    a, b = request.args.get("a", ""), request.args.get("b", "")
    refs = [a, b] if a and b else [r for r in request.args.getlist("r") if r][:MAX_COMPARE]
    groups = picker()
    if len(refs) < 2:
        message = ("Pick A (before) and B (after) above: any two stored snapshots of any nodes, "
                   "or uploaded files." if groups else
                   "Nothing to compare yet: run beamalloc watch into the store, or upload two "
                   "or more files.")
        return render_template("compare.html", c=None, figures="{}", groups=groups,
                               pick=(a, b), message=message)
    loaded = [_load(r) for r in refs]
    snaps = [s for s, _ in loaded]
    if not (a and b) and len({s.node for s in snaps}) == 1 \
            and all(s.taken_at is not None for s in snaps):
        # One node's history: A is the earliest, so "before/after" reads left to right.
        order = sorted(range(len(refs)), key=lambda i: snaps[i].taken_at or 0)
        loaded, refs = [loaded[i] for i in order], [refs[i] for i in order]
    c = compare_view([s for s, _ in loaded], [x for _, x in loaded], list(refs))
    return render_template("compare.html", c=c, figures=figures_json(c["figures"]),
                           groups=groups, pick=(refs[0], refs[-1]), message=None)
