"""Bench: `recommend` with predictions seeded from the node's carriers (issue 17 item 10).

    .venv/bin/python tests/bench/bench_recommend.py [--runs N] [--burst B]

One real node runs the scatter workload scaled up (2 x B binaries of 1-3 KB, a random 5 % kept)
with +MBlmbcs 1024: about 2.3 GiB of binary_alloc in 2,000 or more carriers of 1 MiB at
B = 600,000, every one pinned. A live snapshot with its carrier data is taken once; then
recommend() runs N times on it with the carriers (the seeded replay) and N times on the same
snapshot without them (the counters' fitted models), alternated: medians, their ratio, and
the seeded replay's size.
Goal: the seeded recommend within 5 s on this machine. A plain script, not a test: tests never
assert wall-clock times.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

from beamalloc.analyzer.recommend import recommend
from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector.live import snapshot_node


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burst", type=int, default=600_000)
    args = ap.parse_args()
    with WorkloadNode("scatter", ["+MBlmbcs", "1024"], {"BURST": str(args.burst)}) as wl:
        wl.wait_ready(timeout=600)
        t = time.perf_counter()
        snap = snapshot_node(wl.node, wl.cookie, timeout=120.0)
        snap_s = time.perf_counter() - t
    cs = snap.carriers_of("binary_alloc")
    print(f"node: scatter x {args.burst}, binary_alloc {sum(c.size for c in cs) / 2**30:.2f} GiB "
          f"in {len(cs)} carriers (snapshot with carriers {snap_s:.2f} s)")
    bare = dataclasses.replace(snap, carriers=None)
    times: dict[str, list[float]] = {"seeded": [], "counters": []}
    result = None
    for _ in range(args.runs):
        for label, s in (("seeded", snap), ("counters", bare)):
            t = time.perf_counter()
            r = recommend(s)
            times[label].append(time.perf_counter() - t)
            if label == "seeded":
                result = r
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"recommend, {k:8}: median {med[k]:.2f} s over {len(v)} runs "
              f"({', '.join(f'{x:.2f}' for x in v)})")
    print(f"ratio seeded / counters: {med['seeded'] / med['counters']:.2f}")
    assert result is not None
    for f in result["findings"]:
        p = f.get("predicted")
        if p and p.get("seeded_from") == "carriers":
            print(f"{f['rule']} {f['allocator']}: {p['model']['events']} events per replay, "
                  f"{p['band']['variants']} variants")
    print(f"goal: seeded recommend within 5 s: {'met' if med['seeded'] <= 5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
