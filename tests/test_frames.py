"""Snapshots as frames (timeseries/frames.py): every kind of snapshot the readers make splits
and joins back equal, and the byte codecs are their own inverses."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from browser.synth import with_carriers
from support import DATA, SAMPLES

from beamalloc.collector.sources import read_file
from beamalloc.timeseries import frames

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([*SAMPLES.glob("*.txt"), *SAMPLES.glob("*.dump"),
                *(ROOT / "samples" / "workloads" / "snapshots").glob("*.json"),
                *DATA.glob("*_raw.txt"), DATA / "otp22_crash.dump", DATA / "hand_recon.txt"])


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_reader_s_snapshot_round_trips(path: Path) -> None:
    snap = read_file(str(path))
    frame = frames.split(snap)
    assert frame is not None
    shape = frames.shape_from_json(frames.shape_json(frame.shape))
    assert shape == frame.shape
    assert frames.join(shape, frame.values, frame.text, frame.raw_none).to_dict() == \
        snap.to_dict()


def test_carriers_raw_none_and_a_delta() -> None:
    base = read_file(str(SAMPLES / "raw_allocator_dump.txt"))
    snap = with_carriers(base, 50)
    snap.raw = None
    frame = frames.split(snap)
    assert frame is not None and frame.raw_none
    back = frames.join(frame.shape, frame.values, frame.text, frame.raw_none)
    assert back.to_dict() == snap.to_dict() and back.raw is None and len(back.carriers) == 50
    # the next sample: a few numbers move; XORed with the key's, most bytes are zeros
    nxt = copy.deepcopy(base)
    nxt.allocators[0].calls = {k: v + 3 for k, v in nxt.allocators[0].calls.items()}
    f0, f1 = frames.split(base), frames.split(nxt)
    assert f0 is not None and f1 is not None and f0.shape == f1.shape
    delta = frames.planes(frames.xor(f1.values, f0.values))
    assert delta.count(0) > 0.95 * len(delta)
    again = frames.xor(frames.unplanes(delta), f0.values)
    assert frames.join(f1.shape, again, f1.text, f1.raw_none).to_dict() == nxt.to_dict()


def test_bytes_codecs() -> None:
    data = bytes(range(256)) * 8
    assert frames.unplanes(frames.planes(data)) == data
    assert frames.xor(frames.xor(data, data[::-1]), data[::-1]) == data
    blob = frames.pack(b"text", b"values", 3, True, xored=True)
    assert frames.unpack(blob) == (b"text", b"values", 3, True, True)
    lying = frames.MAGIC + bytes([0]) + (100).to_bytes(4, "little") + bytes(4)  # text past it
    flagged = frames.MAGIC + bytes([8]) + bytes(8)  # a flag no writer sets
    for bad in (b"BAF1", lying, flagged, blob[:5], b"\x28\xb5\x2f\xfd" + bytes(20),
                b"BAF0" + blob[4:]):
        with pytest.raises(ValueError):
            frames.unpack(bad)
    assert blob.startswith(b"BAF1") and frames.MAGIC == frames.PREFIX + b"%d" % frames.VERSION
    with pytest.raises(frames.NewerFormat, match="frame of format 2"):
        frames.unpack(b"BAF2" + blob[4:])


def test_a_changed_flag_is_a_new_shape() -> None:
    a = read_file(str(SAMPLES / "raw_allocator_dump.txt"))
    b = copy.deepcopy(a)
    b.allocators[0].options["as"] = "aoffcbf" if a.allocators[0].options.get("as") != \
        "aoffcbf" else "bf"
    fa, fb = frames.split(a), frames.split(b)
    assert fa is not None and fb is not None and fa.shape != fb.shape
