"""Coverage-guided fuzzing of the native allocator-reply reader
(collector/native/src/alloc_reply.rs) with atheris: any bytes as a reply to
system_info({allocator, A}) give the same Snapshot or error line natively as through the
decoder and system_info.py (alloc_props.check). atheris sees the Python entry, not the Rust, so
new inputs come from mutation more than guidance; a custom mutator mixes in term-level changes
(alloc_props.mutate) of what it holds, so that a key twice or a bignum is not left to chance.

    .venv/bin/python tests/fuzz/atheris_alloc.py -max_total_time=600 CORPUS SEEDS

SEEDS: a folder of real replies (`--write-seeds DIR` writes tests/data/alloc_replies.etf's).
Not collected by pytest (atheris is not a test dependency); tests/test_alloc_reply.py runs the
same property on seeded mutations at every `make test`.
"""

from __future__ import annotations

import os
import random
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import alloc_props

    import beamalloc.collector.build
    import beamalloc.collector.etf
    import beamalloc.collector.system_info  # noqa: F401

from beamalloc.collector import etf


def test_one(data: bytes) -> None:
    alloc_props.check(data)


def mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if rng.random() < 0.5:
        try:
            term = etf.term_at(data, 0, 1)[0]
            m = alloc_props.mutate(term, rng, rng.choice((1, 2)))
            if alloc_props.format_ok(m):
                out = alloc_props.encode(m)
                if len(out) <= max_size:
                    return out
        except (etf.ETFError, RecursionError):
            pass
    return atheris.Mutate(data, max_size)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--write-seeds":
        os.makedirs(sys.argv[2], exist_ok=True)
        for r, a, d in alloc_props.replies():
            with open(os.path.join(sys.argv[2], f"{r}_{a}"), "wb") as f:
                f.write(d)
        return
    atheris.Setup(sys.argv, test_one, custom_mutator=mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
