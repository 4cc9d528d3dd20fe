"""Bench: what reading a crash dump's =ets and =proc sections (collector/dumptables.py) adds to
reading its allocators, by both readers of a dump.

    .venv/bin/python tests/bench/bench_dump_tables.py [--runs N] [--copies K]

The ETS-heavy real dump of ../shared/samples/real-dumps with its =proc sections repeated K times
(default 200, distinct pids: about 27,000 processes, 14 MiB), N runs of each case alternated,
by each reader of a dump against its own floor measured in this run:

- the Python line reader (`read_crashdump_lines`, text in memory: the tests' and the fuzzers'):
  with the tables, and with a table collector that takes no section (its floor);
- the native one every file goes through (`read_crashdump_file` of a file on disk: the byte
  scan hands the =proc and =ets sections to collector/native/src/procrecs.rs): the dump, and
  its floor, the same dump without its =proc and =ets sections (the allocators alone: handed
  to it, the native reader reads them whatever the collector takes).

Minima and their ratios (goal: at most 1.5x the floor), and the native reader's time with the
tables against the line reader's. A plain script, not a test: tests never assert wall-clock
times.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beamalloc.collector import crashdump, dumptables

DUMP = (Path(__file__).resolve().parents[3] / "shared" / "samples" / "real-dumps"
        / "sharondad91__FinalProject__src_erl_crash.dump.dump")


class _NoTables(dumptables.DumpTables):
    """The line reader's floor: no section is a table's."""

    def start(self, section: str) -> bool:
        return False


def _run(runs: int, lines: list[str], full: Path, alone: Path) -> dict[tuple[str, str], float]:
    """Minimum seconds per (reader, tables or floor), alternated run by run."""
    def native(path: Path) -> Callable[[], Any]:
        def read() -> Any:
            with path.open("rb") as f:  # a regular file: read at its offsets, as every file
                return crashdump.read_crashdump_file(f, str(path))
        return read

    def line_reader(cls: type) -> Callable[[], Any]:
        def read() -> Any:
            crashdump.DumpTables = cls  # type: ignore[misc]
            try:
                return crashdump.read_crashdump_lines(iter(lines))
            finally:
                crashdump.DumpTables = real  # type: ignore[misc]
        return read

    real = crashdump.DumpTables
    cases = {("lines", "tables"): line_reader(real), ("lines", "floor"): line_reader(_NoTables),
             ("native", "tables"): native(full), ("native", "floor"): native(alone)}
    times: dict[tuple[str, str], list[float]] = {k: [] for k in cases}
    procs = {}
    for _ in range(runs):
        for k, read in cases.items():
            t = time.perf_counter()
            snap = read()
            times[k].append(time.perf_counter() - t)
            procs[k] = snap.extra.get("dump_procs", {}).get("count", 0)
    # both readers read every =proc section; the native floor has none to read
    assert procs[("lines", "tables")] == procs[("native", "tables")] > 0, procs
    assert procs[("native", "floor")] == 0, procs
    return {k: min(v) for k, v in times.items()}


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
    # the native reader's floor: the allocators alone, the dump without its =proc and =ets
    # sections (handed to it, it reads them whatever the table collector takes)
    bare = re.sub(r"^=(?:proc|ets):.*?(?=^=)", "", big, flags=re.S | re.M)
    with tempfile.TemporaryDirectory() as tmp:
        full, alone = Path(tmp) / "tables.dump", Path(tmp) / "floor.dump"
        full.write_bytes(big.encode("latin-1"))
        alone.write_bytes(bare.encode("latin-1"))
        times = _run(args.runs, lines, full, alone)
    print(f"{len(big) >> 20} MiB, {big.count(chr(10) + '=proc:')} =proc sections; the floor "
          f"without them {len(bare) >> 10} KiB; minima of {args.runs} runs")
    for reader in ("lines", "native"):
        t, f = times[(reader, "tables")], times[(reader, "floor")]
        print(f"  {reader:6} reader: with tables {t:.3f} s, floor {f:.3f} s, ratio {t / f:.2f}")
    print(f"  native against lines, with tables: "
          f"{times[('native', 'tables')] / times[('lines', 'tables')]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
