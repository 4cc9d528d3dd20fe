"""The nodes page (every node in the store) and a node's page (its series over time)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, abort, current_app, jsonify, render_template, request

from beamalloc.advice import wording
from beamalloc.analyzer.metrics import usage
from beamalloc.reporters.recommend import said, verdict
from beamalloc.timeseries.series import view as point_view
from beamalloc.timeseries.store import StoreError
from beamalloc.units import human, pct, unix_time
from beamalloc.webui import figures
from beamalloc.webui.data import MAX_POINTS, MISSING, Data, NotFound, is_stored_ref
from beamalloc.webui.holders_view import node_holders
from beamalloc.webui.pagedata import figures_json, severity
from beamalloc.webui.recommend_view import recommendations_of

bp = Blueprint("nodes", __name__)
log = logging.getLogger(__name__)

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


#: The series keys a node page charts (figures.node_figures): node-wide and per allocator type.
PAGE_FIELDS = frozenset({"allocated", "used", "erlang_total", "rss", "sbcs", "pool",
                         "mseg_hits", "mseg_calls", "cg_current", "cg_limit"})
#: Nodes the nodes page charts (most unused first); the table lists them all.
CHART_NODES = 50


#: Rows of the nodes table per page: a fleet of 4,000 nodes renders in one page of them
#: (issue 28 item 5); the headline and the chart summarise every node.
PAGE_ROWS = 100
#: The keys of a node's last point every row of the nodes page reads (list_nodes' point_keys).
ROW_KEYS = ("allocated", "used")
#: Node names a headline lists before "and N more".
HEADLINE_NAMES = 10


@bp.get("/")
def nodes_page() -> str:
    d = data()
    problem = d.store_problem()
    now = time.time()
    rows: list[dict[str, Any]] = []
    nodes: list[dict[str, Any]] = []
    st = d.store() if problem is None else None
    try:
        if st is not None:
            # the numbers every row needs (order, headline, chart); the rest for those shown
            nodes = st.list_nodes(findings=False, point_keys=ROW_KEYS)
            rows = _rows(d, nodes)
    except StoreError as e:  # a damaged store: its one line, as a store that does not open
        problem, rows = str(e), []
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    page = min(max(_page_arg(), 1), pages)
    shown = rows[(page - 1) * PAGE_ROWS:page * PAGE_ROWS]
    charted = sorted((r for r in rows if r["allocated"] is not None),
                     key=lambda r: r["allocated"] - r["used"], reverse=True)[:CHART_NODES]
    # a point of ROW_KEYS alone was read from `last`: the whole one for the rows drawn (one
    # the store's series gave, a store of schema 1, is whole already)
    part = [r["node"] for r in (*shown, *charted)
            if r["point"] and set(r["point"]) <= set(ROW_KEYS)]
    try:
        whole = st.last_points(part) if st is not None and part else {}
    except StoreError as e:
        problem, whole = str(e), {}
    for r in (*shown, *charted):
        r["point"] = whole.get(r["node"], r["point"])
        _details(r)
    figs = {"nodes": figures.nodes_unused(charted)} if rows else {}
    refresh, last = _fleet_refresh(nodes, now)
    summary = _summary(rows)
    page_html = render_template(
        "nodes.html", rows=shown, summary=summary, problem=problem,
        store=str(d.store_path or ""), figures=figures_json(figs), refresh=refresh, last=last,
        page=page, pages=pages, first=(page - 1) * PAGE_ROWS + 1, total=len(rows))
    _compute_later(d, summary["pending"])
    return page_html


def _page_arg() -> int:
    v = request.args.get("page", "1")
    return int(v) if v.isdigit() and len(v) < 9 else 1


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline's counts over every node (the table shows a page of them)."""
    judged = [r for r in rows if r.get("state")]
    acting = [r for r in judged if r["state"] != "HEALTHY"]
    bad = [r["node"] for r in rows if r.get("severity") == "bad"]
    more = len(bad) - HEADLINE_NAMES
    pending = [r["pending"] for r in rows if r.get("pending")]
    return {"total": len(rows), "judged": len(judged), "acting": acting, "bad": len(bad),
            "pending": pending,
            "bad_names": ", ".join(bad[:HEADLINE_NAMES]) + (f" and {more} more" if more > 0
                                                             else "")}


def _fleet_refresh(nodes: list[dict[str, Any]], now: float | None = None
                   ) -> tuple[float | None, float | None]:
    """The nodes page's refresh period (the fastest live node's) and the newest sample time,
    as of `now` (the time the rows were read: verdicts take time to compute)."""
    now = time.time() if now is None else now
    live = [r for r in (live_refresh(n, now) for n in nodes) if r is not None]
    return (min(live) if live else None), max((n["last"] or 0 for n in nodes), default=None)


def _rows(d: Data, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per node from Store.list_nodes, and the verdict of the latest snapshot of the
    VERDICT_NODES with most unused bytes (cached per snapshot). A row holds what the headline,
    the order and the chart need; `_details` adds what its table row shows, for the rows shown
    (4,000 nodes' allocator views were most of the page)."""
    rows: list[dict[str, Any]] = []
    now = time.time()
    for n in nodes:
        row: dict[str, Any] = {"node": n["node"], "samples": n["samples"], "verdict": None,
                               "last": n["last"], "down": n["down_since"] is not None,
                               "down_reason": n["down_reason"], "allocated": None,
                               "point": n["point"], "now": now}
        p = n["point"]
        if p:
            alloc, used = p.get("allocated", 0), p.get("used", 0)
            row.update(allocated=alloc, used=used,
                       severity=severity(alloc - used, usage(used, alloc)))
        sid = n["latest_snapshot"]
        row["latest_ref"] = f"s{sid}" if sid is not None else None
        rows.append(row)
    judged = sorted((r for r in rows if r["latest_ref"]),
                    key=lambda r: (r["allocated"] or 0) - (r.get("used") or 0), reverse=True)
    for r in judged[:VERDICT_NODES]:
        r.update(_verdict(d, r["latest_ref"], wait=False))
    return rows


def _details(row: dict[str, Any]) -> None:
    """What a node's table row shows beyond `_rows`: its words and its worst allocator."""
    if "ago" in row:
        return
    t = row["last"]
    row.update(last=when(t), ago=ago(t, row["now"]))
    if row["point"]:
        p = point_view(row["point"])
        worst = max(p["types"].items(), key=lambda kv: kv[1]["unused"], default=(None, None))
        row.update(usage=pct(p["usage"]), unused=human(p["unused"]), rss=human(p["rss"]),
                   worst=worst[0],
                   worst_unused=human(worst[1]["unused"]) if worst[1] else "-")


#: Nodes whose verdict the nodes page gives (most unused first): a verdict replays flags
#: (about a second for a node with advice, once per snapshot); the others link to theirs.
VERDICT_NODES = 16


def _verdict(d: Data, ref: str, wait: bool = True) -> dict[str, Any]:
    """The verdict of a node's latest snapshot as its snapshot page gives it (its first line,
    recommend_view.recommendations_of): the same words, never bare rule codes.

    `wait=False` (the pages): only a verdict computed already; else {"pending": ref}, and the
    page's script asks /api/verdict for it. A verdict replays the advised flags (~0.8 s at
    28 days' store, issue 28 item 5): a page opened first after the server starts shows its
    numbers at once and the verdict a second later, rather than nothing for a second."""
    try:
        if not wait and d.verdicts.peek(ref) is MISSING:
            return {"pending": ref}
        rec = recommendations_of(d, ref)
    except NotFound:  # replaced by the writer since: shown on the next view
        return {}
    if rec is None:
        return {"verdict": "recommender not available: the snapshot page has the evidence"}
    v = rec.records.verdict
    return {"verdict": verdict(rec.records), "state": v.state, "why": said(wording.why, v),
            "severity": severity(0, 1.0, v.state)}


def _compute_later(d: Data, refs: list[str]) -> None:
    """Compute the verdicts a page showed as pending, one after the other in one thread
    started once the page is rendered (not to slow it): a reload finds them without the
    page's script, and the script's /api/verdict waits for the one being made (data._LRU)."""
    with d.lock:
        refs = [r for r in refs if r not in d.queued]
        d.queued.update(refs)
    if not refs:
        return

    def run() -> None:
        for ref in refs:
            try:
                _verdict(d, ref)
            except Exception:  # a damaged row (StoreError): its page says it when asked
                log.exception("verdict of %s", ref)
            finally:
                with d.lock:
                    d.queued.discard(ref)

    threading.Thread(target=run, name="verdicts", daemon=True).start()


def _range() -> tuple[float | None, float | None]:
    def num(k: str) -> float | None:  # nan, inf, 1e20, text: a 400 in one line (InputError)
        return unix_time(k, request.args.get(k))

    return num("start"), num("end")


def _node_figures(node: str, start: float | None, end: float | None) -> tuple[dict, dict]:
    d = data()
    st = d.store()
    if st is None:
        abort(404)
    try:
        series = st.series(node, start, end, max_points=MAX_POINTS, fields=PAGE_FIELDS)
    except StoreError:
        abort(404, description=f"no node {node!r} in the store")
    usage, calls = d.node_samples(node, start, end)
    return series, figures.node_figures(series, usage, calls)


#: Bounds of a live node page's refresh period (seconds): its sampling interval, within these.
REFRESH_MIN, REFRESH_MAX = 2.0, 60.0
#: A node is live while its last sample is younger than this many sampling intervals.
LIVE_INTERVALS = 3


def live_refresh(info: dict[str, Any], now: float) -> float | None:
    """The refresh period of a node page while a watch writes this node (its mean sampling
    interval, bounded), or None when no sample came for LIVE_INTERVALS intervals or it is down."""
    first, last, n = info["first"], info["last"], info["samples"]
    if last is None or first is None or n < 2 or info.get("down_since") is not None:
        return None
    interval = max((last - first) / (n - 1), 0.5)
    if now - last > LIVE_INTERVALS * max(interval, REFRESH_MIN):
        return None
    return round(min(max(interval, REFRESH_MIN), REFRESH_MAX), 1)


def headline(p: dict[str, Any]) -> str:
    return (f"Latest sample: {human(p['unused'])} of {human(p['allocated'])} allocated holds no "
            f"data (usage {pct(p['usage'])}); RSS {human(p['rss'])}.")


@bp.get("/node")
def node_page() -> str:
    node = request.args.get("n", "")
    d = data()
    st = d.store()
    if st is None:
        abort(404, description=d.store_problem())
    info = next(iter(st.list_nodes(node)), None)
    now = time.time()  # liveness as the row was read, not after the verdict was computed
    if info is None:
        abort(404, description=f"no node {node!r} in the store")
    start, end = _range()
    last = info["last"] or time.time()
    series, figs = _node_figures(node, start, end)
    snaps = st.snapshots(node, start, end)
    summary = None
    if series["t"]:
        p = point_view({k: v[-1] for k, v in series["columns"].items() if v[-1] is not None})
        summary = {"headline": headline(p), "severity": severity(p["unused"], p["usage"])}
    # the first line: the latest stored snapshot's verdict, as its snapshot page says it
    # (once computed: else the page's script asks for it, and swaps it in)
    latest = st.snapshots(node)
    verdict = _verdict(d, f"s{latest[-1]['id']}", wait=False) if latest else {}
    if verdict.get("state") and summary is not None:
        summary["severity"] = verdict["severity"]
    ranges = [(label, None if secs is None else last - secs) for label, secs in RANGES]
    page_html = render_template(
        "node.html", node=node, info=info, first=when(info["first"]), last=when(info["last"]),
        summary=summary, verdict=verdict, latest_ref=f"s{latest[-1]['id']}" if latest else None,
        holders=node_holders(d, f"s{latest[-1]['id']}" if latest else None),
        ranges=ranges, start=start, end=end,
        points=len(series["t"]), downsampled=series["downsampled"], gaps=series["gaps"],
        snapshots=[{"ref": f"s{s['id']}", "when": when(s["t"]), "kept": s["kept"]}
                   for s in snaps[-200:]][::-1],
        when=when, figures=figures_json(figs), refresh=live_refresh(info, now))
    _compute_later(d, [verdict["pending"]] if verdict.get("pending") else [])
    return page_html


@bp.get("/api/verdict")
def verdict_api() -> Response:
    """A stored snapshot's verdict, computed here if no page has yet (the pages ask for the
    verdicts they showed as pending, then fetch themselves again to show them)."""
    ref = request.args.get("ref", "")
    if not is_stored_ref(ref):
        abort(404, description=f"no snapshot {ref!r} in the store")
    v = _verdict(data(), ref)
    if not v:  # replaced by the writer since (a transient latest), or never there
        abort(404, description=f"no snapshot {ref!r} in the store")
    return jsonify({k: v.get(k) for k in ("verdict", "state", "why", "severity")})


@bp.get("/api/node/last")
def node_last() -> Response:
    """What a live node page polls: the last sample's time, the headline, and whether a watch
    is still writing (the page stops polling when not)."""
    st = data().store()
    info = next(iter(st.list_nodes(request.args.get("n", ""))), None) if st else None
    if info is None:
        abort(404)
    p = point_view(info["point"]) if info["point"] else None
    return jsonify({"last": info["last"], "samples": info["samples"],
                    "headline": headline(p) if p else None,
                    "live": live_refresh(info, time.time()) is not None})


@bp.get("/api/node")
def node_api() -> Response:
    """The node page's figures for a time range: the page refetches them on zoom."""
    start, end = _range()
    series, figs = _node_figures(request.args.get("n", ""), start, end)
    resp = current_app.response_class(figures_json(figs), mimetype="application/json")
    resp.headers["X-Points"] = str(len(series["t"]))
    return resp


@bp.get("/api/nodes/last")
def nodes_last() -> Response:
    """What a live nodes page polls: the newest sample of any node, and whether any is live."""
    st = data().store()
    if st is None:
        return jsonify({"last": None, "live": False})
    refresh, last = _fleet_refresh(st.list_nodes(findings=False, point_keys=()))  # times only
    return jsonify({"last": last, "live": refresh is not None})


@bp.get("/api/nodes")
def nodes_api() -> Response:
    st = data().store()
    return jsonify([] if st is None else st.list_nodes())
