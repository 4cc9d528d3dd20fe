"""Issue 17 item 8, measured on real nodes: a workload runs under the node's flags, its
snapshot (carrier data included) gives a carrier-seeded prediction for a candidate flag set,
the workload runs again under those flags, and the measured change in the allocator's unused
bytes is set against the predicted one.

Run `.venv/bin/python tests/e2e/seeded.py` to print the table that docs/recommend.md shows;
tests/e2e/test_seeded_e2e.py asserts on the same measurements.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from before_after import carriers, run

from beamalloc.advice.findings import facts
from beamalloc.advice.predict import Predictor
from beamalloc.flags import parse
from beamalloc.snapshot import Snapshot

#: (workload, allocator, rule, candidate flags): the flags each rule proposes for the shape,
#: and for the heap peak the pair an R7 reading of its lifetime counters once proposed.
CASES = (
    ("binspike", "binary_alloc", "R3", "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512"),
    ("heapchurn", "eheap_alloc", "R4", "+MHas ageffcbf +MHlmbcs 1024"),
    ("frag", "binary_alloc", "R3", "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512"),
    ("scatter", "binary_alloc", "R3", "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512"),
    ("heappeak", "eheap_alloc", "R7", "+MHsbct 8192 +MHlmbcs 32768"),
)


@dataclass
class Seeded:
    workload: str
    allocator: str
    flags: str
    prediction: dict[str, Any]
    before: tuple[int, int]  # (allocated, unused) of the allocator, measured
    after: tuple[int, int]
    snapshot: Snapshot  # the node before, under its own flags

    @property
    def predicted_pct(self) -> float:
        return float(self.prediction["change_pct"]["unused"])

    @property
    def measured_pct(self) -> float:
        return 100.0 * (self.after[1] - self.before[1]) / self.before[1]


def predict(snap: Snapshot, allocator: str, rule: str, flags: str) -> dict[str, Any]:
    with Predictor(snap, facts(snap)) as pr:
        return pr.predict(allocator, rule, parse(flags, otp=pr.base.otp))


def seeded(workload: str, allocator: str, rule: str, flags: str) -> Seeded:
    before = run(workload, "")
    after = run(workload, flags)
    return Seeded(workload, allocator, flags, predict(before, allocator, rule, flags),
                  carriers(before, allocator), carriers(after, allocator), before)  # fmt: skip


def table(rows: list[Seeded]) -> str:
    mib = 1 << 20
    out = ["| workload | allocator | flags | seeded from (calibration error) | predicted unused "
           "(band; the replay's bytes) | measured unused | difference |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        p = r.prediction
        lo, hi = p["band"]["unused_pct"]
        cal = (p.get("calibration") or {}).get("error")
        out.append(
            f"| {r.workload} | {r.allocator} | `{r.flags}` | {p['seeded_from']} "
            f"({'-' if cal is None else f'{cal:.2f}'}) | {r.predicted_pct:+.0f} % "
            f"({lo:+.0f} to {hi:+.0f}; {p['before']['unused'] / mib:.1f} → "
            f"{p['after']['unused'] / mib:.1f} MiB) | {r.before[1] / mib:.1f} → "
            f"{r.after[1] / mib:.1f} MiB ({r.measured_pct:+.0f} %) | "
            f"{r.predicted_pct - r.measured_pct:+.0f} points |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    print(table([seeded(*case) for case in CASES]))
    sys.exit(0)
