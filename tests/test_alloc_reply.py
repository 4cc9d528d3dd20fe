"""The native allocator-reply reader (collector/native/src/alloc_reply.rs) against the path it
shortens (the ETF decoder, then system_info.py): on real replies of OTP 25, 27 and 29 the same
records, the same term text, the same Snapshot byte for byte; on thousands of mutated replies
the same Snapshot or the same error line (tests/fuzz/alloc_props.py), and it declines what it
does not read rather than read it differently.

tests/data/alloc_replies.etf holds, per release, the replies to system_info({allocator, A})
of a node started with `+S 2 +Muatags true`, as our client received them (send_raw); made by
a script over tests/otp.py start_node and Session.run, kept in the commit that added it.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from beamalloc.collector import build, etf, system_info
from beamalloc.collector.terms import Atom, format_term
from beamalloc.snapshot import Snapshot

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
import alloc_props

REPLIES = alloc_props.replies()


def test_the_data_holds_every_release_and_allocator() -> None:
    releases = {r for r, _, _ in REPLIES}
    assert releases == {"25", "27", "29"}
    assert {a for _, a, _ in REPLIES} >= {"binary_alloc", "eheap_alloc", "mseg_alloc",
                                          "erts_mmap", "fix_alloc"}


@pytest.mark.parametrize(("release", "alloc", "data"), REPLIES,
                         ids=[f"{r}-{a}" for r, a, _ in REPLIES])
def test_real_replies_read_alike(release: str, alloc: str, data: bytes) -> None:
    native = system_info.native_info(alloc, data, 0, etf.MAX_WORDS)
    term, end = etf.term_at(data, 0, 1)
    if alloc in system_info.NOT_UTIL:
        assert native is None
        return
    assert native is not None, f"OTP {release} {alloc}: declined"
    assert native.end == end == len(data)
    assert native.text == format_term(term)
    a, b = Snapshot(node="n@h", source="live"), Snapshot(node="n@h", source="live")
    system_info.add_system_info(a, alloc, native)
    system_info.add_system_info(b, alloc, term)
    assert a.allocators == b.allocators and a.allocators
    assert a.to_json() == b.to_json()
    assert alloc_props.check(data, alloc)


@pytest.mark.parametrize("release", ["25", "27", "29"])
def test_a_whole_snapshot_is_byte_identical(release: str) -> None:
    """Every allocator of a node, as collect() hands them to build: native where it reads,
    decoded terms otherwise, against all decoded; the JSON (raw term included) is the same."""
    mine = [(a, d) for r, a, d in REPLIES if r == release]

    def body(native: bool) -> list[object]:
        allocs = []
        for a, d in mine:
            info = system_info.native_info(a, d, 0, etf.MAX_WORDS) if native else None
            allocs.append((Atom(a), info if info is not None else etf.term_at(d, 0, 1)[0]))
        return [(Atom("node"), Atom("n@h")), (Atom("otp_release"), release),
                (Atom("allocators"), allocs), (Atom("sampled_at_us"), 1_700_000_000_000_000)]

    a = build.build_snapshot("n@h", body(True))
    b = build.build_snapshot("n@h", body(False))
    assert a.to_json() == b.to_json() and len(a.allocators) > 20
    assert a.raw == b.raw and "binary_alloc" in (a.raw or "")


def test_mutated_replies_read_alike_or_are_declined() -> None:
    """Seeded mutations of every real reply, at the term level (re-encoded) and the byte
    level: the property holds for each, and a good share is still read natively (the test
    would prove nothing if the reader declined them all)."""
    rng = random.Random(28)
    read = total = 0
    utils = [(a, d) for _, a, d in REPLIES if a not in system_info.NOT_UTIL]
    for _ in range(600):
        alloc, data = rng.choice(utils)
        term = etf.term_at(data, 0, 1)[0]
        if rng.random() < 0.7:
            m = alloc_props.mutate(term, rng, rng.choice((1, 1, 2, 3)))
            if not alloc_props.format_ok(m):
                continue
            blob = alloc_props.encode(m)
        else:
            b = bytearray(data)
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(b))
                b[i] = rng.randrange(256)
            blob = bytes(b[:rng.randrange(len(b) // 2, len(b) + 1)])
        total += 1
        read += alloc_props.check(blob, alloc)
    assert total > 400 and read > total // 10, (read, total)


def test_the_budget_is_the_decoders_or_tighter() -> None:
    """With any word budget, what the native reader reads the decoder decodes within it."""
    _, alloc, data = next(x for x in REPLIES if x[1] == "binary_alloc")
    need = next(b for b in range(0, 1 << 20, 64)
                if system_info.native_info(alloc, data, 0, b) is not None)
    for b in (need - 64, need, need + 64):
        if system_info.native_info(alloc, data, 0, b) is not None:
            from beamalloc._refalloc import etf_decode
            from beamalloc.collector.terms import Opaque
            etf_decode(data, 0, Atom, Opaque, None, b, 1)  # raises if over budget
    assert system_info.native_info(alloc, data, 0, need - 64) is None


def test_declined_shapes() -> None:
    """What it leaves to the Python path: recon's raw_blocks, OTP 22's totals, a key twice,
    a negative count, a float, an option that is not plain."""
    inst = (Atom("instance"), 0, [(Atom("mbcs"), [(Atom("carriers"), 1, 1, 1)])])
    assert system_info.native_info("x_alloc", alloc_props.encode([inst]), 0,
                                   etf.MAX_WORDS) is not None
    for bad in (
        [(Atom("mbcs"), [(Atom("raw_blocks"), [])])],
        [(Atom("mbcs"), [(Atom("blocks"), 1, 2, 3)])],
        [(Atom("mbcs"), []), (Atom("mbcs"), [])],
        [(Atom("mbcs"), [(Atom("carriers"), -1, 1, 1)])],
        [(Atom("mbcs"), []), (Atom("options"), [(Atom("x"), 1.5)])],
        [(Atom("mbcs"), []), (Atom("options"), [(Atom("sbct"), Atom("big"))])],
        [(Atom("mbcs"), []), (Atom("options"), [(Atom("x"), "text")])],
        [(Atom("mbcs"), []), (Atom("calls"), [(Atom("a"), 1 << 40, 0)])],
        [(Atom("sbcs"), []), "not a tuple"],
    ):
        data = alloc_props.encode([(Atom("instance"), 0, bad)])
        assert system_info.native_info("x_alloc", data, 0, etf.MAX_WORDS) is None, bad
        alloc_props.check(data, "x_alloc")


def test_a_reply_of_millions_of_terms_is_declined() -> None:
    """The decoder's budget charges nothing for a small integer: a peer's list of 2 M of them
    is declined past alloc_reply.rs MAX_NODES (1 Mi terms, 48 MiB of nodes at most), not read
    to the end; the decoder then reads it as before."""
    data = b"\x6c" + (2 << 20).to_bytes(4, "big") + b"\x61\x07" * (2 << 20) + b"\x6a"
    assert system_info.native_info("x_alloc", data, 0, etf.MAX_WORDS) is None
    assert len(etf.term_at(data, 0, 1)[0]) == 2 << 20
