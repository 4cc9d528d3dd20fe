"""Trace generators (spike-and-drop, large binaries, ETS churn, stationary mix fitted to a
snapshot) and predict(): what-if from a snapshot alone (issue 4)."""

from __future__ import annotations

from pathlib import Path

from beamalloc.collector.sources import read_file
from beamalloc.refalloc import tracegen as tg
from beamalloc.refalloc.replay import replay_snapshot
from beamalloc.snapshot import Carrier, FreeHistogram
from beamalloc.trace import Op, open_trace, read_header

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "otp25"


def live_curve(path):
    live, peak, curve = 0, 0, []
    for ev in tg.events(path):
        live += {Op.ALLOC: 1, Op.FREE: -1, Op.REALLOC: 0}[ev.op]
        peak = max(peak, live)
        curve.append(live)
    return curve, peak


def test_generators_are_deterministic(tmp_path):
    a, b, c = tmp_path / "a.batr", tmp_path / "b.batr", tmp_path / "c.batr"
    tg.spike_and_drop(a, base_live=100, churn=500, seed=7)
    tg.spike_and_drop(b, base_live=100, churn=500, seed=7)
    tg.spike_and_drop(c, base_live=100, churn=500, seed=8)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


def test_spike_and_drop_shape_and_replay(tmp_path):
    p = tmp_path / "s.batr"
    n = tg.spike_and_drop(p, schedulers=2, base_live=400, spike_factor=5, churn=1000)
    curve, peak = live_curve(p)
    assert len(curve) == n and peak == 2000 and curve[-1] == 400
    assert read_header(p).extra["generator"] == "spike_and_drop"
    r = replay_snapshot(p)
    b = r.snapshot.instances("binary_alloc")
    assert sum(i.mbcs.block_count.max for i in b) >= 1000  # per-instance peaks
    assert r.snapshot.extra["replay"]["anomalies"] == dict.fromkeys(
        ("unknown_free", "unknown_realloc", "reused_id", "no_allocator"), 0
    )
    # the drop leaves survivors in the spike's carriers: footprint stays well above the live set
    assert r.series[-1]["carriers_size"] > 2 * r.series[-1]["blocks_size"]


def test_large_binaries_and_sbct(tmp_path):
    p = tmp_path / "l.batr"
    tg.large_binaries(p, live=50, events=2000)
    default = replay_snapshot(p).snapshot.instances("binary_alloc")[1]
    high = replay_snapshot(p, "+MBsbct 4096 +MBlmbcs 20480").snapshot.instances("binary_alloc")[1]
    assert default.sbcs.carriers.max > 0
    assert high.sbcs.carriers.max < default.sbcs.carriers.max


def test_ets_churn_uses_ets_alloc_with_realloc(tmp_path):
    p = tmp_path / "e.batr"
    tg.ets_churn(p, rows=2000, cycles=2)
    ops = {ev.op for ev in tg.events(p)}
    assert ops == {Op.ALLOC, Op.FREE, Op.REALLOC}
    inst = replay_snapshot(p).snapshot.instances("ets_alloc")[1]
    assert inst.calls["ets_realloc"] == 2 * 500
    # a moving realloc allocates the new block before freeing the old (docs/erts/alloc_util.md
    # §3.6): +1 at most
    assert inst.mbcs.block_count.max in (2000, 2001)


def test_stationary_mix_matches_the_snapshot_live_set(tmp_path):
    snap = read_file(str(SAMPLES / "recon_snapshot.txt"))
    p = tmp_path / "m.batr"
    tg.stationary_mix(snap, p, max_live=10**7, max_events=0)  # build-up only, unscaled
    replayed = replay_snapshot(p, schedulers=snap.schedulers).snapshot
    for f in tg.fit(snap):
        inst = next(i for i in replayed.instances(f.name) if i.instance == f.instance)
        pool = inst.mbcs_pool.block_count if inst.mbcs_pool else 0
        got = inst.mbcs.block_count.current + inst.sbcs.block_count.current + pool
        assert got == f.mbc_live + f.sbc_live, (f.name, f.instance)


def test_predict_runs_each_flag_set_in_order():
    snap = read_file(str(SAMPLES / "system_info_binary_alloc.txt"))
    runs = tg.predict(snap, ["", "+MBas aobf"], max_live=2000, max_events=6000)
    assert [r["flags"] for r in runs] == ["", "+MBas aobf"]
    for r in runs:
        assert r["snapshot"]["source"] == "replay"
        assert r["analysis"]["source"] == "replay" and r["series"]
    b = [a for a in runs[1]["snapshot"]["allocators"] if a["allocator"] == "binary_alloc"]
    assert {a["options"]["as"] for a in b} == {"aobf"}


def test_spike_and_drop_of_process_heaps_without_churn_after(tmp_path):
    """eheap_alloc's heaps (type `heap`, docs/erts/erts_types_otp25.tsv); churn_after=0 ends the
    trace
    with the drop (the fit the recommender uses when a node kept its peak's carriers)."""
    p = tmp_path / "h.batr"
    tg.spike_and_drop(p, allocator="eheap_alloc", base_live=50, spike_factor=4, churn=200,
                      churn_after=0.0)  # fmt: skip
    with open_trace(p) as r:
        events = list(r)
        assert [(t.n, t.name, t.allocator) for t in r.header.types] == [(184, "heap", 6)]
    assert {e.allocator for e in events} == {6}
    assert all(e.op == Op.FREE for e in events[-150:])  # 200 live at the peak, 50 kept
    assert events[-151].op == Op.ALLOC


def _bytes(snap, container: str) -> int:
    """binary_alloc's current carrier or block bytes, pooled carriers included (recon's sum)."""
    from beamalloc.analyzer.metrics import container_size

    return sum(container_size(i, "current", container) for i in snap.instances("binary_alloc"))


def _carrier(size: int, blocks: int, blocks_size: int, counts: list[int], pool: bool = True):
    return Carrier("binary_alloc", None, pool, size, blocks, blocks_size,
                   FreeHistogram(256, tuple(counts)))


def _stragglers(n: int) -> list:
    """n 4 MiB carriers, each pinned by two 1 KiB blocks between three large free blocks
    (the carrier map of a peak's stragglers), beside one dense carrier of 2,000 blocks."""
    mib = 1 << 20
    sparse = [_carrier(4 * mib, 2, 2048, [0] * 10 + [1, 2, 0, 0]) for _ in range(n)]
    return [_carrier(4 * mib, 2000, 2000 * 1700, [3] + [0] * 13, pool=False), *sparse]


def test_from_carriers_rebuilds_the_node_and_is_deterministic(tmp_path):
    cs = _stragglers(12)
    a, b, c = tmp_path / "a.batr", tmp_path / "b.batr", tmp_path / "c.batr"
    kw = {"allocator": "binary_alloc", "schedulers": 2, "max_blocks": 100_000}
    n, fit = tg.from_carriers(a, cs, seed=1, **kw)
    tg.from_carriers(b, cs, seed=1, **kw)
    tg.from_carriers(c, cs, seed=2, **kw)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert (fit.carriers, fit.merge, fit.blocks) == (13, 1, 2024)
    # What stays live at the end is what the carriers hold: every block kept, fillers gone.
    curve, _ = live_curve(a)
    assert len(curve) == n and curve[-1] == 2024
    # Replayed under the flags the carriers were made with (the defaults), the trace leaves the
    # node's unused bytes: 13 carriers of 4 MiB minus the blocks they hold.
    node_unused = sum(x.size - x.blocks_size for x in cs)
    snap = replay_snapshot(a, "", schedulers=2).snapshot
    unused = _bytes(snap, "carriers_size") - _bytes(snap, "blocks_size")
    assert 0.7 * node_unused <= unused <= 1.3 * node_unused, (unused, node_unused)


def test_from_carriers_small_carriers_release_stragglers(tmp_path):
    """The same stream under +MBlmbcs 512: two stragglers pin two small carriers, not 4 MiB."""
    p = tmp_path / "s.batr"
    tg.from_carriers(p, _stragglers(12), allocator="binary_alloc", schedulers=2, seed=1)

    def carriers(flags: str) -> int:
        return _bytes(replay_snapshot(p, flags, schedulers=2).snapshot, "carriers_size")

    assert carriers("+MBas ageffcbf +MBsbct 256 +MBlmbcs 512") < 0.4 * carriers("")


def test_from_carriers_coarsens_blocks_not_carriers(tmp_path):
    """Past max_blocks the trace merges kept neighbours and grows fillers: carrier bytes stay."""
    p, q = tmp_path / "p.batr", tmp_path / "q.batr"
    cs = _stragglers(30)
    n_full, full = tg.from_carriers(p, cs, allocator="binary_alloc", seed=1, max_blocks=100_000)
    n_small, small = tg.from_carriers(q, cs, allocator="binary_alloc", seed=1, max_blocks=5_000)
    assert small.merge > 1 and n_small < n_full / 2
    assert small.carrier_bytes == full.carrier_bytes
    csize = [_bytes(replay_snapshot(x, "").snapshot, "carriers_size") for x in (p, q)]
    assert abs(csize[0] - csize[1]) <= 0.1 * csize[0], csize


def test_from_carriers_peak_of_large_blocks_comes_back(tmp_path):
    """heappeak's shape: two kept 2.4 MiB heaps in single-block carriers after a peak of 80
    heaps of 6 MiB. The peak comes back in the trace; under a raised sbct its heaps land in
    multiblock carriers that the kept heaps then pin (a real node: 1 -> 54 MiB unused)."""
    from beamalloc.analyzer.metrics import container_size

    mib = 1 << 20
    sbc = [_carrier(2488 * 1024, 1, 2488 * 1024 - 64, [0] * 14, pool=False) for _ in range(4)]
    dense = [_carrier(mib, 40, mib // 2, [2] + [0] * 8 + [1] + [0] * 4, pool=False)]
    p = tmp_path / "h.batr"
    tg.from_carriers(p, sbc + dense, allocator="eheap_alloc", schedulers=2, sbct=512 * 1024,
                     peak_sbcs=80, peak_sbc_size=6 * mib, seed=1)  # fmt: skip

    def unused(flags: str) -> int:
        insts = replay_snapshot(p, flags, schedulers=2).snapshot.instances("eheap_alloc")
        return sum(container_size(i, "current", "carriers_size")
                   - container_size(i, "current", "blocks_size") for i in insts)  # fmt: skip

    assert unused("") < 2 * mib
    assert unused("+MHsbct 8192 +MHlmbcs 32768") > 20 * mib


def test_from_carriers_follows_a_traced_stream(tmp_path):
    """`then`: the traced blocks are followed by id; a free of a block older than the trace takes
    one of the dense carriers' blocks; the sparse carriers' blocks stay."""
    from beamalloc.trace import ALLOCATOR_NUMBERS, Event

    b = ALLOCATOR_NUMBERS["binary_alloc"]
    evs = [Event(10 * k, Op.ALLOC, b, 1 + k % 2, 214, 900, 10_000 + k, 0, 1) for k in range(1000)]
    evs += [Event(20_000 + k, Op.FREE, b, 1 + k % 2, 214, 900, 10_000 + k, 0, 1)
            for k in range(0, 1000, 2)]  # fmt: skip
    evs += [Event(30_000 + k, Op.FREE, b, 1, 214, 0, 99_000 + k, 0, 1) for k in range(100)]
    evs.append(Event(40_000, Op.REALLOC, b, 2, 214, 5000, 10_001, 77_777, 1))
    p = tmp_path / "t.batr"
    n, fit = tg.from_carriers(p, _stragglers(12), allocator="binary_alloc", schedulers=2,
                              max_blocks=100_000, then=iter(evs), seed=1)  # fmt: skip
    curve, _ = live_curve(p)
    assert len(curve) == n
    assert curve[-1] == fit.blocks + 500 - 100  # the realloc keeps the count
    # The 24 sparse blocks (2 per straggler carrier) are all still live at the end.
    sizes = {}
    for ev in tg.events(p):
        if ev.op == Op.ALLOC:
            sizes[ev.id] = ev.size
        elif ev.op == Op.FREE:
            sizes.pop(ev.id)
        else:
            sizes.pop(ev.id)
            sizes[ev.new_id] = ev.size
    assert sum(1 for s in sizes.values() if s == 1024 - 16) == 24
