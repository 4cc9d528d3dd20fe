"""The holders analysis on tables built by hand (no node): the JSON shape of issue 12 item 4,
where the thresholds fall, what is inferred without the probe and what the probe's measurement
overrides, and the verdict's words."""

from __future__ import annotations

import dataclasses

from beamalloc.advice import holders as h
from beamalloc.advice import wording
from beamalloc.advice.records import NoFlagEntry, Reason, Remedy
from beamalloc.collector.processes import MFA, Group, ProbeResult, Proc, ProcessTable

MF0 = MFA("m", "f", 0)

MB = 1 << 20


def proc(pid: str, name: str | None = None, *, status: str = "waiting", mq: int = 0,
         heap: int = 2000, used: int = 1000, survived: int = 0, bins: int = 0, count: int = 0,
         excl: int | None = None) -> Proc:
    return Proc(pid=pid, name=name, initial_call=MF0, spawned_as=MF0,
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
        groups=[Group(MFA("m", "f", 0), len(ps), sum(p.memory for p in ps),
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


# ---- idle heaps (issue 24 items 6 and 7) ------------------------------------------------------

WS = 8
MIN = h.MIN_HEAP_WORDS * WS


def worker(i: int, *, heap: int = 32 * 1024, status: str = "waiting", call: str = "w:loop/0",
           name: str | None = None) -> Proc:
    return dataclasses.replace(proc(f"<0.{100 + i}.0>", name, status=status, heap=heap),
                               initial_call=MFA.read(call), spawned_as=MFA.read(call))


def fleet(procs: list[Proc], count: int, heap_each: int, *, call: str = "w:loop/0",
          activity: dict[str, tuple[int, int]] | None = None,
          extra_groups: tuple[Group, ...] = ()) -> ProcessTable:
    """`count` idle members of one group, `procs` among them reported, plus other groups."""
    g = Group(MFA.read(call) or call, count, count * (heap_each + 800), count * heap_each, 0, 0, [],
              count, count * heap_each)
    groups = [g, *extra_groups]
    return ProcessTable(
        node="n@h", source="live", count=count + sum(x.count for x in extra_groups),
        scanned=count, complete=True, procs=procs, groups=groups, wordsize=WS,
        idle_count=sum(x.idle_count or 0 for x in groups),
        idle_total_heap_bytes=sum(x.idle_total_heap_bytes or 0 for x in groups),
        activity=activity, taken_at=100.0 if activity is not None else None)


def test_one_read_is_idle_at_one_instant_and_names_no_candidates() -> None:
    ws = [worker(i) for i in range(5)]
    j = h.processes_json(fleet(ws, 1000, 32 * 1024))
    ih = j["idle_heaps"]
    assert ih["idle_by"] == "one instant" and ih["count"] == 1000
    assert ih["releases"] == ih["bound"] == 1000 * (32 * 1024 - MIN)  # a bound: beyond minimum
    f = next(x for x in j["findings"] if x["rule"] == "H2")
    assert "idle at one instant" in f["title"] and "Hibernation candidates" not in f["message"]
    assert "at most" in f["message"]
    # no verdict on one unprobed read, and no hibernation remedy offered
    assert h.idle_verdict(j, 40 * MB) is None
    _, (e,) = h.verdict_holders(j, [dataclasses.replace(_entry(10 * MB),
                                                        allocator="eheap_alloc")])
    assert "hibernate_idle" not in [r.code for r in e.remedies]


def test_two_reads_decide_who_is_idle() -> None:
    """Five reported members waiting when read; three did nothing between the reads, one spent
    reductions (it handled messages), one had a message waiting at the first read."""
    ws = [worker(i) for i in range(5)]
    before = {p.pid: (1000, 0) for p in ws} | {"<0.900.0>": (5, 0)}
    after = dict(before) | {ws[3].pid: (1000 + h.IDLE_REDUCTIONS + 1, 0),
                            ws[0].pid: (1000 + h.IDLE_REDUCTIONS, 0)}
    before[ws[4].pid] = (1000, 2)
    earlier = fleet(ws, 1000, 32 * 1024, activity=before)
    later = dataclasses.replace(earlier, activity=after, taken_at=101.0)
    idle = h.idleness(later, earlier)
    assert idle.by == "two reads" and idle.seconds == 1.0
    assert [idle.idle(p) for p in ws] == [True, True, True, False, False]
    j = h.processes_json(later, None, earlier)
    ih = j["idle_heaps"]
    # the group's 1,000 members scaled by its reported members' share that stayed quiet: 3 of 5
    assert ih["idle_by"] == "two reads" and ih["count"] == 600
    f = next(x for x in j["findings"] if x["rule"] == "H2")
    assert f["title"].startswith("600 idle processes") and "Hibernation candidates" in f["message"]
    assert "1.0 s apart" in f["message"]
    assert h.probe_candidates(later, 5, earlier) == [p.pid for p in ws[:3]]


def test_otp_processes_are_apart() -> None:
    """OTP's own processes are never idle candidates: by name (code_server, spawned the
    application's way, erlang:apply/2 on OTP 25) or by the module of their initial call."""
    code = worker(0, name="code_server", heap=400_000, call="erlang:apply/2")
    app = worker(1, heap=400_000, call="erlang:apply/2")
    purger = Group(MFA("erts_code_purger", "start", 0), 1, 3000, 2000, 0, 0, [], 1, 2000)
    t = fleet([code, app], 2, 400_000, call="erlang:apply/2", extra_groups=(purger,))
    assert h.is_system("code_server", MFA("erlang", "apply", 2))
    assert h.is_system(None, MFA("erts_literal_area_collector", "start", 0))
    assert not h.is_system("my_server", MFA("my_server", "init", 1))
    # the module is the call's typed part: text is never split for it (issue 27 item 1)
    assert not h.is_system(None, "erts_literal_area_collector:start/0")
    j = h.processes_json(t)
    ih = j["idle_heaps"]
    assert ih["count"] == 1 and ih["total_heap_bytes"] == 400_000
    assert ih["system"] == {"count": 2, "total_heap_bytes": 402_000}
    assert [g["system"] for g in j["groups"]] == [False, True]
    assert h.probe_candidates(t, 3) == [app.pid]


def test_the_probe_measures_a_group_and_the_verdict_names_it() -> None:
    """3 of 10,000 idle members probed: the share of their heaps a collection released stands
    for the group (an estimate from a measurement, not the bound)."""
    call = "feeley:'-link_of/3-fun-0-'/0"
    ws = [worker(i, call=call) for i in range(3)]
    t = fleet(ws, 10_000, 32 * 1024, call=call)
    probe = [ProbeResult(p.pid, None, heap_before=32 * 1024, heap_after=8 * 1024) for p in ws]
    assert h.probe_candidates(t, 3) == [p.pid for p in ws]
    j = h.processes_json(t, probe)
    g = j["idle_heaps"]["groups"][0]
    assert g["how"] == "probe" and g["probed"] == 3
    assert g["releases"] == 10_000 * 24 * 1024 < g["bound"]
    r = h.idle_verdict(j, 400 * MB)
    assert r is not None and r.code == "idle_heaps" and not r.numbers["bound"]
    line = wording.fit(wording.idle_headline(r.numbers))
    assert line.startswith("NO FLAG HELPS: ~234.4 MiB of 400.0 MiB is dead in idle heaps")
    assert len(line) <= 100
    # below half of the node: no verdict of its own (the holders' line says it)
    assert h.idle_verdict(j, 500 * MB) is None
    # the bound without the probe is said as one
    assert h.idle_verdict(h.processes_json(t), 400 * MB) is None  # one read, unprobed


def test_a_queue_is_bounded_by_name_or_not_at_all() -> None:
    """The generic "a queue or cache" remedy names the queue (a long mailbox) or is dropped."""
    generic = Remedy("bound_queue", 10 * MB, "at most", ("x",), True)
    _, (e,) = h.verdict_holders(h.processes_json(table(ROUTER)), [_entry(20 * MB, (generic,))])
    assert "bound_queue" not in [r.code for r in e.remedies]
    box = proc("<0.7.0>", "slow_consumer", mq=50_000)
    _, (e,) = h.verdict_holders(h.processes_json(table(box)), [_entry(20 * MB, (generic,))])
    (q,) = [r for r in e.remedies if r.code == "bound_queue"]
    assert q.who == "slow_consumer" and "slow_consumer" in wording.remedy(q)
    assert "slow_consumer" in wording.remedy_short(q)


def test_probe_takes_members_that_wait_where_the_group_waits() -> None:
    """The main process of a fleet, with the largest heap of its group, waits elsewhere: the
    probe takes the members that wait where most of the group does, which speak for it."""
    main = dataclasses.replace(worker(0, heap=400_000), current_function="app:main/0")
    ws = [main, *(worker(i) for i in range(1, 4))]
    t = fleet(ws, 5000, 32 * 1024)
    assert h.probe_candidates(t, 2) == [ws[1].pid, ws[2].pid]


def test_terminal_shows_idle_heaps_and_how_they_are_known() -> None:
    from rich.console import Console

    from beamalloc.reporters.holders import render

    ws = [worker(i) for i in range(3)]
    probe = [ProbeResult(p.pid, None, heap_before=32 * 1024, heap_after=2048) for p in ws]
    for pr, want in ((None, ("up to", "bound", "idle at one instant")),
                     (probe, ("~", "GC probe on 3"))):
        c = Console(record=True, width=120, color_system=None)
        render(h.processes_json(fleet(ws, 1000, 32 * 1024), pr), c)
        text = c.export_text()
        row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("w:loop/0")
                   and "1,000" in ln and ("bound" in ln or "probe" in ln))
        assert all(x in row or x in text for x in want), row


def test_a_sampled_scan_stands_for_the_node() -> None:
    """A scan its budget cut read a fair sample: 2,500 of 10,000 processes, 2,500 idle members
    read, so 10,000 on the node."""
    t = dataclasses.replace(fleet([worker(0)], 2500, 32 * 1024), count=10_000, scanned=2500,
                            complete=False)
    ih = h.processes_json(t)["idle_heaps"]
    assert ih["scaled"] == 4.0 and ih["count"] == 10_000
    assert ih["releases"] == 4 * 2500 * (32 * 1024 - MIN)
    f = next(x for x in h.findings(t) if x["rule"] == "H2")
    assert "scaled from the 2,500 of 10,000 read" in f["message"]
    assert h.processes_json(fleet([worker(0)], 2500, 32 * 1024))["idle_heaps"]["scaled"] is None
