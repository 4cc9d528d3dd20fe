"""The options an allocator runs with ("in force"): those of its first scheduler instance.

Instance 0 serves the threads that are not schedulers and never takes part in the carrier pool
(docs/erts/alloc_util.md §2.3), so its options can differ from what the schedulers run with; it
speaks for the allocator only where it is the only instance. The one definition, read by the
analysis, the carrier map, findings, lint, the predictions and the pages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from beamalloc.snapshot import AllocatorInstance, Snapshot


def _order(inst: AllocatorInstance) -> tuple[bool, int]:
    return (inst.instance == 0, inst.instance)


def first_scheduler_instance(insts: Iterable[AllocatorInstance]) -> AllocatorInstance | None:
    """The instance of one allocator whose options are in force (None for no instance)."""
    return min(insts, key=_order, default=None)


def first_scheduler_options(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Per allocator, in snapshot order, a copy of the options in force."""
    out: dict[str, dict[str, Any]] = {}
    for inst in sorted(snap.allocators, key=_order):
        out.setdefault(inst.allocator, dict(inst.options))
    return out
