"""The what-if page: replay candidate flag sets on a stored snapshot (issue 15, item 4).

Nothing here predicts: the candidate sets and their predictions are `beamalloc recommend`'s own
(advice/recommend.py `recommend`, the `predicted` of each finding and the whole proposal), and
a flag set the user types is replayed by the same predictor (advice/predict.py `Predictor`,
which synthesizes the trace from the node's own state and replays it through refalloc's
`replay_snapshot`), on the trace recommend uses for the finding whose flags it resembles. So a
typed set equal to a finding's flags shows that finding's numbers, to the byte.

A replay takes seconds: a request replays at most MAX_TYPED typed sets, each trace holds at most
predict.MAX_EVENTS events (carrier-seeded ones at most predict.CARRIER_BLOCKS["fitted"] blocks),
one replay runs at a time, and results are cached per (snapshot, flags). The page says so.

What-if is not advice: a flag is advised only by the recommender's judgement
(docs/recommend.md, "The verdict"), which the page shows beside each candidate set.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, abort, current_app, redirect, render_template, request

from beamalloc.advice import wording
from beamalloc.advice.findings import facts
from beamalloc.advice.lint import lint_flags
from beamalloc.advice.predict import (
    CARRIER_BLOCKS,
    MAX_EVENTS,
    PredictionError,
    Predictor,
    measure_turnover,
    node_flags,
    otp_of,
)
from beamalloc.advice.recommend import (
    MIN_GAIN,
    Document,
    Recommended,
    in_force,
    recommend,
    unmodelled_release,
)
from beamalloc.advice.records import Measures, Prediction
from beamalloc.errors import InputError
from beamalloc.flags import ALLOCATORS, FlagError, FlagSet, effective_config, parse
from beamalloc.reporters.recommend import said, verdict
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.store import StoreError
from beamalloc.units import count, human, pct
from beamalloc.versions import erts_of
from beamalloc.webui import figures
from beamalloc.webui.data import _LRU, MAX_POINTS, Data, NotFound
from beamalloc.webui.pagedata import figures_json

bp = Blueprint("whatif", __name__)

#: Flag sets a user may type per request: each may cost a few seconds of replay.
MAX_TYPED = 3
#: Characters of one typed set: a full proposal is under 200.
MAX_FLAG_TEXT = 400
#: Allocators charted beside the predictions (those the shown sets act on, most unused first).
MAX_HISTORY_CHARTS = 3
#: Stored snapshots offered per node in the picker (the latest ones).
PICKER_SNAPSHOTS = 20
#: Cached recommendations and typed-set predictions (per snapshot ref, per (ref, flags)).
CACHE_SIZE = 128
#: Words of the page's notice; the figures are the predictor's own constants.
BOUNDS = (f"at most {MAX_TYPED} typed flag sets per request; traces of at most "
          f"{count(MAX_EVENTS)} events (carrier-seeded: at most "
          f"{count(CARRIER_BLOCKS['fitted'])} blocks rebuilt); one replay at a time; "
          "results cached per snapshot and flags")


class BadFlags(ValueError):
    """A typed flag set the page cannot replay (one line, HTTP 400)."""


@dataclass
class _State:
    recommendations: _LRU
    predictions: _LRU
    lock: threading.Lock
    replays: int = 0  # replays run (not served from the cache), for the page and the tests


@bp.record_once
def _setup(state: Any) -> None:
    state.app.extensions["beamalloc.whatif"] = _State(_LRU(CACHE_SIZE), _LRU(CACHE_SIZE),
                                                      threading.Lock())


def _state() -> _State:
    return current_app.extensions["beamalloc.whatif"]


def data() -> Data:
    return current_app.extensions["beamalloc"]


# ---- predictions (the recommender's and the predictor's own) ---------------------------------


def recommendation(ref: str, snap: Snapshot) -> Document:
    """`beamalloc recommend`'s result for this snapshot, computed once per ref (stored
    snapshots never change; an upload's ref is new for every upload)."""
    st = _state()

    def run() -> Document:
        # the same inputs as the snapshot page's verdict (recommend_view.recommendations): the
        # holders, and a watched node's turnover against its previous stored sample, so that
        # both pages say the same state
        d = data()
        earlier = d.previous(ref, snap)
        processes = d.analysis(ref)[1].processes
        with st.lock:  # one replay at a time: the machine's cores serve the other pages
            st.replays += 1
            return recommend(snap, processes=processes,
                             turnover=measure_turnover(earlier, snap) if earlier else None)

    return st.recommendations.get_or(ref, run)


def parse_set(text: str, snap: Snapshot) -> FlagSet:
    """A typed flag set, parsed for the snapshot's release and checked as erts would take it
    after the node's own flags; BadFlags with one line otherwise."""
    text = " ".join(text.split())
    if len(text) > MAX_FLAG_TEXT:
        raise BadFlags(f"a flag set is at most {MAX_FLAG_TEXT} characters, got {len(text)}")
    otp = otp_of(snap)
    try:
        fs = parse(text, otp=otp)
        base = node_flags(snap)
        effective_config(FlagSet(base.flags + fs.flags, otp=otp), snap.schedulers or 1, otp=otp)
    except (FlagError, ValueError) as e:
        raise BadFlags(f"{text[:80]}: {e}") from None
    if not fs.flags:
        raise BadFlags("an empty flag set: type +M flags, e.g. +MBas ageffcbf +MBlmbcs 512")
    return fs


def _targets(fs: FlagSet, snap_allocators: set[str]) -> list[str | None]:
    """The allocators a set acts on (None: the whole node, for +MM, +Mu and the like)."""
    out: list[str | None] = []
    for f in fs:
        name = ALLOCATORS[f.target][0] if f.target in ALLOCATORS else None
        if name is not None and name not in snap_allocators:
            continue  # an allocator the node does not run: nothing to replay it on
        if name not in out:
            out.append(name)
    return out or [None]


def _rule_for(rec: Recommended, allocator: str | None, fs: FlagSet) -> str:
    """The rule whose trace the recommender replays for flags like these on `allocator`: the
    finding whose candidate flags share most (allocator, parameter) pairs with `fs`, first in
    the rules' priority order; "" (the allocator's own model, predict.choose_model) if none.
    The records keep each finding's candidates typed (records.Found): no flag text read back."""
    mine = {(f.target, f.param) for f in fs}
    best, score = "", 0
    for fnd, cands, p in rec.findings:
        if p is None or fnd.allocator != allocator:
            continue
        n = len(mine & {(f.target, f.param) for f in cands})
        if n > score:
            best, score = fnd.rule, n
    return best


@dataclass
class Typed:
    """A typed set's replay on one allocator it acts on ("all": the whole node): the predictor's
    result as a Prediction record, or why there is none."""

    allocator: str
    rule: str  # the finding whose trace it was replayed on ("" for the allocator's own model)
    prediction: Prediction | None = None
    error: str | None = None


def predict_typed(ref: str, snap: Snapshot, rec: Recommended,
                  sets: list[FlagSet]) -> list[list[Typed]]:
    """Per typed set, per allocator it acts on: the predictor's result or why there is none.
    Cached per (snapshot, flags, allocator, rule); the missing ones share one Predictor, so a
    trace is synthesized once for all of them."""
    st = _state()
    names = {i.allocator for i in snap.allocators}
    out: list[list[Typed]] = []
    missing: list[tuple[tuple[Any, ...], FlagSet, str | None, str, Typed]] = []
    for fs in sets:
        row = []
        for alloc in _targets(fs, names):
            rule = _rule_for(rec, alloc, fs)
            key = (ref, fs.render(), alloc, rule)
            with st.predictions.lock:
                hit = st.predictions.get(key)
            entry = hit if hit is not None else Typed(alloc or "all", rule)
            if hit is None:
                missing.append((key, fs, alloc, rule, entry))
            row.append(entry)
        out.append(row)
    if missing:
        with st.lock, Predictor(snap, facts(snap)) as pr:
            for key, fs, alloc, rule, entry in missing:
                st.replays += 1
                try:
                    entry.prediction = Prediction.from_dict(pr.predict(alloc, rule, fs))
                except PredictionError as e:
                    entry.error = str(e)
                st.predictions.get_or(key, lambda entry=entry: entry)
    return out


# ---- what the page shows ---------------------------------------------------------------------


def _side(fig: Measures, scale: float) -> dict[str, Any]:
    """One side of a prediction as the table shows it (the trace's bytes, as the CLI's)."""
    carriers, unused = fig.carriers_size or 0, fig.unused or 0
    used = carriers - unused
    usage = used / carriers if carriers else None
    return {"carriers": carriers, "used": used, "unused": unused, "usage": usage,
            "carriers_h": human(carriers), "used_h": human(used), "unused_h": human(unused),
            "usage_h": pct(usage) if usage is not None else "no carriers",
            "peak_h": human(fig.peak_carriers_size), "calls": fig.carrier_calls,
            "scale": scale}


def _change(before: float, after: float) -> str:
    if before == after:
        return "no change"
    if not before:
        return f"from 0 to {human(after)}"
    return wording.change((after - before) / before)


def _band(p: Prediction) -> str:
    """The band of the change in unused bytes over the orders of the blocks drawn, or ""."""
    if p.band_pct is None:
        return ""
    lo, hi = p.band_pct
    return (f"{wording.change(lo / 100)} to {wording.change(hi / 100)} over "
            f"{p.band_variants} orders of the blocks")


def _best_case(p: Prediction) -> str:
    """The best case's change in unused bytes, where it reproduces the node, or ""."""
    best = p.best_case
    ch = None if best is None or not best.reproduces else best.change_pct.get("unused")
    return "" if ch is None else wording.change(ch / 100)


def row_view(p: Prediction) -> dict[str, Any]:
    """One allocator's predicted before/after, and whether the prediction says memory grows:
    from the Prediction record (advice/records.py), its numbers said by advice/wording.py."""
    r, scale = p.replayed, p.replayed.model.scale
    b, a = _side(r.before, scale), _side(r.after, scale)
    worse = []
    if p.unused_saving < 0:
        worse.append(f"unused bytes grow by {pct(-p.unused_saving, 0)} "
                     f"({b['unused_h']} to {a['unused_h']})")
    if a["carriers"] > b["carriers"]:
        worse.append(f"carriers grow from {b['carriers_h']} to {a['carriers_h']}")
    return {
        "allocator": p.allocator, "before": b, "after": a,
        "unused_change": _change(b["unused"], a["unused"]),
        "carriers_change": _change(b["carriers"], a["carriers"]),
        "worse": worse,
        "saving": f"{pct(p.unused_saving, 0)}",
        "model": r.model.generator,
        "scaled": (f"at {pct(scale, 0)} of the node's size" if scale < 1
                   else "at the node's size"),
        "seeded": ("the node's own carriers" if p.seeded_from == "carriers"
                   else "the node's counters"),
        "reproduces": r.reproduces,
        "fidelity": "n/a" if p.fidelity is None else f"{p.fidelity:.2f}",
        "calibration": wording.calibration(p),
        "workload": p.workload or "fitted",
        "node_unused_h": human(p.node_unused),
        "band": _band(p),
        "best_case": _best_case(p),
        "not_modelled": p.not_modelled or "",
        "node_size": (f"at the node's size (the trace's bytes / {scale:.2f}): "
                      f"carriers {human(b['carriers'] / scale)} to "
                      f"{human(a['carriers'] / scale)}, unused "
                      f"{human(b['unused'] / scale)} to "
                      f"{human(a['unused'] / scale)}" if 0 < scale < 1
                      else ""),
        "flags_after": p.flags_after or "(the OTP defaults)",
        "summary": p.summary,
    }


def candidate_sets(rec: Recommended) -> list[dict[str, Any]]:
    """The sets recommend considered: each action or held-back finding's flags with its
    prediction, then the whole proposal; the recommender's judgement beside each (its records,
    worded by advice/wording.py as `recommend` words them)."""
    v = rec.verdict
    held = {(h.rule, h.allocator): said(wording.held_back, h) for h in v.held_back}
    advised = {(r.rule, r.allocator) for r in v.advised}
    out = []
    for fnd, cands, pred in rec.findings:
        if not cands:
            continue
        key = (fnd.rule, fnd.allocator)
        if key in advised:
            judged = "advised by recommend"
        elif key in held:
            judged = f"not advised: {held[key]}"
        else:
            judged = "not advised"
        out.append({
            "id": f"{fnd.rule}-{fnd.allocator or 'node'}",
            "title": fnd.title, "rule": fnd.rule,  # the words, then the code
            # the flags replayed (the lint may have taken some), else the rule's own
            "flags": pred.flags if pred else " ".join(f.render() for f in cands),
            "judged": judged, "advised": key in advised,
            "rows": [row_view(pred)] if pred else [],
            "errors": [] if pred else [f"recommend did not replay it ({judged}); type its "
                                       "flags below to replay them"],
        })
    whole = rec.proposal
    if whole is not None and len([c for c in out if c["advised"]]) > 1:
        out.append({"id": "proposal", "title": "recommend's proposal: every advised flag",
                    "flags": whole.flags, "judged": "advised by recommend", "advised": True,
                    "rows": [row_view(r) for r in whole.runs], "errors": []})
    return out


def typed_view(fs: FlagSet, results: list[Typed], snap: Snapshot) -> dict[str, Any]:
    rows, errors = [], []
    for r in results:
        if r.prediction is not None:
            rows.append(row_view(r.prediction))
            rows[-1]["rule"] = r.rule
        else:
            errors.append(f"{r.allocator}: {r.error}")
    erts = erts_of(snap.erts_version, snap.otp_release)
    lint = [i.message for i in lint_flags(fs, base=in_force(snap), schedulers=snap.schedulers,
                                          erts=erts)]
    return {"id": "typed", "title": "typed", "flags": fs.render(), "judged": "", "advised": False,
            "rows": rows, "errors": errors, "lint": lint}


# ---- the measured history --------------------------------------------------------------------

def history(snap: Snapshot, allocators: list[str | None]) -> tuple[dict[str, Any], str]:
    """The node's measured history from the store (figures by id), and a line saying what it
    is or why there is none."""
    st = data().store()
    if st is None:
        return {}, "no store: the measured history comes from beamalloc watch --store"
    try:
        series = st.series(snap.node, max_points=MAX_POINTS, fields={"allocated", "used"})
    except StoreError:
        return {}, f"the store holds no history of {snap.node}"
    figs = {}
    for i, a in enumerate(allocators[:MAX_HISTORY_CHARTS]):
        f = figures.carrier_history(series, a, snap.taken_at)
        if f is not None:
            figs[f"hist{i}"] = f
    n = len(series["t"])
    gaps = len(series["gaps"])
    what = (f"{n} sample{'s' if n != 1 else ''} of {snap.node} in the store"
            + (f", {gaps} gap{'s' if gaps != 1 else ''} (grey, lines broken there)" if gaps
               else "") + "; the dashed line is this snapshot")
    if n < 2:
        what += ": one sample is a point, not a trend"
    return figs, what


# ---- the picker ----------------------------------------------------------------------------


def picker() -> dict[str, Any]:
    """Stored snapshots per node (the latest PICKER_SNAPSHOTS) and the uploads in memory."""
    from beamalloc.webui.nodes import when

    d = data()
    nodes = []
    st = d.store()
    if st is not None:
        try:
            for n in st.list_nodes():
                snaps = st.snapshots(n["node"])[-PICKER_SNAPSHOTS:][::-1]
                nodes.append({"node": n["node"],
                              "snapshots": [{"ref": f"s{s['id']}", "when": when(s["t"])}
                                            for s in snaps]})
        except StoreError:
            nodes = []
    with d.uploads.lock:
        uploads = [{"ref": r, "label": f"{s.node} ({s.source})"} for r, s in d.uploads.items()]
    return {"nodes": nodes, "uploads": uploads[::-1], "problem": d.store_problem()}


# ---- routes ----------------------------------------------------------------------------------


def _render(**kw: Any) -> str:
    kw.setdefault("typed", [])
    kw.setdefault("figures", "{}")
    return render_template("whatif.html", pick=picker(), bounds=BOUNDS, max_typed=MAX_TYPED,
                           min_gain=wording.share(MIN_GAIN), **kw)


@bp.get("/whatif")
def whatif_page() -> tuple[str, int] | str:
    ref = request.args.get("r", "")
    if not ref:
        return _render(v=None, error=None, ref="")
    try:
        snap = data().snapshot(ref)
    except NotFound as e:
        abort(404, description=str(e))
    texts = [t for t in request.args.getlist("f") if t.strip()]
    error, sets = None, []
    if len(texts) > MAX_TYPED:
        error = (f"{len(texts)} typed flag sets: at most {MAX_TYPED} per request (each replay "
                 "takes seconds)")
    else:
        for i, text in enumerate(texts, 1):
            try:
                sets.append(parse_set(text, snap))
            except BadFlags as e:
                error = f"flag set {i} is not valid: {e}"
                break
    rec = recommendation(ref, snap)
    cands = candidate_sets(rec.records)
    # pre-ticked: the sets recommend replayed; one it did not replay is offered, never ticked
    chosen = (set(request.args.getlist("c")) if request.args.get("go")
              else {c["id"] for c in cands if c["rows"]})
    shown = [c for c in cands if c["id"] in chosen]
    typed = []
    old = unmodelled_release(snap)  # the recommender's own reason: no replay says anything
    if old is not None and sets:
        error = f"not replayed: {old}"
    if error is None and sets:
        for fs, res in zip(sets, predict_typed(ref, snap, rec.records, sets), strict=True):
            typed.append(typed_view(fs, res, snap))
    allocs: list[str | None] = []
    for s in typed + shown:
        for r in s["rows"]:
            a = None if r["allocator"] == "all" else r["allocator"]
            if a not in allocs:
                allocs.append(a)
    if not allocs:
        allocs = [None]
    figs, hist_note = history(snap, allocs)
    from beamalloc.webui.nodes import when

    # the verdict as the snapshot page words it: from its records (advice/wording.py)
    v = {"snap": snap, "when": when(snap.taken_at), "rec": rec, "candidates": cands,
         "headline": verdict(rec.records), "why": said(wording.why, rec.records.verdict),
         "shown": shown, "typed": typed, "chosen": chosen, "hist_note": hist_note,
         "hist_ids": list(figs), "base": node_flags(snap).render() or "(the OTP defaults)",
         "replays": _state().replays}
    html = _render(v=v, error=error, ref=ref, typed=texts, figures=figures_json(figs))
    return (html, 400) if error else html


@bp.post("/whatif/upload")
def whatif_upload() -> Response | tuple[str, int]:
    f = request.files.get("file")
    if f is None or not f.filename:
        return _render(v=None, ref="", error="Choose a file first."), 400
    try:
        ref = data().add_upload(f.filename, f.read())
    except InputError as e:
        return _render(v=None, ref="", error=str(e)), 400
    return redirect(f"/whatif?r={ref}", 303)
