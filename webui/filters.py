"""Jinja filters and globals shared by the server and the report (same templates in both)."""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment

from beamalloc.analyzer.rules import R2_MBCS_USAGE_PROBLEM, R2_USAGE_SUSPECT, usage_level
from beamalloc.reporters.recommend import evidence_line
from beamalloc.units import human, pct


def usage_class(u: float | None) -> str:
    if u is None:
        return ""
    return usage_level(u)


def show(v: Any) -> str:
    """A recommender value (number, string, list or dict) as one line of text; Jinja escapes it."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return evidence_line(v)  # the recommender's own: sizes in KiB/MiB, ratios in %
    if isinstance(v, list | tuple):
        return "; ".join(show(x) for x in v)
    return json.dumps(v)


def install(env: Environment) -> None:
    from beamalloc.webui.assets import plotly_version

    env.filters.update(human=human, pct=pct, usage_class=usage_class, show=show)
    env.globals["plotly_version"] = plotly_version()
    env.globals["usage_bad_pct"] = round(100 * R2_MBCS_USAGE_PROBLEM)
    env.globals["usage_warn_pct"] = round(100 * R2_USAGE_SUSPECT)
