"""Sizes are bytes in data and JSON; humans see KiB/MiB (docs/design.md, "Conventions")."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from beamalloc.limits import MAX_SCHEDULERS

#: `--bytes` (issue 26 item 2, "MiB with the bytes on request"): while set, `human` prints a
#: size's exact bytes beside it. A context variable rather than an argument: the reporters call
#: `human` in many places, and the command sets it for its rendering only (`exact_bytes`), so
#: the sentences a stage builds (the verdict's first line: at most 100 characters) stay human.
_EXACT: ContextVar[bool] = ContextVar("beamalloc_exact_bytes", default=False)

#: The exact bytes `human` adds under `exact_bytes`: " (162,738,176 B)", its group the number
#: (what a reader of the output finds; code takes them from `Sized`, never from the text).
EXACT_SUFFIX = re.compile(r" \((-?[0-9][0-9,]*) B\)")


class Sized(str):
    """What `human` gives under `exact_bytes`: the text "155.2 MiB (162,738,176 B)", which prose
    prints as it is, with its parts kept as data for a table cell, which puts the exact bytes
    on a line of their own under the human figure (`stacked`: reporters/table.py)."""

    _parts: tuple[str, str, str, str]

    def __new__(cls, short: str, exact: str, before: str = "", after: str = "") -> Sized:
        s = super().__new__(cls, f"{before}{short} ({exact}){after}")
        s._parts = (short, exact, before, after)
        return s

    @property
    def stacked(self) -> str:
        short, exact, before, after = self._parts
        return f"{before}{short}{after}\n{exact}"


def around(before: str, size: str, after: str = "") -> str:
    """A cell of words around one size ("3 (1.0 MiB)"), which keeps that size's exact bytes
    as data (a `Sized`) where `human` gave them."""
    if isinstance(size, Sized):
        short, exact, b, a = size._parts
        return Sized(short, exact, before + b, a + after)
    return before + size + after


#: Binary units, smallest first: the one table of `human` and of an axis's ticks (`tick_label`).
BYTE_UNITS = (("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40))


def byte_unit(vmax: float) -> tuple[str, int]:
    """The largest binary unit not above `vmax` (B for 0 and below 1 KiB), and its bytes."""
    name, factor = BYTE_UNITS[0]
    for n, f in BYTE_UNITS:
        if abs(vmax) >= f:
            name, factor = n, f
    return name, factor


def tick_label(n: float, unit: str | None = None) -> str:
    """A chart axis's tick: `n` bytes in the largest unit not above it, or `n` already counted
    in `unit`; no trailing zeros, since ticks sit at round values: '0', '512 KiB', '2.5 MiB'."""
    if unit is None:
        unit, factor = byte_unit(n)
        n = n / factor
    return "0" if n == 0 else f"{n:,.2f}".rstrip("0").rstrip(".") + f" {unit}"


def human(n: int | float | None, nb: bool = False) -> str:
    """1536 -> '1.5 KiB'. Exact below 1 KiB, one decimal above; under `exact_bytes`, the
    exact bytes beside it: '1.5 KiB (1,536 B)'. `nb`: no-break spaces throughout, for a web
    table cell that must wrap only at its own separators (a plain str, never a `Sized`)."""
    if n is None:
        return "-"
    sp = "\u00a0" if nb else " "
    sign, v = ("-" if n < 0 else ""), float(abs(n))
    if v < 1024:
        return f"{sign}{int(v)}{sp}B"
    for unit, _ in BYTE_UNITS[1:]:
        v /= 1024
        if v < 1024 or unit == BYTE_UNITS[-1][0]:
            text = f"{sign}{v:.1f}{sp}{unit}"
            if not _EXACT.get():
                return text
            return f"{text}{sp}({exact(n)}{sp}B)" if nb else Sized(text, f"{exact(n)} B")
    raise AssertionError


def count(n: int | None) -> str:
    """A count of things (events, carrier calls, processes): thousands separated, "-" where
    unknown. The one count format (advice/wording.py says it through this)."""
    return "-" if n is None else f"{n:,}"


def exact(n: int | float) -> str:
    """A size in exact bytes, thousands separated, no unit: the figure a reader copies into a
    calculation ("in bytes: 1,536"); `human` writes it beside a size under `exact_bytes`."""
    return f"{n:,.0f}"


@contextmanager
def exact_bytes(on: bool = True) -> Iterator[None]:
    """`human` prints exact bytes beside each size inside this block (`on`), or never (`on`
    False: a stage's own sentences inside a block that renders with them)."""
    token = _EXACT.set(on)
    try:
        yield
    finally:
        _EXACT.reset(token)


def pct(x: float | None, digits: int = 1) -> str:
    """0.028 -> '2.8 %' (`digits` after the point): a space before the sign, as
    wording.change and wording.share print it, the one style of every output (issue 26 item 3)."""
    return "-" if x is None else f"{100 * x:.{digits}f} %"


# ---- numbers a user types: every option is finite and within what a machine can hold ------------
# (docs/robustness.md, "Ranges"). argparse calls these with the option's text; a value outside
# its range is one line and exit 2, never nan reaching a timer or 10^9 schedulers a replay.


def _plain(x: float) -> str:
    """1000000 -> '1,000,000', 0.5 -> '0.5', 1e-06 -> '1e-06'."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


class _Range:
    """An argparse `type=`: the text as an int or a float within [lo, hi] (`lo` excluded when
    `open_lo`), in `unit`, else argparse.ArgumentTypeError with the range."""

    def __init__(self, kind: type, lo: float, hi: float, unit: str, open_lo: bool = False) -> None:
        self.kind, self.lo, self.hi, self.unit, self.open_lo = kind, lo, hi, unit, open_lo
        self.__name__ = "integer" if kind is int else "number"  # argparse names it in errors

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        lo, hi = _plain(self.lo), _plain(self.hi)
        return f"above {lo}, at most {hi}{unit}" if self.open_lo else f"from {lo} to {hi}{unit}"

    def __call__(self, text: str) -> int | float:
        what = "a whole number" if self.kind is int else "a finite number"
        bad = argparse.ArgumentTypeError(f"expected {what} {self.describe()}, got "
                                         f"{text[:30]!r}")
        try:
            v = int(text, 10) if self.kind is int else float(text)
        except ValueError:
            raise bad from None
        if isinstance(v, float) and not math.isfinite(v):
            raise bad
        if v < self.lo or v > self.hi or (self.open_lo and v == self.lo):
            raise bad
        return v



#: Every numeric option of every command, one home: option -> its argparse type.
OPTIONS: dict[str, _Range] = {
    "--timeout": _Range(float, 0, 3600, "seconds", open_lo=True),
    "--interval": _Range(float, 0, 86400, "seconds", open_lo=True),
    "--retain": _Range(float, 0, 36500, "days", open_lo=True),
    "--duration": _Range(float, 0, 366 * 86400, "seconds", open_lo=True),
    "--rate-seconds": _Range(float, 0, 3600, "seconds"),
    "--trace-for": _Range(float, 0, 600, "seconds", open_lo=True),
    "--sample-ms": _Range(float, 1e-6, 86_400_000, "ms"),  # 1 ns to a day of trace time
    "--schedulers": _Range(int, 1, MAX_SCHEDULERS, "schedulers"),
    "--top": _Range(int, 1, 1_000_000, "instances"),
    "--max-carriers": _Range(int, 0, 100_000_000, "carriers"),
    "--carriers-every": _Range(int, 0, 1_000_000, "samples"),
    "--processes-every": _Range(float, 0, 86400, "seconds"),
    "--pid": _Range(int, 1, (1 << 31) - 1, ""),
    "--sample": _Range(float, 0, 1, "(a fraction of the time)", open_lo=True),
    "--slice-ms": _Range(float, 1, 3_600_000, "ms"),
    "--max-overhead": _Range(float, 0, 100, "%", open_lo=True),
}


def option_type(option: str) -> _Range:
    """The argparse `type=` for `option` (a key of OPTIONS)."""
    return OPTIONS[option]


def apply_ranges(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give every option of `parser` and its subcommands that OPTIONS names its range: the one
    call the CLI makes after building its parser, so a new command gets the checks too."""
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:  # argparse has no public walk of its options
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            for s in action.option_strings:
                if s in OPTIONS:
                    action.type = OPTIONS[s]
    return parser


def unix_time(name: str, text: str | None) -> float | None:
    """A Unix time given as text (a web query's `start`, `end`): None when absent, else a finite
    number of seconds between 1970 and 9999, or InputError in one line (a 400, not a 500)."""
    from beamalloc.errors import InputError
    from beamalloc.snapshot import MAX_TIME

    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 <= v <= MAX_TIME):
        raise InputError(f"{name}: expected a Unix time in seconds, 0 to {MAX_TIME:.0f}")
    return v
