"""The records of `beamalloc diff` (advice/diff.py builds them, advice/wording.py words their
verdict and notes, reporters/diff.py and webui/compare.py lay them out). `Diff.to_json()` is what
`beamalloc diff --json` prints (docs/diff.md). Apart from diff.py so that wording.py can name
these types while diff.py calls wording.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SCHEMA = "beamalloc.diff/2"


class _Record:
    """Its JSON is its fields, nested records as objects."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Side(_Record):
    """Where one side came from: `label` (a path, a node, a store sample) and its snapshot."""

    label: str | None
    node: str
    source: str
    taken_at: str | None
    otp_release: str | None
    erts_version: str | None
    os_pid: int | None
    rss: int | None


@dataclass(frozen=True)
class Numbers(_Record):
    """One allocator type's (or every allocator's) carriers on one side, or their change from A
    to B (`TypeDiff.delta`: B − A; usage in parts of one, None where a side has no usage)."""

    mbcs_carriers: int
    sbcs_carriers: int
    carriers_size: int
    used: int
    unused: int
    usage: float | None

    def minus(self, a: Numbers) -> Numbers:
        """self − a, field by field."""
        return Numbers(self.mbcs_carriers - a.mbcs_carriers, self.sbcs_carriers - a.sbcs_carriers,
                       self.carriers_size - a.carriers_size, self.used - a.used,
                       self.unused - a.unused,
                       None if self.usage is None or a.usage is None else self.usage - a.usage)


@dataclass(frozen=True)
class TypeDiff(_Record):
    """An allocator type ("total" for every allocator) on A and B (None where a side lacks it),
    the change, B's level (ok, warn, bad: by what B still holds unused) and the change of unused
    bytes relative to A's."""

    allocator: str
    a: Numbers | None
    b: Numbers | None
    delta: Numbers | None
    level: str
    relative_unused: float | None


@dataclass(frozen=True)
class OptionChange(_Record):
    """A +M option whose value differs (first scheduler instance), as each VM reports it, and
    both values in the option's unit (`format_option`)."""

    allocator: str
    option: str
    flag: str
    unit: str
    a: Any
    b: Any
    a_text: str
    b_text: str


@dataclass(frozen=True)
class RssChange(_Record):
    a: int
    b: int
    delta: int


@dataclass(frozen=True)
class DiffVerdict(_Record):
    """Did the change help: `outcome` (helped, helped_partly, barely_helped, unchanged, worse)
    and `level` judged in advice/diff.py, `headline` and `lines` worded by advice/wording.py;
    `load_change` (the change of used bytes where the load moved, else None), unused bytes per
    used byte on A and B, and the judged change of it."""

    outcome: str
    level: str
    headline: str
    lines: list[str]
    load_change: float | None
    unused_per_used: tuple[float | None, float | None]
    judged_change: float | None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "unused_per_used": list(self.unused_per_used)}


@dataclass(frozen=True)
class Diff:
    """Two snapshots compared, A before, B after (docs/diff.md)."""

    a: Side
    b: Side
    same_node: bool
    same_otp: bool
    notes: list[str]  # what makes A and B not a like-for-like pair, worded
    verdict: DiffVerdict
    total: TypeDiff
    rss: RssChange | None
    types: list[TypeDiff]  # every allocator type with carriers on a side, most unused first
    flags: list[OptionChange]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "same_node": self.same_node,
            "same_otp": self.same_otp,
            "notes": list(self.notes),
            "verdict": self.verdict.to_json(),
            "total": self.total.to_json(),
            "rss": None if self.rss is None else self.rss.to_json(),
            "types": [t.to_json() for t in self.types],
            "flags": [f.to_json() for f in self.flags],
        }
