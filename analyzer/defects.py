"""Known VM defects that show in memory, matched against the node's erts version and its
symptom (docs/erts/memory-categories.md §5, where each entry's ticket and fixing release are).

A defect is reported only when the node runs an affected release and its snapshot shows the
symptom the table names; the finding says the node matches the symptom, not that it has the
bug, and names the release that fixes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from beamalloc.snapshot import Snapshot
from beamalloc.units import human
from beamalloc.versions import erts_tuple

Version = tuple[int, ...]


def _allocated(snap: Snapshot, allocator: str) -> int:
    return sum(i.mbcs.carriers_size.current + i.sbcs.carriers_size.current
               for i in snap.instances(allocator))


def _all_allocated(snap: Snapshot) -> int:
    return sum(i.mbcs.carriers_size.current + i.sbcs.carriers_size.current
               for i in snap.allocators)


#: Symptom thresholds [heur] (§5): what a healthy node does not reach.
FIX_ALLOC_MIN, FIX_ALLOC_SHARE = 64 << 20, 0.10
BINARY_MIN, BINARY_SHARE = 256 << 20, 0.50


def _fix_alloc_grown(snap: Snapshot) -> str | None:
    fix, total = _allocated(snap, "fix_alloc"), _all_allocated(snap)
    if fix >= FIX_ALLOC_MIN and total and fix >= FIX_ALLOC_SHARE * total:
        return f"fix_alloc holds {human(fix)} of the node's {human(total)} of carriers"
    return None


def _binary_grown(snap: Snapshot) -> str | None:
    b, t = snap.memory.get("binary"), snap.memory.get("total")
    if b is not None and t and b >= BINARY_MIN and b >= BINARY_SHARE * t:
        return f"erlang:memory(binary) is {human(b)} of {human(t)}"
    return None


@dataclass(frozen=True)
class Defect:
    ticket: str
    what: str
    #: [lo, hi) erts versions affected; hi is the erts of the release that fixed that line
    affected: tuple[tuple[Version, Version], ...]
    fixed_in: str
    symptom: Callable[[Snapshot], str | None]


DEFECTS: tuple[Defect, ...] = (
    Defect("erlang/otp#6947 (OTP-18496)",
           "fix_alloc leaked the process aliases of terminating processes",
           (((12, 0), (12, 3, 2, 10)), ((13, 0), (13, 2))),
           "OTP 24.3.4.10 (erts-12.3.2.10); on OTP 25 upgrade to 25.3 or later",
           _fix_alloc_grown),
    Defect("erlang/otp#7834 (OTP-18885)",
           "binaries of fragmented distribution messages to an inactive alias leaked",
           (((12, 0), (12, 3, 2, 15)), ((13, 0), (13, 2, 2, 5)), ((14, 0), (14, 2))),
           "OTP 24.3.4.15 (erts-12.3.2.15), 25.3.2.8 (erts-13.2.2.5), 26.2 (erts-14.2)",
           _binary_grown),
)


@dataclass(frozen=True)
class DefectFinding:
    ticket: str
    erts_version: str
    symptom: str
    fixed_in: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def defect_findings(snap: Snapshot) -> list[DefectFinding]:
    v = erts_tuple(snap.erts_version)
    if v is None:
        return []
    out = []
    for d in DEFECTS:
        if not any(lo <= v < hi for lo, hi in d.affected):
            continue
        seen = d.symptom(snap)
        if seen is None:
            continue
        out.append(DefectFinding(
            d.ticket, str(snap.erts_version), seen, d.fixed_in,
            f"erts {snap.erts_version} is affected by {d.ticket}: {d.what}. The node matches "
            f"its symptom ({seen}); fixed in {d.fixed_in}."))
    return out
