"""Read recon_alloc snapshot files and raw allocator dumps (docs/erts/recon-formulas.md §3).

Accepted terms, each written as one `~p.` term:

* Format A, what `recon_alloc:snapshot_save/1` writes: `{erlang:memory(), [{{Alloc, N}, Props}]}`
  with recon's normalized props (§0.2);
* Format B, a hand-made dump:
  `{erlang:memory(), [{Alloc, erlang:system_info({allocator, Alloc})}]}`,
  which recon itself loads but then crashes on (§5, bug 4) — normalized here;
* a bare `erlang:system_info({allocator, Alloc})` result for one allocator, whose name is read from
  its call counters (`{binary_alloc, G, N}` names binary_alloc).
"""

from __future__ import annotations

from typing import Any

from beamalloc.collector.system_info import (
    FormatError,
    add_allocator,
    add_system_info,
    memory_from_term,
)
from beamalloc.collector.terms import format_term, parse_term, proplist
from beamalloc.snapshot import ALLOCATOR_NAME, Snapshot, describe


def _single_allocator_name(info: list) -> str:
    for entry in info:
        calls = proplist(proplist(entry[2] if len(entry) == 3 else []).get("calls", []))
        for name in calls:
            if name.endswith("_alloc") and name not in ("mseg_alloc", "sys_alloc"):
                return name
    raise FormatError("a bare allocator dump whose call counters do not name its allocator")


def snapshot_from_term(term: Any, node: str, taken_at: float | None) -> Snapshot:
    snap = Snapshot(node=node, source="recon", taken_at=taken_at, raw=format_term(term))
    if (
        isinstance(term, list)
        and term
        and all(isinstance(e, tuple) and len(e) == 3 and e[0] == "instance" for e in term)
    ):
        name = _single_allocator_name(term)
        add_system_info(snap, name, term)
        snap.notes.append(
            f"a single-allocator dump ({name}): no erlang:memory(), no other allocators"
        )
        return snap
    if not (isinstance(term, tuple) and len(term) == 2 and isinstance(term[1], list)):
        raise FormatError(
            "not a recon snapshot: expected {erlang:memory(), Allocators} "
            "(recon_alloc:snapshot_save/1) or an allocator dump"
        )
    memory, allocs = term
    snap.memory = memory_from_term(memory)
    for i, entry in enumerate(allocs):
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise FormatError(f"allocator entry {i + 1} is not a {{Key, Props}} pair")
        key, props = entry
        name = key[0] if isinstance(key, tuple) and len(key) == 2 else key
        if isinstance(name, str) and not ALLOCATOR_NAME.match(name):
            raise FormatError(f"allocator entry {i + 1}: not an allocator name")
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
            if not isinstance(key[1], int):
                raise FormatError(f"allocator entry {i + 1} has {describe(key[1])} as instance")
            add_allocator(snap, str(key[0]), key[1], props)  # Format A
        elif isinstance(key, str):
            add_system_info(snap, str(key), props)  # Format B
        else:
            raise FormatError(f"allocator entry {i + 1} has {describe(key)} as key")
    if not snap.allocators:
        raise FormatError("the snapshot holds no alloc_util allocator")
    return snap


def read_recon(text: str, node: str, taken_at: float | None) -> Snapshot:
    return snapshot_from_term(parse_term(text, final_dot=False), node, taken_at)
