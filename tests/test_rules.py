"""Each rule of docs/erts/tuning.md §1 with a symptom in the statistics: one snapshot that fires it,
one that does not (issue 3, must-hold 2). Snapshots are real (recommend_fixtures.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
from recommend_fixtures import WORKLOADS, load, set_usage

from beamalloc.advice import rules
from beamalloc.advice.findings import facts
from beamalloc.advice.recommend import recommend
from beamalloc.snapshot import Snapshot


def _fired(rule: rules.Rule, snap: Snapshot) -> list:
    return rule(facts(snap))


def _r1_fire() -> Snapshot:
    s = load("healthy")
    s.rss = 2 << 30  # 2 GiB resident against ~80 MiB of carriers
    return s


def _r6_fire() -> Snapshot:
    s = load("healthy")
    for m in s.mseg:
        m.calls["mseg_alloc"], m.cache_hits = 50_000, 5_000
    return s


def _r9_fire() -> Snapshot:
    s = load("binspike_bf")
    inst = s.instances("binary_alloc")[1]  # scheduler 1 kept a fifth of its carriers
    cs = inst.mbcs.carriers_size
    inst.mbcs.carriers_size = type(cs)(cs.current // 5, cs.last_max, cs.max)
    return s


def _r11_fire() -> Snapshot:
    s = load("healthy")
    s.memory.update(total=600 << 20, binary=500 << 20)
    return s


def _oom_fire() -> Snapshot:
    """The slogan of issue 17's OTP 17 dump: a size computed negative, read as unsigned."""
    s = load("heapchurn")
    s.source = "crashdump"
    s.extra["slogan"] = ('eheap_alloc: Cannot allocate 18446744072694856536 bytes of memory '
                         '(of type "heap").')
    return s


def _r13_fire() -> Snapshot:
    s = load("binspike")
    for inst in s.instances("binary_alloc"):
        inst.calls["binary_realloc"] = inst.calls["binary_alloc"] // 2
    return s


def _r16_fire() -> Snapshot:
    """binspike's 23 pooled carriers (128 MiB), and instance 2 failing to fetch any of them:
    most carriers it passed over too full (counters as erl_alloc_util.c's cpool_fetch counts)."""
    s = load("binspike")
    pool = s.instances("binary_alloc")[2].mbcs_pool
    assert pool is not None
    pool.counters.update(fetch=12, fail=9120, fail_shared=40, skip_size=52_000, skip_race=55_000)
    return s


def _r17_fire() -> Snapshot:
    s = load("binspike")
    text = s.extra["erts_mmap"]
    s.extra["erts_mmap"] = text.replace("{used,2162688}", "{used,943718400}", 1)  # 900 MiB
    return s


#: rule id -> (rule, a snapshot that fires it, one that does not, the allocator it names)
CASES: dict[str, tuple[rules.Rule, Callable[[], Snapshot], Callable[[], Snapshot], str | None]] = {
    "OOM": (rules.oom_runaway, _oom_fire, lambda: load("heapchurn"), "eheap_alloc"),
    "R0": (rules.r0_real_usage, lambda: set_usage(load("healthy"), 0.95), lambda: load("healthy"),
           None),
    "R1": (rules.r1_outside_erts_alloc, _r1_fire, lambda: load("healthy"), None),
    "R2": (rules.r2_fragmentation, lambda: load("binspike"), lambda: load("healthy"),
           "binary_alloc"),
    "R3": (rules.r3_binary_fragmentation, lambda: load("binspike"), lambda: load("etschurn"),
           "binary_alloc"),
    "R4": (rules.r4_eheap_fragmentation, lambda: load("heapchurn"), lambda: load("binspike"),
           "eheap_alloc"),
    "R5": (rules.r5_ets_fragmentation, lambda: load("etschurn"), lambda: load("heapchurn"),
           "ets_alloc"),
    "R6": (rules.r6_mseg_cache, _r6_fire, lambda: load("healthy"), "mseg_alloc"),
    "R7": (rules.r7_sbcs, lambda: load("bigbin"), lambda: load("binspike"), "binary_alloc"),
    "R9": (rules.r9_migration_off, _r9_fire, lambda: load("binspike_bf"), "binary_alloc"),
    "R10": (rules.r10_pool_bloat, lambda: load("binspike"), lambda: load("binspike_bf"),
            "binary_alloc"),
    "R11": (rules.r11_binary_leak, _r11_fire, lambda: load("healthy"), None),
    "R13": (rules.r13_realloc, _r13_fire, lambda: load("binspike"), "binary_alloc"),
    "R16": (rules.r16_pool_unusable, _r16_fire, lambda: load("binspike"), "binary_alloc"),
    "R17": (rules.r17_super_carrier_headroom, _r17_fire, lambda: load("binspike"),
            "literal_alloc"),
}  # fmt: skip


@pytest.mark.parametrize("rid", sorted(CASES))
def test_rule_fires(rid: str) -> None:
    rule, fire, _, allocator = CASES[rid]
    found = _fired(rule, fire())
    assert found and all(f.rule == rid for f in found)
    assert allocator is None or allocator in {f.allocator for f in found}
    for f in found:
        assert f.evidence and f.sources  # the numbers and the references behind it
        assert (f.level == "action") == bool(f.advice)  # info never carries a flag


@pytest.mark.parametrize("rid", sorted(CASES))
def test_rule_silent(rid: str) -> None:
    rule, _, quiet, _ = CASES[rid]
    assert _fired(rule, quiet()) == []


def test_every_rule_is_tested_and_documented() -> None:
    assert {rid for rid, _ in rules.RULES} == set(CASES)
    for rid, rule in rules.RULES:
        doc = inspect.getdoc(rule) or ""
        assert doc.startswith(rid + " "), rule.__name__  # its id
        assert "Sources" in doc or "Source" in doc, rule.__name__  # and where it comes from


def _candidates(r: dict) -> dict[str, list[str]]:
    return {x["rule"]: x["candidate_flags"] for x in r["findings"] if x["candidate_flags"]}


def test_advice_is_action_rules_only() -> None:
    """R0, R1, R2, R11 never set a flag; the flag rules give the documented flags. Without a
    prediction (issue 17) they are candidates, never advice."""
    r = recommend(load("binspike_bf"), predict=False)
    assert _candidates(r) == {"R3": ["+MBas ageffcbf", "+MBacul de", "+MBlmbcs 512",
                                     "+MBsbct 256"]}  # fmt: skip
    assert r["emulator_flags"] == "" and r["held_back"][0]["why"].startswith("not predicted")
    assert _candidates(recommend(load("heapchurn"), predict=False))["R4"] == [
        "+MHas ageffcbf", "+MHlmbcs 1024"]  # eheap sbct is never lowered (riak_kv#1820)
    assert _candidates(recommend(load("etschurn"), predict=False))["R5"] == ["+MEas ageffcbf"]


def test_below_threshold_is_information() -> None:
    """A fragmented allocator below the byte floor is not worth a restart: no flag."""
    s = load("binspike")
    for inst in s.allocators:
        for cs in (inst.mbcs, inst.sbcs):
            cs.carriers_size = type(cs.carriers_size)(
                cs.carriers_size.current // 100, 0, cs.carriers_size.max // 100)
        if inst.mbcs_pool is not None:
            inst.mbcs_pool.carriers_size //= 100
            inst.mbcs_pool.blocks = {}
        for b in inst.mbcs.blocks.values():
            b.size = type(b.size)(b.size.current // 1000, 0, b.size.max // 1000)
    r = recommend(s, predict=False)
    assert r["healthy"] is True and r["emulator_flags"] == "" and not _candidates(r)


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_candidates(name: str) -> None:
    """Which rules propose flags on each real workload (before any prediction judges them)."""
    expected = {"binspike": {"R3", "R10"}, "binspike_bf": {"R3"}, "bigbin": {"R7"},
                "etschurn": {"R5", "R10"}, "heapchurn": {"R4", "R10"}, "healthy": set()}
    r = recommend(load(name), predict=False)
    assert set(_candidates(r)) == expected[name]
    assert r["recommendations"] == []  # no prediction, no advice
    # the others have >= 32 MiB of carriers mostly empty: never HEALTHY (bigbin uses 83 %)
    assert r["healthy"] is (name in ("healthy", "bigbin"))
