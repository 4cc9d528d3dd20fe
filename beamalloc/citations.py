"""Citations in our output point at the docs the package ships, as links a user can open.

The rules, the lint and the remedies cite our own documents (`docs/erts/tuning.md §1 R8`,
`docs/processes.md "Facts"`). Those documents travel with the package: the wheel holds docs/ as
`beamalloc/docs` (setup.cfg, package_data); a source checkout or an editable install reads the
repository's docs/. `link()` turns a citation into the installed file's `file://` URI with the
GitHub-style anchor of the first section it names, so the reader on the node's host (or in the
terminal beside it) opens the very text the finding rests on.

    link("docs/erts/tuning.md §1 R8, §0.2 item 5")
      -> "file:///…/beamalloc/docs/erts/tuning.md#r8-lint-lmbcs-against-sbct"
    with_link(citation) -> "docs/erts/tuning.md §1 R8, §0.2 item 5 <file:///…#r8-…>"

A citation naming no document of ours (an issue, a book) links to nothing and is shown as is.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

#: Where the docs are: beside this module in a wheel, the repository's docs/ in a checkout.
_HERE = Path(__file__).resolve().parent
DOCS_DIR = _HERE / "docs" if (_HERE / "docs").is_dir() else _HERE.parent / "docs"

#: `docs/<path>.md` (or .tsv), then what names a part of it: a number, `§1 Rn`, a quoted name.
_DOC = re.compile(r"(?<![\w/.-])docs/((?:[\w-]+/)*[\w.-]+\.(?:md|tsv))")
_SECTION = re.compile(r'\s*,?\s*(?:§(\d+(?:\.\d+)*)(?:\s+(R\d+)\b)?|"([^"\n]+)")')
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_HEADING_NUMBER = re.compile(r"§?(\d+(?:\.\d+)*)\.?(?:\s|$)")
_HEADING_RULE = re.compile(r"(R\d+)\b")


@dataclass(frozen=True)
class Target:
    """Where a citation points: the document (a path relative to DOCS_DIR) and a part of it."""

    doc: str
    section: str | None = None  # "2.1", "R8" or a quoted name; None for the whole document

    @property
    def path(self) -> Path:
        return DOCS_DIR / self.doc


def targets(citation: str) -> list[Target]:
    """Every document of ours a citation names, each with the first part named after it."""
    out = []
    for m in _DOC.finditer(citation):
        part = _SECTION.match(citation, m.end())
        section = None
        if part:
            section = part[2] if part[1] == "1" and part[2] else part[1] or part[3]
        out.append(Target(m[1], section))
    return out


def slug(heading: str) -> str:
    """The anchor GitHub (and most Markdown viewers) give a heading: lower case, punctuation
    dropped, spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading(line: str) -> tuple[int, str] | None:
    """A Markdown heading line's level and text (`## 2.1 Foo` -> (2, "2.1 Foo")), else None."""
    m = _HEADING.match(line)
    return (len(m[1]), m[2]) if m else None


@functools.cache
def _headings(path: Path) -> tuple[str, ...]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ()
    fenced = False
    out = []
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := _HEADING.match(line)):
            out.append(m[2])
    return tuple(out)


def anchor(target: Target) -> str | None:
    """The anchor of the heading a target names, or None when the document has none such (a
    quoted name not in a heading, e.g. a term defined in a paragraph, links to the document)."""
    if target.section is None:
        return None
    heads = _headings(target.path)
    pattern = _HEADING_RULE if target.section[0] == "R" else _HEADING_NUMBER
    for h in heads:
        m = pattern.match(h)
        if m and m[1] == target.section:
            return slug(h)
    for h in heads:  # a quoted name: the heading that is, or starts with, that name
        if h == target.section or h.startswith(target.section + " "):
            return slug(h)
    return None


def doc_ref(citation: str) -> str | None:
    """The first document of ours a citation names, relative to DOCS_DIR, with the section's
    anchor: for docs/erts/tuning.md §1 R8 the path below docs/ and `#r8-lint-lmbcs-against-sbct`.
    For a page that serves the docs itself, where a `file://` link would name the server's disk.
    None when it names none."""
    for t in targets(citation):
        if t.path.is_file():
            a = anchor(t)
            return t.doc + (f"#{a}" if a else "")
    return None


def link(citation: str) -> str | None:
    """The `file://` URI (with the section's anchor) of the first document of ours a citation
    names, or None when it names none or the document is not installed."""
    ref = doc_ref(citation)
    if ref is None:
        return None
    doc, _, a = ref.partition("#")
    return (DOCS_DIR / doc).as_uri() + (f"#{a}" if a else "")


def with_link(citation: str) -> str:
    """The citation as the reporters print it: its text, then its link when it has one."""
    uri = link(citation)
    return f"{citation} <{uri}>" if uri else citation
