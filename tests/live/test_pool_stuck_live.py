"""R16 on a pool that really fails, on real nodes of OTP 25, 27 and 29 (tests/otp.py):
samples/workloads/poolstuck.erl parks half-full binary_alloc carriers in the pool with 60 KB holes,
then asks for 200 KB blocks from another scheduler, round after round; every fetch attempt passes
over every pooled carrier (skip_size) and takes nothing. The rule must fire with the node's own
numbers, and stay silent where the pool serves (`+MBacfml 524288`, the remedy it names) and on a
node that never pooled anything."""

from __future__ import annotations

import re

import pytest
from otp import Node, release_params, start_node, start_workload

from beamalloc.advice import rules
from beamalloc.advice.findings import FETCH_FAILURES, Finding, facts
from beamalloc.collector import live

pytestmark = pytest.mark.live
MIB = 1 << 20
COUNTERS = ("fetch", *FETCH_FAILURES, "skip_size", "skip_busy", "skip_race", "skip_not_pooled")
#: binary_alloc's pool over its instances, as the node counts it: carriers, carriers_size, then
#: each of COUNTERS ({Name, Giga, Ones} in system_info, docs/erts/alloc_util.md §5.1).
OWN = (
    "Pools = [P || {instance, _, I} <- erlang:system_info({allocator, binary_alloc}), "
    "{mbcs_pool, P} <- [lists:keyfind(mbcs_pool, 1, I)]], "
    "Sum = fun(K) -> lists:sum([case T of {K, C} -> C; {K, G, O} -> G * 1000000000 + O end "
    "|| P <- Pools, T <- P, element(1, T) =:= K]) end, "
    "[Sum(K) || K <- [carriers, carriers_size, " + ", ".join(COUNTERS) + "]]"
)


def _own(node: Node) -> dict[str, int]:
    values = [int(x) for x in re.findall(r"\d+", node.eval(OWN))]
    return dict(zip(("carriers", "carriers_size", *COUNTERS), values, strict=True))


def _read(node: Node) -> tuple[dict[str, int], list[Finding], dict[str, int]]:
    """The node's own counters before and after a live snapshot, and R16 on the snapshot."""
    before = _own(node)
    f = facts(live.snapshot_node(node.node, node.cookie, timeout=60.0, max_carriers=0))
    return before, rules.r16_pool_unusable(f), _own(node)


@pytest.mark.parametrize("release", release_params())
def test_r16_fires_on_a_pool_no_instance_reuses(release: str) -> None:
    with start_workload(release, "poolstuck", flags=["+S", "2"]) as wl:
        wl.wait_ready(timeout=240)
        before, found, after = _read(wl)
    # the workload did what it says: 13-ish carriers of 60 KB holes, never fetched from
    assert before["carriers"] >= 8 and before["carriers_size"] >= 48 * MIB, before
    assert before["fetch"] == 0 and before["fail"] >= 1000, before
    [x] = found
    ev = x.evidence
    assert x.rule == "R16" and x.allocator == "binary_alloc" and x.level == "info"
    # the finding's numbers are the node's own (a snapshot allocates too: between two reads)
    for k in ("fetch", *FETCH_FAILURES, "skip_size", "skip_race", "skip_busy"):
        assert before[k] <= ev[k] <= after[k], (k, before, ev, after)
    assert ev["fetch_failures"] == sum(ev[k] for k in FETCH_FAILURES) >= 1000
    assert ev["pool_carriers"] == before["carriers"] == after["carriers"]
    assert ev["pool_carriers_size"] == before["carriers_size"]
    # every carrier passed over was too full: the remedy is acfml, with sbct's bytes
    assert ev["skip_size"] >= ev["fetch_failures"] and ev["skip_size_share"] == 1.0
    assert "+MBacfml 524288" in x.message and f"{ev['fetch_failures']:,}" in x.message


@pytest.mark.parametrize("release", release_params(("25", "29")))
def test_r16_is_silent_where_the_pool_serves(release: str) -> None:
    """The remedy R16 names, in force: `+MBacfml 524288` keeps the half-full carriers out of the
    pool, so the same rounds find no pooled carrier to fail on; and a node that never pooled."""
    with start_workload(release, "poolstuck", flags=["+S", "2", "+MBacfml", "524288"]) as wl:
        wl.wait_ready(timeout=240)
        before, found, _ = _read(wl)
    assert before["carriers"] == 0 and before["fail"] == 0, before
    assert found == []
    with start_node(["+S", "2"], release=release) as n:
        before, found, _ = _read(n)
    assert before["fail"] < 1000 and found == []
