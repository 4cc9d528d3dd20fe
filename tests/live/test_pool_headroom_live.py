"""R16 and R17 on real OTP 25 nodes: a literal area filled by persistent_term (live, and until
the node dies and writes its crash dump), and a carrier pool churned across two schedulers.
Nodes get random names and are killed in teardown (tests/otp.py)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from otp import start_node

from beamalloc.advice import rules
from beamalloc.advice.findings import facts
from beamalloc.collector import live
from beamalloc.collector.sources import read_file
from beamalloc.flags import Flag

pytestmark = pytest.mark.live
MIB = 1 << 20
#: N persistent_term values of 100,000 small integers: ~800 KB each in the literal area.
FILL = ("[persistent_term:put({{beamalloc_fill, I}}, list_to_tuple(lists:seq(1, 100000)))"
        " || I <- lists:seq(1, {n})], ok")


def test_literal_area_nearly_full() -> None:
    """+MIscs 64 and 55 persistent_term values: the snapshot's literal super carrier is
    over 80 % used, and R17 advises the power of two that holds it at half: +MIscs 128."""
    n = start_node(["+MIscs", "64"])
    try:
        n.eval(FILL.format(n=55), timeout=60)
        f = facts(live.snapshot_node(n.node, n.cookie, timeout=60.0, max_carriers=0))
    finally:
        n.stop()
    lit = f.super_carriers["literal_mmap"]
    assert lit.size == 64 * MIB and lit.only and 0.80 < lit.used_share < 0.95, lit
    [x] = rules.r17_super_carrier_headroom(f)
    assert x.level == "action" and x.allocator == "literal_alloc"
    assert [a.flag for a in x.advice] == [Flag("I", "scs", 128 * MIB)]


def test_a_default_node_has_headroom() -> None:
    n = start_node()
    try:
        f = facts(live.snapshot_node(n.node, n.cookie, timeout=60.0, max_carriers=0))
    finally:
        n.stop()
    lit = f.super_carriers["literal_mmap"]
    assert lit.size == 1 << 30 and lit.used_share < 0.05  # erl_mmap.h: 1 GiB
    assert rules.r17_super_carrier_headroom(f) == []


@pytest.mark.slow
def test_literal_area_exhausted_crash_dump() -> None:
    """+MIscs 32 and 60 x 800 KB: the node dies `literal_alloc: Cannot allocate`, and its own
    crash dump shows the literal super carrier full: R17 gives the flag the node needed."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "erl_crash.dump"
        n = start_node(["+MIscs", "32", "-env", "ERL_CRASH_DUMP", str(dump)],
                       eval_=FILL.format(n=60) + ", halt().", wait=False)
        try:
            n.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the node did not die of a full literal area")
        finally:
            n.stop()
        f = facts(read_file(str(dump)))
    assert (f.slogan or "").startswith("literal_alloc: Cannot allocate")
    lit = f.super_carriers["literal_mmap"]
    assert lit.size == 32 * MIB and lit.used_share > 0.90, lit
    [x] = rules.r17_super_carrier_headroom(f)
    assert x.level == "action" and [a.flag for a in x.advice] == [Flag("I", "scs", 64 * MIB)]


#: Scheduler 1 maps ~240 MB of 60 KB binaries and keeps every other one; small allocations after
#: it let its half-empty carriers go to the pool; scheduler 2 then asks for 200 KB blocks, which
#: the pooled carriers' 60 KB holes cannot hold (skip_size), their tails sometimes can (fetch).
CHURN = """
On = fun(S, F) -> Self = self(),
         P = spawn_opt(fun() -> Self ! {self(), F()} end, [{scheduler, S}, link]),
         receive {P, R} -> R end end,
Keep = On(1, fun() ->
    Bins = [binary:copy(<<I:8>>, 60000) || I <- lists:seq(1, 4000)],
    K = [B || {B, N} <- lists:zip(Bins, lists:seq(1, 4000)), N rem 2 =:= 0],
    erlang:garbage_collect(), K end),
erlang:garbage_collect(),
On(1, fun() -> [byte_size(binary:copy(<<1>>, 100)) || _ <- lists:seq(1, 100000)], ok end),
Held = On(2, fun() -> [binary:copy(<<I:8>>, 200000) || I <- lists:seq(1, 200)] end),
persistent_term:put(beamalloc_churn, {Keep, Held}),
length(Keep) + length(Held)
"""


def test_pool_churned_counters_read_live() -> None:
    """The fetch counters of a churned pool reach the rule as the node counts them: the summed
    counters of binary_alloc equal the node's own sum over its instances, and fetches succeeded,
    so R16 stays silent."""
    n = start_node()
    try:
        assert n.eval(CHURN, timeout=120).strip() == "2200"
        f = facts(live.snapshot_node(n.node, n.cookie, timeout=60.0, max_carriers=0))
        own = n.eval(
            "lists:foldl(fun({instance, _, P}, Acc) -> "
            "case proplists:get_value(mbcs_pool, P) of undefined -> Acc; Pool -> "
            "[{K, maps:get(K, maps:from_list(Acc), 0) + G * 1000000000 + O} || {K, G, O} "
            "<- Pool] end end, [], erlang:system_info({allocator, binary_alloc}))")
    finally:
        n.stop()
    a = f.allocators["binary_alloc"]
    counted = dict(
        (k.strip(), int(v)) for k, v in
        (kv.split(",") for kv in own.replace("[", "").replace("]", "").replace("\n", "")
         .replace(" ", "").strip("{}").split("},{")))  # fmt: skip
    assert {k: a.pool_counters[k] for k in counted} == counted
    assert a.pool_carriers >= 10 and a.pool_allocated >= 100 * MIB
    assert a.pool_counters["skip_size"] > 0 and a.pool_counters["fetch"] > 0
    assert rules.r16_pool_unusable(f) == []
