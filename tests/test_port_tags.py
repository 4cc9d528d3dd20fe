"""Ports as holders (issue 24 item 2; OTP 27+ tags a driver's blocks per port, OTP-18577): the
answers the agent and our client read, odd ones included. An odd answer names nothing and
costs nothing else: the tags stand without the names. Real nodes: tests/live/
test_picture_ports.py."""

from __future__ import annotations

import copy
import struct

import pytest
from support import ROOT

from beamalloc.advice.wording import holder_sentence
from beamalloc.analyzer.analysis import carrier_bytes, type_rows
from beamalloc.analyzer.categories import picture
from beamalloc.collector import dist
from beamalloc.collector.collect import _raw_ports
from beamalloc.collector.instrument import MAX_PORT_NAMES, _add_port_names, port_origins
from beamalloc.collector.sources import read_file
from beamalloc.collector.terms import Atom, Opaque
from beamalloc.snapshot import FreeHistogram, TaggedBlocks

SNAP = read_file(str(ROOT / "samples" / "workloads" / "snapshots" / "healthy.json"))
NODE = b"w\x07t_1@box"  # SMALL_ATOM_UTF8_EXT 't_1@box'


def _new_port(n: int) -> bytes:
    return b"Y" + NODE + struct.pack(">II", n, 7)


def _v4_port(n: int) -> bytes:
    return b"x" + NODE + struct.pack(">QI", n, 7)


def _list(items: list[bytes]) -> dist.RawReply:
    return dist.RawReply(b"\x00\x6c" + struct.pack(">I", len(items)) + b"".join(items)
                         + b"\x6a", 1)


def test_raw_ports_slices_each_port_as_the_target_encoded_it() -> None:
    got = _raw_ports(_list([_new_port(3), _v4_port(1 << 40), _new_port(9)]))
    assert got == {"#Port<0.3>": _new_port(3), f"#Port<0.{1 << 40}>": _v4_port(1 << 40),
                   "#Port<0.9>": _new_port(9)}
    assert _raw_ports(dist.RawReply(b"\x6a", 0)) == {}


@pytest.mark.parametrize("data", [
    b"\x6c\x00\x00\x00\x02" + _new_port(1) + b"\x6a",  # one port short
    b"\x6c\x00\x00\x00\x01" + _new_port(1)[:-3] + b"\x6a",  # cut inside a port
    b"\x6c\x00\x00\x00\x01" + b"X" + NODE + b"\x00" * 12 + b"\x6a",  # a pid, not a port
    b"\x6c\x00\x00\x00\x01" + _new_port(1) + b"\x6b",  # no tail
    b"\x68\x01\x6a",  # a tuple
    b"",
])
def test_raw_ports_of_another_shape_is_none(data: bytes) -> None:
    assert _raw_ports(dist.RawReply(data, 0)) is None
    assert _raw_ports("not raw") is None


def test_port_origins_heaviest_first_and_capped() -> None:
    hists = {Opaque(f"#Port<0.{i}>"): {"drv_binary": (0,) * i + (1,)} for i in range(1, 15)}
    hists |= {"system": {"binary": (9, 9)}, "prim_file": {"drv_binary": (0, 0, 0, 5)}}
    got = port_origins(("ok", (128, 0, hists)))
    assert got == [f"#Port<0.{i}>" for i in range(14, 14 - MAX_PORT_NAMES, -1)]
    for odd in (None, ("ok", (128, 0, [])), ("error", "not_enabled"), ("ok", 5)):
        assert port_origins(odd) == []


def test_port_names_keep_printable_names_of_ports_only() -> None:
    snap = copy.deepcopy(SNAP)
    _add_port_names(snap, [
        (Opaque("#Port<0.7>"), (Atom("name"), "tcp_inet")),
        (Opaque("#Port<0.8>"), (Atom("name"), [47, 98, 105, 110, 27, 91])),  # a charlist
        (Opaque("#Port<0.9>"), Atom("undefined")),  # closed in between
        ("<0.1.0>", (Atom("name"), "pid")), (Opaque("#Port<0.10>"), (Atom("name"), 5)),
        "junk"])
    assert snap.extra["port_names"] == {"#Port<0.7>": "tcp_inet", "#Port<0.8>": "/bin?["}
    snap = copy.deepcopy(SNAP)
    for odd in (None, "x", [("a", "b")], [(Opaque("#Port<0.1>"), ("id", 1))]):
        _add_port_names(snap, odd)
        assert "port_names" not in snap.extra


def test_a_port_is_a_holder_named_with_its_driver() -> None:
    snap = copy.deepcopy(SNAP)
    h = FreeHistogram(128, (0,) * 17 + (1,))  # one block of at least 128 x (2^17 - 1) bytes
    snap.tagged_blocks = [TaggedBlocks("#Port<0.7>", "drv_binary", h),
                          TaggedBlocks("#Port<0.9>", "drv_internal", FreeHistogram(128, (0, 2))),
                          TaggedBlocks("prim_file", "nif_internal", FreeHistogram(128, (0, 1)))]
    snap.extra["port_names"] = {"#Port<0.7>": "tcp_inet\x1b[2J", "#Port<0.9>": 5}
    snap.memory = {**snap.memory, "total": 64 << 20}
    pic = picture(snap, carrier_bytes(type_rows(snap)))
    c = pic.to_json()
    binary = next(x for x in c["categories"] if x["name"] == "binary")["holders"]
    assert binary[0]["kind"] == "port" and binary[0]["name"] == "#Port<0.7> (tcp_inet?[2J)"
    assert binary[0]["bytes"] == h.bounds(17)[0]
    rest = next(x for x in c["categories"] if x["name"] == "other_system")["holders"]
    assert {(x["kind"], x["name"]) for x in rest} == {("port", "#Port<0.9>"),
                                                      ("origin", "prim_file")}
    # a port's buffer is its own: it may be the largest holder, said as a lower bound
    assert c["largest"]["name"] == "#Port<0.7> (tcp_inet?[2J)"
    assert pic.largest is not None
    s = holder_sentence(pic.largest, pic.largest_share)
    assert s.startswith("Port #Port<0.7> (tcp_inet?[2J) holds at least 16.0 MiB, 25.0 %")
