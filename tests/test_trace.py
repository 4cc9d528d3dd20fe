"""Tests of the trace format (beamalloc/trace.py, docs/trace-format.md)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beamalloc import trace
from beamalloc.trace import (
    FORMAT_VERSION,
    MAGIC,
    Event,
    Op,
    TraceError,
    TraceHeader,
    TraceWriter,
    TypeInfo,
    convert,
    open_trace,
    read_header,
    write_csv,
)

BINARY = TypeInfo(214, "binary", 10)
HEAP = TypeInfo(184, "heap", 6)


def header(**kw) -> TraceHeader:
    base = dict(node="a@host", otp="25.2.3", schedulers=2, flags="+MBas bf", types=[BINARY, HEAP])
    base.update(kw)
    return TraceHeader(**base)


def sample_events() -> list[Event]:
    return [
        Event(0, Op.ALLOC, 10, 1, 214, 100_024, 0x7F00_0000_1000, 0, 1),
        Event(5, Op.ALLOC, 10, 1, 214, 24, 0x7F00_0000_2000, 0, 1),
        Event(7, Op.REALLOC, 10, 1, 214, 48, 0x7F00_0000_2000, 0x7F00_0000_3000, 1),
        Event(9, Op.ALLOC, 6, 0, 184, 4096, 0x5500_0000_0000, 0, 0),
        Event(12, Op.FREE, 10, 2, 214, 100_024, 0x7F00_0000_1000, 0, 2),
        Event(12, Op.FREE, 6, 0, 184, 0, 0x5500_0000_0000, 0, 0),
    ]


def write(path, events, hdr=None):
    with TraceWriter(path, hdr or header()) as w:
        for ev in events:
            w.write(ev)
    return path


def test_binary_round_trip_keeps_header_and_events(tmp_path):
    p = write(tmp_path / "t.batr", sample_events(), header(threads={1: "1_scheduler"}))
    with open_trace(p) as r:
        assert r.header.node == "a@host"
        assert r.header.schedulers == 2
        assert r.header.types == [BINARY, HEAP]
        assert r.header.threads == {1: "1_scheduler"}
        assert list(r) == sample_events()
    assert read_header(p).flags == "+MBas bf"


def test_header_keeps_unknown_keys(tmp_path):
    hdr = header(extra={"collector": "ebpf-0.1"})
    assert read_header(write(tmp_path / "t.batr", [], hdr)).extra == {"collector": "ebpf-0.1"}


_u64 = st.integers(0, (1 << 64) - 1)
_events = st.builds(
    Event,
    t_ns=_u64,
    op=st.sampled_from([Op.ALLOC, Op.FREE, Op.REALLOC]),
    allocator=st.integers(1, 12),
    instance=st.integers(0, 300),
    type=st.integers(0, 1 << 20),
    size=_u64,
    id=_u64,
    new_id=_u64,
    thread=st.integers(0, 1 << 32),
).map(lambda e: e if e.op == Op.REALLOC else e._replace(new_id=0))


@settings(max_examples=200, deadline=None)
@given(st.lists(_events, max_size=60))
def test_binary_round_trip_any_events(tmp_path_factory, events):
    p = write(tmp_path_factory.mktemp("t") / "t.batr", events)
    with open_trace(p) as r:
        assert list(r) == events


def test_reading_streams_across_chunk_boundaries(tmp_path, monkeypatch):
    events = [
        Event(
            i * 3,
            Op.ALLOC if i % 3 else Op.REALLOC,
            10,
            i % 3,
            214,
            i * 7,
            i,
            (i + 1) * (i % 3 == 0),
        )
        for i in range(5000)
    ]
    p = write(tmp_path / "t.batr", events)
    monkeypatch.setattr(trace._BinaryReader, "CHUNK", 97)
    with open_trace(p) as r:
        assert list(r) == events


def test_records_are_compact(tmp_path):
    n = 10_000
    events = []
    for i in range(n):  # a typical synthetic pattern: sequential ids, small deltas
        events.append(Event(i * 50, Op.ALLOC, 10, 1, 214, 24 + i % 64, i))
        events.append(Event(i * 50 + 20, Op.FREE, 10, 1, 214, 0, i))
    p = write(tmp_path / "t.batr", events)
    body = p.stat().st_size - 16 - len(json.dumps(header().to_json(), separators=(",", ":")))
    assert body / len(events) <= 5.0


def test_csv_round_trip_and_names(tmp_path):
    p = tmp_path / "t.csv"
    assert write_csv(p, header(), sample_events()) == 6
    text = p.read_text().splitlines()
    assert text[0].startswith("# beamalloc-trace 1 {")
    assert text[1] == "t_ns,op,allocator,instance,type,size,id,new_id,thread"
    assert text[2].startswith("0,alloc,binary_alloc,1,binary,100024,")
    with open_trace(p) as r:
        assert r.header.node == "a@host"
        assert list(r) == sample_events()


def test_hand_made_csv_without_header(tmp_path):
    p = tmp_path / "hand.csv"
    p.write_text(
        "t_ns,op,allocator,instance,type,size,id,new_id\n"
        "0,alloc,binary_alloc,1,binary,100,1,\n"
        "# comments are skipped\n"
        "1,alloc,10,1,my_type,200,0x10,\n"
        "2,realloc,binary_alloc,1,214,300,1,2\n"
        "3,free,eheap_alloc,0,heap_thing,,0x10,\n"
    )
    with open_trace(p) as r:
        events = list(r)
        assert r.header.source == "csv"
        names = {t.name: t.n for t in r.header.types}
    assert names == {"binary": 0x10000, "my_type": 0x10001, "heap_thing": 0x10002}
    assert events[1] == Event(1, Op.ALLOC, 10, 1, 0x10001, 200, 16)
    assert events[2] == Event(2, Op.REALLOC, 10, 1, 214, 300, 1, 2)
    assert events[3].size == 0 and events[3].allocator == 6


def test_convert_both_ways(tmp_path):
    b = write(tmp_path / "a.batr", sample_events())
    assert convert(b, tmp_path / "a.csv") == 6
    assert convert(tmp_path / "a.csv", tmp_path / "b.batr") == 6
    with open_trace(tmp_path / "b.batr") as r:
        assert list(r) == sample_events()
    hand = tmp_path / "hand.csv"
    hand.write_text(
        "t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,ll_alloc,0,code,8,1,\n"
    )
    convert(hand, tmp_path / "hand.batr")
    with open_trace(tmp_path / "hand.batr") as r:
        assert r.header.types == [TypeInfo(0x10000, "code", 5)]
        assert [e.type for e in r] == [0x10000]


# --- bad files -------------------------------------------------------------------------------


def raw(path, body: bytes, hdr: bytes = b"{}", version=FORMAT_VERSION, flags=0):
    path.write_bytes(MAGIC + struct.pack("<HHI", version, flags, len(hdr)) + hdr + body)
    return path


def fails(path, message, **kw):
    with pytest.raises(TraceError) as info, open_trace(path, **kw) as r:
        list(r)
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_bad_magic_and_header(tmp_path):
    (tmp_path / "x").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 40)
    fails(tmp_path / "x", "not a beamalloc trace")
    (tmp_path / "d").write_bytes(b"\x89BATR\n\x1a" + b"\0" * 40)
    fails(tmp_path / "d", "damaged magic")
    fails(raw(tmp_path / "v", b"", version=9), "version 9 is not supported")
    fails(raw(tmp_path / "f", b"", flags=1), "unknown header flags")
    fails(raw(tmp_path / "j", b"", hdr=b"{nope"), "header is not valid JSON")
    fails(raw(tmp_path / "o", b"", hdr=b"[1]"), "header is not a JSON object")
    fails(raw(tmp_path / "s", b"", hdr=b'{"schedulers":0}'),
          "header field 'schedulers' is not an integer in 1..1024 (a JSON int)")
    # Found by atheris: a wrong type anywhere in the header was an AttributeError or TypeError.
    for hdr, field in [(b'{"threads":7}', "threads"), (b'{"threads":{"x":"y"}}', "threads"),
                       (b'{"types":[{"n":1}]}', "types"), (b'{"types":{"a":1}}', "types"),
                       (b'{"schedulers":true}', "schedulers"), (b'{"node":5}', "node"),
                       (b'{"options":[]}', "options"), (b'{"word_size":3}', "word_size"),
                       (b'{"word_size":8.0}', "word_size"), (b'{"word_size":true}', "word_size"),
                       (b'{"types":[{"n":1e400,"name":"x","allocator":1}]}', "types")]:
        fails(raw(tmp_path / "t", b"", hdr=hdr), f"header field {field!r} is not")
    (tmp_path / "h").write_bytes(MAGIC + struct.pack("<HHI", 1, 0, 100) + b"{}")
    fails(tmp_path / "h", "truncated header (2 of 100 bytes)")
    fails(tmp_path / "missing", "No such file")


def test_bad_records(tmp_path):
    good = write(tmp_path / "g.batr", sample_events()).read_bytes()
    (tmp_path / "cut").write_bytes(good[:-3])
    fails(tmp_path / "cut", "truncated")
    (tmp_path / "noend").write_bytes(good[:-2])
    fails(tmp_path / "noend", "no END record")
    with open_trace(tmp_path / "noend", allow_truncated=True) as r:
        assert list(r) == sample_events()
    fails(raw(tmp_path / "count", b"\x03\x05"), "END record says 5 events but 0")
    fails(raw(tmp_path / "after", b"\x03\x00\x00"), "data after END")
    fails(raw(tmp_path / "tag", b"\x40\x00"), "bad record tag 0x40")
    fails(raw(tmp_path / "ctx", b"\x00\x00\x00\x00\x03\x01"), "lacks allocator/type context")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("t_ns,op,size\n", "expected CSV columns"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,malloc,binary_alloc,0,x,1,1,\n",
         "op is not alloc, free or realloc (a field of 6 characters)"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,big_alloc,0,x,1,1,\n",
         "unknown allocator (a field of 9 characters;"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,9x9,0,x,1,1,\n",
         "allocator is not an integer (a field of 3 characters)"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,10,0,x,1,1,\n\xff\n",
         ":3: not UTF-8 text"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,10,0,x,1,\n",
         ":2: expected 8 or 9 fields, got 7"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,realloc,10,0,x,1,1,\n",
         "realloc needs new_id"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,10,0,2555555555555555555555,1,1,\n",
         "type is outside 0..2^64-1 (a number of 22 digits)"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,10,0,2nd,1,1,\n",
         "type is not an integer (a field of 3 characters)"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n0,alloc,10,0,x,1,1,2\n",
         "new_id is for realloc only (empty on alloc)"),
        ("t_ns,op,allocator,instance,type,size,id,new_id\n-1,alloc,10,0,x,1,1,\n",
         "t_ns is outside 0..2^64-1 (a negative number)"),
        ("# beamalloc-trace 7\nt_ns,op,allocator,instance,type,size,id,new_id\n",
         "CSV trace version is not supported (this reader: 1)"),
        ("# beamalloc-trace 1 {bad\nt_ns,op,allocator,instance,type,size,id,new_id\n",
         ":1: header is not valid JSON"),
    ],
)  # fmt: skip
def test_bad_csv(tmp_path, body, message):
    p = tmp_path / "bad.csv"
    p.write_bytes(body.encode("latin-1"))
    fails(p, message)


def test_allocator_numbers_outside_otp25_survive_both_formats(tmp_path):
    """The binary format carries any allocator number (another OTP's numbering); so does CSV,
    so a converted trace reads back (found by atheris: a CSV written from a binary trace with
    allocator 17 did not read)."""
    events = [Event(1, Op.ALLOC, 17, 0, 214, 100, 1, 0, 0),
              Event(2, Op.FREE, 10, 0, 214, 0, 1, 0, 0)]  # fmt: skip
    src = tmp_path / "a.batr"
    with TraceWriter(src) as w:
        for ev in events:
            w.write(ev)
    convert(src, tmp_path / "a.csv")
    convert(tmp_path / "a.csv", tmp_path / "b.batr")
    for p in ("a.csv", "b.batr"):
        with open_trace(tmp_path / p) as r:
            assert list(r) == events


def test_writer_rejects_out_of_range(tmp_path):
    with TraceWriter(tmp_path / "w.batr") as w, pytest.raises(TraceError, match="size -1"):
        w.write(Event(0, Op.ALLOC, 10, 0, 1, -1, 0))


@pytest.mark.parametrize("body", ["tCOOKIEsecretVALUE42\n",
                                  "t_ns,op,allocator,instance,type,size,id,new_id\n"
                                  "0,COOKIEsecretVALUE42,binary_alloc,0,x,1,1,\n",
                                  "t_ns,op,allocator,instance,type,size,id,new_id\n"
                                  "0,alloc,COOKIEsecretVALUE42,0,x,1,1,\n",
                                  "t_ns,op,allocator,instance,type,size,id,new_id\n"
                                  "COOKIEsecretVALUE42,alloc,10,0,x,1,1,\n"])  # fmt: skip
def test_errors_name_the_place_never_the_bytes(tmp_path, body) -> None:
    """A cookie file replayed by mistake: one line, exit 2, and no piece of it on stderr."""
    p = tmp_path / "cookie"
    p.write_text(body)
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "replay", str(p)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    secret = "COOKIEsecretVALUE42"
    assert not any(secret[i : i + 4] in r.stderr for i in range(len(secret) - 3)), r.stderr


def test_longest_records_read_across_chunk_boundaries(tmp_path, monkeypatch):
    """Reallocs with CTX and TYPE whose eight varints take 10 bytes each (81-byte records): the
    reader's in-place window once stopped 10 bytes short of them (a panic in Rust, a false
    "truncated record" in the Python reader at a chunk's end)."""
    big = 1 << 63
    events = [Event(big + k if k % 2 == 0 else 1, Op.REALLOC, big + k, big + k + 1, big + k + 2,
                    big + k + 3, big + k if k % 2 == 0 else 1, 1 if k % 2 == 0 else big + k,
                    big + k + 4) for k in range(40)]  # fmt: skip
    p = write(tmp_path / "t.batr", events)
    for chunk in (7, 97, 1 << 20):
        monkeypatch.setattr(trace._BinaryReader, "CHUNK", chunk)
        with open_trace(p) as r:
            assert list(r) == events
