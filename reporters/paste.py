"""The paste block of a recommendation (where its flags go: beamalloc/pastes.py) and the verdict's
sentences as the outputs say them, apart from the terminal rendering (reporters/recommend.py,
which re-exports them): `recommend --json` prints its paste block without loading rich (its
cost against `snapshot`, issue 28 item 3)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from beamalloc import pastes
from beamalloc.advice import wording
from beamalloc.units import exact_bytes

if TYPE_CHECKING:
    from beamalloc.advice.recommend import Document, Recommended


def said(f: Callable[..., str], *args: Any) -> str:
    """A sentence of the wording module as the verdict says it, in human sizes whatever
    `--bytes` asks of the tables (the JSON's words, computed the same way)."""
    with exact_bytes(False):
        return f(*args)


def paste_note(rec: Recommended) -> str | None:
    """Why there is nothing to paste where the lint calls a setting in force wrong: the verdict
    weighed reverting it, and the paste says so rather than disagree with the lint."""
    held = [rv for rv in rec.verdict.reverts if not rv.advised]
    return f"{said(wording.revert, held[0])}; see the verdict" if held else None


def paste(r: Document, fmt: str) -> str:
    """The paste block of a recommendation (advice/recommend.py's result) for `fmt`."""
    return paste_of(r.records, fmt)


def paste_of(rec: Recommended, fmt: str) -> str:
    """The paste block of the recommendation's records for `fmt`: the advised flags, in the
    order they are pasted in."""
    return paste_block([f"{x.flag} {x.value}" for x in rec.verdict.advised], fmt,
                       paste_note(rec))


def paste_block(parts: Sequence[str], fmt: str, note: str | None = None) -> str:
    """The text to paste for `fmt`, from the flags one by one (beamalloc/pastes.py)."""
    return pastes.render(parts, fmt, note)
