"""Per-carrier data from real nodes (issue 17, item 1) on OTP 25, 27 and 29: what
instrument:carriers/1 lists adds up to the allocators' own carrier bytes, a node without the
application that ships instrument still gets a full snapshot, the cap bounds what is read, and
nothing of ours is loaded on the target."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from otp import start_node, start_workload

from beamalloc.analyzer import metrics as m
from beamalloc.analyzer.carriers import STRAGGLERS, carrier_map
from beamalloc.collector import live
from beamalloc.collector.terms import parse_term
from beamalloc.snapshot import Snapshot
from beamalloc.versions import instrument_app

pytestmark = pytest.mark.live


def _carrier_bytes(snap: Snapshot, allocator: str) -> tuple[int, int, int]:
    """(carrier bytes, block bytes, pooled carriers) of one allocator from its counters:
    mbcs + sbcs of every instance plus the pooled carriers each instance owns."""
    size = blocks = pooled = 0
    for i in snap.instances(allocator):
        size += m.container_size(i, "current", "carriers_size")
        blocks += m.container_size(i, "current", "blocks_size")
        pooled += i.mbcs_pool.carriers if i.mbcs_pool else 0
    return size, blocks, pooled


@pytest.fixture(scope="module")
def binspike(otp_release: str) -> Snapshot:
    # A spike of 40,000 binaries per worker, one in 4,000 kept: pooled carriers pinned by a few
    # blocks each, as on the spike-and-drop node. On each test release (tests/otp.py):
    # instrument:carriers/1 answers in the same shape on 25, 27 and 29.
    with start_workload(otp_release, "binspike", env={"BURST": "40000"}) as wl:
        wl.wait_ready()
        snap = live.snapshot_node(wl.node, wl.cookie, timeout=60.0)
        # After "ready" the spike's last frees may still hand carriers back (about 1 MB of
        # binary_alloc in 1 of 12 first reads): read until two reads agree, as an idle node does,
        # and the carrier list agrees with the counters read just before it on the pooled
        # carriers (a carrier that entered or left the pool between the two calls of one read
        # made them 15 against 16 in a clean-clone run on OTP 29).
        before = _carrier_bytes(snap, "binary_alloc")
        for _ in range(5):
            time.sleep(0.5)
            snap = live.snapshot_node(wl.node, wl.cookie, timeout=60.0)
            counters = _carrier_bytes(snap, "binary_alloc")
            listed = sum(c.in_pool for c in snap.carriers_of("binary_alloc"))
            if counters == before and listed == counters[2]:
                break
            before = counters
    assert snap.otp_release == otp_release
    return snap


def test_carrier_sizes_add_up(binspike: Snapshot) -> None:
    snap = binspike
    assert snap.carriers is not None and snap.carriers_unavailable is None
    assert snap.carriers_skipped == 0
    assert {c.allocator for c in snap.carriers} == {
        a for a in snap.allocator_names() if _carrier_bytes(snap, a)[0] > 0}
    for a in snap.allocator_names():
        cs = snap.carriers_of(a)
        size, blocks, pooled = _carrier_bytes(snap, a)
        got = sum(c.size for c in cs)
        # The node idles, but our own requests allocate on it while it is read (heaps of the
        # erpc processes, the instrument module's code): a few carriers' worth at most.
        slack = 0 if a == "binary_alloc" else max(size // 20, 1 << 20)
        assert abs(got - size) <= slack, (a, got, size)
        assert abs(sum(c.blocks_size for c in cs) - blocks) <= max(slack, blocks // 50), a
        if a == "binary_alloc":
            assert sum(c.in_pool for c in cs) == pooled
        insts = {i.instance for i in snap.instances(a)}
        assert {c.instance for c in cs} <= insts, a
    b = snap.carriers_of("binary_alloc")
    assert len(b) >= 10 and sum(c.in_pool for c in b) >= 5
    assert all(0 <= c.blocks_size <= c.size and c.free_histogram.start == 256 for c in b)


def test_spike_leaves_stragglers(binspike: Snapshot) -> None:
    cm = carrier_map(binspike)["binary_alloc"]
    assert cm.classification is not None and cm.classification.kind == STRAGGLERS
    assert cm.sparse >= 5 and cm.pinning_bytes < cm.sparse_size // 20
    assert cm.largest_free is not None and cm.largest_free[0] >= 1 << 20


def test_round_trip_of_a_live_snapshot(binspike: Snapshot) -> None:
    back = Snapshot.from_json(binspike.to_json())
    assert back.carriers == binspike.carriers
    assert back.tagged_blocks == binspike.tagged_blocks
    assert binspike.tagged_blocks and any(t.type == "binary" for t in binspike.tagged_blocks)
    assert "instrument" not in (binspike.raw or "")  # the carriers are not repeated as text
    assert parse_term(binspike.raw + ".")


def test_only_instrument_is_loaded(any_target, probe, marker) -> None:
    target = any_target
    loaded = "lists:sort([M || {M, _} <- erpc:call(T, code, all_loaded, [])])"
    before = set(parse_term(probe(target, loaded).strip() + "."))
    snap = live.snapshot_node(target.node, target.cookie)
    after = set(parse_term(probe(target, loaded).strip() + "."))
    assert snap.carriers
    assert after - before <= {"instrument"}  # OTP's own, from the target's code path


def test_cap_reads_whole_instances(target, marker) -> None:
    full = live.snapshot_node(target.node, target.cookie)
    capped = live.snapshot_node(target.node, target.cookie, max_carriers=6)
    assert capped.carriers is not None and 0 < len(capped.carriers) <= 6
    assert capped.carriers_skipped >= len(full.carriers or ()) - 6 - 4  # the node moves a bit
    assert any("capped at 6 carriers" in n for n in capped.notes)
    none = live.snapshot_node(target.node, target.cookie, max_carriers=0)
    assert none.carriers is None and none.carriers_unavailable is None


def test_node_without_tools(otp_release, probe, marker) -> None:
    """Without the application that ships instrument (tools on 25, runtime_tools from 26:
    docs/erts/releases.md §2), named for the node's release."""
    app = instrument_app(otp_release)
    with start_node(eval_=f"code:del_path({app})", release=otp_release) as n:
        _without_tools(n, app, probe)


def _without_tools(n, app, probe) -> None:
    assert "non_existing" in probe(n, "erpc:call(T, code, which, [instrument])")
    snap = live.snapshot_node(n.node, n.cookie)
    assert snap.carriers is None
    assert "no instrument module" in (snap.carriers_unavailable or "")
    assert f"(OTP's {app} application): start it with {app} installed" in \
        snap.carriers_unavailable
    assert len(snap.allocators) > 20 and snap.memory["total"] > 0  # the rest is all there
    env = {**os.environ, "BEAMALLOC_COOKIE": n.cookie}
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "snapshot", n.node, "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and notes[0].startswith("beamalloc: note: no per-carrier data"), notes
    assert '"carriers": null' in r.stdout


def test_watch_reads_carriers_every_nth_sample(target, tmp_path, marker) -> None:
    import io

    from beamalloc.timeseries.store import Store
    from beamalloc.timeseries.watch import Watcher

    db = tmp_path / "w.db"
    w = Watcher([target.node], target.cookie, store_path=str(db), interval=0.5,
                carriers_every=3, out=io.StringIO())
    written = w.run(duration=4.2)
    with Store(db, readonly=True) as st:
        samples = len(st.series(target.node)["t"])
        snaps = [st.snapshot(s["id"]) for s in st.snapshots(target.node)]
    with_carriers = [s for s in snaps if s.carriers is not None]
    assert samples == written >= 5
    # samples 0, 3, 6, ... read carriers, and each such sample is stored whole
    assert len(with_carriers) == (samples + 2) // 3
    assert all(s.carriers for s in with_carriers)


#: Keeps every third of 300,000 binaries: the survivors sit on every carrier the burst made.
#: (No variable holds the whole burst: an -eval fun is interpreted and keeps its bindings.)
SCATTER = ("spawn(fun() -> K = [B || {I, B} <- lists:zip(lists:seq(1, 300000), "
           "[binary:copy(<<1>>, 900) || _ <- lists:seq(1, 300000)]), I rem 3 =:= 0], "
           "erlang:garbage_collect(), register(keeper, self()), "
           "receive stop -> length(K) end end)")


def test_scattered_survivors(node_factory, probe, marker) -> None:
    import time

    n = node_factory(eval_=SCATTER)
    deadline = time.monotonic() + 60
    while "undefined" in probe(n, "erpc:call(T, erlang, whereis, [keeper])"):
        assert time.monotonic() < deadline, "the node never kept its binaries"
        time.sleep(0.2)
    cm = carrier_map(live.snapshot_node(n.node, n.cookie))["binary_alloc"]
    assert cm.classification is not None and cm.classification.kind == "scattered", cm
    assert cm.mbcs >= 10 and cm.sparse <= cm.mbcs // 10
