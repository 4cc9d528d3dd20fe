"""The nodes page (every node in the store) and a node's page (its series over time)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, abort, current_app, jsonify, render_template, request

from beamalloc.timeseries.series import view as point_view
from beamalloc.timeseries.store import StoreError
from beamalloc.units import human, pct
from beamalloc.webui import figures
from beamalloc.webui.data import MAX_POINTS, Data
from beamalloc.webui.pagedata import figures_json, severity
from beamalloc.webui.recommend_view import recommendations

bp = Blueprint("nodes", __name__)

#: The range buttons of a node page: label, seconds (None: everything).
RANGES = (("1 h", 3600), ("6 h", 6 * 3600), ("1 day", 86400), ("7 days", 7 * 86400),
          ("all", None))


def data() -> Data:
    return current_app.extensions["beamalloc"]


def when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(t: float | None, now: float) -> str:
    if t is None:
        return "never"
    s = max(0, now - t)
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s / n:.0f} {unit} ago"
    return f"{s:.0f} s ago"


@bp.get("/")
def nodes_page() -> str:
    d = data()
    problem = d.store_problem()
    rows: list[dict[str, Any]] = []
    if problem is None:
        st = d.store()
        assert st is not None
        now = time.time()
        for n in st.list_nodes():
            row: dict[str, Any] = {"node": n["node"], "samples": n["samples"],
                                   "last": when(n["last"]), "ago": ago(n["last"], now),
                                   "down": n["down_since"] is not None,
                                   "down_reason": n["down_reason"], "allocated": None}
            if n["last"] is not None:
                s = st.series(n["node"], n["last"], n["last"], max_points=None)
                if s["t"]:
                    p = point_view({k: v[-1] for k, v in s["columns"].items()
                                    if v[-1] is not None})
                    worst = max(p["types"].items(), key=lambda kv: kv[1]["unused"],
                                default=(None, None))
                    row.update(allocated=p["allocated"], used=p["used"],
                               usage=pct(p["usage"]), unused=human(p["unused"]),
                               rss=human(p["rss"]), worst=worst[0],
                               worst_unused=human(worst[1]["unused"]) if worst[1] else "-",
                               severity=severity(p["unused"], p["usage"]))
            latest = st.snapshots(n["node"])
            row["latest_ref"] = f"s{latest[-1]['id']}" if latest else None
            row["findings"] = _findings(d, row["latest_ref"])
            rows.append(row)
    figs = {"nodes": figures.nodes_unused(rows)} if rows else {}
    return render_template("nodes.html", rows=rows, problem=problem,
                           store=str(d.store_path or ""), figures=figures_json(figs))


def _findings(d: Data, ref: str | None) -> str:
    if ref is None:
        return "-"
    snap, _ = d.analysis(ref)
    rec = recommendations(snap)
    if rec is None:
        return "n/a"
    n = len(rec.get("findings") or [])
    return f"{rec['verdict']['state']}, {n} finding{'s' if n != 1 else ''}"


def _range() -> tuple[float | None, float | None]:
    def num(k: str) -> float | None:
        v = request.args.get(k)
        if v in (None, ""):
            return None
        try:
            return float(v)
        except ValueError:
            abort(400)

    return num("start"), num("end")


def _node_figures(node: str, start: float | None, end: float | None) -> tuple[dict, dict]:
    d = data()
    st = d.store()
    if st is None:
        abort(404)
    try:
        series = st.series(node, start, end, max_points=MAX_POINTS)
    except StoreError:
        abort(404, description=f"no node {node!r} in the store")
    usage, calls = d.node_samples(node, start, end)
    return series, figures.node_figures(series, usage, calls)


@bp.get("/node")
def node_page() -> str:
    node = request.args.get("n", "")
    d = data()
    st = d.store()
    if st is None:
        abort(404, description=d.store_problem())
    info = next((n for n in st.list_nodes() if n["node"] == node), None)
    if info is None:
        abort(404, description=f"no node {node!r} in the store")
    start, end = _range()
    last = info["last"] or time.time()
    series, figs = _node_figures(node, start, end)
    snaps = st.snapshots(node, start, end)
    summary = None
    if series["t"]:
        p = point_view({k: v[-1] for k, v in series["columns"].items() if v[-1] is not None})
        summary = {"allocated": human(p["allocated"]), "used": human(p["used"]),
                   "unused": human(p["unused"]), "usage": pct(p["usage"]),
                   "rss": human(p["rss"]), "severity": severity(p["unused"], p["usage"])}
    ranges = [(label, None if secs is None else last - secs) for label, secs in RANGES]
    return render_template(
        "node.html", node=node, info=info, first=when(info["first"]), last=when(info["last"]),
        summary=summary, ranges=ranges, start=start, end=end,
        points=len(series["t"]), downsampled=series["downsampled"], gaps=series["gaps"],
        snapshots=[{"ref": f"s{s['id']}", "when": when(s["t"]), "kept": s["kept"]}
                   for s in snaps[-200:]][::-1],
        when=when, figures=figures_json(figs))


@bp.get("/api/node")
def node_api() -> Response:
    """The node page's figures for a time range: the page refetches them on zoom."""
    start, end = _range()
    series, figs = _node_figures(request.args.get("n", ""), start, end)
    resp = current_app.response_class(figures_json(figs), mimetype="application/json")
    resp.headers["X-Points"] = str(len(series["t"]))
    return resp


@bp.get("/api/nodes")
def nodes_api() -> Response:
    st = data().store()
    return jsonify([] if st is None else st.list_nodes())
