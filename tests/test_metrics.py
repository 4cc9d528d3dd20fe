"""recon_alloc's numbers on fixtures whose expected values are worked out from the spec by hand
(docs/erts/recon-formulas.md §0.4 and §1), and on recon's own published output (§2)."""

from __future__ import annotations

import pytest
from support import DATA

from beamalloc.analyzer import metrics as m
from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file


@pytest.fixture(scope="module")
def hand():
    return read_file(str(DATA / "hand_recon.txt"))


def test_memory_current_adds_the_pool_and_skips_literal_alloc(hand):
    # used: binary 0 mbcs 1000; binary 1 mbcs 500 + pool 300 + sbcs 600000; eheap 0 mbcs 250.
    # literal_alloc (100 used of 10000) is not one of recon's util allocators (§0.3).
    assert m.memory(hand, "used") == 1000 + 500 + 300 + 600000 + 250 == 602050
    # allocated: 4000; 2000 + pool 1000 + 602112; 1000.
    assert m.memory(hand, "allocated") == 4000 + 2000 + 1000 + 602112 + 1000 == 610112
    assert m.memory(hand, "unused") == 610112 - 602050
    assert m.memory(hand, "usage") == 602050 / 610112


def test_memory_max_uses_element_four_and_ignores_the_pool(hand):
    assert m.memory(hand, "used", "max") == 3000 + 900 + 600000 + 250
    assert m.memory(hand, "allocated", "max") == 8000 + 2000 + 602112 + 1000


def test_fragmentation_current_values_and_order(hand):
    rows = m.fragmentation(hand)
    # weights: binary 1 = (1 - 600000/602112)*602112 + (1 - 800/3000)*3000 ≈ 4312,
    # binary 0 = 0.75 * 4000 = 3000, eheap 0 = 0.75 * 1000 = 750.
    assert [k for k, _ in rows] == [("binary_alloc", 1), ("binary_alloc", 0), ("eheap_alloc", 0)]
    assert rows[0][1] == {
        "sbcs_usage": 600000 / 602112,
        "mbcs_usage": 800 / 3000,
        "sbcs_block_size": 600000,
        "sbcs_carriers_size": 602112,
        "mbcs_block_size": 800,
        "mbcs_carriers_size": 3000,
    }
    assert list(rows[0][1]) == list(m.FRAGMENTATION_KEYS)  # recon's key order
    assert rows[1][1]["sbcs_usage"] == 1.0  # no SBCs: usage(0, 0) is 1.0
    assert rows[1][1]["mbcs_usage"] == 0.25


def test_average_block_sizes_and_sbcs_to_mbcs(hand):
    assert m.average_block_sizes(hand) == [
        ("binary_alloc", {"mbcs": (1000 + 500 + 300) / (2 + 1 + 1), "sbcs": 600000 / 1}),
        ("eheap_alloc", {"mbcs": 250 / 1, "sbcs": 0}),
    ]
    ratios = m.sbcs_to_mbcs(hand)
    # binary 1: 1 SBC block against 1 MBC + 1 pool block; the two 0.0 ties sort by key, descending.
    assert ratios == [
        (("binary_alloc", 1), 0.5),
        (("eheap_alloc", 0), 0.0),
        (("binary_alloc", 0), 0.0),
    ]
    assert isinstance(dict(ratios)[("eheap_alloc", 0)], float)


def test_cache_hit_rates_count_giga_calls(hand):
    rates = m.cache_hit_rates(hand)
    # mseg 1 has {mseg_alloc,1,0}: 10^9 calls and no hit, so 10^9 misses: first.
    assert rates == [
        (1, {"hit_rate": 0.0, "hits": 0, "calls": 1_000_000_000}),
        (0, {"hit_rate": 0.75, "hits": 3, "calls": 4}),
    ]


def test_allocated_types_and_instances(hand):
    assert m.allocated_types(hand) == [
        ("binary_alloc", 4000 + 2000 + 1000 + 602112),
        ("eheap_alloc", 1000),
    ]
    assert m.allocated_instances(hand) == [(0, 5000), (1, 605112)]


def test_recon_published_pool_case():
    """recon's own output for pooltest.erl (docs/erts/recon-formulas.md §2), to the last digit."""
    snap = read_file(str(DATA / "pooltest_raw.txt"))
    cur = dict(m.fragmentation(snap))[("binary_alloc", 1)]
    peak = dict(m.fragmentation(snap, "max"))[("binary_alloc", 1)]
    assert cur["mbcs_usage"] == 0.01967084845780523
    assert (cur["mbcs_block_size"], cur["mbcs_carriers_size"]) == (8035264, 408485888)
    assert peak["mbcs_usage"] == 0.9831985578899607
    assert (peak["mbcs_block_size"], peak["mbcs_carriers_size"]) == (401622736, 408485888)


def test_analysis_json_carries_recon_values(hand):
    a = analyze(hand).to_json()
    assert a["totals"] == {
        "used": 602050,
        "allocated": 610112,
        "unused": 8062,
        "usage": 602050 / 610112,
    }
    # beamalloc's own: literal_alloc is reported beside recon's totals, not inside them.
    assert a["totals_all"]["allocated"] == 610112 + 10000
    rows = {(r["allocator"], r["instance"]): r for r in a["allocators"]}
    assert rows[("literal_alloc", 0)]["in_recon"] is False
    # recon's fragmentation(current) keys, worked out by hand from the fixture (§1); binary 1's
    # mbcs include its pool carrier (2000 + 1000 bytes holding 500 + 300).
    by_hand = {
        ("binary_alloc", 0): (1.0, 1000 / 4000, 0, 0, 1000, 4000),
        ("binary_alloc", 1): (600000 / 602112, 800 / 3000, 600000, 602112, 800, 3000),
        ("eheap_alloc", 0): (1.0, 250 / 1000, 0, 0, 250, 1000),
        ("literal_alloc", 0): (1.0, 100 / 10000, 0, 0, 100, 10000),
    }
    assert {key: tuple(rows[key][k] for k in m.FRAGMENTATION_KEYS) for key in rows} == by_hand
    assert [(r["allocator"], r["instance"]) for r in a["allocators"]][:2] == [
        ("literal_alloc", 0),
        ("binary_alloc", 1),
    ]  # 9900 unused bytes beats 4312
    assert rows[("binary_alloc", 1)]["pool"]["carriers_size"] == 1000


def test_same_numbers_from_every_format_of_one_node():
    """The OTP 22 raw dump and the OTP 22 crash dump describe the same node."""
    a = analyze(read_file(str(DATA / "otp22_raw.txt"))).to_json()
    b = analyze(read_file(str(DATA / "otp22_crash.dump"))).to_json()
    for key in ("totals", "totals_max", "average_block_sizes", "sbcs_to_mbcs"):
        assert a[key] == b[key], key
    counted = (
        *m.FRAGMENTATION_KEYS,
        "unused",
        "mbcs_blocks",
        "sbcs_blocks",
        "mbcs_carriers",
        "sbcs_carriers",
        "pool",
        "max",
    )
    assert [{k: r[k] for k in counted} for r in a["allocators"]] == [
        {k: r[k] for k in counted} for r in b["allocators"]
    ]
    # pool blocks of OTP 22 count as the owner's (recon adds blocks_size of the pool)
    assert a["totals"]["used"] == 20000 + 50000 + 7000
