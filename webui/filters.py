"""Jinja filters and globals shared by the server and the report (same templates in both)."""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment

from beamalloc.units import human, pct


def usage_class(u: float | None) -> str:
    if u is None:
        return ""
    return "bad" if u < 0.5 else "warn" if u < 0.75 else "ok"


def show(v: Any) -> str:
    """A recommender value (number, string, list or dict) as one line of text; Jinja escapes it."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        try:  # the recommender's own evidence formatting: sizes in KiB/MiB, ratios in %
            from beamalloc.reporters.recommend import evidence_line

            return evidence_line(v)
        except ImportError:
            return ", ".join(f"{k}: {show(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return "; ".join(show(x) for x in v)
    return json.dumps(v)


def install(env: Environment) -> None:
    from beamalloc.webui.assets import plotly_version

    env.filters.update(human=human, pct=pct, usage_class=usage_class, show=show)
    env.globals["plotly_version"] = plotly_version()
