"""The docs the output cites, served by the web UI (issue 15 item 5).

Findings, remedies and the lint cite our own documents (`docs/erts/tuning.md §1 R8`); the
terminal links them as `file://` URIs of the installed copy (beamalloc/citations.py), which
on a server would name the server's disk. Here they are pages: `/docs/<path>#<anchor>`, with
each heading given the anchor citations.slug() gives it, so a citation's link lands on its
section. Only the documents the package ships are served, from an index built once (a request
path is looked up in it, never joined into a file path: docs/webui.md, "Security").

Markdown is rendered as Markdown (markdown-it-py, CommonMark with tables; raw HTML in a
document is escaped, links are checked by markdown-it's own validator), every heading given the
anchor citations.slug() gives its text, wide tables in a box that scrolls (docs/webui.md). A .tsv
is shown as it is, preformatted.
"""

from __future__ import annotations

import functools

from flask import Blueprint, abort, render_template
from markdown_it import MarkdownIt
from markupsafe import Markup

from beamalloc import citations

bp = Blueprint("docs", __name__)

#: CommonMark, tables on, raw HTML off: a document's `<script>` is shown, never run.
_MD = MarkdownIt("commonmark", {"html": False}).enable("table")


@functools.cache
def index() -> dict[str, str]:
    """Path below docs/ -> its text, for every document the package ships (.md, .tsv)."""
    root = citations.DOCS_DIR
    out = {}
    for path in sorted([*root.rglob("*.md"), *root.rglob("*.tsv")]):
        out[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return out


def render(doc: str, text: str) -> Markup:
    """A document as HTML: Markdown rendered, headings anchored as citations link them."""
    if not doc.endswith(".md"):
        return Markup("<pre>{}</pre>").format(text)
    tokens = _MD.parse(text)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and i + 1 < len(tokens):
            tok.attrSet("id", citations.slug(tokens[i + 1].content))
        elif tok.type == "table_open":  # a wide table scrolls in its box, the page does not
            tok.attrSet("class", "scroll")
    html = _MD.renderer.render(tokens, _MD.options, {})
    html = html.replace('<table class="scroll">', '<div class="table-scroll"><table>')
    return Markup(html.replace("</table>", "</table></div>"))


@bp.get("/docs/<path:doc>")
def doc_page(doc: str) -> str:
    text = index().get(doc)
    if text is None:
        abort(404, description=f"no such document: docs/{doc}")
    return render_template("docs.html", doc=doc, body=render(doc, text))
