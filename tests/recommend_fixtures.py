"""Real snapshots of the workloads in samples/workloads/ (OTP 25.2.3, 2 schedulers, taken live
after each workload settled), and small edits of them for the rule tests' edge cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Snapshot, Triple

SNAPS = Path(__file__).resolve().parent.parent / "samples" / "workloads" / "snapshots"
WORKLOADS = ("binspike", "binspike_bf", "bigbin", "etschurn", "heapchurn", "healthy")


def load(name: str) -> Snapshot:
    return read_file(str(SNAPS / f"{name}.json"))


def set_usage(snap: Snapshot, usage: float) -> Snapshot:
    """Shrink every carrier so that blocks fill `usage` of it (the pool emptied into mbcs)."""
    for inst in snap.allocators:
        for cs in (inst.mbcs, inst.sbcs):
            cur = int(cs.block_size.current / usage)
            cs.carriers_size = Triple(cur, cur, max(cur, cs.carriers_size.max))
        if inst.mbcs_pool is not None:
            inst.mbcs_pool = dataclasses.replace(inst.mbcs_pool, carriers=0, carriers_size=0,
                                                 blocks={})  # fmt: skip
    return snap


def earlier_snapshot(name: str, allocs: int, seconds: float = 5.0) -> Snapshot:
    """An earlier read of snapshot `name`: `seconds` before it, with `allocs` fewer binary_alloc
    alloc calls on its scheduler instances (what a node under load makes between two reads)."""
    snap = load(name)
    scheds = [i for i in snap.instances("binary_alloc") if i.instance >= 1]
    for k, inst in enumerate(scheds):
        share = allocs // len(scheds) + (k < allocs % len(scheds))
        inst.calls = {**inst.calls, "binary_alloc": inst.calls.get("binary_alloc", 0) - share}
    assert snap.taken_at is not None
    snap.taken_at -= seconds
    return snap


def earlier(name: str, path: Path, allocs: int, seconds: float = 5.0) -> Path:
    """earlier_snapshot() written to `path`, for `recommend SNAP --rate-from EARLIER` to measure
    the turnover."""
    path.write_text(earlier_snapshot(name, allocs, seconds).to_json())
    return path
