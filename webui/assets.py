"""CSS, the page script and plotly.js, served from memory: no request path reaches a file."""

from __future__ import annotations

import base64
import gzip
from functools import cache
from importlib import resources

from flask import Blueprint, Response, abort

bp = Blueprint("assets", __name__)

_TYPES = {"style.css": "text/css", "app.js": "text/javascript"}


@cache
def text(name: str) -> str:
    """One of webui/static's files, read once."""
    return resources.files("beamalloc.webui").joinpath("static", name).read_text("utf-8")


@cache
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


@cache
def plotly_js_gz_b64() -> str:
    """plotly.js gzipped and base64-encoded: the report inlines this (≈1.9 MB instead of 4.8)."""
    return base64.b64encode(gzip.compress(plotly_js().encode(), 9, mtime=0)).decode()


def plotly_version() -> str:
    import plotly

    return plotly.__version__


@bp.get("/assets/<name>")
def asset(name: str) -> Response:
    if name == f"plotly-{plotly_version()}.min.js":
        resp = Response(plotly_js(), mimetype="text/javascript")
        resp.headers["Cache-Control"] = "public, max-age=604800, immutable"
        return resp
    if name not in _TYPES:
        abort(404)
    resp = Response(text(name), mimetype=_TYPES[name])
    resp.headers["Cache-Control"] = "public, max-age=300"
    return resp
