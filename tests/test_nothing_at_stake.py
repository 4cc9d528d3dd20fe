"""Issue 22 item 8, the matrix's OTP 27 churn cell under the defaults: a node mostly empty as a
whole whose every allocator holds a few MiB unused is "nothing at stake" (HEALTHY, said as
such), never a NO FLAG HELPS that claims no +M flag releases those MiB (R3's flags, measured on
that node, released 87 % of its 8.7 MiB)."""

from __future__ import annotations

import dataclasses
import json

from recommend_fixtures import load

from beamalloc.advice import wording
from beamalloc.advice.findings import facts
from beamalloc.advice.recommend import verdict
from beamalloc.advice.records import HEALTHY, NO_FLAG
from beamalloc.advice.rules import MIN_UNUSED
from beamalloc.snapshot import Snapshot, Triple

MIB = 1 << 20


def thinned(usage: dict[str, float]) -> Snapshot:
    """The healthy workload's snapshot with each named allocator's carriers grown so that its
    blocks fill `usage` of them (its pool emptied into mbcs)."""
    snap = load("healthy")
    for inst in snap.allocators:
        if inst.allocator not in usage:
            continue
        for cs in (inst.mbcs, inst.sbcs):
            cur = int(cs.block_size.current / usage[inst.allocator])
            cs.carriers_size = Triple(cur, cur, max(cur, cs.carriers_size.max))
        if inst.mbcs_pool is not None:
            inst.mbcs_pool = dataclasses.replace(inst.mbcs_pool, carriers=0, carriers_size=0,
                                                 blocks={})  # fmt: skip
    return snap


#: binary_alloc 27.0 MiB unused, ets_alloc 21.3, ll_alloc 17.5, eheap_alloc 13.4: the node
#: 41 % used with 82 MiB unused, no allocator at the 32 MiB a rule fires from.
SPREAD = {"binary_alloc": 0.55, "ets_alloc": 0.35, "ll_alloc": 0.30, "eheap_alloc": 0.30}


def test_a_few_mib_per_allocator_is_nothing_at_stake() -> None:
    snap = thinned(SPREAD)
    f = facts(snap)
    assert f.usage < 0.5 and f.unused >= MIN_UNUSED  # mostly empty as a whole
    assert all(a.unused < MIN_UNUSED for a in f.allocators.values())
    r = verdict(snap)
    v = r.verdict
    assert v.state == HEALTHY and v.reasons[0].code == "nothing_at_stake"
    assert not v.no_flag_helps and not v.advised
    n = v.reasons[0].numbers
    assert n["allocator"] == "binary_alloc" and 26 * MIB < n["allocator_unused"] < 28 * MIB
    head, why = wording.headline(v), wording.why(v)
    assert head.startswith("HEALTHY: nothing at stake: ") and "binary_alloc" in head
    assert "no +M flag releases" not in head and len(head) <= wording.HEADLINE_MAX
    assert why and why[0].startswith("Why: ") and "32.0 MiB" in why[0] and "80.3 MiB" in why[0]
    # the first line stands alone at 80 columns too (the first part is kept whole)
    assert len(wording.fit(wording.headline_parts(v), 80)) <= 80
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["healthy"] is True and doc["verdict"]["no_flag_helps"] == []
    assert doc["verdict"]["reasons"][0]["code"] == "nothing_at_stake"


def test_one_allocator_at_the_floor_is_still_at_stake() -> None:
    """The same node with binary_alloc at 40 MiB unused: that is at stake, so the verdict says
    what holds it (NO FLAG HELPS with its remedies, or a rule's flags), never nothing at stake."""
    snap = thinned({**SPREAD, "binary_alloc": 0.45})
    assert facts(snap).allocators["binary_alloc"].unused >= MIN_UNUSED
    v = verdict(snap, predict=False).verdict
    assert v.reasons[0].code != "nothing_at_stake" and v.state != HEALTHY
    if v.state == NO_FLAG:
        assert v.no_flag_helps and v.no_flag_helps[0].allocator == "binary_alloc"
