"""The options an allocator runs with ("in force"): those of its first scheduler instance.

Instance 0 serves the threads that are not schedulers and never takes part in the carrier pool
(docs/erts/alloc_util.md §2.3), so its options can differ from what the schedulers run with; it
speaks for the allocator only where it is the only instance. The one definition, read by the
analysis, the carrier map, findings, lint, the predictions and the pages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from beamalloc import flags as fl
from beamalloc.snapshot import AllocatorInstance, Snapshot
from beamalloc.units import human


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


# ---- how an option's value reads --------------------------------------------------------


def option_unit(option: str) -> str:
    """bytes, percent, count, bool or text: how the VM's value of `option` reads. flags.py's
    parameter table is the one home of each option's kind (sizes are held in bytes there and in
    a Snapshot's options; acul/acful are percentages of a carrier, docs/erts/alloc_util.md §2.1)."""
    kind = fl.param_kind("B", option) or fl.param_kind("u", option) or "any"
    return {"kb": "bytes", "mb": "bytes", "pct": "percent", "acpct": "percent",
            "int": "count", "bool": "bool"}.get(kind, "text")


def format_option(option: str, value: Any) -> str:
    """A VM's option value in its unit: 524288 of sbct is '512.0 KiB', 40 of acful is '40%',
    erts's infinite (`~0`) is 'infinity', the one way every output says it (issue 26 item 2),
    an absent option '-'."""
    if value is None:
        return "-"
    unit = option_unit(option)
    if isinstance(value, bool) or unit == "bool":
        return "true" if value else "false"
    if isinstance(value, int):
        if value >= fl.UINT_MAX:
            return "infinity"
        if unit == "bytes":
            return human(value)
        if unit == "percent":
            return f"{value} %"  # the one percent style (docs/design.md "Conventions")
        return f"{value:,}"
    return str(value)
