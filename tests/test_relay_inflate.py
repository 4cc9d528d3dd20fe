"""The relay's compressed answers go through etf's one inflate (collector/etf.py `inflate`), its
errors the relay's DistError line."""

from __future__ import annotations

import struct
import zlib

import pytest

from beamalloc.collector import dist, etf, relay

PLAIN = b"\x83h\x02w\x02okk\x00\x03abc"  # term_to_binary({ok, "abc"})


def compressed(plain: bytes, size: int | None = None, tail: bytes = b"") -> bytes:
    body = plain[1:]
    return (b"\x83P" + struct.pack(">I", len(body) if size is None else size)
            + zlib.compress(body) + tail)  # fmt: skip


def test_inflates_as_etf_decodes() -> None:
    assert relay._inflate(compressed(PLAIN)) == PLAIN
    assert relay._inflate(PLAIN) == PLAIN  # not compressed: as it came
    assert etf.decode(compressed(PLAIN)) == etf.decode(PLAIN)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (compressed(PLAIN, size=etf.MAX_BYTES + 1), b"claims"),
        (compressed(PLAIN, size=3), b"does not match its stated size"),
        (b"\x83P\x00\x00\x00\x09" + b"not zlib", b"bad compressed term"),
        (b"\x83P\x00", b"truncated compressed term"),
        (compressed(PLAIN)[:-3], b"does not match its stated size"),
    ],
)
def test_bad_compressed_answers_are_one_dist_error(data: bytes, words: bytes) -> None:
    with pytest.raises(dist.DistError) as info:
        relay._inflate(data)
    assert info.value.kind == "call_failed"
    assert info.value.detail.startswith(b"unreadable answer: ") and words in info.value.detail
    assert b"\n" not in info.value.detail
