"""`beamalloc diff A B` in a terminal: the verdict first, then the flags that changed, then per
allocator type A, B and the change (advice/diff.py computes all of it; this only lays it out).

Laid out for 80 columns by design: prose is wrapped at WIDTH, and the table puts A, B and the
change on three lines of one allocator instead of side by side, its columns as wide as their
widest cell, so no number is ever cut whatever the terminal.
"""

from __future__ import annotations

import textwrap

from rich.console import Console
from rich.text import Text

from beamalloc.advice.diff_records import Diff, Numbers, Side, TypeDiff
from beamalloc.reporters.table import UNIT_GLUE
from beamalloc.units import around, count, human, pct

WIDTH = 80
STYLE = {"ok": "green", "warn": "yellow", "bad": "bold red"}


def _wrap(text: str, indent: str = "", first: str = "") -> list[str]:
    # a number stays on one line with its unit ("5.9 %", "19.0 MiB"), as table.prose keeps it
    text = UNIT_GLUE.sub("\\1\u00a0\\2", text)
    lines = textwrap.wrap(text, WIDTH, initial_indent=first or indent, subsequent_indent=indent,
                          break_long_words=True, break_on_hyphens=False) or [first]
    return [ln.replace("\u00a0", " ") for ln in lines]


def signed_bytes(n: int | None, missing: str = "-") -> str:
    """A change in bytes: "+2.2 KiB", "-512.0 KiB", "=" for none; `missing` where a side lacks it
    (the terminal's and the compare page's one rule)."""
    if n is None:
        return missing
    return around("+" if n > 0 else "", human(n)) if n else "="


def count_delta(n: int | None) -> str:
    return "-" if n is None else f"{n:+,}" if n else "="


def _usage(u: float | None) -> str:
    return pct(u)


def usage_delta(u: float | None, missing: str = "-") -> str:
    """A change of usage in percentage points, "=" below 0.05."""
    return missing if u is None else f"{100 * u:+.1f} pt" if round(100 * u, 1) else "="


def _cells(side: Numbers | None) -> list[str]:
    if side is None:
        return ["-"] * 6
    return [count(side.mbcs_carriers), count(side.sbcs_carriers), human(side.carriers_size),
            human(side.used), human(side.unused), _usage(side.usage)]


def _delta_cells(d: Numbers | None) -> list[str]:
    if d is None:
        return ["-"] * 6
    return [count_delta(d.mbcs_carriers), count_delta(d.sbcs_carriers),
            signed_bytes(d.carriers_size), signed_bytes(d.used), signed_bytes(d.unused),
            usage_delta(d.usage)]


HEADER = ["", "", "mbcs", "sbcs", "carriers", "used", "unused", "usage"]


#: A type whose unused bytes and carrier bytes stay below this on both sides, and moved less,
#: is left out of the table (one line says how many; --json has them all).
SMALL_ROW = 1 << 20


def shown_types(d: Diff) -> list[TypeDiff]:
    def big(r: TypeDiff) -> bool:
        sides = [s for s in (r.a, r.b) if s is not None]
        moved = r.delta is None or abs(r.delta.carriers_size) >= SMALL_ROW \
            or abs(r.delta.unused) >= SMALL_ROW
        return moved or any(s.unused >= SMALL_ROW for s in sides)
    return [r for r in d.types if big(r)]


def table_rows(d: Diff) -> list[tuple[list[str], str | None]]:
    """(cells, style) of the table: per row of advice/diff.py's `total` and shown `types`,
    the A, B and change lines; B's line is coloured by what it still holds unused."""
    out: list[tuple[list[str], str | None]] = []
    for r in [d.total, *shown_types(d)]:
        name = "all allocators" if r.allocator == "total" else r.allocator
        out.append(([name, "A", *_cells(r.a)], None))
        out.append((["", "B", *_cells(r.b)], STYLE.get(r.level) if r.b else None))
        out.append((["", "Δ", *_delta_cells(r.delta)], "dim"))
    return out


def table_lines(d: Diff) -> list[tuple[str, str | None]]:
    rows = table_rows(d)
    widths = [max(len(c[i]) for c in [HEADER, *(r for r, _ in rows)]) for i in range(len(HEADER))]

    def line(cells: list[str]) -> str:
        left = f"{cells[0]:<{widths[0]}} {cells[1]:<{widths[1]}}"
        return " ".join([left, *(f"{c:>{w}}" for c, w in zip(cells[2:], widths[2:],
                                                             strict=True))]).rstrip()
    out: list[tuple[str, str | None]] = [(line(HEADER), "bold")]
    for i, (cells, style) in enumerate(rows):
        if i and i % 3 == 0:
            out.append(("", None))
        out.append((line(cells), style))
    return out


def _side_line(tag: str, s: Side) -> list[str]:
    where = f"{s.source}, {s.taken_at or 'no time'}, OTP {s.otp_release or '?'}"
    text = f"{s.node} ({where})"
    if s.label and s.label != s.node:
        text += f" from {s.label}"
    return _wrap(text, indent="   ", first=f"{tag}  ")


def lines(d: Diff) -> list[tuple[str, str | None]]:
    """Every line of the report with its style, none wider than WIDTH (the table's lines
    excepted only if a number is wider than any real one: numbers are never cut)."""
    v = d.verdict
    out: list[tuple[str, str | None]] = []
    out += [(x, "bold") for x in _side_line("A", d.a)]
    out += [(x, "bold") for x in _side_line("B", d.b)]
    for n in d.notes:
        out += [(x, "yellow") for x in _wrap(n, "      ", "note: ")]
    out.append(("", None))
    out += [(x, STYLE[v.level]) for x in _wrap(v.headline, "  ")]
    for x in v.lines:
        out += [(y, None) for y in _wrap(x, "    ", "  - ")]
    rss = d.rss
    if rss is not None:
        out.append((f"  - RSS {human(rss.a)} → {human(rss.b)} ({signed_bytes(rss.delta)})", None))
    else:
        missing = " or ".join(t for t, s in (("A", d.a), ("B", d.b)) if s.rss is None)
        out += [(y, "dim") for y in _wrap(f"no RSS in {missing} (only a live node or a "
                                          "snippet file has it)", "    ", "  - ")]
    out.append(("", None))
    if d.flags:
        out.append(("+M options that changed (first scheduler instance, as the VMs report "
                    "them)", "bold"))
        wf = max(len(f.flag) for f in d.flags)
        for f in d.flags:
            out += [(y, None) for y in _wrap(f"{f.a_text} → {f.b_text}",
                                             " " * (wf + 4), f"  {f.flag:<{wf}}  ")]
    else:
        out.append(("No +M option differs between A and B.", "dim"))
    out.append(("", None))
    out.append(("Per allocator type: A, B and the change (Δ); carriers are counts, then "
                "sizes", "bold"))
    out += table_lines(d)
    hidden = len(d.types) - len(shown_types(d))
    if hidden:
        out.append(("", None))
        out += [(y, "dim") for y in _wrap(f"{hidden} more allocator types hold less than "
                                          f"{human(SMALL_ROW)} unused in A and B and moved less "
                                          "(--json lists them)")]
    return out


def render(d: Diff, console: Console) -> None:
    for text, style in lines(d):
        console.print(Text(text, style=style or ""), overflow="ignore", crop=False,
                      soft_wrap=True)
