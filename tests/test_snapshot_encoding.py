"""The fast paths of a snapshot's checking and encoding say what the general ones say
(beamalloc/snapshot.py `_instance`, `_plainly_valid`; collector/terms.py `proplist`).

`to_json` writes allocator instances out field by field and `check` proves plain instances valid
without building messages: both must agree with the dataclass walk and with `_check_instance`
on every instance, the odd ones (negative, boolean or out-of-range numbers, text in numeric
options, non-ASCII names, lone surrogates) included.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import SAMPLES
from test_snapshot_json import instances

from beamalloc.collector.sources import read_file
from beamalloc.collector.terms import Atom, proplist
from beamalloc.snapshot import (
    AllocatorInstance,
    BlockStats,
    SnapshotError,
    Triple,
    _check_instance,
    _encode,
    _plainly_valid,
)


def walk(obj: Any) -> Any:
    """The general encoding: every dataclass field in order, Triples as lists."""
    if isinstance(obj, Triple):
        return obj.to_json()
    if dataclasses.is_dataclass(obj):
        return {f.name: walk(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: walk(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [walk(v) for v in obj]
    return obj


def verdict(inst: AllocatorInstance) -> str | None:
    try:
        _check_instance(inst)
    except SnapshotError as e:
        return str(e)
    return None


def sample_instances() -> list[AllocatorInstance]:
    files = [p for p in SAMPLES.glob("*") if p.name != "README.md"]
    files += sorted((SAMPLES.parents[0] / "workloads" / "snapshots").glob("*.json"))
    return [inst for p in files for inst in read_file(str(p)).allocators]


def test_samples_encode_as_the_dataclass_walk_and_are_proven_valid() -> None:
    insts = sample_instances()
    assert len(insts) > 50
    for inst in insts:
        assert json.dumps(_encode(inst)) == json.dumps(walk(inst)), inst.key
        assert _plainly_valid(inst) and verdict(inst) is None


@settings(max_examples=300, deadline=None)
@given(instances)
def test_generated_instances_encode_as_the_dataclass_walk(inst: AllocatorInstance) -> None:
    assert json.dumps(_encode(inst)) == json.dumps(walk(inst))


ODD = [-1, 2**64, True, 1.5, "12", "\udc80", "é", None]


@settings(max_examples=300, deadline=None)
@given(instances, st.sampled_from(["options", "options.sbct", "calls", "mbcs.carriers",
                                   "mbcs.blocks", "sbcs.mseg_carriers", "allocator", "instance",
                                   "pool"]),
       st.sampled_from(ODD))  # fmt: skip
def test_the_fast_check_never_passes_what_the_full_check_refuses(
        inst: AllocatorInstance, where: str, odd: Any) -> None:
    if where == "options":
        inst.options["x"] = odd
    elif where == "options.sbct":
        inst.options["sbct"] = odd
    elif where == "calls":
        inst.calls[odd if isinstance(odd, str) else "alloc"] = odd
    elif where == "mbcs.carriers":
        inst.mbcs.carriers = Triple(1, odd, 2)
    elif where == "mbcs.blocks":  # an odd type name, or an odd count
        key = odd if isinstance(odd, str) else "t"
        count = 1 if isinstance(odd, str) else odd
        inst.mbcs.blocks[key] = BlockStats(Triple(count, 1, 1), Triple(8, 8, 8))
    elif where == "sbcs.mseg_carriers":
        inst.sbcs.mseg_carriers = odd
    elif where == "allocator":
        inst.allocator = odd if isinstance(odd, str) else inst.allocator + "é"
    elif where == "instance":
        inst.instance = odd
    elif inst.mbcs_pool is not None:
        inst.mbcs_pool.counters["fetch"] = odd
    if _plainly_valid(inst):
        assert verdict(inst) is None


@pytest.mark.parametrize("items, want", [
    ([(Atom("a"), 1), (Atom("a"), 2), ("b", 3, 4), 5, (Atom("c"),), (6, 7)],
     {"a": 1, "b": (3, 4), "c": ()}),
    ("not a list", {}),
    ([], {}),
])  # fmt: skip
def test_proplist_keeps_the_first_of_equal_keys_as_plain_strings(items: Any, want: dict) -> None:
    got = proplist(items)
    assert got == want and list(got) == list(want)
    assert all(type(k) is str for k in got)
