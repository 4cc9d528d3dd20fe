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
