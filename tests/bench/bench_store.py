"""Store figures: the write rate for a fleet (1,000 nodes at 5 s: >= 2,000 samples/s?), bytes per
sample (a year of 1-minute samples of 10 nodes < 1 GB?) and the time to load and summarize a
24-hour series at 1 s (< 5 s?).

    .venv/bin/python tests/bench/bench_store.py [--days 1] [--schedulers 8] [--fleet-minutes 10]
        [--only fleet,year,day] [--snapshots FILE]

`--snapshots FILE` keeps the recorded snapshots (JSON lines) and plays them again in a later run:
two runs of one store version, or two versions, then compare the same data.

Fleet: real snapshots of a `+S 1` node, then of a `+S 8` node (4x the snapshot), each played
as 1,000 nodes sampled every 5 s for 31 minutes (so every node's rows are chunked once and a
snapshot kept at 30 min), written as watch's writer writes them: one batch (transaction) per
interval, the rules evaluated every 30 s per node (their findings stored with the sample). The
rate is printed per wall second and per CPU second of this process (the machine is shared),
beside a baseline of the unbatched write path in the same run; then the CPU per sample at
`+S 8` over the one at `+S 1` (issue 28 item 5: the per-sample cost independent of the
snapshot's size; 1.0 would be fully independent). derive() runs in watch's pollers, not its
writer: its cost per sample is printed beside.

The snapshots are real: a node with `+S N` runs a workload that allocates and frees binaries and
ETS entries on every scheduler while one Session samples it; that recorded sequence then plays 10
nodes' 1-minute samples through Store.add_sample (the same path `watch` takes). The year figure is
the measured bytes per sample times 5,256,000 samples; the simulated days carry each node's fixed
costs (the unchunked rows, the key snapshots), so a short simulation overstates it, if anything.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from beamalloc.collector.session import Session
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import FINDINGS_EVERY, active_findings, derive, summarize
from beamalloc.timeseries.store import Store

YEAR_SAMPLES = 10 * 365 * 24 * 60
WORKLOAD = (
    "[spawn(fun() -> T = ets:new(t, [public]), "
    " (fun F(N) -> ets:insert(T, {N rem 4000, binary:copy(<<1>>, 64 + (N * 7919) rem 90000)}),"
    "  [ets:delete(T, (N * 31) rem 4000) || N rem 3 =:= 0],"
    "  [timer:sleep(1) || N rem 200 =:= 0], F(N + 1) end)(0) end) || _ <- lists:seq(1, 8)]"
)


def record(n: int, schedulers: int) -> list:
    """`n` real snapshots of a busy node, 0.25 s apart."""
    name, cookie = f"bench_{secrets.token_hex(4)}", f"C{secrets.token_hex(12)}"
    host = socket.gethostname().split(".")[0]
    proc = subprocess.Popen(["erl", "-sname", name, "-setcookie", cookie, "-noshell",
                             "+S", str(schedulers), "-eval", WORKLOAD],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(2)
        snaps = []
        with Session(cookie) as s:
            while len(snaps) < n:
                try:
                    snaps.append(s.snapshot(f"{name}@{host}", 10))
                except Exception:  # the node still booting
                    if proc.poll() is not None:
                        raise
                time.sleep(0.25)
        return snaps
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def recorded(path: Path | None, n: int, schedulers: int) -> list:
    """`record(n, schedulers)`, or the snapshots an earlier run kept in `path`."""
    if path is not None and path.exists():
        with path.open() as f:
            snaps = [Snapshot.from_json(line) for line in f if line.strip()]
        if len(snaps) >= n and snaps[0].schedulers == schedulers:
            return snaps[:n]
    snaps = record(n, schedulers)
    if path is not None:
        path.write_text("".join(s.to_json() + "\n" for s in snaps))
    return snaps


def page_fill(db: sqlite3.Connection) -> str:
    """Per table and index, its pages, payload and unused bytes (SQLite's dbstat): where the
    file's pages go, and how full they are."""
    rows = db.execute("SELECT name, count(*), sum(pgsize), sum(payload), sum(unused) FROM dbstat"
                      " GROUP BY name ORDER BY sum(pgsize) DESC").fetchall()
    return "\n".join(f"    {name:28} {pages:6} pages {size / 1e6:8.3f} MB, payload "
                      f"{payload / 1e6:8.3f} MB, unused {unused / 1e6:7.3f} MB "
                      f"({unused / size:.0%})" for name, pages, size, payload, unused in rows)


def bench_year(snaps: list, days: float, path: Path) -> None:
    points = [derive(s) for s in snaps]
    per_node = int(days * 24 * 60)
    t0 = time.time() - days * 86400
    start = time.perf_counter()
    half = per_node // 2
    with Store(path) as st:
        for i in range(per_node):
            if i == half:  # from here on, what the store grows by per sample
                st.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                size_half = st.size()
            for k in range(10):
                j = (i + 7 * k) % len(snaps)  # each node at its own place in the sequence
                s = snaps[j]
                s.node, s.taken_at = f"node{k}@bench", t0 + i * 60 + k
                st.add_sample(s, points[j])
        wrote = time.perf_counter() - start
        st.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = os.path.getsize(path)
        live = st.size()
        derived = st.db.execute("SELECT coalesce(sum(length(data)), 0) FROM chunks").fetchone()[0]
        recent = st.db.execute("SELECT coalesce(sum(length(data)), 0) FROM recent").fetchone()[0]
        snap_bytes, kept, keys = st.db.execute(
            "SELECT sum(length(data)), sum(kept), sum(base IS NULL) FROM snapshots").fetchone()
        fill = page_fill(st.db)
    n = per_node * 10
    per = (live - size_half) / ((per_node - half) * 10)
    print(f"year bench: {n} samples (10 nodes x {days:g} days at 1 min), {len(snaps)} recorded "
          f"snapshots of {len(snaps[0].to_json())} B JSON each, written in {wrote:.1f} s "
          f"({n / wrote:.0f} samples/s)")
    print(f"  file {size} B ({live} B in use): chunked series {derived / n:.1f} B/sample, "
          f"unchunked rows {recent} B, snapshots {snap_bytes / n:.1f} B/sample "
          f"({kept} kept, {keys} keys), the rest SQLite pages, indexes and free pages")
    print(f"  growth over the second half: {per:.1f} B/sample")
    print(f"  pages in use by table and index:\n{fill}")
    year = size + per * (YEAR_SAMPLES - n)
    print(f"  a year of 1-minute samples of 10 nodes ({YEAR_SAMPLES} samples): "
          f"{year / 1e9:.3f} GB -> {'under' if year < 1e9 else 'OVER'} 1 GB")


def _play(snaps: list, points: list, found: list, path: Path, nodes: int, ticks: int,
          interval: float, batched: bool, latest_every: float) -> tuple[float, float, int]:
    """Write `ticks` intervals of `nodes` nodes; returns (wall s, CPU s, snapshots stored)."""
    every = round(FINDINGS_EVERY / interval)
    t0 = time.time() - ticks * interval
    names = [f"fleet{k:04d}@bench" for k in range(nodes)]
    stored = 0
    wall, cpu = time.perf_counter(), time.process_time()
    with Store(path, latest_every=latest_every) as st:
        for i in range(ticks):
            with st.batch() if batched else contextlib.nullcontext():
                for k, name in enumerate(names):
                    j = (i + 7 * k) % len(snaps)
                    s = snaps[j]
                    s.node, s.taken_at = name, t0 + i * interval + k * 0.001
                    sid = st.add_sample(s, points[j], findings=found[j] if (i + k) % every == 0
                                        else None)  # fmt: skip
                    stored += sid is not None
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        listed = st.list_nodes()
    assert len(listed) == nodes and sum(x["samples"] for x in listed) == ticks * nodes
    return wall, cpu, stored


def bench_fleet(snaps: list, minutes: float, path: Path, nodes: int = 1000,
                interval: float = 5.0) -> float:
    """Prints the fleet's figures; returns the CPU seconds per sample."""
    t = time.process_time()
    points = [derive(s) for s in snaps]
    derive_ms = (time.process_time() - t) / len(snaps) * 1000
    t = time.process_time()
    found = [dict(zip(("findings", "lint"), active_findings(s), strict=True)) for s in snaps]
    rules_ms = (time.process_time() - t) / len(snaps) * 1000
    ticks = int(minutes * 60 / interval)
    wall, cpu, stored = _play(snaps, points, found, path, nodes, ticks, interval, True, 60.0)
    n = ticks * nodes
    # The baseline, same data, same process: the write path before batching (a transaction
    # per sample, the snapshot of every sample encoded), over fewer intervals.
    bticks = max(2, ticks // 20)
    bwall, bcpu, _ = _play(snaps, points, found, path.with_suffix(".base"), nodes, bticks,
                           interval, False, 0.0)
    bn = bticks * nodes
    rate, crate = n / wall, n / cpu
    verdict = ("at least" if rate >= 2000 else "CPU at least" if crate >= 2000 else "UNDER")
    print(f"fleet bench: {n} samples ({nodes} nodes x {ticks} intervals of {interval:g} s), "
          f"{len(snaps[0].to_json())} B snapshots of a +S {snaps[0].schedulers} node, "
          f"written in {wall:.1f} s "
          f"({cpu:.1f} s of CPU): {rate:.0f} samples/s, {crate:.0f} per CPU second -> "
          f"{verdict} 2,000 samples/s")
    print(f"  baseline, a transaction and a snapshot per sample ({bn} samples): "
          f"{bn / bwall:.0f} samples/s, {bn / bcpu:.0f} per CPU second -> batched "
          f"{rate / (bn / bwall):.1f}x (wall), {crate / (bn / bcpu):.1f}x (CPU)")
    print(f"  {stored} snapshots encoded ({stored / n:.1%} of samples: kept, or a node's latest "
          f"refreshed every 60 s); {ticks} batches of {nodes} samples")
    print(f"  on the pollers, per sample: derive() {derive_ms:.2f} ms of CPU; rules and lint "
          f"{rules_ms:.2f} ms every {FINDINGS_EVERY:g} s")
    return cpu / n


def bench_day(snaps: list, path: Path) -> None:
    points = [derive(s) for s in snaps]
    node = "day@bench"
    t0 = time.time() - 86400
    with Store(path) as st:
        batch = []
        for i in range(86400):
            batch.append((t0 + i, points[i % len(points)]))
            if len(batch) == 3600:
                st.add_points(node, batch)
                batch = []
    with Store(path, readonly=True) as st:
        start = time.perf_counter()
        series = st.series(node, max_points=None)
        loaded = time.perf_counter() - start
        summary = summarize(series)
        total = time.perf_counter() - start
        start = time.perf_counter()
        down = st.series(node, max_points=1000)
        downsampled = time.perf_counter() - start
    b = summary["types"]["binary_alloc"]
    print(f"day bench: {len(series['t'])} samples at 1 s of one node: loaded in {loaded:.2f} s, "
          f"loaded and summarized in {total:.2f} s -> {'under' if total < 5 else 'OVER'} 5 s; "
          f"downsampled to {len(down['t'])} points in {downsampled:.2f} s")
    print(f"  binary_alloc usage min/median/max {b['usage_min']:.3f}/{b['usage_median']:.3f}/"
          f"{b['usage_max']:.3f}, peak unused {b['peak_unused']} B; "
          f"{len(summary['types'])} allocator types summarized")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=1.0, help="days of 10 nodes to simulate")
    ap.add_argument("--schedulers", type=int, default=8, help="+S of the recorded node")
    ap.add_argument("--recorded", type=int, default=60, help="real snapshots to record")
    ap.add_argument("--fleet-minutes", type=float, default=31.0,
                    help="minutes of 1,000 nodes at 5 s to simulate")
    ap.add_argument("--only", default="fleet,year,day",
                    help="which benches, comma-separated (fleet, year, day)")
    ap.add_argument("--snapshots", type=Path,
                    help="keep the recorded snapshots here, and play them again if there")
    args = ap.parse_args()
    only = set(args.only.split(","))
    keep = args.snapshots
    snaps = recorded(keep, args.recorded, args.schedulers)
    if "fleet" in only:
        small = recorded(keep and keep.with_suffix(".s1" + keep.suffix), 20, 1)
        with tempfile.TemporaryDirectory() as d:
            one = bench_fleet(small, args.fleet_minutes, Path(d) / "fleet.db")
        with tempfile.TemporaryDirectory() as d:
            many = bench_fleet(snaps[:20], args.fleet_minutes, Path(d) / "fleet.db")
        print(f"per-sample CPU, +S {args.schedulers} over +S 1 (snapshots "
              f"{len(snaps[0].to_json()) / len(small[0].to_json()):.1f}x the size): "
              f"{many / one:.2f}x ({many * 1e6:.0f} us against {one * 1e6:.0f} us)")
    with tempfile.TemporaryDirectory() as d:
        if "year" in only:
            bench_year(snaps, args.days, Path(d) / "year.db")
        if "day" in only:
            bench_day(snaps, Path(d) / "day.db")
    return 0


if __name__ == "__main__":
    sys.exit(main())
