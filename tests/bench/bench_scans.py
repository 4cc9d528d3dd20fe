"""Bench: what the watch's process scans cost (timeseries/scans.py): prints, asserts nothing.

    .venv/bin/python tests/bench/bench_scans.py [--nodes 20] [--seconds 6]

1. Stored bytes per scan: samples/workloads/holders.erl with 50 and with 20,000 idle workers,
   one scan each (processes.scan_node), its row as the store keeps it (scans.encode).
2. A watch of `--nodes` idle nodes at a 1 s interval for `--seconds`, twice each way, without
   scans (the floor: --processes-every 0) and with the default (every node scanned on its first
   sample): our CPU time, the scans stored, and per tick the nodes sampled and the spread
   between the first and last sample. Ratios are against the floor of the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sqlite3
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from otp import SYSTEM, start_workload  # noqa: E402

from beamalloc.collector import processes  # noqa: E402
from beamalloc.limits import PROCESSES_EVERY  # noqa: E402
from beamalloc.timeseries import scans  # noqa: E402
from beamalloc.timeseries.watch import Watcher  # noqa: E402


def stored_bytes() -> None:
    for workers in ("50", "20000"):
        env = {"ROUTER": "20000", "CACHE": "5000", "PEAK": "10000", "WORKERS": workers}
        with start_workload(SYSTEM, "holders", env=env) as w:
            w.wait_ready(timeout=300)
            t0 = time.monotonic()
            t = processes.scan_node(w.node, w.cookie, timeout=60)
            took = time.monotonic() - t0
        blob = scans.encode(t)
        print(f"{t.count:>6} processes: scan {took:.2f} s, {len(t.procs)} records, "
              f"{len(t.groups)} groups; stored {len(blob):,} B "
              f"({len(zlib.decompress(blob)):,} B of JSON)")


def watch(names: list[str], cookie: str, every: float, seconds: float) -> dict[str, object]:
    d = tempfile.mkdtemp(prefix="bench-scans-")
    with open(os.devnull, "w") as out:
        w = Watcher(names, cookie, store_path=f"{d}/w.db", interval=1.0, timeout=1.0, out=out,
                    processes_every=every)
        cpu = time.process_time()
        w.run(seconds)
        cpu = time.process_time() - cpu
    with sqlite3.connect(f"{d}/w.db") as db:
        n = db.execute("SELECT count(*) FROM process_scans").fetchone()[0]
    ticks = w.intervals()[:int(seconds)]
    return {"cpu": cpu, "scans": n, "sampled": [i["samples"] for i in ticks],
            "spread": [round(i["spread"], 2) for i in ticks]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    stored_bytes()
    spec = importlib.util.spec_from_file_location("bench_watch", HERE / "bench_watch.py")
    assert spec and spec.loader
    bw = importlib.util.module_from_spec(spec)
    sys.modules["bench_watch"] = bw
    spec.loader.exec_module(bw)
    fleet = bw.Fleet()
    try:
        names = fleet.start(args.nodes)
        runs = [(every, watch(names, fleet.cookie, every, args.seconds))
                for every in (0, PROCESSES_EVERY, 0, PROCESSES_EVERY)]
    finally:
        fleet.stop()
    floor = min(r["cpu"] for e, r in runs if e == 0)
    for every, r in runs:
        print(f"--processes-every {every:g}: our CPU {r['cpu']:.2f} s ({r['cpu'] / floor:.2f}x "
              f"the floor), {r['scans']} scans stored; per tick sampled {r['sampled']}, "
              f"spread {r['spread']} s")


if __name__ == "__main__":
    main()
