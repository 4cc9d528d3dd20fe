"""Synthetic allocation traces, so what-if works without eBPF (issue 4).

Six generators write ordinary trace files (docs/trace-format.md), deterministic for a seed:

* :func:`spike_and_drop` — churn at a base live set, a spike to several times that, a random drop
  back (most of the spike freed in random order, so survivors pin carriers), churn again;
* :func:`large_binaries` — binaries around the SBC threshold (tens of KB to MBs), so sbct,
  lmbcs and the mseg cache decide the footprint;
* :func:`ets_churn` — ets_alloc: a table's small term blocks inserted, updated (realloc) and
  deleted while the table grows and shrinks;
* :func:`stragglers` — a spike freed but for a few blocks spread evenly over its carriers (the
  recommender's best case for the survivors of a spike);
* :func:`stationary_mix` — fitted to a Snapshot: per allocator instance, the current live block
  count and average block size (mbcs and sbcs apart) and a turnover from its call counts;
* :func:`from_carriers` — an allocator's carriers as ``instrument:carriers/1`` reports them,
  rebuilt block by block, then its workload (fitted, or the node's own traced events) forward:
  the recommender's seeded predictions (docs/recommend.md, "Prediction");
* :func:`history` — a node's history from an empty VM (base set, churn, spike, random drop,
  churn after the drop that replaces blocks at random or each survivor in turn): the
  recommender's restart-true prediction, whose free parameters it searches (advice/predict.py).

:func:`predict` replays a snapshot's fitted mix under candidate flag sets; the recommender uses
it for its ``predicted`` field.

Sizes in traces are user sizes: a block is ``8`` (header) ``+ 8`` (atag, binary/driver_alloc on
OTP 25) ``+ user`` bytes (docs/erts/alloc_util.md §3.1); snapshots report block sizes, so the fit
subtracts
the overhead.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from beamalloc.flags import FlagSet
from beamalloc.snapshot import Snapshot
from beamalloc.trace import ALLOCATOR_NUMBERS, Event, Op, TraceHeader, TraceWriter, TypeInfo

__all__ = [
    "TYPE_OF",
    "ets_churn",
    "history",
    "large_binaries",
    "predict",
    "spike_and_drop",
    "spike_size",
    "stationary_mix",
    "stragglers",
]

BINARY, ETS = 10, 7
#: Type numbers of OTP 25 (docs/erts/erts_types_otp25.tsv, docs/erts/alloc_util.md §7).
T_BINARY, T_DB_TERM = 214, 195
#: One representative type per allocator for fitted traces (its name; numbers per §7).
TYPE_OF = {
    "binary_alloc": (214, "binary"), "ets_alloc": (195, "db_term"),
    "eheap_alloc": (184, "heap"), "driver_alloc": (213, "drv_binary"),
    "fix_alloc": (197, "proc"), "literal_alloc": (212, "literal"), "temp_alloc": (9, "tmp"),
}  # fmt: skip
_ATAGS = {"binary_alloc", "driver_alloc"}  # atags on by default (§2.3)


class _Live:
    """Live block ids with O(1) random removal."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self.where: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, bid: int, size: int) -> None:
        self.where[bid] = len(self.ids)
        self.ids.append(bid)
        self.sizes.append(size)

    def pop_at(self, i: int) -> tuple[int, int]:
        bid, size = self.ids[i], self.sizes[i]
        last_id, last_size = self.ids.pop(), self.sizes.pop()
        del self.where[bid]
        if i < len(self.ids):
            self.ids[i], self.sizes[i] = last_id, last_size
            self.where[last_id] = i
        return bid, size


@dataclass
class _Stream:
    """One allocator instance's event source: live set, next id, size sampler."""

    allocator: int
    instance: int
    type: int
    live: _Live
    next_id: int


class _Gen:
    """Shared writer state: time, ids, the live sets."""

    def __init__(self, path: str | Path, header: TraceHeader, seed: int) -> None:
        self.w = TraceWriter(path, header)  # batched, encoded natively
        self.rng = random.Random(seed)
        self.t = 0
        self.next_id = 1

    def stream(self, allocator: int, instance: int, type_: int) -> _Stream:
        return _Stream(allocator, instance, type_, _Live(), 0)

    def alloc(self, s: _Stream, size: int, dt: int) -> None:
        self.t += dt
        bid = self.next_id
        self.next_id += 1
        self.w.write_checked(Event(self.t, Op.ALLOC, s.allocator, s.instance, s.type, size, bid,
                                   0, s.instance))  # fmt: skip
        s.live.add(bid, size)

    def free_random(self, s: _Stream, dt: int) -> None:
        bid, size = s.live.pop_at(self.rng.randrange(len(s.live)))
        self.t += dt
        self.w.write_checked(Event(self.t, Op.FREE, s.allocator, s.instance, s.type, size, bid,
                                   0, s.instance))  # fmt: skip

    def free(self, s: _Stream, bid: int, dt: int) -> None:
        _, size = s.live.pop_at(s.live.where[bid])
        self.t += dt
        self.w.write_checked(Event(self.t, Op.FREE, s.allocator, s.instance, s.type, size, bid,
                                   0, s.instance))  # fmt: skip

    def realloc_random(self, s: _Stream, size: int, dt: int) -> None:
        bid, _ = s.live.pop_at(self.rng.randrange(len(s.live)))
        self.t += dt
        nid = self.next_id
        self.next_id += 1
        self.w.write_checked(Event(self.t, Op.REALLOC, s.allocator, s.instance, s.type, size,
                                   bid, nid, s.instance))  # fmt: skip
        s.live.add(nid, size)

    def close(self) -> int:
        self.w.close()
        return self.w.count


def _header(schedulers: int, kind: str, types: Sequence[tuple[int, str, int]],
            **extra: Any) -> TraceHeader:  # fmt: skip
    return TraceHeader(
        schedulers=schedulers,
        source="synthetic",
        types=[TypeInfo(n, name, a) for n, name, a in types],
        threads={i: f"{i}_scheduler" for i in range(1, schedulers + 1)},
        extra={"generator": kind, **extra},
    )


def _lognormal(rng: random.Random, mean: float, sigma: float, lo: int, hi: int) -> int:
    """A lognormal size with the given mean before clipping to [lo, hi]."""
    mu = math.log(max(mean, 1.0)) - sigma * sigma / 2
    return int(min(max(rng.lognormvariate(mu, sigma), lo), hi))


def spike_size(rng: random.Random, mean_size: int) -> int:
    """A block of a spike (spike_and_drop, and the recommender's stragglers best case):
    lognormal with sigma 1 around `mean_size`, its tail cut at 400 000 bytes or 8 x the mean."""
    return _lognormal(rng, mean_size, 1.0, 1, max(400_000, 8 * mean_size))


def spike_and_drop(
    path: str | Path,
    *,
    schedulers: int = 1,
    base_live: int = 2_000,
    spike_factor: float = 10.0,
    mean_size: int = 2_000,
    churn: int = 20_000,
    duration_s: float = 10.0,
    seed: int = 1,
    allocator: str = "binary_alloc",
    churn_after: float = 0.5,
) -> int:
    """Blocks on every scheduler instance of `allocator` (binaries by default, process heaps for
    eheap_alloc): churn, spike, random drop, churn; `churn_after` is the share of the churn
    that comes after the drop. Returns the count."""
    number = ALLOCATOR_NUMBERS[allocator]
    typ, type_name = TYPE_OF.get(allocator, (T_BINARY, "binary"))
    g = _Gen(path, _header(schedulers, "spike_and_drop", [(typ, type_name, number)],
                           base_live=base_live, spike_factor=spike_factor,
                           mean_size=mean_size, allocator=allocator), seed)  # fmt: skip
    streams = [g.stream(number, ix, typ) for ix in range(1, schedulers + 1)]
    per = max(base_live // schedulers, 1)
    total = int(per * schedulers * (2 + 2 * spike_factor) + 2 * churn)
    dt = max(int(duration_s * 1e9 / max(total, 1)), 1)

    def size() -> int:
        return spike_size(g.rng, mean_size)

    def churn_rounds(n: int) -> None:
        for _ in range(n // schedulers + 1):
            for s in streams:
                g.free_random(s, dt)
                g.alloc(s, size(), dt)

    after = round(churn * churn_after)
    for _ in range(per):
        for s in streams:
            g.alloc(s, size(), dt)
    churn_rounds(churn - after)
    for _ in range(int(per * (spike_factor - 1))):
        for s in streams:
            g.alloc(s, size(), dt)
    for s in streams:
        while len(s.live) > per:
            g.free_random(s, dt)
    if after:
        churn_rounds(after)
    return g.close()


def large_binaries(
    path: str | Path,
    *,
    schedulers: int = 1,
    live: int = 200,
    events: int = 20_000,
    mean_size: int = 400_000,
    duration_s: float = 20.0,
    seed: int = 2,
) -> int:
    """Large binaries (lognormal around `mean_size`, 4 KB .. 16 MB) with churn."""
    g = _Gen(path, _header(schedulers, "large_binaries", [(T_BINARY, "binary", BINARY)],
                           mean_size=mean_size), seed)  # fmt: skip
    streams = [g.stream(BINARY, ix, T_BINARY) for ix in range(1, schedulers + 1)]
    dt = max(int(duration_s * 1e9 / max(events, 1)), 1)
    n = 0
    while n < events:
        s = streams[n % schedulers]
        if len(s.live) < max(live // schedulers, 1) or g.rng.random() < 0.5:
            g.alloc(s, _lognormal(g.rng, mean_size, 0.8, 4096, 16 << 20), dt)
        else:
            g.free_random(s, dt)
        n += 1
    return g.close()


def ets_churn(
    path: str | Path,
    *,
    schedulers: int = 1,
    rows: int = 50_000,
    cycles: int = 3,
    mean_size: int = 200,
    duration_s: float = 10.0,
    seed: int = 3,
) -> int:
    """ets_alloc db_term blocks: fill a table to `rows`, update some rows in place (realloc),
    delete down to a tenth, and again, `cycles` times."""
    g = _Gen(path, _header(schedulers, "ets_churn", [(T_DB_TERM, "db_term", ETS)],
                           rows=rows, cycles=cycles), seed)  # fmt: skip
    streams = [g.stream(ETS, ix, T_DB_TERM) for ix in range(1, schedulers + 1)]
    per = max(rows // schedulers, 1)
    dt = max(int(duration_s * 1e9 / max(rows * cycles * 3, 1)), 1)

    def size() -> int:
        return _lognormal(g.rng, mean_size, 0.7, 16, 60_000)

    for _ in range(cycles):
        for s in streams:
            while len(s.live) < per:
                g.alloc(s, size(), dt)
        for _ in range(per // 4):
            for s in streams:
                g.realloc_random(s, size(), dt)
        for s in streams:
            while len(s.live) > per // 10:
                g.free_random(s, dt)
    return g.close()


def stragglers(
    path: str | Path,
    *,
    schedulers: int,
    allocator: str,
    live: int,
    peak: int,
    stragglers: int,
    mean_size: int,
    churn: int,
    seed: int = 7,
) -> int:
    """Per scheduler instance: the live set, churn in it, a peak, the peak freed but for
    `stragglers` blocks evenly spread in allocation order, churn again. Returns the count (the
    recommender's best case for survivors of a spike, advice/predict.py)."""
    number = ALLOCATOR_NUMBERS[allocator]
    typ = TYPE_OF.get(allocator, (1, "synthetic"))
    header = TraceHeader(
        schedulers=schedulers,
        source="synthetic",
        types=[TypeInfo(typ[0], typ[1], number)],
        threads={i: f"{i}_scheduler" for i in range(1, schedulers + 1)},
        extra={"generator": "stragglers"},
    )
    rng = random.Random(seed)
    w = TraceWriter(path, header)
    t, next_id = 0, 1
    per = max(live // schedulers, 1)
    spike = max((peak - live) // schedulers, 0)
    keep_every = max(spike // max(stragglers // schedulers, 1), 1)
    rounds = churn // (2 * schedulers) + 1
    kept: list[list[int]] = [[] for _ in range(schedulers)]
    sizes: dict[int, int] = {}

    def alloc(ix: int) -> int:
        nonlocal t, next_id
        t += 1000
        bid, next_id = next_id, next_id + 1
        size = spike_size(rng, mean_size)
        sizes[bid] = size
        w.write(Event(t, Op.ALLOC, number, ix, typ[0], size, bid, 0, ix))
        return bid

    def free(ix: int, bid: int) -> None:
        nonlocal t
        t += 1000
        w.write(Event(t, Op.FREE, number, ix, typ[0], sizes.pop(bid), bid, 0, ix))

    def churn_phase() -> None:
        for _ in range(rounds):
            for ix in range(1, schedulers + 1):
                base = kept[ix - 1]
                j = rng.randrange(len(base))
                free(ix, base[j])
                base[j] = alloc(ix)

    for _ in range(per):
        for ix in range(1, schedulers + 1):
            kept[ix - 1].append(alloc(ix))
    churn_phase()
    burst = [[alloc(ix) for _ in range(spike)] for ix in range(1, schedulers + 1)]
    for ix, blocks in enumerate(burst, 1):
        for k, bid in enumerate(blocks):
            if k % keep_every != keep_every // 2:
                free(ix, bid)
    churn_phase()
    w.close()
    return w.count


@dataclass(frozen=True)
class History:
    """One instance's history from an empty VM (every scheduler instance runs it): a base set of
    `live` blocks, `before` random replacements, a spike to `peak` blocks, a drop back to `live`
    keeping survivors at random, then `after` replacements. `order` says which block each of
    those replaces: "random" (any live block: some survivors outlive many replacements) or
    "passes" (each live block once per pass, in a random order: `live` replacements retire
    every survivor of the spike, wherever it sits).
    Sizes are drawn uniformly within `spread` of `mean_size` (user bytes). With `stragglers`
    N > 0 the drop keeps the base set (the first `live` - N blocks made) and N blocks evenly
    spread over the spike (binspike's stragglers), and `after` replaces the base set only; with
    `rebuild` too, whole: its `after` new blocks are all made before the oldest `after` go (a
    list rebuilt in a process, the old one freed at its next full collection)."""

    live: int
    peak: int
    before: int
    after: int
    order: str = "passes"
    mean_size: int = 800
    spread: float = 0.3
    stragglers: int = 0
    rebuild: bool = False
    #: Where each straggler sits in its stride of the spike, in thousandths (500: its middle).
    phase: int = 500

    def events(self, schedulers: int) -> int:
        """Events of the trace on `schedulers` instances."""
        return schedulers * (2 * max(self.peak, self.live) - self.live + 2 * self.before
                             + 2 * self.after)  # fmt: skip


def history(path: str | Path, h: History, *, allocator: str = "binary_alloc",
            schedulers: int = 1, seed: int = 1) -> int:  # fmt: skip
    """Write `h` on every scheduler instance of `allocator`, the instances in lock step as the
    node's workers are (one event each in turn); returns the event count. A prediction writes
    several histories of a node's size, so the events are generated natively
    (refalloc/src/history.rs), deterministic for a seed; it replays them without a file
    (:func:`history_params`, refalloc/replay.py `replay_histories`)."""
    import json

    from beamalloc import _refalloc

    header, params = history_params(h, allocator=allocator, schedulers=schedulers, seed=seed)
    blob = json.dumps(header.to_json(), separators=(",", ":"))
    return int(_refalloc.history_trace(str(path), blob, params))


def history_params(h: History, *, allocator: str = "binary_alloc", schedulers: int = 1,
                   seed: int = 1) -> tuple[TraceHeader, dict[str, int]]:  # fmt: skip
    """The header :func:`history` writes and the native generator's parameters of `h`."""
    number = ALLOCATOR_NUMBERS[allocator]
    typ, type_name = TYPE_OF.get(allocator, (T_BINARY, "binary"))
    header = _header(schedulers, "history", [(typ, type_name, number)], allocator=allocator,
                     **dataclasses.asdict(h))  # fmt: skip
    lo = max(int(h.mean_size * (1 - h.spread)), 1)
    params = {"live": h.live, "peak": max(h.peak, h.live), "before": h.before, "after": h.after,
              "passes": int(h.order == "passes"), "stragglers": h.stragglers,
              "rebuild": int(h.rebuild), "phase": h.phase, "lo": lo,
              "hi": max(int(h.mean_size * (1 + h.spread)), lo), "allocator": number,
              "type": typ, "instances": schedulers, "seed": seed}  # fmt: skip
    return header, params


# --- fitted to a snapshot -------------------------------------------------------------------------


@dataclass
class _Fit:
    name: str
    instance: int
    mbc_live: int
    mbc_mean: float
    sbc_live: int
    sbc_mean: float
    turnover: float  # frees per live block over the node's life, from the call counts
    sbct: int


def _overhead(name: str) -> int:
    return 16 if name in _ATAGS else 8  # §3.1: header + atag


def fit(snap: Snapshot) -> list[_Fit]:
    """Per allocator instance with live blocks: live count, mean block size, turnover."""
    out = []
    for inst in snap.allocators:
        if inst.allocator not in ALLOCATOR_NUMBERS:
            continue
        mb, sb = inst.mbcs.block_count.current, inst.sbcs.block_count.current
        if inst.mbcs_pool is not None:
            mb += inst.mbcs_pool.block_count
        if mb + sb == 0:
            continue
        mbs = inst.mbcs.block_size.current + (inst.mbcs_pool.block_size if inst.mbcs_pool else 0)
        frees = sum(v for k, v in inst.calls.items() if k.endswith("_free")
                    and not k.startswith(("mseg", "sys")))  # fmt: skip
        sbct = inst.options.get("sbct", 512 * 1024)
        out.append(
            _Fit(
                inst.allocator, inst.instance, mb, mbs / mb if mb else 0.0, sb,
                inst.sbcs.block_size.current / sb if sb else 0.0,
                frees / (mb + sb), int(sbct) if isinstance(sbct, int) else 512 * 1024,
            )
        )  # fmt: skip
    return out


def stationary_mix(
    snap: Snapshot,
    path: str | Path,
    *,
    max_live: int = 100_000,
    max_events: int = 400_000,
    duration_s: float = 10.0,
    seed: int = 4,
) -> int:
    """A trace whose live set matches `snap` (scaled down to `max_live` blocks if larger), then
    stationary churn: each step frees a random live block of one instance and allocates a new
    one drawn from the same fitted distribution. Returns the event count."""
    fits = fit(snap)
    live_total = sum(f.mbc_live + f.sbc_live for f in fits)
    scale = min(1.0, max_live / live_total) if live_total else 1.0
    schedulers = snap.schedulers or max((f.instance for f in fits), default=1) or 1
    types = {(TYPE_OF.get(f.name, (1 << 16, f.name))[0], TYPE_OF.get(f.name, (0, f.name))[1],
              ALLOCATOR_NUMBERS[f.name]) for f in fits}  # fmt: skip
    g = _Gen(path, _header(schedulers, "stationary_mix", sorted(types), node=snap.node,
                           scale=scale), seed)  # fmt: skip
    g.w.header.node = snap.node
    plans: list[tuple[_Stream, _Fit, int, int]] = []
    for f in fits:
        typ = TYPE_OF.get(f.name, (1 << 16, f.name))[0]
        s = g.stream(ALLOCATOR_NUMBERS[f.name], f.instance, typ)
        plans.append((s, f, round(f.mbc_live * scale), round(f.sbc_live * scale)))
    target = sum(m + s for _, _, m, s in plans)
    churn_budget = max(max_events - target, 0)
    dt = max(int(duration_s * 1e9 / max(target + churn_budget, 1)), 1)

    def draw(f: _Fit, sbc: bool) -> int:
        ov = _overhead(f.name)
        if sbc:
            return max(int(f.sbc_mean * g.rng.uniform(0.8, 1.2)) - ov, f.sbct)
        return _lognormal(g.rng, max(f.mbc_mean - ov, 1.0), 0.9, 1, max(f.sbct - 1, 1))

    # Build-up, interleaved across instances in proportion to their live sets.
    queue = [(s, f, False) for s, f, m, _ in plans for _ in range(m)]
    queue += [(s, f, True) for s, f, _, n in plans for _ in range(n)]
    g.rng.shuffle(queue)
    kinds: dict[int, list[bool]] = {}
    for s, f, sbc in queue:
        g.alloc(s, draw(f, sbc), dt)
        kinds.setdefault(id(s), []).append(sbc)
    # Churn, weighted by each instance's turnover (frees per live block).
    weights = [max(f.turnover, 0.01) * (m + n) for _, f, m, n in plans]
    live_plans = [p for p, w in zip(plans, weights, strict=True) if p[2] + p[3] > 0]
    live_weights = [w for p, w in zip(plans, weights, strict=True) if p[2] + p[3] > 0]
    for _ in range(churn_budget // 2 if live_plans else 0):
        s, f, _, n = g.rng.choices(live_plans, live_weights)[0]
        i = g.rng.randrange(len(s.live))
        size = s.live.sizes[i]
        sbc = size >= f.sbct and n > 0
        bid, _ = s.live.pop_at(i)
        g.t += dt
        g.w.write(Event(g.t, Op.FREE, s.allocator, s.instance, s.type, size, bid, 0,
                        s.instance))  # fmt: skip
        g.alloc(s, draw(f, sbc), dt)
    return g.close()


def predict(
    snap: Snapshot,
    flag_sets: Sequence[FlagSet | str | None],
    *,
    max_live: int = 100_000,
    max_events: int = 400_000,
    seed: int = 4,
) -> list[dict[str, Any]]:
    """Replay `snap`'s fitted stationary mix under each flag set (in order); one run each, shaped
    as in ``beamalloc replay --json`` (flags, snapshot, analysis, peak, series)."""
    import tempfile  # this generator alone writes a scratch file

    from beamalloc.refalloc.replay import run

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mix.batr"
        stationary_mix(snap, path, max_live=max_live, max_events=max_events, seed=seed)
        return [run(path, f, schedulers=snap.schedulers or None) for f in flag_sets]


def events(path: str | Path) -> Iterator[Event]:
    """The events of a trace (a convenience for tests)."""
    from beamalloc.trace import open_trace

    with open_trace(path) as r:
        yield from r


# --- from the node's own carriers ---------------------------------------------------------------


class CarrierLike(Protocol):
    """What :func:`from_carriers` reads of one carrier (snapshot.Carrier has it)."""

    size: int
    blocks: int
    blocks_size: int
    in_pool: bool
    instance: int | None

    @property
    def free_histogram(self) -> Any: ...  # .counts, .bounds(i): free blocks per size band


#: A carrier holding one block that fills at least this share of it is a single-block carrier.
SBC_FILL = 0.9
#: Carriers at least this full hold the live set that turns over; sparser ones hold survivors
#: that stay (the stragglers of a peak) [heur].
DENSE_FILL = 0.5
#: ... and so do carriers whose blocks sit in runs (fewer free blocks than this per block):
#: blocks allocated together, lately, unlike stragglers, each alone between free blocks [heur].
RUN_GAPS = 0.5
_FILLER, _SBC, _DENSE, _SPARSE = range(4)


@dataclass(frozen=True)
class CarrierFit:
    """How a carrier-seeded trace maps onto the node: the carriers it rebuilds (single-block
    ones among them), their bytes and blocks, and how many kept neighbours one traced block
    stands for (1: every block as the node has it)."""

    carriers: int
    merge: int
    sbcs: int
    carrier_bytes: int
    blocks: int


def _gaps(rng: random.Random, hist: Any, free: int) -> list[int]:
    """Sizes of a carrier's free blocks: one per histogram count, drawn inside its size band
    (the open last band up to twice its floor) and scaled so that they add up to the carrier's
    free bytes: the histogram is coarse, the free bytes exact."""
    raw: list[float] = []
    for i, n in enumerate(hist.counts):
        lo, hi = hist.bounds(i)
        hi = hi if hi is not None else 2 * max(lo, 1)
        raw += [rng.uniform(max(lo, 1), hi) for _ in range(n)]
    if not raw and free > 0:
        raw = [1.0]
    rng.shuffle(raw)
    total = sum(raw)
    return [max(int(free * r / total), 1) for r in raw] if total else []


def _window(rng: random.Random, c: CarrierLike, filler: int, merge: int) -> list[tuple[int, bool]]:
    """One carrier as the allocation order that leaves it as the node has it: its blocks
    (kept) in runs between its free blocks, each free block as fillers of about `filler` bytes
    (allocated, then freed). Up to `merge` neighbouring kept blocks become one block of their
    joint size (they sit side by side, so they pin the same carrier). Blocks are (size, kept)."""
    n = max(c.blocks, 0)
    gaps = _gaps(rng, c.free_histogram, max(c.size - c.blocks_size, 0))
    # Two free blocks are never neighbours (they coalesce): interior runs hold one block at least.
    while len(gaps) > n + 1:
        j = rng.randrange(len(gaps) - 1)
        gaps[j] += gaps.pop(j + 1)
    runs = [0] * (len(gaps) + 1)
    for k in range(1, len(gaps)):
        runs[k] = 1
    for _ in range(n - sum(runs)):
        runs[rng.randrange(len(runs))] += 1
    size = max(c.blocks_size // n, 1) if n else 0
    out: list[tuple[int, bool]] = []
    for k, run in enumerate(runs):
        if run:
            parts = math.ceil(run / merge)
            out += [(size * run // parts, True)] * parts
        if k < len(gaps):
            pieces = max(round(gaps[k] / filler), 1)
            out += [(max(gaps[k] // pieces, 1), False)] * pieces
    return out


def _follow(g: _Gen, streams: list[_Stream], turning: list[list[int]],
            events: Iterable[Event]) -> None:  # fmt: skip
    """Append a traced allocation stream of one allocator to the rebuilt carriers. A block the
    trace saw allocated is followed by its own id; a free (or realloc) of a block allocated
    before the trace began takes one of the rebuilt blocks of that instance's dense carriers,
    the live set that turns over (sparse carriers' blocks stay, as in the fitted model)."""
    ids: dict[int, tuple[_Stream, int]] = {}
    last = None
    n = len(streams)
    for ev in events:
        s = streams[(ev.instance - 1) % n] if ev.instance >= 1 else streams[0]
        dt = 1 if last is None else max(ev.t_ns - last, 1)
        last = ev.t_ns
        if ev.op != Op.ALLOC:
            old = ids.pop(ev.id, None)
            if old is not None:
                g.free(old[0], old[1], dt)
            else:
                pool = turning[s.instance - 1]
                if pool:
                    g.free(s, pool.pop(g.rng.randrange(len(pool))), dt)
            if ev.op == Op.FREE:
                continue
            dt, key = 1, ev.new_id
        else:
            key = ev.id
        g.alloc(s, max(ev.size, 1), dt)
        ids[key] = (s, s.live.ids[-1])


def from_carriers(
    path: str | Path,
    carriers: Sequence[CarrierLike],
    *,
    allocator: str,
    schedulers: int = 1,
    sbct: int | None = None,
    max_blocks: int = 30_000,
    churn: float = 1.0,
    peak_sbcs: int = 0,
    peak_sbc_size: int = 0,
    then: Iterable[Event] | None = None,
    seed: int = 1,
) -> tuple[int, CarrierFit]:
    """A trace that rebuilds `allocator`'s carriers as the node reports them
    (``instrument:carriers/1``) and runs its workload forward; returns (events, fit).

    Each carrier becomes a window of the allocation order: the blocks it holds now, in runs
    between its free blocks as its free-block histogram sizes them, and fillers where the free
    blocks are, allocated and then freed (the peak that left the carrier as it is). Windows go
    in carrier-size order (carriers grow as an instance grows, docs/erts/alloc_util.md §2.2),
    each on the instance that made it (round robin where that is unknown). Then the live set
    of the dense carriers turns over `churn` times (free one at random, allocate one like it)
    while the blocks of sparse carriers stay:
    the same stream replayed under other flags shows where those blocks would have gone.
    Single-block carriers are allocated first and kept. Last, the peak the counters show in
    single-block carriers comes back and goes (`peak_sbcs` blocks of `peak_sbc_size` bytes,
    spread over the instances): gone from the carrier map, but a raised sbct puts its blocks
    in multiblock carriers, where they can leave carriers behind. Above `max_blocks` blocks are
    coarser, never carriers fewer (`fit.merge` says by how much): the replay runs at the node's
    size. With `then` (the node's own events, from `beamalloc trace`), those events run forward
    instead of the churn and the peak: see :func:`_follow`."""
    number = ALLOCATOR_NUMBERS[allocator]
    typ, type_name = TYPE_OF.get(allocator, (T_BINARY, "binary"))
    over = _overhead(allocator)

    def is_sbc(c: CarrierLike) -> bool:
        big = sbct is None or c.blocks_size >= sbct
        return c.blocks == 1 and big and c.blocks_size >= SBC_FILL * c.size

    def turns_over(c: CarrierLike) -> bool:
        runs = c.blocks >= 16 and sum(c.free_histogram.counts) < RUN_GAPS * c.blocks
        return c.blocks > 0 and (c.blocks_size >= DENSE_FILL * c.size or runs)

    sbcs = [c for c in carriers if is_sbc(c)]
    mbcs = sorted((c for c in carriers if not is_sbc(c) and c.size > 0), key=lambda c: c.size)
    # Fillers are the size of the allocator's blocks: those of the scheduler instances' carriers
    # (instance 0 serves other threads, a few odd blocks), of any carrier where none say.
    pool = [c for c in mbcs if c.blocks and c.instance != 0] or [c for c in mbcs if c.blocks]
    filler = max(sum(c.blocks_size for c in pool) // max(sum(c.blocks for c in pool), 1), 16)
    # Above max_blocks, blocks grow instead of carriers going: fillers get larger and runs of
    # kept neighbours merge, so every carrier keeps its size and its sparse blocks their count
    # (what pins it), while blocks stay well below the smallest sbct in play [heur].
    total = sum(c.blocks + (c.size - c.blocks_size) // filler for c in mbcs)
    merge = max(math.ceil(total / max_blocks), 1)
    cap = max((sbct or 512 * 1024) // 8, filler)
    filler = min(filler * merge, cap)
    fit = CarrierFit(len(mbcs) + len(sbcs), merge, len(sbcs),
                     sum(c.size for c in mbcs) + sum(c.size for c in sbcs),
                     sum(c.blocks for c in mbcs) + len(sbcs))  # fmt: skip
    g = _Gen(path, _header(schedulers, "from_carriers", [(typ, type_name, number)],
                           allocator=allocator, carriers=fit.carriers, merge=merge),
             seed)  # fmt: skip
    streams = [g.stream(number, ix, typ) for ix in range(1, schedulers + 1)]

    def home(k: int, c: CarrierLike) -> int:
        """The stream of the instance that made the carrier, where the data says which."""
        return (c.instance - 1) % schedulers if c.instance else k % schedulers

    # Per stream, blocks in allocation order as (size, role): FILLER (freed by the drop), SBC,
    # DENSE (kept, in a carrier that turns_over) or SPARSE (kept for good).
    plans: list[list[tuple[int, int]]] = [[] for _ in streams]
    for k, c in enumerate(sbcs):
        plans[home(k, c)].append((max(c.blocks_size - over, 1), _SBC))
    for k, c in enumerate(mbcs):
        role = _DENSE if turns_over(c) else _SPARSE
        plans[home(k, c)] += [(max(size - over, 1), role if keep else _FILLER)
                              for size, keep in _window(g.rng, c, filler, merge)]  # fmt: skip
    dt = 1000
    # Fill: every instance allocates its windows in order, interleaved as schedulers run.
    made: list[list[tuple[int, int, int]]] = [[] for _ in streams]  # (id, size, role)
    for j in range(max((len(p) for p in plans), default=0)):
        for s, plan, out in zip(streams, plans, made, strict=True):
            if j < len(plan):
                size, role = plan[j]
                g.alloc(s, size, dt)
                out.append((s.live.ids[-1], size, role))
    # The drop: each instance frees its fillers in random order.
    for s, out in zip(streams, made, strict=True):
        gone = [bid for bid, _, role in out if role == _FILLER]
        g.rng.shuffle(gone)
        for bid in gone:
            g.free(s, bid, dt)
    turning = [[bid for bid, _, role in out if role == _DENSE] for out in made]
    if then is not None:
        _follow(g, streams, turning, then)
        return g.close(), fit
    # Forward: the dense carriers' live set turns over; the sparse carriers' blocks stay.
    new_size = max(filler - over, 1)
    for _ in range(round(churn * max((len(t) for t in turning), default=0))):
        for s, t in zip(streams, turning, strict=True):
            if not t:
                continue
            j = g.rng.randrange(len(t))
            g.free(s, t[j], dt)
            g.alloc(s, new_size, dt)
            t[j] = s.live.ids[-1]
    # The peak of single-block carriers, again: allocated round robin, then freed. The kept
    # single-block blocks are made anew halfway through it, as the peak's large blocks were
    # (a heap moves at each garbage collection; a large binary is made in its burst).
    big = [(s, bid, size) for s, out in zip(streams, made, strict=True)
           for bid, size, role in out if role == _SBC]  # fmt: skip
    peak: list[tuple[_Stream, int]] = []
    for k in range(peak_sbcs):
        s = streams[k % schedulers]
        g.alloc(s, max(peak_sbc_size - over, 1), dt)
        peak.append((s, s.live.ids[-1]))
        if k == peak_sbcs // 2:
            for owner, bid, size in big:
                g.free(owner, bid, dt)
                g.alloc(owner, size, dt)
    for s, bid in peak:
        g.free(s, bid, dt)
    return g.close(), fit
