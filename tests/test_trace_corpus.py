"""The fuzzers' property on the Python reader (tests/fuzz/trace_props.py), run on every input a
fuzzer ever kept or failed on, and on random mutations of valid traces: `make test` checks what
`make fuzz` found, without atheris."""

from __future__ import annotations

import random
import sys

import pytest
from support import DATA, ROOT

sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
import trace_props

CORPUS = sorted(
    p
    for d in (DATA / "bad_traces", ROOT / "refalloc" / "fuzz" / "regressions" / "read_trace")
    for p in d.iterdir()
    if p.name != "README.md"
)


# tests/data/bad_traces/README.md: these two read as traces and are refused by the replay (a
# size or an address space the model cannot hold; tests/refalloc/test_replay_cli.py runs them).
# Every other file there, and every fuzzer regression of the reader, is refused by the reader.
READ_THEN_REFUSED_BY_REPLAY = {"size_above_2pow47.csv", "address_space_outgrown.csv"}


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_fuzz_finds_read_or_fail_cleanly(path):
    accepted = trace_props.check(path.read_bytes())
    assert accepted is (path.name in READ_THEN_REFUSED_BY_REPLAY)


VALID = "t_ns,op,allocator,instance,type,size,id,new_id,thread\n" + "".join(
    f"{i},alloc,binary_alloc,0,binary,{100 * i},{i},,0\n{i}5,free,10,0,214,,{i},,0\n"
    for i in range(1, 30)
)


def test_mutations_of_a_valid_csv_trace():
    """Byte flips, insertions, deletions and cuts of a valid CSV trace (2 000 seeded cases):
    every one reads or fails with TraceError, and what reads round-trips."""
    rng = random.Random(5)
    accepted = 0
    base = VALID.encode()
    assert trace_props.check(base)
    for _ in range(2000):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(b))
            kind = rng.randrange(4)
            if kind == 0:
                b[at] = rng.choice(b"0123456789,\n\"x\x81\xff-#")
            elif kind == 1:
                b.insert(at, rng.randrange(256))
            elif kind == 2:
                del b[at]
            else:
                del b[at:]
            if not b:
                break
        accepted += trace_props.check(bytes(b))
    assert 0 < accepted < 2000  # both sides of the reader were exercised
