"""Reading traces into Python events (beamalloc/trace.py `open_trace` over refalloc's reader,
refalloc/src/trace.rs and csv.rs) against the floor measured in the same run: the native
reader alone, decoding every event without making Python objects (`TraceReader._drain`).

Writes a binary_alloc trace of EVENTS events with `TraceWriter`, converts it to CSV, then times
each path REPEAT times and keeps the fastest (CPU time). Prints events per second and each
path's ratio to its floor; and CSV -> binary conversion (the replay's fallback for a CSV its
straight path declines) against the same floor.

Usage: python tests/bench/bench_trace_read.py [EVENTS] [REPEAT]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from beamalloc.trace import Event, Op, TraceHeader, TraceWriter, TypeInfo, convert, open_trace


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        c = time.process_time()
        fn()
        times.append(time.process_time() - c)
    return min(times)


def main() -> int:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        binary, csv = Path(tmp) / "t.batr", Path(tmp) / "t.csv"
        with TraceWriter(binary, TraceHeader(types=[TypeInfo(214, "binary", 10)])) as w:
            live: list[int] = []
            for i in range(events):
                if live and rng.random() < 0.45:
                    bid = live.pop(rng.randrange(len(live)))
                    w.write_checked(Event(i * 10, Op.FREE, 10, i % 3, 214, 0, bid, 0, 1))
                else:
                    size = rng.randrange(1, 1 << 16)
                    w.write_checked(Event(i * 10, Op.ALLOC, 10, i % 3, 214, size, i, 0, 1))
                    live.append(i)
        convert(binary, csv)

        def iterate(path: Path) -> Callable[[], None]:
            def run() -> None:
                with open_trace(path) as r:
                    for _ in r:
                        pass

            return run

        def drain(path: Path) -> Callable[[], None]:
            def run() -> None:
                with open_trace(path) as r:
                    r._drain()

            return run

        out = Path(tmp) / "o.batr"
        rows = {
            "binary floor (native)": best(drain(binary), repeat),
            "binary -> Events": best(iterate(binary), repeat),
            "CSV floor (native)": best(drain(csv), repeat),
            "CSV -> Events": best(iterate(csv), repeat),
            "CSV -> binary file": best(lambda: convert(csv, out), repeat),
        }
        for name, s in rows.items():
            print(f"{name:22s} {events / s / 1e6:7.2f} M events/s CPU ({s:.3f} s)")
        b, c = rows["binary floor (native)"], rows["CSV floor (native)"]
        print(f"binary -> Events / floor: {rows['binary -> Events'] / b:.1f}; "
              f"CSV -> Events / floor: {rows['CSV -> Events'] / c:.1f}; "
              f"CSV -> binary file / CSV floor: {rows['CSV -> binary file'] / c:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
