"""Sizes are bytes in data and JSON; humans see KiB/MiB (docs/design.md, "Conventions")."""

from __future__ import annotations


def human(n: int | float | None) -> str:
    """1536 -> '1.5 KiB'. Exact below 1 KiB, one decimal above."""
    if n is None:
        return "-"
    sign, v = ("-" if n < 0 else ""), float(abs(n))
    if v < 1024:
        return f"{sign}{int(v)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        v /= 1024
        if v < 1024 or unit == "TiB":
            return f"{sign}{v:.1f} {unit}"
    raise AssertionError


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
