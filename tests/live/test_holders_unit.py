"""The holders analysis on tables built by hand (no node): the JSON shape of issue 12 item 4,
where the thresholds fall, what is inferred without the probe and what the probe's measurement
overrides, and the verdict's words."""

from __future__ import annotations

import dataclasses

from beamalloc.analyzer import holders as h
from beamalloc.analyzer import wording
from beamalloc.analyzer.records import NoFlagEntry, Reason, Remedy
from beamalloc.collector.processes import Group, ProbeResult, Proc, ProcessTable

MB = 1 << 20


def proc(pid: str, name: str | None = None, *, status: str = "waiting", mq: int = 0,
         heap: int = 2000, used: int = 1000, survived: int = 0, bins: int = 0, count: int = 0,
         excl: int | None = None) -> Proc:
    return Proc(pid=pid, name=name, initial_call="m:f/0", spawned_as="m:f/0",
                current_function="m:loop/1", status=status, reductions=1, memory=heap + 800,
                heap_bytes=heap, total_heap_bytes=heap, message_queue_len=mq,
                binary_bytes=bins, binary_count=count,
                binary_exclusive_bytes=bins if excl is None else excl, survived_bytes=survived,
                heap_used_bytes=used)


def table(*procs: Proc, idle_heap: int | None = None,
          idle_count: int | None = None) -> ProcessTable:
    ps = list(procs)
    idle = [p for p in ps if p.idle]
    return ProcessTable(
        node="n@h", source="live", count=len(ps), scanned=len(ps), complete=True, procs=ps,
        groups=[Group("m:f/0", len(ps), sum(p.memory for p in ps),
                      sum(p.total_heap_bytes for p in ps), 0, 0, [],
                      len(idle), sum(p.total_heap_bytes for p in idle))],
        wordsize=8, binary_bytes=sum(p.binary_bytes or 0 for p in ps),
        idle_count=len(idle) if idle_count is None else idle_count,
        idle_total_heap_bytes=(sum(p.total_heap_bytes for p in idle) if idle_heap is None
                               else idle_heap))


ROUTER = proc("<0.80.0>", "router", bins=40 * MB, count=40_000, survived=0, heap=20 * MB)
CACHE = proc("<0.81.0>", "cache", bins=10 * MB, count=10_000, survived=800_000, heap=2 * MB)


def test_json_has_the_issues_shape() -> None:
    j = h.processes_json(table(ROUTER, CACHE, proc("<0.9.0>")))
    for k in ("count", "scanned", "complete", "top_binary", "top_heap", "groups", "gc_probe"):
        assert k in j
    row = j["top_binary"][0]
    assert set(row) >= {"pid", "name", "initial_call", "current_function", "binary_bytes",
                        "binary_count", "total_heap_bytes", "message_queue_len"}
    assert row["name"] == "router" and j["gc_probe"] is None
    assert [r["name"] for r in j["top_binary"]] == ["router", "cache"]  # no zero rows


def test_dead_or_live_is_inferred_from_what_survived() -> None:
    found = {f["name"]: f for f in h.findings(table(ROUTER, CACHE)) if f["rule"] == "H1"}
    assert found["router"]["level"] == "action"
    assert found["router"]["evidence"]["holder"]["kind"] == "probably dead"
    assert found["cache"]["level"] == "info"
    assert found["cache"]["evidence"]["holder"]["kind"] == "probably live"
    # 6 words a reference: half of the 40,000 fit in 960,000 bytes; a byte less is "dead"
    for survived, kind in ((20_000 * 48, "probably live"), (20_000 * 48 - 1, "probably dead")):
        f = h.findings(table(dataclasses.replace(ROUTER, survived_bytes=survived)))[0]
        assert f["evidence"]["holder"]["kind"] == kind


def test_the_probe_overrides_the_inference() -> None:
    # the cache's counters say live; the probe freed 9 of its 10 MB: dead after all
    probe = [ProbeResult("<0.81.0>", "cache", binary_before=10 * MB, binary_after=MB,
                         released_binary_bytes=9 * MB, heap_before=2 * MB, heap_after=MB,
                         memory_binary_before=60 * MB, memory_binary_after=51 * MB)]
    f = next(x for x in h.findings(table(ROUTER, CACHE), probe) if x["name"] == "cache")
    assert f["level"] == "action" and f["evidence"]["holder"]["kind"] == "dead"
    assert f["evidence"]["releases"] == 9 * MB and "9.0 MiB" in f["message"]


def test_thresholds() -> None:
    small = proc("<0.5.0>", "small", bins=h.MIN_PINNED - 1, count=10)
    busy = proc("<0.6.0>", "busy", status="running", bins=50 * MB, count=50_000)
    box = proc("<0.7.0>", "box", status="waiting", mq=h.MIN_MAILBOX)
    short = proc("<0.8.0>", "short", mq=h.MIN_MAILBOX - 1)
    found = h.findings(table(small, busy, box, short))
    assert [f["name"] for f in found if f["rule"] == "H1"] == []  # small; busy is not idle
    assert [f["name"] for f in found if f["rule"] == "H3"] == ["box"]


def test_idle_heaps_count_the_whole_node() -> None:
    few = [proc(f"<0.{i}.0>", heap=600_000, used=300_000) for i in range(3)]
    # 500 idle workers on the node, 3 reported: the totals decide, not the rows
    f = next(x for x in h.findings(table(*few, idle_heap=500 * 600_000, idle_count=500))
             if x["rule"] == "H2")
    assert f["level"] == "action" and f["evidence"]["count"] == 500
    assert f["evidence"]["grown_bytes"] == 500 * (600_000 - 233 * 8)
    tiny = [proc(f"<0.{i}.0>", heap=233 * 8) for i in range(1000)]
    assert not [x for x in h.findings(table(*tiny)) if x["rule"] == "H2"]


def test_h_flags_are_weighed_never_advised() -> None:
    box = proc("<0.7.0>", "box", mq=5000)
    j = h.processes_json(table(ROUTER, box))
    assert {x["flag"] for x in j["h_flags"]} >= {"+hmbs", "+hmqd off_heap"}
    assert all(not x["advised"] and x["cost"] and x["why"] for x in j["h_flags"])


def _entry(unused: int, remedies: tuple = ()) -> NoFlagEntry:
    return NoFlagEntry("binary_alloc", unused, unused * 2, 0.5, (), (), None,
                       Reason("no_carrier_data"), None, remedies)


def test_verdict_names_the_holders() -> None:
    j = h.processes_json(table(ROUTER, CACHE))
    said, _ = h.verdict_holders(j, [])
    line = "; ".join(said)
    assert "40.0 MiB of refc binaries are held by router" in line
    assert "cache keeps 10.0 MiB of refc binaries that are live" in line
    assert "garbage" not in line.split("cache keeps")[1]  # a live cache is not told to collect
    restart = Remedy("restart_holders", 500 * MB, "at most", ("x",), True)
    _, (e,) = h.verdict_holders(j, [_entry(500 * MB, (restart,))])
    assert [r.code for r in e.remedies] == ["gc_holder", "bound_live_holder", "restart_holders"]
    assert wording.remedy(e.remedies[0]).startswith("garbage-collect or hibernate router")
    assert wording.remedy(e.remedies[1]).startswith("bound cache")
    # a restart releases what the holder table counts for holders not called live: the router's
    assert e.remedies[2].releases == 40 * MB and e.remedies[1].releases == 0
    assert [x["name"] for x in e.held_by] == ["router", "cache"]


def test_no_release_promised_for_live_binaries() -> None:
    """Issue 22 item 5: where the holder scan calls every holder's binaries live, no restart,
    hibernation or collection is offered as releasing them."""
    j = h.processes_json(table(CACHE))
    restart = Remedy("restart_holders", 500 * MB, "at most", ("x",), True)
    _, (e,) = h.verdict_holders(j, [_entry(500 * MB, (restart,))])
    assert [r.code for r in e.remedies] == ["bound_live_holder"]
    assert e.remedies[0].releases == 0


def test_probe_candidates_are_idle_and_strongest_first() -> None:
    busy = proc("<0.6.0>", "busy", status="running", bins=90 * MB, count=90_000)
    t = table(busy, CACHE, ROUTER, proc("<0.9.0>"))
    assert h.probe_candidates(t, 2) == [ROUTER.pid, CACHE.pid]
    assert h.probe_candidates(t, 0) == []
