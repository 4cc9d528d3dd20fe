"""Snapshot -> JSON -> Snapshot is lossless (beamalloc/snapshot.py, schema beamalloc.snapshot/1)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import DATA, SAMPLES

from beamalloc.collector.sources import read_file
from beamalloc.snapshot import (
    NUMERIC_OPTIONS,
    SOURCES,
    AllocatorInstance,
    BlockStats,
    CarrierStats,
    FixType,
    MsegInstance,
    PoolStats,
    Snapshot,
    SnapshotError,
    Triple,
)

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_@.'\"<>\\é", min_size=1, max_size=16)
counts = st.integers(min_value=0, max_value=2**64 - 1)
triples = st.builds(Triple, counts, counts, counts)
option_values = st.one_of(counts, st.booleans(), names)
# Sizes and counts are integers (Snapshot.check refuses `sbct: "abc"`); other options any value.
options = st.dictionaries(names.filter(lambda k: k not in NUMERIC_OPTIONS), option_values,
                          max_size=5) | st.dictionaries(st.sampled_from(sorted(NUMERIC_OPTIONS)),
                                                        counts, max_size=3)
carrier_stats = st.builds(
    CarrierStats,
    blocks=st.dictionaries(names, st.builds(BlockStats, triples, triples), max_size=3),
    carriers=triples,
    carriers_size=triples,
    mseg_carriers=counts,
    sys_carriers=counts,
    mseg_carriers_size=counts,
    sys_carriers_size=counts,
)
pools = st.builds(
    PoolStats,
    blocks=st.dictionaries(names, st.tuples(counts, counts), max_size=3),
    # 2^63 and above is a wrapped counter, read as 0 with a note on load (snapshot.WRAP)
    carriers=st.integers(0, 2**63 - 1),
    carriers_size=st.integers(0, 2**63 - 1),
    counters=st.dictionaries(names, counts, max_size=3),
)
instances = st.builds(
    AllocatorInstance,
    allocator=names,
    instance=st.integers(0, 1024),
    options=options,
    mbcs=carrier_stats,
    sbcs=carrier_stats,
    mbcs_pool=st.none() | pools,
    calls=st.dictionaries(names, counts, max_size=4),
    fix_types=st.none() | st.lists(st.builds(FixType, names, counts, counts), max_size=2),
    versions=st.none() | st.lists(names, max_size=2),
)
msegs = st.builds(
    MsegInstance,
    instance=st.integers(0, 64),
    options=options,
    cached_segments=counts,
    cache_hits=counts,
    segments=triples,
    segments_watermark=counts,
    segments_size=triples,
    calls=st.dictionaries(names, counts, max_size=3),
)
json_values = st.recursive(
    st.none() | st.booleans() | counts | names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
snapshots = st.builds(
    Snapshot,
    node=names,
    source=st.sampled_from(SOURCES),
    taken_at=st.none() | st.floats(0, 4e9, allow_nan=False),
    otp_release=st.none() | names,
    erts_version=st.none() | names,
    wordsize=st.none() | st.sampled_from([4, 8]),
    schedulers=st.none() | st.integers(1, 1024),
    os_pid=st.none() | st.integers(1, 2**22),
    memory=st.dictionaries(names, counts, max_size=4),
    rss=st.none() | counts,
    allocators=st.lists(instances, max_size=4),
    mseg=st.lists(msegs, max_size=3),
    extra=st.dictionaries(names, json_values, max_size=3),
    notes=st.lists(names, max_size=3),
    truncated=st.booleans(),
    raw=st.none() | names,
)


@given(snapshots)
@settings(max_examples=200, deadline=None)
def test_json_round_trip_is_lossless(snap):
    text = snap.to_json()
    back = Snapshot.from_json(text)
    assert back == snap
    assert back.to_json() == text


@pytest.mark.parametrize(
    "path",
    [
        SAMPLES / "recon_snapshot.txt",
        SAMPLES / "raw_allocator_dump.txt",
        SAMPLES / "erl_crash.dump",
        DATA / "otp22_raw.txt",
        DATA / "otp22_crash.dump",
    ],
    ids=lambda p: p.name,
)
def test_real_inputs_round_trip_through_the_cli(path, tmp_path, cli):
    out = tmp_path / "snap.json"
    assert cli("snapshot", str(path), "-o", str(out)).returncode == 0
    snap = read_file(str(path))
    back = Snapshot.from_json(out.read_text())
    assert back == snap
    # and analyzing the JSON gives what analyzing the original gives, bar a crash dump's
    # process sections, which a Snapshot does not carry (docs/processes.md), and the process
    # groups the categories name from them (analyzer/categories.py)
    a = json.loads(cli("analyze", str(path), "--json").stdout)
    b = json.loads(cli("analyze", str(out), "--json").stdout)
    assert b["processes"] is None and (a["processes"] is None) == (snap.source != "crashdump")
    for c in a["categories"]["categories"]:
        c["holders"] = [h for h in c["holders"] if h["kind"] != "process_group"]
    assert (a["categories"]["largest"] or {}).get("kind") != "process_group"
    assert {**a, "processes": None} == b


def test_the_schema_is_named_and_checked():
    doc = json.loads(Snapshot(node="a@b", source="live").to_json())
    assert doc["schema"] == "beamalloc.snapshot/1"
    doc["source"] = "telepathy"
    with pytest.raises(SnapshotError, match="source: a string of 9 characters, not one of"):
        Snapshot.from_dict(doc)
