"""Write the fuzzers' starting corpora: small valid traces (fuzz/README.md).

read_trace gets whole files; replay_trace gets 4 configuration bytes and the records that follow
the header (its harness adds a header of its own); python_reader (tests/fuzz/atheris_trace.py)
gets the binary files and their CSV forms. Sizes span the min block, the sbct and the
carrier sizes the harness configures, so the first mutations already reach every carrier path.
"""

from __future__ import annotations

import io
import random
import struct
import sys
from pathlib import Path

from beamalloc.trace import MAGIC, Event, Op, TraceWriter, TypeInfo, open_trace, write_csv

SIZES = (8, 24, 100, 700, 3_000, 40_000, 300_000, 2_000_000)


def trace(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    buf = io.BytesIO()
    w = TraceWriter(buf)
    live: list[int] = []
    t, next_id = 0, 1
    for _ in range(n):
        t += rng.choice((1, 1000, 2_000_000_000))
        allocator = rng.choice((6, 10, 10, 12))
        instance = rng.randrange(3)
        r = rng.random()
        if live and r < 0.35:
            bid = live.pop(rng.randrange(len(live)))
            w.write(Event(t, Op.FREE, allocator, instance, 214, 0, bid, 0, instance))
        elif live and r < 0.5:
            bid = live.pop(rng.randrange(len(live)))
            w.write(Event(t, Op.REALLOC, allocator, instance, 214, rng.choice(SIZES), bid,
                          next_id, instance))  # fmt: skip
            live.append(next_id)
            next_id += 1
        else:
            w.write(Event(t, Op.ALLOC, allocator, instance, 214, rng.choice(SIZES), next_id, 0,
                          instance))  # fmt: skip
            live.append(next_id)
            next_id += 1
    w.close()
    return buf.getvalue()


def main(out: Path) -> None:
    for target in ("read_trace", "replay_trace", "python_reader", "csv_fast", "read_csv"):
        (out / target).mkdir(parents=True, exist_ok=True)
    for i, n in enumerate((0, 1, 5, 20, 60, 150)):
        data = trace(i, n)
        (out / "read_trace" / f"seed{i}").write_bytes(data)
        assert data.startswith(MAGIC)
        (hlen,) = struct.unpack_from("<I", data, 12)
        config = bytes([i, 0x31 * i & 0xFF, 0x52 + i, 0x95 + 7 * i & 0xFF])
        (out / "replay_trace" / f"seed{i}").write_bytes(config + data[16 + hlen :])
        binary = out / "python_reader" / f"seed{i}"
        binary.write_bytes(data)
        with open_trace(binary) as r:
            events = list(r)
            write_csv(out / "python_reader" / f"seed{i}.csv", r.header, events)
            write_csv(out / "csv_fast" / f"seed{i}.csv", r.header, events)
            write_csv(out / "read_csv" / f"seed{i}.csv", r.header, events)
            # Rows with type names, as a traced node's CSV has them (the fast paths read known
            # names too).
            r.header.types = [TypeInfo(214, "binary", 10)]
            write_csv(out / "csv_fast" / f"named{i}.csv", r.header, events)
            write_csv(out / "read_csv" / f"named{i}.csv", r.header, events)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
