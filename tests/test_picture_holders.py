"""The largest holder whatever its kind (issue 24 item 2): a group of processes that share an
initial call is named where it holds more than any single process, table or category, and
never where one member holds most of it; OTP's own groups are apart. The processes sections
here are shaped as advice/holders.py processes_json writes them; the snapshot is a real
one (samples/workloads/snapshots/healthy.json) with its erlang:memory() set for each case.

Real nodes: tests/live/test_picture_groups_live.py (feeley.erl on OTP 25, 27 and 29)."""

from __future__ import annotations

import copy
from typing import Any

from support import ROOT

from beamalloc.advice.wording import holder_label, holder_sentence
from beamalloc.analyzer.analysis import carrier_bytes, type_rows
from beamalloc.analyzer.categories import GROUP_OVER_ONE, picture
from beamalloc.collector.sources import read_file

SNAP = read_file(str(ROOT / "samples" / "workloads" / "snapshots" / "healthy.json"))
MIB = 1 << 20


def _snap(processes: int, ets: list[dict[str, Any]] | None = None) -> Any:
    s = copy.deepcopy(SNAP)
    s.memory = {"total": processes + 60 * MIB, "processes": processes, "system": 60 * MIB,
                "atom": 1 * MIB, "binary": 2 * MIB, "code": 20 * MIB, "ets": 30 * MIB}
    s.extra.pop("ets", None)
    if ets is not None:
        s.extra["ets"] = {"count": len(ets), "read": len(ets), "tables": ets}
    return s


def _proc(pid: str, memory: int, initial_call: str) -> dict[str, Any]:
    return {"pid": pid, "name": None, "initial_call": initial_call,
            "current_function": "m:loop/1", "memory": memory, "binary_bytes": 0}


def _processes(groups: list[dict[str, Any]], top: list[dict[str, Any]],
               waits: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"source": "live", "count": sum(g["count"] for g in groups), "complete": True,
            "scanned": sum(g["count"] for g in groups), "top_heap": top, "top_binary": [],
            "groups": groups, "idle_heaps": {"groups": [
                {"initial_call": k, "current_function": v} for k, v in (waits or {}).items()]},
            **kw}


def _group(key: str, count: int, memory: int, system: bool = False,
           idle: int = 0) -> dict[str, Any]:
    return {"initial_call": key, "count": count, "memory": memory, "system": system,
            "idle_count": idle}


def test_a_group_of_idle_processes_is_the_largest_holder_over_its_members() -> None:
    """Feeley's shape: 10,000 processes of 33 KiB each beside one process of 2 MiB."""
    groups = [_group("erlang:apply/2", 10_000, 10_000 * 33 * 1024, idle=9_999),
              _group("shell:server/1", 1, 2 * MIB)]
    top = [_proc("<0.90.0>", 2 * MIB, "shell:server/1"),
           _proc("<0.100.0>", 34 * 1024, "erlang:apply/2")]
    p = _processes(groups, top, {"erlang:apply/2": "feeley:link_of/3"})
    c = picture(_snap(330 * MIB), carrier_bytes(type_rows(SNAP)), p)
    h = c.largest
    assert h is not None and h.kind == "process_group"
    assert (h.name, h.members, h.bytes) == ("feeley:link_of/3", 10_000, 10_000 * 33 * 1024)
    assert "spawned as erlang:apply/2" in h.detail and "9,999 waiting" in h.detail
    assert c.largest_notable
    assert h.spawned_as == "erlang:apply/2" and h.idle == 9_999 and not h.scaled
    assert holder_label(h) == ("10,000 processes spawned as erlang:apply/2, most "
                               "waiting in feeley:link_of/3")
    assert holder_label(h, short=True) == "feeley:link_of/3 ×10,000"
    s = holder_sentence(h, c.largest_share)
    assert s.startswith("10,000 processes spawned as erlang:apply/2, most waiting in "
                        "feeley:link_of/3 hold 322.3 MiB, ")
    assert s.endswith("the largest holder (9,999 waiting with an empty mailbox).")
    cat = next(x for x in c.categories if x.name == "processes")
    assert cat.holders[0] == h
    # a group overlaps its members listed beside it: counted once in holders_bytes
    assert cat.holders_bytes == 2 * MIB + 34 * 1024


def test_a_group_named_by_its_initial_call_when_it_says_what_runs() -> None:
    groups = [_group("session:init/1", 500, 200 * MIB)]
    c = picture(_snap(300 * MIB), carrier_bytes(type_rows(SNAP)),
                _processes(groups, [_proc("<0.1.0>", MIB, "session:init/1")]))
    assert c.largest is not None and c.largest.name == "session:init/1"
    assert holder_label(c.largest) == "500 processes of session:init/1"


def test_a_group_one_member_dominates_is_that_member() -> None:
    big = 100 * MIB
    groups = [_group("worker:init/1", 3, big + 2 * MIB)]
    top = [_proc("<0.5.0>", big, "worker:init/1"), _proc("<0.6.0>", MIB, "worker:init/1")]
    c = picture(_snap(200 * MIB), carrier_bytes(type_rows(SNAP)), _processes(groups, top))
    assert c.largest is not None and c.largest.kind == "process"
    assert c.largest.name.startswith("<0.5.0>")
    assert big + 2 * MIB < GROUP_OVER_ONE * big  # the reason: the group is its one member


def test_otp_groups_and_single_member_groups_are_not_groups() -> None:
    groups = [_group("supervisor:kernel/1", 40, 80 * MIB, system=True),
              _group("lonely:init/1", 1, 5 * MIB)]
    c = picture(_snap(100 * MIB), carrier_bytes(type_rows(SNAP)),
                _processes(groups, [_proc("<0.7.0>", 5 * MIB, "lonely:init/1")]))
    assert c.largest is not None and c.largest.kind == "process"


def test_a_larger_ets_table_beats_a_group() -> None:
    ets = [{"name": "cache", "bytes": 400 * MIB, "owner": "<0.9.0>", "type": "set",
            "objects": 10}]
    groups = [_group("session:init/1", 500, 200 * MIB)]
    c = picture(_snap(250 * MIB, ets), carrier_bytes(type_rows(SNAP)),
                _processes(groups, [_proc("<0.1.0>", MIB, "session:init/1")]))
    assert c.largest is not None and (c.largest.kind, c.largest.name) == ("ets_table", "cache")


def test_a_sampled_scan_scales_its_groups() -> None:
    groups = [_group("session:init/1", 250, 100 * MIB)]
    p = _processes(groups, [_proc("<0.1.0>", MIB, "session:init/1")])
    p.update(count=1000, scanned=250, complete=False)
    c = picture(_snap(450 * MIB), carrier_bytes(type_rows(SNAP)), p)
    assert c.largest is not None
    assert (c.largest.members, c.largest.bytes) == (1000, 400 * MIB)
    assert "scaled from a sample" in c.largest.detail


def test_malformed_groups_are_left_out() -> None:
    groups: list[Any] = [{"initial_call": None, "count": 5, "memory": 9 * MIB},
                         {"initial_call": "a:b/0", "count": "x", "memory": 9 * MIB},
                         {"initial_call": "a:c/0", "count": 5, "memory": -1}]
    c = picture(_snap(50 * MIB), carrier_bytes(type_rows(SNAP)),
                _processes([], [_proc("<0.1.0>", MIB, "a:b/0")]) | {"groups": groups})
    assert c.largest is not None and c.largest.kind != "process_group"


def test_otp_members_of_a_mixed_group_are_taken_out() -> None:
    """OTP 25 and crash dumps group every proc_lib process under proc_lib:init_p/5: OTP's own
    members reported there (advice/holders.py `otp_count`, `otp_memory`) are not the
    application's, and the group is weighed against its largest application member."""
    g = _group("proc_lib:init_p/5", 40, 60 * MIB, idle=40)
    g.update(otp_count=30, otp_memory=50 * MIB, largest_member=MIB)
    c = picture(_snap(100 * MIB), carrier_bytes(type_rows(SNAP)),
                _processes([g], [_proc("<0.1.0>", 3 * MIB, "x:y/0")],
                           {"proc_lib:init_p/5": "gen_server:loop/7"}))
    h = c.largest
    assert h is not None and h.kind == "process_group"
    assert (h.members, h.bytes) == (10, 10 * MIB)
    assert "10 waiting with an empty mailbox" in h.detail
    # where OTP's own hold nearly all of it, no group is named
    g.update(otp_memory=int(59.5 * MIB))
    c = picture(_snap(100 * MIB), carrier_bytes(type_rows(SNAP)),
                _processes([g], [_proc("<0.1.0>", 3 * MIB, "x:y/0")]))
    assert c.largest is not None and c.largest.kind == "process"
