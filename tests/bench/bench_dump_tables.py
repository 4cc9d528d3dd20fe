"""Bench: what reading a crash dump's =ets and =proc sections (collector/dumptables.py) adds to
reading its allocators.

    .venv/bin/python tests/bench/bench_dump_tables.py [--runs N] [--copies K]

The ETS-heavy real dump of ../shared/samples/real-dumps with its =proc sections repeated K times
(default 200, distinct pids: about 27,000 processes, 14 MiB), read with the tables and with a
reader whose table collector takes no section (the floor), alternated, N runs each: minima and
their ratio, both measured in this run (goal: at most 1.5x the floor). A plain script, not a
test: tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from beamalloc.collector import crashdump, dumptables

DUMP = (Path(__file__).resolve().parents[3] / "shared" / "samples" / "real-dumps"
        / "sharondad91__FinalProject__src_erl_crash.dump.dump")


class _NoTables(dumptables.DumpTables):
    def start(self, section: str) -> bool:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--copies", type=int, default=200)
    args = ap.parse_args()
    if not DUMP.exists():
        print(f"skipped: {DUMP} is absent")
        return 0
    text = DUMP.read_text(encoding="latin-1")
    i, j = text.index("\n=proc:"), text.index("\n=port:")
    procs = text[i:j]
    big = text[:j] + "".join(
        re.sub(r"=proc:<0\.(\d+)\.0>", lambda m, k=k: f"=proc:<0.{m.group(1)}.{k}>", procs)
        for k in range(1, args.copies)) + text[j:]
    lines = big.splitlines(True)
    real = crashdump.DumpTables
    times: dict[str, list[float]] = {"tables": [], "floor": []}
    try:
        for _ in range(args.runs):
            for name, cls in (("tables", real), ("floor", _NoTables)):
                crashdump.DumpTables = cls  # type: ignore[misc]
                t = time.perf_counter()
                crashdump.read_crashdump_lines(iter(lines))
                times[name].append(time.perf_counter() - t)
    finally:
        crashdump.DumpTables = real  # type: ignore[misc]
    t, f = min(times["tables"]), min(times["floor"])
    print(f"{len(big) >> 20} MiB, {big.count(chr(10) + '=proc:')} =proc sections: "
          f"with tables {t:.3f} s, floor {f:.3f} s, ratio {t / f:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
