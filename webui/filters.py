"""Jinja filters and globals shared by the server and the report (same templates in both)."""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment
from markupsafe import Markup, escape

from beamalloc import citations
from beamalloc.advice.rules import (
    MIN_UNUSED,
    R2_MBCS_USAGE_PROBLEM,
    R2_USAGE_SUSPECT,
    USAGE_QUIET_UNUSED,
    usage_level,
)
from beamalloc.console import clean
from beamalloc.reporters.recommend import evidence_line
from beamalloc.units import count, human, pct


def usage_class(u: float | None, unused: int | None = None) -> str:
    if u is None:
        return ""
    return usage_level(u, unused)


def show(v: Any) -> str:
    """A recommender value (number, string, list or dict) as one line of text; Jinja escapes it.
    Never a Python repr: None is "-", a dict reads "key value, ..." (sizes in KiB/MiB, ratios
    in %) with its empty keys left out and nested dicts in parentheses."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        flat = {k: x for k, x in v.items() if x is not None and not isinstance(x, dict | list)}
        parts = [evidence_line(flat)] if flat else []  # the recommender's own number format
        parts += [f"{k} ({show(x)})" for k, x in v.items() if isinstance(x, dict) and x]
        return ", ".join(p for p in parts if p) or "-"
    if isinstance(v, list | tuple):
        return "; ".join(show(x) for x in v) or "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return json.dumps(v)


def citation_links(docs: str | None):  # -> the `cites` filter
    """A filter that shows citations ("; "-joined), each of our own documents as a link to its
    section: under `docs` (the server's /docs pages, webui/docs.py), or without `docs` to the
    installed file (the static report, opened where beamalloc is installed)."""
    def cite(citation: str) -> Markup:
        ref = citations.doc_ref(citation)
        href = (f"{docs}/{ref}" if docs else citations.link(citation)) if ref else None
        if href is None:
            return escape(citation)
        return Markup('<a href="{}">{}</a>').format(href, citation)

    def cites(sources: str | list[str] | None) -> Markup:
        if not sources:
            return Markup("")
        items = [sources] if isinstance(sources, str) else sources
        return Markup("; ").join(cite(s) for s in items)

    return cites


def visible(v: Any) -> Any:
    """Every value a template shows (Jinja's `finalize`), as the terminal shows text from
    outside (beamalloc/console.py `clean`): a control character (an escape sequence, a bell, a
    carriage return, a bidi override that reorders what the reader sees) as `\\xNN`, harmless
    and visible; line breaks kept (HTML shows them as space, a <pre> of ours needs them).
    Markup (our own HTML: the citations' links, the figures' JSON) is left as it is."""
    if isinstance(v, str) and not isinstance(v, Markup):
        return clean(v, limit=0, keep="\n")
    return v


def install(env: Environment, docs: str | None = "/docs") -> None:
    from beamalloc.webui.assets import plotly_version

    env.finalize = visible
    # `tally`, not `count`: Jinja's own `count` is `length`
    env.filters.update(human=human, pct=pct, usage_class=usage_class, show=show,
                       cites=citation_links(docs), tally=count)
    env.globals["plotly_version"] = plotly_version()
    env.globals["usage_bad_pct"] = round(100 * R2_MBCS_USAGE_PROBLEM)
    env.globals["usage_warn_pct"] = round(100 * R2_USAGE_SUSPECT)
    env.globals["usage_min_unused"] = human(MIN_UNUSED)
    env.globals["usage_quiet_unused"] = human(USAGE_QUIET_UNUSED)
