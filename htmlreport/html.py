"""`beamalloc report`: one self-contained HTML file to attach to a ticket.

The one reporter above the web layer (docs/architecture.md): it renders the web UI's own
templates, figures and page data (webui/templates/_snapshot.html, _compare.html, figures.py,
pagedata.py), so a page section and its report section are one edit. Laid out on one page:
with two or more sources a comparison first, then every snapshot. plotly.js is inlined gzipped
(static/loader.js unpacks it), so the file opens offline, fetches nothing, and one snapshot's
report stays near 2 MB.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from beamalloc.analyzer.analysis import Analysis
from beamalloc.files import atomic_write_text
from beamalloc.snapshot import Snapshot
from beamalloc.webui import assets, filters
from beamalloc.webui.compare import compare_view
from beamalloc.webui.pagedata import figures_json, snapshot_view


@cache
def _env() -> Environment:
    env = Environment(loader=PackageLoader("beamalloc.webui", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    filters.install(env, docs=None)  # a file: its citations link to the installed docs
    return env


def render_report(analyses: list[Analysis],
                  snapshots: list[Snapshot] | None = None) -> str:
    """The report's HTML. Without `snapshots`, no recommendations and no option diffs."""
    views = []
    figs: dict[str, Any] = {}
    for i, a in enumerate(analyses):
        v = snapshot_view(snapshots[i] if snapshots else None, a)
        views.append(v)
        figs.update({f"s{i}-{k}": f for k, f in v["figures"].items()})
    compare = None
    if len(analyses) > 1:
        compare = compare_view(snapshots, analyses, [None] * len(analyses))
        figs.update({f"cmp-{k}": f for k, f in compare["figures"].items()})
    return _env().get_template("report.html").render(
        title="beamalloc report: " + ", ".join(a.node for a in analyses),
        written=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        views=views, compare=compare, figures=figures_json(figs),
        css=assets.text("style.css"), app_js=_script(assets.text("app.js")),
        loader_js=_script(assets.text("loader.js")), plotly_gz=assets.plotly_js_gz_b64())


def _script(js: str) -> str:
    # Our own scripts never contain "</script", but make sure an edit cannot end the element.
    return js.replace("</", "<\\/")


def write_report(analyses: list[Analysis], path: str,
                 snapshots: list[Snapshot] | None = None) -> None:
    atomic_write_text(path, render_report(analyses, snapshots))
