"""A synthetic watch store for the web UI's tests and bench: real SQLite, real Store API.

One node sampled every `interval` seconds for `days`: a daily traffic cycle drives binary_alloc's
used bytes up to 5x, and its carriers stay allocated after each peak and give memory back
slowly (the fragmentation signature beamalloc explains). A full snapshot is stored every
`snapshot_every` seconds, with per-instance carriers varied so that the heatmap has something
to show. Built from the real OTP 25 recon sample.
"""

from __future__ import annotations

import math
from pathlib import Path

from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Snapshot, Triple
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "otp25" / "recon_snapshot.txt"
T0 = 1_700_000_000.0
DAY = 86400.0


def base_snapshot(node: str) -> Snapshot:
    snap = read_file(str(SAMPLE))
    snap.node = node
    snap.os_pid = 4242
    snap.notes = []
    return snap


def _load(t: float) -> tuple[float, float]:
    """(used factor, allocated factor) of binary_alloc at time t: peaks held, slowly released."""
    phase = (t - T0) / DAY
    used = 1 + 4 * max(0.0, math.sin(2 * math.pi * phase)) ** 3
    peak = 1 + 4 * max(0.0, math.sin(2 * math.pi * (math.floor(phase) + 0.25))) ** 3
    since = (phase - math.floor(phase) - 0.25) % 1
    held = max(used, 1 + (peak - 1) * math.exp(-since * 3)) * 1.15
    return used, held


def snapshot_at(base: Snapshot, t: float, i: int) -> Snapshot:
    snap = Snapshot.from_dict(base.to_dict())
    snap.taken_at = t
    used, held = _load(t)
    for inst in snap.instances("binary_alloc"):
        skew = 1 + 0.6 * math.sin(i * 0.7 + inst.instance)  # instances drift apart
        for b in inst.mbcs.blocks.values():
            c = round(b.size.current * used * skew)
            b.size = Triple(c, max(c, b.size.last_max), max(c, b.size.max))
        cs = inst.mbcs.carriers_size
        c = max(round(cs.current * held * skew), inst.mbcs.block_size.current)
        inst.mbcs.carriers_size = Triple(c, max(c, cs.last_max), max(c, cs.max))
        inst.calls = {k: v + i * 1000 * (inst.instance + 1) for k, v in inst.calls.items()}
    for m in snap.mseg:
        m.cache_hits += i * 40
        m.calls = {k: v + i * 50 for k, v in m.calls.items()}
    snap.rss = sum(a.mbcs.carriers_size.current + a.sbcs.carriers_size.current
                   for a in snap.allocators) + (40 << 20)
    return snap


def build_store(path: str | Path, node: str = "synth@host", days: float = 7.0,
                interval: float = 60.0, snapshot_every: float = 1800.0,
                gap: bool = True) -> int:
    """Fill a store at `path`; returns the number of samples written."""
    base = base_snapshot(node)
    n = int(days * DAY / interval)
    per_snap = max(1, round(snapshot_every / interval))
    batch: list[tuple[float, dict[str, int]]] = []
    last_point: dict[str, int] = {}
    gap_at = n // 2 if gap else -1
    with Store(path) as st:
        for i in range(n):
            t = T0 + i * interval
            if i % per_snap == 0:
                if batch:
                    st.add_points(node, batch)
                    batch = []
                snap = snapshot_at(base, t, i // per_snap)
                last_point = derive(snap)
                st.add_sample(snap, last_point, force_keep=True)
                continue
            if gap_at <= i < gap_at + 30:  # half an hour unreachable
                if i == gap_at:
                    st.add_gap(node, t - interval, t + 30 * interval, "timeout")
                continue
            used, held = _load(t)
            p = dict(last_point)
            b_used, b_alloc = p.get("binary_alloc.used", 0), p.get("binary_alloc.allocated", 0)
            u0, h0 = _load(t - (i % per_snap) * interval)
            nu, na = round(b_used * used / u0), round(b_alloc * held / h0)
            p["binary_alloc.used"], p["binary_alloc.allocated"] = nu, max(na, nu)
            p["used"] += nu - b_used
            p["allocated"] += max(na, nu) - b_alloc
            p["rss"] = p["allocated"] + (40 << 20)
            p["mseg_calls"] += i % per_snap * 2
            p["mseg_hits"] += i % per_snap
            batch.append((t, p))
        if batch:
            st.add_points(node, batch)
    return n


def with_carriers(snap: Snapshot, n: int, seed: int = 1) -> Snapshot:
    """`snap` with `n` synthetic binary_alloc carriers (a spike's leftovers: most pooled and
    nearly empty, a few full), for the carrier map at 10 and at 5,000 carriers."""
    import random

    from beamalloc.snapshot import Carrier, FreeHistogram

    rnd = random.Random(seed)
    sizes = [1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 23]
    out = []
    for i in range(n):
        size = rnd.choice(sizes)
        pooled = rnd.random() < 0.7
        fill = rnd.uniform(0.005, 0.08) if pooled or rnd.random() < 0.3 else rnd.uniform(0.6, 1)
        used = int(size * fill)
        blocks = max(1, used // 900)
        counts = [0] * 18
        counts[min(17, max(0, (size - used) // 256).bit_length() - 1)] = 1
        out.append(Carrier("binary_alloc", i % 4 + 1, pooled, size, blocks, used,
                           FreeHistogram(256, tuple(counts))))
    snap.carriers = out
    return snap


def build_restart(st: Store, node: str, t0: float, interval: float = 60.0, n: int = 60) -> float:
    """`n` samples, a restart (new OS pid, the gap watch records), `n` more: returns the time
    of the first sample after the restart. mseg_alloc is idle (its counters never move), as on
    most nodes between peaks."""
    base = base_snapshot(node)
    t = t0
    for half in range(2):
        snap = snapshot_at(base, t, 3 * half)
        snap.os_pid = 4242 + half
        p0 = derive(snap)
        st.add_sample(snap, p0, force_keep=True)
        pts = []
        for i in range(1, n):
            p = dict(p0)
            wave = round((1 + math.sin(i / 7)) * (8 << 20))
            p["used"] += wave
            p["allocated"] += 2 * wave
            p["rss"] = p["allocated"] + (40 << 20)
            pts.append((t + i * interval, p))
        st.add_points(node, pts)
        if half == 0:
            last = t + (n - 1) * interval
            t = last + interval  # the next poll sees the new pid: watch closes the gap here
            st.add_gap(node, last, t, "restarted (os pid 4242 -> 4243)")
    return t


def build_few(st: Store, node: str, t0: float, n: int, interval: float = 60.0) -> None:
    """A node watched for `n` samples only, each with its snapshot (a watch just started)."""
    base = base_snapshot(node)
    for i in range(n):
        snap = snapshot_at(base, t0 + i * interval, i)
        st.add_sample(snap, derive(snap), force_keep=True)
