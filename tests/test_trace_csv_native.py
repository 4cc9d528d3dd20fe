"""The CSV fast path (refalloc/src/csv.rs) gives the reference reader's file or its error."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from beamalloc import trace
from beamalloc.trace import Event, Op, TraceHeader, TraceWriter, TypeInfo

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
import csv_props

BAD = Path(__file__).parent / "data" / "bad_traces"


def _events(rng: random.Random, n: int) -> list[Event]:
    out, live, next_id = [], [], 1
    for t in range(n):
        if live and rng.random() < 0.4:
            i = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.3:
                out.append(Event(t * 7, Op.REALLOC, 10, 1, 214, rng.randrange(1, 1 << 20), i,
                                 next_id, 3))  # fmt: skip
                live.append(next_id)
                next_id += 1
            else:
                out.append(Event(t * 7, Op.FREE, rng.choice([6, 10]), 0, 215, 0, i, 0, 0))
        else:
            out.append(Event(t * 7, Op.ALLOC, rng.choice([6, 10, 99]), rng.randrange(3),
                             rng.choice([214, 215, 70000]), rng.randrange(1 << 22), next_id, 0,
                             rng.randrange(5)))  # fmt: skip
            live.append(next_id)
            next_id += 1
    return out


@pytest.fixture(scope="module")
def csv_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("csv")
    header = TraceHeader(source="test", types=[TypeInfo(214, "binary", 10),
                                               TypeInfo(215, "heap", 6)])  # fmt: skip
    with TraceWriter(d / "t.batr", header) as w:
        for ev in _events(random.Random(7), 20_000):
            w.write(ev)
    trace.convert(d / "t.batr", d / "t.csv")
    return d / "t.csv"


def test_plain_rows_take_the_fast_path_and_give_the_reference_file(csv_trace: Path,
                                                                   tmp_path: Path) -> None:
    with trace.open_trace(csv_trace) as r:
        assert trace._native_csv_to_binary(csv_trace, tmp_path / "fast.batr", r) == 20_000
    assert trace.convert(csv_trace, tmp_path / "ref.batr", native=False) == 20_000
    assert (tmp_path / "fast.batr").read_bytes() == (tmp_path / "ref.batr").read_bytes()


def test_type_names_hex_crlf_comments_and_blank_lines(tmp_path: Path) -> None:
    text = ("t_ns,op,allocator,instance,type,size,id,new_id,thread\r\n"
            "# made by hand\r\n\r\n"
            "1, alloc ,binary_alloc,0,msg,0x40,0X1F,,\r\n"
            "2,realloc,10,0,msg,80,31,32,2\r\n"
            "3,free,eheap_alloc,1,heap,,7,,\r\n"
            "4,alloc,6,1,,8,8,\r\n")  # fmt: skip
    src = tmp_path / "hand.csv"
    src.write_text(text, newline="")
    with trace.open_trace(src) as r:
        assert trace._native_csv_to_binary(src, tmp_path / "fast.batr", r) == 4
    csv_props.check(text.encode())
    with trace.open_trace(tmp_path / "fast.batr") as r:
        names = {t.n: t.name for t in r.header.types}
        events = list(r)
    assert [names[e.type] for e in events] == ["msg", "msg", "heap", ""]
    assert (events[0].size, events[0].id, events[1].new_id, events[1].thread) == (64, 31, 32, 2)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    specials = [b'"', b"\r", b"\x00", b"\xc3\xa9", b"\xff", b"+", b"_", b" ", b"\t", b"0x",
                b",", b"\n", b"#", b"-", b"99999999999999999999", b"realloc", b"\x0b", b"\xa0"]
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(b) + 1)
        match rng.randrange(6):
            case 4 | 5 if i < len(b) and chr(b[i]).isdigit():
                b[i] = rng.choice(b"0123456789")  # still a plain row, mostly
            case 0:
                b[i:i] = rng.choice(specials)
            case 1:
                del b[i : i + rng.randrange(1, 6)]
            case 2 if i < len(b):
                b[i] = rng.randrange(256)
            case _:
                b[i:i] = b[max(0, i - 30) : i]
    return bytes(b)


def test_mutated_traces_give_the_same_file_or_the_same_error(csv_trace: Path) -> None:
    lines = csv_trace.read_bytes().split(b"\n")
    rng = random.Random(11)
    accepted = declined = 0
    for _ in range(1500):
        start = rng.randrange(2, len(lines) - 20)
        data = b"\n".join(lines[:2] + lines[start : start + rng.randrange(1, 15)]) + b"\n"
        data = _mutate(rng, data)
        csv_props.check(data)
        src = csv_props._DIR / "in.csv"
        try:
            with trace.open_trace(src) as r:
                fast = trace._native_csv_to_binary(src, csv_props._DIR / "x.batr", r)
        except trace.TraceError:
            fast = None
        accepted += fast is not None
        declined += fast is None
    # Both sides of the fast path were exercised, not just the fallback.
    assert accepted > 80 and declined > 300, (accepted, declined)


@pytest.mark.parametrize("path", sorted(BAD.glob("*.csv")), ids=lambda p: p.name)
def test_kept_bad_traces(path: Path) -> None:
    csv_props.check(path.read_bytes())


def test_replay_straight_from_csv_equals_the_binary_replay(csv_trace: Path,
                                                           tmp_path: Path) -> None:
    from beamalloc import _refalloc
    from beamalloc.flags import replay_config

    config = replay_config(None, 2)
    rows = trace.native_csv_rows(csv_trace)
    assert rows is not None
    trace.convert(csv_trace, tmp_path / "t.batr", native=False)
    from_csv = _refalloc.replay(str(csv_trace), config, 2, 1000, csv=rows)
    from_binary = _refalloc.replay(str(tmp_path / "t.batr"), config, 2, 1000)
    assert "declined" not in from_csv
    for key in ("allocators", "mseg_alloc", "footprint", "anomalies", "events", "live_blocks"):
        assert from_csv[key] == from_binary[key], key
    # A row the fast path does not take (a quoted field) is handed back, not guessed at.
    quoted = tmp_path / "quoted.csv"
    quoted.write_bytes(csv_trace.read_bytes() + b'"5",alloc,binary_alloc,0,binary,8,999999,,0\n')
    declined = _refalloc.replay(str(quoted), config, 2, 1000, csv=trace.native_csv_rows(quoted))
    assert declined == {"declined": 20_003}
