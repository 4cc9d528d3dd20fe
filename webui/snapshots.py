"""A snapshot's page, the compare page and uploads."""

from __future__ import annotations

from flask import Blueprint, Response, abort, current_app, redirect, render_template, request

from beamalloc.errors import InputError
from beamalloc.webui.data import Data, NotFound
from beamalloc.webui.pagedata import figures_json, snapshot_view
from beamalloc.webui.recommend_view import recommendations_of

bp = Blueprint("snapshots", __name__)

MAX_COMPARE = 8


def data() -> Data:
    return current_app.extensions["beamalloc"]


def _load(ref: str):  # -> tuple[Snapshot, Analysis]
    try:
        return data().analysis(ref)
    except NotFound as e:
        abort(404, description=str(e))


@bp.get("/snapshot/<ref>")
def snapshot_page(ref: str) -> str:
    snap, a = _load(ref)
    v = snapshot_view(snap, a, rec=recommendations_of(data(), ref))
    return render_template("snapshot.html", v=v, ref=ref, figures=figures_json(v["figures"]))


@bp.get("/api/snapshot/<ref>")
def snapshot_api(ref: str) -> Response:
    """The analysis document (docs/analysis-schema.md), for whoever wants every number."""
    _, a = _load(ref)
    return current_app.response_class(figures_json(a.to_json()), mimetype="application/json")


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
