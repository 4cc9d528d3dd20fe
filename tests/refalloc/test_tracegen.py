"""Trace generators (spike-and-drop, large binaries, ETS churn, stationary mix fitted to a
snapshot) and predict(): what-if from a snapshot alone (issue 4)."""

from __future__ import annotations

from pathlib import Path

from beamalloc import tracegen as tg
from beamalloc.collector.sources import read_file
from beamalloc.replay import replay_snapshot
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
    # a moving realloc allocates the new block before freeing the old (§3.6): +1 at most
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
    """eheap_alloc's heaps (type `heap`, erts_types_otp25.tsv); churn_after=0 ends the trace
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
