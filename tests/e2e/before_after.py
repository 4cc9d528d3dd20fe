"""Must-hold 5 of issue 3, measured on real nodes: run a workload, recommend, restart it with the
recommended flags (appended after the node's own, as the paste block says), measure again.

Run `.venv/bin/python tests/e2e/before_after.py` to print the before/after table;
tests/e2e/test_recommend_e2e.py asserts on the same measurements.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from beamalloc.advice.recommend import recommend
from beamalloc.analyzer import metrics as m
from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector.live import snapshot_node
from beamalloc.snapshot import Snapshot

#: (workload, flags the node runs with, the allocator the advice is about)
CASES = (
    ("binspike", "+MBas bf", "binary_alloc"),  # an old configuration: migration off
    ("binspike", "", "binary_alloc"),  # OTP defaults
    ("frag", "", "binary_alloc"),  # workload (a) of the demo, OTP defaults
)


def future_pct(prediction: dict[str, Any] | None, name: str) -> float | None:
    """A prediction's future `name` ("turnover", "kept") as a change of the unused bytes, in %
    (churn.py and matrix.py read both futures of an UNDECIDED verdict)."""
    for f in (prediction or {}).get("futures") or ():
        if f["name"] == name:
            return -100.0 * f["unused_saving"]
    return None


def run(module: str, flags: str, env: dict[str, str] | None = None) -> Snapshot:
    with WorkloadNode(module, extra_args=flags.split(), env=env) as wl:
        wl.wait_ready()
        return snapshot_node(wl.node, wl.cookie, timeout=60.0)


def run_node_twice(module: str) -> tuple[Snapshot, Snapshot]:
    """Two snapshots of one idle workload node, a second apart."""
    with WorkloadNode(module) as wl:
        wl.wait_ready()
        first = snapshot_node(wl.node, wl.cookie, timeout=60.0)
        time.sleep(1.0)  # an interval between the reads, not a wait for anything
        return first, snapshot_node(wl.node, wl.cookie, timeout=60.0)


def carriers(snap: Snapshot, allocator: str) -> tuple[int, int]:
    """(allocated, unused) carrier bytes of one allocator, recon's current values."""
    insts = snap.instances(allocator)
    allocated = sum(m.container_size(i, "current", "carriers_size") for i in insts)
    used = sum(m.container_size(i, "current", "blocks_size") for i in insts)
    return allocated, allocated - used


@dataclass
class Row:
    workload: str
    flags: str
    recommended: str
    rules: str
    allocator: str
    before: tuple[int, int]  # (allocated, unused) of the allocator
    after: tuple[int, int]
    total_before: int  # all allocators (recon's allocated)
    total_after: int
    rss_before: int | None
    rss_after: int | None

    @property
    def unused_drop(self) -> float:
        return 1 - self.after[1] / self.before[1] if self.before[1] else 0.0

    @property
    def footprint_change(self) -> float:
        return self.total_after / self.total_before - 1


def flags_to_measure(rec: dict) -> tuple[str, str]:
    """(flags, rules): the advised flags, or where none passed (issue 17: a snapshot without
    carrier data is judged on its worst case) the held-back memory flags, to measure what the
    verdict held back."""
    if rec["emulator_flags"]:
        return rec["emulator_flags"], ",".join(sorted({r["rule"] for r in rec["recommendations"]}))
    held = [h for h in rec["held_back"] if h["rule"] in ("R3", "R4", "R5")]
    return " ".join(h["flags"] for h in held), ",".join(h["rule"] + " (held back)" for h in held)


def measure(module: str, flags: str, allocator: str) -> Row:
    before = run(module, flags)
    rec = recommend(before)
    tested, rules = flags_to_measure(rec)
    new_flags = f"{flags} {tested}".strip()
    after = run(module, new_flags) if tested else before
    return Row(module, flags or "(defaults)", tested, rules, allocator,
               carriers(before, allocator), carriers(after, allocator),
               int(m.memory(before, "allocated")), int(m.memory(after, "allocated")),
               before.rss, after.rss)  # fmt: skip


def table(rows: list[Row]) -> str:
    mib = 1 << 20
    out = ["| workload | node's flags | recommended (rules) | allocator | unused before → after "
           "| unused drop | allocated (all) before → after | change | RSS before → after |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        rss = (f"{r.rss_before / mib:.0f} → {r.rss_after / mib:.0f} MiB"
               if r.rss_before and r.rss_after else "-")  # fmt: skip
        out.append(
            f"| {r.workload} | `{r.flags}` | `{r.recommended}` ({r.rules}) | {r.allocator} | "
            f"{r.before[1] / mib:.1f} → {r.after[1] / mib:.1f} MiB | {100 * r.unused_drop:.0f} % "
            f"| {r.total_before / mib:.1f} → {r.total_after / mib:.1f} MiB "
            f"| {100 * r.footprint_change:+.1f} % | {rss} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    print(table([measure(*case) for case in CASES]))
    sys.exit(0)
