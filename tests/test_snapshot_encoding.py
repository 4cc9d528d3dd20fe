"""The fast paths of a snapshot's checking and encoding say what the general ones say
(beamalloc/snapshot.py `_instance`, `_plainly_valid`; collector/terms.py `proplist`).

`to_json` writes allocator instances out field by field (`_instances_json`: straight to text,
each distinct part once) and `check` proves plain instances valid without building messages:
both must agree with the dataclass walk and json.dumps, and with `_check_instance`, on every
instance, the odd ones (negative, boolean or out-of-range numbers, text in numeric options,
non-ASCII names, lone surrogates) included.
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


# ---- carriers: built without the frozen dataclass's __init__, written with f-strings ----------

_COUNTS = st.tuples(*[st.integers(0, 2**64 - 1)] * 3)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["binary_alloc", "eheap_alloc", "é_alloc", 'a"b']),
                          st.none() | st.integers(0, 129), st.booleans(),
                          st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), _COUNTS,
                          st.sampled_from([(0,) * 18, (1, 2, 3), (5,)])),
                min_size=1, max_size=30))
def test_carriers_are_written_as_json_dumps_writes_them(rows: list[Any]) -> None:
    from beamalloc.collector.instrument import _new_carrier
    from beamalloc.snapshot import Carrier, FreeHistogram, Snapshot

    carriers = []
    for alloc, inst, pool, size, blocks, (used, foreign, unscanned), counts in rows:
        args = (alloc, inst, pool, size, blocks, used, FreeHistogram(256, counts), foreign,
                unscanned)
        fast = _new_carrier(*args)
        assert fast == Carrier(*args) and hash(fast) == hash(Carrier(*args))
        carriers.append(fast)
    snap = Snapshot(node="a@b", source="live", carriers=carriers, notes=["carriers-x"])
    assert snap.to_json() == json.dumps(snap.to_dict())


def test_a_carrier_of_odd_values_is_written_by_json_dumps() -> None:
    """A value no reader makes (a bool count, a float size) goes through json.dumps as before."""
    from beamalloc.snapshot import Carrier, FreeHistogram, Snapshot

    odd = [Carrier("x", None, True, 10.0, 1, 2, FreeHistogram(1, (True, 0))),  # type: ignore
           Carrier("x", 1, False, 10, 1, 2, FreeHistogram(1, (1, 0)))]
    snap = Snapshot(node="a@b", source="live", carriers=odd)
    text = snap.to_json()
    assert text == json.dumps(snap.to_dict())
    assert '"size": 10.0' in text and '"counts": [true, 0]' in text


@pytest.mark.parametrize("items", [
    [(Atom("a"), 1, 2), (Atom("a"), 3, 4), (Atom("b"), 7)],
    [(Atom("c"), (2, 5)), ("d", 0, 9), (Atom("e"),), 5, [Atom("f"), 1]],
    [(Atom("g"), 1, 2, 3)],
    [(Atom("h"), -1, 0)],
    "not a list",
])
def test_calls_and_options_read_the_list_as_proplist_does(items: Any) -> None:
    """system_info's one-pass readers against the proplist()-based ones they replaced."""
    from beamalloc.collector import system_info as si

    def calls_before(v: Any) -> Any:
        out = {}
        for name, val in proplist(v).items():
            if isinstance(val, tuple) and len(val) == 2:
                out[name] = si._int(val[0], "w") * si.GIGA + si._int(val[1], "w")
            else:
                out[name] = si._int(val, "w")
        return out

    def outcome(f: Any) -> Any:
        try:
            return f()
        except si.FormatError as e:
            return str(e)

    assert outcome(lambda: si._calls(items, "w")) == outcome(lambda: calls_before(items))
    want = {k: si.option_value(v) for k, v in proplist(items).items()}
    got = si.options(items)
    assert got == want and [type(v) for v in got.values()] == [type(v) for v in want.values()]
    assert all(type(k) is str for k in got)


# ---- instances: written directly by to_json, each distinct part once ------------------------


def _snap_of(insts: list[AllocatorInstance]) -> Any:
    from beamalloc.snapshot import Snapshot

    return Snapshot(node="a@b", source="live", allocators=insts)


def test_sample_snapshots_are_written_as_json_dumps_writes_them() -> None:
    """The compact document (instances and carriers written directly) is json.dumps' own,
    byte for byte, on every sample, and with carriers (the format does not change)."""
    from browser.synth import with_carriers

    files = [p for p in SAMPLES.glob("*") if p.name != "README.md"]
    files += sorted((SAMPLES.parents[0] / "workloads" / "snapshots").glob("*.json"))
    for p in files:
        snap = read_file(str(p))
        assert snap.to_json() == json.dumps(snap.to_dict()), p.name
        with_carriers(snap, 30)
        assert snap.to_json() == json.dumps(snap.to_dict()), p.name
        assert snap.to_json(indent=1) == json.dumps(snap.to_dict(), indent=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(instances, min_size=1, max_size=6))
def test_generated_instances_are_written_as_json_dumps_writes_them(
        insts: list[AllocatorInstance]) -> None:
    snap = _snap_of(insts + [dataclasses.replace(i, instance=i.instance + 1) for i in insts])
    assert snap.to_json() == json.dumps(snap.to_dict())


@settings(max_examples=300, deadline=None)
@given(instances, st.sampled_from(["options", "calls", "mbcs.carriers", "mbcs.blocks",
                                   "sbcs.mseg_carriers", "allocator", "instance", "pool",
                                   "versions", "fix"]),
       st.sampled_from([*ODD, 0.0, -0.0, float("nan"), 1, 0, False, (1, 2), Triple()]))
def test_odd_values_are_written_as_json_dumps_writes_them(
        inst: AllocatorInstance, where: str, odd: Any) -> None:
    """An odd value in any part (a bool where an int was, -0.0 beside 0.0, a tuple) is written
    as json.dumps writes it, and never takes the text of an equal plain value (True == 1):
    the same instance, plain, stands beside it."""
    from beamalloc.snapshot import FixType, PoolStats

    odd_inst = dataclasses.replace(inst, options=dict(inst.options), calls=dict(inst.calls),
                                   mbcs=dataclasses.replace(inst.mbcs,
                                                            blocks=dict(inst.mbcs.blocks)),
                                   sbcs=dataclasses.replace(inst.sbcs))
    if where == "options":
        odd_inst.options["sbct"] = odd
    elif where == "calls":
        odd_inst.calls["alloc"] = odd
    elif where == "mbcs.carriers":
        odd_inst.mbcs.carriers = Triple(1, odd, 2)
    elif where == "mbcs.blocks":
        odd_inst.mbcs.blocks[odd if isinstance(odd, str) else "t"] = BlockStats(
            Triple(1 if isinstance(odd, str) else odd, 1, 1), Triple(8, 8, 8))
    elif where == "sbcs.mseg_carriers":
        odd_inst.sbcs.mseg_carriers = odd
    elif where == "allocator":
        odd_inst.allocator = odd
    elif where == "instance":
        odd_inst.instance = odd
    elif where == "pool":
        odd_inst.mbcs_pool = PoolStats({"t": (1, odd)}, 1, 2, {"fetch": odd})
    elif where == "versions":
        odd_inst.versions = ["0.9", odd]
    else:
        odd_inst.fix_types = [FixType("proc", odd, 1)]
    plain = dataclasses.replace(inst, allocator=inst.allocator)
    for order in ([plain, odd_inst, plain], [odd_inst, plain, odd_inst]):
        snap = _snap_of(order)
        try:
            want = json.dumps(snap.to_dict())
        except (TypeError, ValueError) as e:  # what json.dumps cannot write, nor to_json
            with pytest.raises(type(e)):
                snap.to_json()
            continue
        assert snap.to_json() == want


def test_equal_values_of_other_types_keep_their_own_text() -> None:
    """True == 1 and -0.0 == 0.0: the text written once per distinct part is per type."""
    a = AllocatorInstance("x_alloc", 1, options={"e": True}, calls={"alloc": 1})
    b = AllocatorInstance("x_alloc", 2, options={"e": 1}, calls={"alloc": True})
    c = AllocatorInstance("x_alloc", 3, options={"e": 0.0}, calls={"alloc": -0.0})
    d = AllocatorInstance("x_alloc", 4, options={"e": -0.0}, calls={"alloc": 0.0})
    b.mbcs.carriers = Triple(True, 0, 0)
    a.mbcs.carriers = Triple(1, 0, 0)
    snap = _snap_of([a, b, c, d, a, b])
    text = snap.to_json()
    assert text == json.dumps(snap.to_dict())
    assert '"options": {"e": true}' in text and '"options": {"e": 1}' in text
    assert '"options": {"e": -0.0}' in text and '"carriers": [true, 0, 0]' in text
