"""`watch` on a fleet of real nodes on this machine (issue 13, item 3): prints, asserts nothing
about times.

    .venv/bin/python tests/bench/bench_watch.py [--nodes 100] [--interval 5] [--intervals 12]

Starts `--nodes` small BEAM nodes (`+S 1`, ~30 MB each) under one cookie and watches them with
one Watcher (timeseries/watch.py) into a store, serving /metrics. While it runs, by tick of the
common grid: one node flaps (SIGSTOP for two intervals, SIGCONT, and again), some die (SIGKILL),
some leave (SIGTERM, a clean stop) and some join (started, then `watch_node`). A thread scrapes
/metrics every 0.25 s throughout, store writes included. Printed: per interval the nodes
sampled of those that were up, and the spread between its first and last sample (sample times
as the nodes took them); the nodes that missed an interval they were up for; the samples taken,
written and found in the store; each node's gaps; the scrape times.

tests/live/test_watch.py runs the same scenario (`run`) with a few nodes and asserts on it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beamalloc.timeseries.prometheus import serve
from beamalloc.timeseries.store import Store
from beamalloc.timeseries.watch import Watcher

HOST = socket.gethostname().split(".")[0]


@dataclass
class Fleet:
    cookie: str = field(default_factory=lambda: f"C{secrets.token_hex(12)}")
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, count: int) -> list[str]:
        names = [f"fleet_{secrets.token_hex(3)}_{i}" for i in range(count)]
        for n in names:
            self.procs[f"{n}@{HOST}"] = subprocess.Popen(
                ["erl", "-sname", n, "-setcookie", self.cookie, "-noshell", "+S", "1"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
        want = {f"{n}@{HOST}" for n in names}
        deadline = time.monotonic() + 60 + count
        while want - self.registered():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(want - self.registered())} nodes did not start")
            time.sleep(0.2)
        return sorted(want)

    @staticmethod
    def registered() -> set[str]:
        out = subprocess.run(["epmd", "-names"], capture_output=True, text=True).stdout
        return {f"{line.split()[1]}@{HOST}" for line in out.splitlines()
                if line.startswith("name ")}

    def signal(self, node: str, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[node].pid, sig)

    def stop(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs.values():
            p.wait()


def run(nodes: int, interval: float, intervals: int, store: Path) -> dict[str, Any]:
    """The scenario; returns what bench and test read (see the module's docstring)."""
    fleet = Fleet()
    try:
        return _run(fleet, nodes, interval, intervals, store)
    finally:
        fleet.stop()


def _run(fleet: Fleet, nodes: int, interval: float, intervals: int, store: Path
         ) -> dict[str, Any]:
    k = max(1, nodes // 25)
    t = time.perf_counter()
    names = fleet.start(nodes)
    boot = time.perf_counter() - t
    flapper, dying, leaving = names[0], names[1:1 + k], names[1 + k:1 + 2 * k]
    w = Watcher(names, fleet.cookie, store_path=str(store), interval=interval,
                timeout=interval, out=open(os.devnull, "w"))  # noqa: SIM115
    server, port = serve("127.0.0.1:0", lambda: dict(w.status))
    scrapes: list[float] = []
    scrape_errors: list[str] = []

    def scrape() -> None:
        while not w.stop.is_set():
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                    r.read()
                scrapes.append(time.perf_counter() - t)
            except OSError as e:
                scrape_errors.append(str(e))
            w.stop.wait(0.25)

    # down[node] = (first tick it may miss, first tick it must be sampled again or None)
    down: dict[str, tuple[int, int | None]] = {}
    joined: dict[str, int] = {}

    def script() -> None:
        def at(tick: int) -> bool:  # wait for a moment inside `tick` (after its samples)
            return not w.stop.wait(w._t0 + (tick + 0.5) * interval - time.monotonic())

        if not at(2):
            return
        fleet.signal(flapper, signal.SIGSTOP)
        if not at(4):
            return
        fleet.signal(flapper, signal.SIGCONT)
        down[flapper] = (3, 6)
        for n in dying:
            fleet.signal(n, signal.SIGKILL)
            down[n] = (5, None)
        if not at(5):
            return
        fleet.signal(flapper, signal.SIGSTOP)
        for n in leaving:
            fleet.signal(n, signal.SIGTERM)
            down[n] = (6, None)
        new = fleet.start(k)
        for n in new:
            joined[n] = int((time.monotonic() - w._t0) / interval) + 2  # sampled from here
            w.watch_node(n)
        if not at(7):
            return
        fleet.signal(flapper, signal.SIGCONT)
        down[flapper] = (3, 9)

    threading.Thread(target=scrape, daemon=True).start()
    t = time.perf_counter()
    w.run(duration=intervals * interval + 0.5 * interval,
          on_start=threading.Thread(target=script, daemon=True).start)
    ran = time.perf_counter() - t
    server.shutdown()
    ticks = [x for x in w.intervals() if x["tick"] < intervals]
    missed: dict[int, list[str]] = {}
    for x in ticks:
        for n in list(names) + list(joined):
            if n in joined and x["tick"] < joined[n]:
                continue
            lo, hi = down.get(n, (10**9, None))
            if lo - 1 <= x["tick"] and (hi is None or x["tick"] < hi):
                continue  # down (or going down) in this interval: a gap in its own series
            if n not in x["nodes"]:
                missed.setdefault(x["tick"], []).append(n)
    with Store(store, readonly=True) as st:
        stored = {n["node"]: n["samples"] for n in st.list_nodes()}
        gaps = {n: st.gaps(n) for n in stored}
    return {"nodes": nodes, "interval": interval, "boot": boot, "ran": ran, "ticks": ticks,
            "missed": missed, "taken": sum(s.samples for s in w.status.values()),
            "written": w.written, "stored": stored, "gaps": gaps, "flapper": flapper,
            "dying": dying, "leaving": leaving, "joined": sorted(joined), "scrapes": scrapes,
            "scrape_errors": scrape_errors, "batches": w.batches, "names": names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--intervals", type=int, default=12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        r = run(args.nodes, args.interval, args.intervals, Path(d) / "watch.db")
    print(f"watch bench: {r['nodes']} nodes (+S 1) started in {r['boot']:.1f} s, watched every "
          f"{r['interval']:g} s for {r['ran']:.0f} s; flapping {r['flapper']}, "
          f"{len(r['dying'])} killed, {len(r['leaving'])} left, {len(r['joined'])} joined")
    for x in r["ticks"]:
        miss = r["missed"].get(x["tick"], [])
        print(f"  interval {x['tick']:2d}: {x['samples']:4d} nodes sampled, spread "
              f"{x['spread'] * 1000:6.0f} ms (requests sent over {x['asked'] * 1000:5.0f} ms)"
              + (f", MISSED {len(miss)}: {miss[:3]}" if miss else ""))
    spreads = [x["spread"] for x in r["ticks"]]
    ok = not r["missed"]
    print(f"  every node up sampled in every interval: {'yes' if ok else 'NO'}; spread median "
          f"{statistics.median(spreads) * 1000:.0f} ms, max {max(spreads) * 1000:.0f} ms")
    stored = sum(r["stored"].values())
    print(f"  samples taken {r['taken']}, written {r['written']}, in the store {stored} "
          f"({r['batches']} batches) -> "
          f"{'nothing lost' if r['taken'] == r['written'] == stored else 'LOST'}")
    gapped = {n: len(g) for n, g in r["gaps"].items() if g}
    expected = {r["flapper"], *r["dying"], *r["leaving"]}
    print(f"  gaps: {gapped}; gaps on other nodes: "
          f"{sorted(set(gapped) - expected) or 'none'}")
    sc = sorted(r["scrapes"])
    print(f"  /metrics scraped {len(sc)} times during the run: median "
          f"{statistics.median(sc) * 1000:.0f} ms, max {sc[-1] * 1000:.0f} ms, "
          f"{len(r['scrape_errors'])} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
