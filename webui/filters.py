"""Jinja filters and globals shared by the server and the report (same templates in both)."""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment

from beamalloc.analyzer.rules import (
    MIN_UNUSED,
    R2_MBCS_USAGE_PROBLEM,
    R2_USAGE_SUSPECT,
    USAGE_QUIET_UNUSED,
    usage_level,
)
from beamalloc.reporters.recommend import evidence_line
from beamalloc.units import human, pct


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


def install(env: Environment) -> None:
    from beamalloc.webui.assets import plotly_version

    env.filters.update(human=human, pct=pct, usage_class=usage_class, show=show)
    env.globals["plotly_version"] = plotly_version()
    env.globals["usage_bad_pct"] = round(100 * R2_MBCS_USAGE_PROBLEM)
    env.globals["usage_warn_pct"] = round(100 * R2_USAGE_SUSPECT)
    env.globals["usage_min_unused"] = human(MIN_UNUSED)
    env.globals["usage_quiet_unused"] = human(USAGE_QUIET_UNUSED)
