"""The one table renderer of the terminal reporters: a table that fits the console's width.

rich shrinks a table wider than the console by cutting its cells ("171…"), which at 3 a.m. is a
wrong number. Here a table never is: its columns are laid out left to right while they fit, and
the ones that do not move into a second table (titled "... (continued)") that repeats the key
columns (what a row is about), and so on; a column marked `optional` is left out instead, with
a note saying so. Numbers are never wrapped or cut; only columns marked `wrap` (names, initial
calls) may wrap inside their cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich import box as boxes
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from beamalloc.units import Sized

#: A number and its unit, to be kept on one line when text wraps.
UNIT_GLUE = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|%)(?=[\s,.;:)]|$)")

#: A column that may wrap is given at least this many cells when the table is laid out.
WRAP_MIN = 20

Cell = str | Text


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "right"
    #: Repeated in every part of a split table: what the row is about (a name).
    key: bool = False
    #: Text that may wrap inside its cell (never a number).
    wrap: bool = False
    #: Left out, with a note, when it does not fit beside the others (instead of moving).
    optional: bool = False


def _build(cols: Sequence[Col], rows: Sequence[Sequence[Cell]],
           idx: Sequence[int], measuring: bool, ends: frozenset[int] = frozenset(),
           **kw: Any) -> Table:
    t = Table(**kw)
    for i in idx:
        c = cols[i]
        # A wrapping column is measured at the width rich will not shrink it below (its
        # longest word, at least WRAP_MIN), so that what is measured to fit does fit: a table
        # rich must shrink further cuts every column, numbers too.
        floor = _floor(rows, i) if c.wrap else None
        t.add_column(c.header, justify=c.justify,  # type: ignore[arg-type]
                     no_wrap=not c.wrap, overflow="fold",
                     max_width=floor if measuring else None,
                     min_width=floor if not measuring else None)
    for n, r in enumerate(rows):
        t.add_row(*(r[i] for i in idx), end_section=n in ends)
    return t


def _floor(rows: Sequence[Sequence[Cell]], i: int) -> int:
    cells = (r[i].plain if isinstance(r[i], Text) else str(r[i]) for r in rows)
    return max([WRAP_MIN, *(len(w) for c in cells for w in c.split())])


def _width(console: Console, t: Table) -> int:
    # measured without the console's limit, which would clamp it to the width it must fit
    return Measurement.get(console, console.options.update_width(1 << 16), t).maximum


def layout(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Cell]],
           **kw: Any) -> tuple[list[list[int]], list[str]]:
    """The column indices of each part, and the headers left out (optional ones). The first
    part takes as many columns as fit (the first columns are the ones that matter most); the
    rest are spread over as few parts as fit, as narrow as keeps that many, so that they are of
    like widths (not six columns and then one)."""
    # Each column measured once, alone; what two columns share (a border) from one pair: a
    # table's width is then a sum, however many rows it has and however many layouts are tried.
    single = [_width(console, _build(cols, rows, [i], True, **kw)) for i in range(len(cols))]
    shared = (single[0] + single[1] - _width(console, _build(cols, rows, [0, 1], True, **kw))
              if len(cols) > 1 else 0)

    def width(idx: list[int]) -> int:
        return sum(single[i] for i in idx) - shared * (len(idx) - 1)

    full = console.width
    best = _pack(cols, full, full, width)
    lo, hi = full // 3, full
    while len(best[0]) > 2 and lo < hi:  # the narrowest room that needs no more parts
        mid = (lo + hi) // 2
        if len(_pack(cols, full, mid, width)[0]) <= len(best[0]):
            hi = mid
        else:
            lo = mid + 1
    parts, dropped = _pack(cols, full, hi, width) if len(best[0]) > 2 else best
    keys = [i for i, c in enumerate(cols) if c.key]
    if len(parts) > 1 and len(parts[-1]) - len(keys) == 1 and len(parts[-2]) - len(keys) > 3:
        # one column alone in the last table: its neighbour keeps it company
        moved = max(i for i in parts[-2] if i not in keys)
        if width(sorted(parts[-1] + [moved])) <= full:
            parts[-2].remove(moved)
            parts[-1] = sorted(parts[-1] + [moved])
    return parts, dropped


def _pack(cols: Sequence[Col], first: int, room: int,
          width: Any) -> tuple[list[list[int]], list[str]]:
    keys = [i for i, c in enumerate(cols) if c.key]
    rest = [i for i, c in enumerate(cols) if not c.key]
    parts: list[list[int]] = []
    dropped: list[str] = []
    while rest:
        cur: list[int] = []
        for i in rest:
            if width(sorted(keys + cur + [i])) <= (room if parts else first):
                cur.append(i)
            elif cur:
                break
        if not cur:  # not even one column beside the keys: show it anyway, wider than asked
            cur = [rest[0]]
        if parts:  # what did not fit in the first table: optional ones are left out
            dropped += [cols[i].header for i in cur if cols[i].optional]
            cur = [i for i in cur if not cols[i].optional]
        rest = [i for i in rest if i not in cur and cols[i].header not in dropped]
        if cur:
            parts.append(sorted(keys + cur))
    return parts or [keys], dropped


def prose(console: Console, text: str, style: str = "", indent: str = "  ",
          hang: str = "") -> None:
    """A paragraph wrapped at the console's width, its lines indented by `indent` and the ones
    after the first by `hang` more (a note under a table, an explanation). Words are never
    split, so neither is a number; a word longer than the line (a path) stays whole."""
    import textwrap

    # a size stays on one line with its unit ("171.4 MiB"): textwrap breaks at ASCII blanks only
    text = UNIT_GLUE.sub("\\1\u00a0\\2", text)
    room = max(20, console.width)
    text = " ".join(_split_term(w, room - len(indent) - len(hang)) for w in text.split(" "))
    lines = textwrap.wrap(text, width=room, initial_indent=indent,
                          subsequent_indent=indent + hang, break_long_words=False,
                          break_on_hyphens=False)
    for line in lines or [""]:
        console.print(Text(line.replace("\u00a0", " "), style=style), soft_wrap=True)


#: Where a word longer than a line (an Erlang term in a slogan) may break: after a separator.
_TERM_BREAK = re.compile(r"(?<=[,;{}()\[\]|])")


def _split_term(word: str, room: int) -> str:
    """A word longer than `room` with a blank after the last separator (`,{[(...`) that keeps
    each piece within `room`, so that it wraps between the elements of a term and never inside
    a number or a name; others unchanged."""
    pieces = []
    while len(word) > room:
        cuts = [m.start() for m in _TERM_BREAK.finditer(word, 1, room)]
        if not cuts:
            break
        pieces.append(word[:cuts[-1]])
        word = word[cuts[-1]:]
    return " ".join([*pieces, word])


def _stack(cell: Cell) -> Cell:
    """A number cell with one size's exact bytes (`--bytes`: units.exact_bytes, a `Sized`) on
    two lines, "155.2 MiB" over "162,738,176 B": a column as narrow as its longer line, not
    their sum."""
    return cell.stacked if isinstance(cell, Sized) else cell


def print_table(console: Console, title: str | None, cols: Sequence[Col],
                rows: Sequence[Sequence[Cell]], ends: Sequence[int] = (), **kw: Any) -> None:
    """Print the table in as many parts as the console's width needs (module docstring).
    `ends`: rows after which a line is drawn; `kw` goes to rich's Table (box, padding, ...)."""
    kw.setdefault("box", boxes.HEAVY_HEAD)
    rows = [[c if cols[i].wrap else _stack(c) for i, c in enumerate(r)] for r in rows]
    parts, dropped = layout(console, cols, rows, **kw)
    for n, idx in enumerate(parts):
        if title is not None:  # above the table, wrapped at the console's width, not the table's
            console.print(Text(title if n == 0 else f"{title} (continued)", style="italic"))
        console.print(_build(cols, rows, idx, False, frozenset(ends), **kw))
    if dropped:
        console.print(f"  left out at {console.width} columns: {', '.join(dropped)} "
                      "(a wider terminal, COLUMNS=..., or --json shows them)", style="dim")
