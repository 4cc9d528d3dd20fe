"""A store written by beamalloc at store schema 2 (tests/data/stores/schema2.db, one zstd JSON
document per snapshot; make_schema2.py beside it says how it was written) opens, migrates and
reads after schema 3's frames (timeseries/frames.py): nothing stored is lost, the pages of its
snapshots show what they showed, and a watch writes on where it stopped."""

from __future__ import annotations

import re
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from support import DATA

from beamalloc.snapshot import Snapshot
from beamalloc.timeseries import frames
from beamalloc.timeseries import store as store_mod
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import CHUNK, Store
from beamalloc.webui.app import create_app

sys.path.insert(0, str(DATA / "stores"))
from make_schema2 import NODES, POINTS, SAMPLES, T0, samples

OLD = DATA / "stores" / "schema2.db"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    p = tmp_path / "old.db"
    shutil.copy(OLD, p)
    return p


@pytest.fixture(scope="module")
def expected() -> dict[tuple[str, float], Snapshot]:
    return {(s.node, s.taken_at): s for s in samples()}


def _version(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    finally:
        db.close()


def test_the_fixture_is_schema_2() -> None:
    """What the rest stands on: the file is what schema 2 wrote (JSON documents, no shapes)."""
    assert _version(OLD) == 2
    db = sqlite3.connect(f"file:{OLD}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        blobs = [r[0] for r in db.execute("SELECT data FROM snapshots")]
    finally:
        db.close()
    assert "shapes" not in tables and len(blobs) == 8
    assert all(b.startswith(b"\x28\xb5\x2f\xfd") for b in blobs)  # zstd frames, no frames.MAGIC


def test_an_old_store_migrates_and_reads_everything(old: Path, expected) -> None:
    with Store(old) as st:
        assert st.version() == store_mod.SCHEMA_VERSION == 3
        nodes = {n["node"]: n for n in st.list_nodes()}
        assert set(nodes) == {*NODES, "points@host"}
        assert all(nodes[n]["samples"] == SAMPLES for n in NODES)
        assert nodes["points@host"]["samples"] == POINTS
        assert nodes[NODES[0]]["findings"] is not None
        rows = {n: st.snapshots(n) for n in NODES}
        # per node: kept at 0, 300, 600 s (keep_every 300) and the transient latest at 660 s
        assert [len(r) for r in rows.values()] == [4, 4]
        for node, rs in rows.items():
            for r in rs:
                got = st.snapshot(r["id"])
                assert got.to_dict() == expected[(node, r["t"])].to_dict()
            assert st.latest(node).taken_at == rs[-1]["t"]
        s = st.series("points@host", max_points=None)
        assert s["t"] == [T0 + i for i in range(POINTS)]
        assert s["columns"]["used"] == [500 + i for i in range(POINTS)]
        assert st.gaps(NODES[0])[0]["reason"] == "restarted (os pid 1 -> 2)"
        first = st.series(NODES[0], max_points=None)
        assert first["columns"]["allocated"][0] == derive(expected[(NODES[0], T0)])["allocated"]


def test_writing_goes_on_after_the_migration(old: Path, expected) -> None:
    """The node's key is a JSON document: the next snapshot starts a frame key (kept), and
    the one after is a frame delta against it; both read back exactly, old rows too."""
    more = []
    for s in samples()[:SAMPLES]:  # the first node, 12 more minutes
        s.taken_at += SAMPLES * 60
        more.append(s)
    with Store(old, keep_every=300) as st:
        ids = [st.add_sample(s, derive(s)) for s in more[:3]]
        assert ids[0] is not None
        row = st.db.execute("SELECT base, kept, shape, data FROM snapshots WHERE id = ?",
                            (ids[0],)).fetchone()
        assert row[0] is None and row[1] == 1 and row[2] is not None
        assert row[3].startswith(frames.MAGIC)
        by_t = {s.taken_at: s for s in more}
        rows = [r for r in st.snapshots(NODES[0]) if r["t"] in by_t]
        assert rows[0]["id"] == ids[0] and rows[-1]["id"] == ids[-1]  # the key; the latest
        assert st.db.execute("SELECT base FROM snapshots WHERE id = ?",
                             (ids[-1],)).fetchone()[0] == ids[0]  # a frame delta on the key
        for r in rows:
            assert st.snapshot(r["id"]).to_dict() == by_t[r["t"]].to_dict()
        for r in st.snapshots(NODES[1]):
            assert st.snapshot(r["id"]).to_dict() == expected[(NODES[1], r["t"])].to_dict()
        assert st.list_nodes(NODES[0])[0]["samples"] == SAMPLES + 3
        # the derived numbers go on too: a chunk of schema 2 (no rollup) and a new one (its
        # rollup of the current format) read as one series
        st.add_points("points@host", [(T0 + i, {"allocated": 1000 + i, "used": 500 + i})
                                      for i in range(POINTS, 2 * CHUNK)])
        assert [r[0][:4] for r in st.db.execute("SELECT data FROM rollups")] == \
            [store_mod.ROLLUP_MAGIC]
        s = st.series("points@host", max_points=None)
        assert s["columns"]["used"] == [500 + i for i in range(2 * CHUNK)]
        coarse = st.series("points@host", max_points=4)
        assert coarse["downsampled"] and max(coarse["max"]["used"]) == 499 + 2 * CHUNK


def test_an_old_store_opened_read_only_asks_for_the_migration(old: Path) -> None:
    with pytest.raises(store_mod.StoreError, match="needs migrating"):
        Store(old, readonly=True)
    assert _version(old) == 2


def _page(path: Path, node: str, t: float) -> str:
    with Store(path, readonly=True) as st:
        sid = next(r["id"] for r in st.snapshots(node) if r["t"] == t)
    client = create_app(path).test_client()
    r = client.get(f"/snapshot/s{sid}")
    assert r.status_code == 200
    return re.sub(r"\bs[0-9]+\b", "sN", r.get_data(as_text=True))


def test_the_snapshot_page_shows_what_it_showed(old: Path, tmp_path: Path) -> None:
    """A stored sample's page from the migrated store (its row a schema 2 JSON document) is
    the page of the same sample stored as a frame by schema 3."""
    with Store(old):
        pass  # migrated
    new = tmp_path / "new.db"
    with Store(new, keep_every=300) as st:
        for s in samples():
            st.add_sample(s, derive(s))
    with Store(new, readonly=True) as st:
        assert all(st.db.execute("SELECT data FROM snapshots WHERE id = ?", (r["id"],))
                   .fetchone()[0].startswith(frames.MAGIC) for r in st.snapshots(NODES[0]))
    t = T0 + 300  # a kept sample with a previous one (the turnover)
    assert _page(old, NODES[0], t) == _page(new, NODES[0], t)
