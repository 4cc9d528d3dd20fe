"""A snapshot's page, the compare page and uploads."""

from __future__ import annotations

from flask import Blueprint, Response, abort, current_app, redirect, render_template, request

from beamalloc.errors import InputError
from beamalloc.webui.data import Data, NotFound
from beamalloc.webui.pagedata import compare_view, figures_json, snapshot_view

bp = Blueprint("snapshots", __name__)

MAX_COMPARE = 8


def data() -> Data:
    return current_app.extensions["beamalloc"]


def _load(ref: str):  # -> tuple[Snapshot, dict]
    try:
        return data().analysis(ref)
    except NotFound as e:
        abort(404, description=str(e))


@bp.get("/snapshot/<ref>")
def snapshot_page(ref: str) -> str:
    snap, a = _load(ref)
    v = snapshot_view(snap, a)
    return render_template("snapshot.html", v=v, ref=ref, figures=figures_json(v["figures"]))


@bp.get("/api/snapshot/<ref>")
def snapshot_api(ref: str) -> Response:
    """The analysis document (docs/analysis-schema.md), for whoever wants every number."""
    _, a = _load(ref)
    return current_app.response_class(figures_json(a), mimetype="application/json")


@bp.get("/compare")
def compare_page() -> str:
    refs = [r for r in request.args.getlist("r") if r][:MAX_COMPARE]
    if len(refs) < 2:
        return render_template("compare.html", c=None, figures="{}",
                               message="Pick two or more snapshots: tick them on a node's page, "
                                       "or upload several files at once.")
    loaded = [_load(r) for r in refs]
    snaps = [s for s, _ in loaded]
    if len({s.node for s in snaps}) == 1 and all(s.taken_at is not None for s in snaps):
        # One node's history: A is the earliest, so "before/after" reads left to right.
        order = sorted(range(len(refs)), key=lambda i: snaps[i].taken_at or 0)
        loaded, refs = [loaded[i] for i in order], [refs[i] for i in order]
    c = compare_view([s for s, _ in loaded], [a for _, a in loaded], list(refs))
    return render_template("compare.html", c=c, figures=figures_json(c["figures"]),
                           message=None)


@bp.get("/upload")
def upload_form() -> str:
    return render_template("upload.html", error=None)


@bp.post("/upload")
def upload() -> Response | tuple[str, int]:
    files = [f for f in request.files.getlist("file") if f and f.filename]
    if not files:
        return render_template("upload.html", error="Choose a file first."), 400
    refs = []
    for f in files[:MAX_COMPARE]:
        try:
            refs.append(data().add_upload(f.filename or "upload", f.read()))
        except InputError as e:
            return render_template("upload.html", error=str(e)), 400
    if len(refs) == 1:
        return redirect(f"/snapshot/{refs[0]}", 303)
    return redirect("/compare?" + "&".join(f"r={r}" for r in refs), 303)
