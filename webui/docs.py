"""The docs the output cites, served by the web UI (issue 15 item 5).

Findings, remedies and the lint cite our own documents (`docs/erts/tuning.md §1 R8`); the
terminal links them as `file://` URIs of the installed copy (beamalloc/citations.py), which
on a server would name the server's disk. Here they are pages: `/docs/<path>#<anchor>`, with
each heading given the anchor citations.slug() gives it, so a citation's link lands on its
section. Only the documents the package ships are served, from an index built once (a request
path is looked up in it, never joined into a file path: docs/webui.md, "Security").

The rendering is plain on purpose: headings with their anchors, code and tables as
preformatted blocks, other lines as paragraphs. Every string is escaped by the template.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from flask import Blueprint, abort, render_template

from beamalloc import citations

bp = Blueprint("docs", __name__)

_ITEM = re.compile(r"\s*(?:[-*]|\d+\.)\s")


@dataclass(frozen=True)
class Block:
    kind: str  # "h1".."h6", "pre" or "p"
    text: str
    anchor: str | None = None


@functools.cache
def index() -> dict[str, str]:
    """Path below docs/ -> its text, for every document the package ships (.md, .tsv)."""
    root = citations.DOCS_DIR
    out = {}
    for path in sorted([*root.rglob("*.md"), *root.rglob("*.tsv")]):
        out[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return out


def blocks(text: str) -> list[Block]:
    out: list[Block] = []
    para: list[str] = []
    pre: list[str] | None = None

    def flush() -> None:
        if para:
            out.append(Block("p", " ".join(para)))
            para.clear()

    for line in text.splitlines():
        if pre is not None:  # inside a fenced block, or a run of table lines
            if line.startswith("```"):
                out.append(Block("pre", "\n".join(pre)))
                pre = None
            else:
                pre.append(line)
            continue
        if line.startswith("```"):
            flush()
            pre = []
        elif line.startswith("|"):
            flush()
            if out and out[-1].kind == "pre" and out[-1].text.startswith("|"):
                out[-1] = Block("pre", out[-1].text + "\n" + line)
            else:
                out.append(Block("pre", line))
        elif (h := citations.heading(line)) is not None:
            flush()
            out.append(Block(f"h{h[0]}", h[1], citations.slug(h[1])))
        elif not line.strip():
            flush()
        else:
            if _ITEM.match(line):  # a list item starts a paragraph of its own
                flush()
            para.append(line.strip())
    flush()
    if pre is not None:
        out.append(Block("pre", "\n".join(pre)))
    return out


@bp.get("/docs/<path:doc>")
def doc_page(doc: str) -> str:
    text = index().get(doc)
    if text is None:
        abort(404, description=f"no such document: docs/{doc}")
    return render_template("docs.html", doc=doc, blocks=blocks(text))
