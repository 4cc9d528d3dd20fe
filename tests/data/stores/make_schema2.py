"""Writes schema2.db: a watch store as beamalloc wrote it at store schema 2 (one zstd JSON
document per snapshot), kept to check that every later schema opens and reads it
(tests/test_store_migration.py). Run once with the beamalloc of schema 2:

    .venv/bin/python tests/data/stores/make_schema2.py tests/data/stores/schema2.db

The recipe is the test's too (`samples()`): the same snapshots, so the test compares what the
migrated store gives back with them.
"""

from __future__ import annotations

import copy
import sqlite3
import sys
from pathlib import Path

from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import active_findings, derive
from beamalloc.timeseries.store import Store

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0
NODES = ("app@host", "db@host")
SAMPLES = 12
#: Derived numbers alone of a third node: a chunk and some unchunked rows.
POINTS = 400


def samples() -> list[Snapshot]:
    """Twelve 60 s samples of two nodes (a live snapshot's shape: a raw term and an os pid)."""
    out = []
    for k, (node, path) in enumerate(zip(NODES, ("samples/otp25/raw_allocator_dump.txt",
                                                 "samples/workloads/snapshots/frag.json"),
                                         strict=True)):
        base = read_file(str(ROOT / path))
        base.node, base.os_pid, base.rss = node, 4242 + k, 200_000_000
        for i in range(SAMPLES):
            s = copy.deepcopy(base)
            s.taken_at = T0 + i * 60 + k
            s.memory["total"] = s.memory.get("total", 0) + i * 4096
            s.allocators[0].calls = {c: n + i for c, n in s.allocators[0].calls.items()}
            out.append(s)
    return out


def write(path: Path) -> None:
    with Store(path, keep_every=300) as st:
        for s in samples():
            found = dict(zip(("findings", "lint"), active_findings(s), strict=True))
            st.add_sample(s, derive(s), findings=found)
        st.add_points("points@host", [(T0 + i, {"allocated": 1000 + i, "used": 500 + i})
                                      for i in range(POINTS)])
        st.add_gap(NODES[0], T0 + 100, T0 + 110, "restarted (os pid 1 -> 2)")
        st.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db = sqlite3.connect(path)
    db.execute("VACUUM")
    db.execute("PRAGMA journal_mode = DELETE")  # one file: nothing beside it when read
    db.close()


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.unlink(missing_ok=True)
    write(out)
