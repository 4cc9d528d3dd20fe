"""The watch store on real SQLite files: lossless snapshots, series, keep policy, retention, schema,
and the Prometheus exposition of the same numbers."""

from __future__ import annotations

import copy
import random
import re
import socket
import sqlite3
import subprocess
import sys

import pytest
from markupsafe import escape
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import DATA, SAMPLES, run_cli

from beamalloc.collector.sources import read_file
from beamalloc.errors import InputError
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries import store as store_mod
from beamalloc.timeseries.prometheus import WatchCollector, parse_address
from beamalloc.timeseries.series import active_findings, derive, instance_usage, summarize
from beamalloc.timeseries.store import CHUNK, Store, StoreError, decode_chunk, encode_chunk
from beamalloc.timeseries.watch import NodeStatus

T0 = 1_700_000_000.0
NODE = "app@host"


@pytest.fixture(scope="module")
def base() -> Snapshot:
    s = read_file(str(SAMPLES / "raw_allocator_dump.txt"))
    s.node, s.os_pid, s.rss = NODE, 4242, 200_000_000
    return s


def _sample(base: Snapshot, t: float, grow: int = 0, pid: int | None = None) -> Snapshot:
    s = copy.deepcopy(base)
    s.taken_at = t
    s.memory["total"] += grow
    if pid is not None:
        s.os_pid = pid
    return s


def _fill(st: Store, base: Snapshot, n: int, step: float = 60.0) -> list[tuple[int, Snapshot]]:
    out = []
    for i in range(n):
        s = _sample(base, T0 + i * step, grow=i)
        p = derive(s)
        p["binary_alloc.used"] += i  # a value that changes every sample
        out.append((st.add_sample(s, p), s))
    return out


def test_lossless_snapshots_and_latest(tmp_path, base) -> None:
    with Store(tmp_path / "w.db", keep_every=300) as st:
        added = _fill(st, base, 12)
        kept = [x for x in st.snapshots(NODE) if x["kept"]]
        # One kept every 300 s of 60 s samples (the first is the node's key), plus the latest.
        assert [x["t"] for x in kept] == [T0 + 300 * k for k in range(3)]
        assert st.snapshots(NODE)[-1] == {"id": added[-1][0], "t": T0 + 660, "kept": False}
        for x in kept:
            orig = next(s for sid, s in added if sid == x["id"])
            assert st.snapshot(x["id"]).to_dict() == orig.to_dict()
        assert st.latest(NODE).to_dict() == added[-1][1].to_dict()
        # The previous latest was transient: replaced, not accumulated.
        with pytest.raises(StoreError):
            st.snapshot(added[-3][0])


def test_a_delta_of_another_shape(tmp_path, base) -> None:
    """A sample whose shape is not its key's (a block type came, as foreign blocks do) is a
    delta on the key all the same (its own shape row, its numbers compressed against the
    key's), not a new key; it reads back exactly."""
    from beamalloc.snapshot import BlockStats, Triple

    with Store(tmp_path / "w.db") as st:
        key = st.add_sample(_sample(base, T0), derive(base))
        s = _sample(base, T0 + 60)
        s.allocators[0].mbcs.blocks["foreign_alloc"] = BlockStats(Triple(1, 2, 3), Triple(4, 5, 6))
        sid = st.add_sample(s, derive(s))
        base_of, shape, kept = st.db.execute("SELECT base, shape, kept FROM snapshots WHERE "
                                             "id = ?", (sid,)).fetchone()
        assert base_of == key and not kept
        assert shape != st.db.execute("SELECT shape FROM snapshots WHERE id = ?",
                                      (key,)).fetchone()[0]
        assert st.snapshot(sid).to_dict() == s.to_dict()
        assert st.db.execute("SELECT count(*) FROM shapes").fetchone()[0] == 2


def test_the_snapshot_before_a_time(tmp_path, base) -> None:
    """What the web UI's turnover reads (webui/data.py previous()): the last stored snapshot
    strictly before a time, whatever the keep policy kept around it."""
    with Store(tmp_path / "w.db", keep_every=300) as st:
        _fill(st, base, 12)
        rows = st.snapshots(NODE)
        assert len(rows) >= 3
        for i, r in enumerate(rows):
            want = rows[i - 1]["id"] if i else None
            assert st.before(NODE, r["t"]) == want
            assert st.before(NODE, r["t"] + 0.5) == r["id"]
        assert st.before("other@host", T0 + 10_000) is None


def test_restart_and_change_keep_a_snapshot(tmp_path, base) -> None:
    with Store(tmp_path / "w.db", keep_every=3600, keep_change=0.10,
               keep_min_interval=60) as st:
        s = _sample(base, T0)
        st.add_sample(s, derive(s))
        s = _sample(base, T0 + 10, pid=9999)  # new OS pid: restarted
        sid = st.add_sample(s, derive(s))
        s = _sample(base, T0 + 20)
        p = derive(s)
        st.add_sample(s, p)
        p = dict(p, allocated=int(p["allocated"] * 1.5))  # +50 %, but only 10 s later
        s = _sample(base, T0 + 30)
        st.add_sample(s, p)
        s = _sample(base, T0 + 100)
        moved = st.add_sample(s, p)  # 90 s after the last kept one: now it counts
        kept = {x["id"] for x in st.snapshots(NODE) if x["kept"]}
        assert sid in kept and moved in kept
        assert len(kept) == 4  # first, restart, pid back to 4242 (another restart), the move


def test_series_across_chunks_exact_and_ranged(tmp_path, base) -> None:
    n = CHUNK * 2 + 17
    with Store(tmp_path / "w.db") as st:
        _fill(st, base, n, step=1.0)
        chunks = st.db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert chunks == 2
        s = st.series(NODE, max_points=None)
        assert s["t"] == [T0 + i for i in range(n)]
        assert s["columns"]["binary_alloc.used"][CHUNK + 5] - s["columns"][
            "binary_alloc.used"][CHUNK + 4] == 1
        first = derive(_sample(base, T0))
        assert {k: v[0] for k, v in s["columns"].items()} == {
            **first, "binary_alloc.used": first["binary_alloc.used"]}
        part = st.series(NODE, T0 + CHUNK - 3, T0 + CHUNK + 2, max_points=None)
        assert part["t"] == [T0 + CHUNK + d for d in range(-3, 3)]
        assert st.list_nodes()[0]["samples"] == n


def test_downsampling_keeps_peaks(tmp_path, base) -> None:
    with Store(tmp_path / "w.db") as st:
        pts = []
        p0 = derive(base)
        for i in range(1000):
            p = dict(p0, **{"binary_alloc.allocated": 10_000_000 + (5_000_000 if i == 517 else 0)})
            pts.append((T0 + i, p))
        st.add_points(NODE, pts)
        s = st.series(NODE, max_points=50)
        assert s["downsampled"] and 45 <= len(s["t"]) <= 50
        assert max(s["max"]["binary_alloc.allocated"]) == 15_000_000
        assert max(s["columns"]["binary_alloc.allocated"]) < 15_000_000  # the mean hides it
        assert s["t"] == sorted(s["t"])


def test_a_long_range_reads_the_rollups(tmp_path, base) -> None:
    """A range of ROLLUP samples or more per point is read from its chunks' rollups (groups of
    ROLLUP, mean and max per key): the peak stays, the means agree with the samples', and a
    chunk without a rollup (schema 2 wrote none) reads the same."""
    n = CHUNK * 3 + 50
    p0 = derive(base)
    pts = [(T0 + i, dict(p0, **{"binary_alloc.allocated": 10_000_000 + 1000 * (i % 7)
                                 + (5_000_000 if i == 517 else 0)})) for i in range(n)]
    with Store(tmp_path / "w.db") as st:
        st.add_points(NODE, pts)
        assert st.db.execute("SELECT count(*) FROM rollups").fetchone()[0] == 3
        fine = st.series(NODE, max_points=n)  # a point a sample: every sample
        s = st.series(NODE, max_points=20)
        assert not fine["downsampled"] and s["downsampled"] and 15 <= len(s["t"]) <= 20
        col = s["columns"]["binary_alloc.allocated"]
        assert max(s["max"]["binary_alloc.allocated"]) == 15_000_000 + 1000 * (517 % 7)
        assert all(10_000_000 <= v < 10_200_000 for v in col)  # the mean hides the peak
        assert abs(sum(col) / len(col) - 10_003_000) < 10_000
        assert s["t"] == sorted(s["t"]) and s["t"][0] >= T0 and s["t"][-1] <= T0 + n
        part = st.series(NODE, T0 + 100, T0 + 800, max_points=10)
        assert part["downsampled"] and part["t"][0] >= T0 + 100 and part["t"][-1] <= T0 + 800
        st.db.execute("DELETE FROM rollups")
        assert st.series(NODE, max_points=20) == s


def test_rollups_and_frames_carry_their_format(tmp_path, base) -> None:
    """A rollup starts with its format version (ROLLUP_MAGIC), a frame with its own
    (frames.MAGIC); a rollup written before versions (schema 3 at first: its zlib stream
    alone) reads as format 1; a newer format of either is one line asking for a newer
    beamalloc, never a wrong reading."""
    pts = [(T0 + i, dict(derive(base), used=1000 + i % 13)) for i in range(CHUNK * 2)]
    path = tmp_path / "w.db"
    with Store(path) as st:
        st.add_points(NODE, pts)
        sid = st.add_sample(_sample(base, T0 + CHUNK * 2), derive(base))
        blobs = [r[0] for r in st.db.execute("SELECT data FROM rollups")]
        assert len(blobs) == 2 and all(b.startswith(b"BAR\x01") for b in blobs)
        assert st.db.execute("SELECT data FROM snapshots WHERE id = ?",
                             (sid,)).fetchone()[0].startswith(b"BAF1")
        s = st.series(NODE, max_points=12)
        assert s["downsampled"] and len(s["t"]) == 12
        st.db.execute("UPDATE rollups SET data = substr(data, 5)")  # as written before versions
        assert st.db.execute("SELECT data FROM rollups").fetchone()[0][:1] == b"\x78"  # zlib
        assert st.series(NODE, max_points=12) == s
        # "BAR", format 2
        st.db.execute("UPDATE rollups SET data = CAST(X'42415202' || data AS BLOB)")
        with pytest.raises(StoreError, match=r"holds a rollup of format 2 .*upgrade beamalloc"):
            st.series(NODE, max_points=12)
        # "BAF2"
        st.db.execute("UPDATE snapshots SET data = CAST(X'42414632' || substr(data, 5) AS BLOB)")
        with pytest.raises(StoreError, match=r"holds a snapshot frame of format 2 .*upgrade"):
            st.snapshot(sid)


def test_chunks_and_usage_carry_their_format(tmp_path, base) -> None:
    """A chunk's columns and a kept snapshot's usage start with their tag and format
    (CHUNK_MAGIC, USAGE_MAGIC); one written before tags (a zlib stream alone) reads as
    format 1; a newer format is one line asking for a newer beamalloc; a tag with no format
    byte is damage, never read as this layout."""
    pts = [(T0 + i, dict(derive(base), used=1000 + i % 13)) for i in range(CHUNK * 2)]
    with Store(tmp_path / "w.db") as st:
        st.add_points(NODE, pts)
        sid = st.add_sample(_sample(base, T0 + CHUNK * 2), derive(base), force_keep=True)
        chunks = [r[0] for r in st.db.execute("SELECT data FROM chunks")]
        usage = st.db.execute("SELECT usage FROM snapshots WHERE id = ?", (sid,)).fetchone()[0]
        assert len(chunks) == 2 and all(b.startswith(b"BAC\x01") for b in chunks)
        assert usage.startswith(b"BAU\x01")
        s, u = st.series(NODE, max_points=None), st.instance_usage([sid])
        assert s["columns"]["used"][:3] == [1000, 1001, 1002] and u[sid]["usage"]
        # as written before tags: the zlib stream alone
        st.db.execute("UPDATE chunks SET data = substr(data, 5)")
        st.db.execute("UPDATE snapshots SET usage = substr(usage, 5) WHERE usage IS NOT NULL")
        assert st.db.execute("SELECT data FROM chunks").fetchone()[0][:1] == b"\x78"
        assert st.series(NODE, max_points=None) == s and st.instance_usage([sid]) == u
        # "BAC", format 2; "BAU", format 2
        st.db.execute("UPDATE chunks SET data = CAST(X'42414302' || data AS BLOB)")
        with pytest.raises(StoreError, match=r"holds a chunk of format 2 .*upgrade beamalloc"):
            st.series(NODE, max_points=None)
        st.db.execute("UPDATE snapshots SET usage = CAST(X'42415502' || usage AS BLOB) "
                      "WHERE usage IS NOT NULL")
        with pytest.raises(StoreError, match=r"holds a usage row of format 2 .*upgrade"):
            st.instance_usage([sid])
        st.db.execute("UPDATE snapshots SET usage = CAST(X'424155' AS BLOB)")  # tag, no format
        with pytest.raises(StoreError, match=r"damaged or not beamalloc's"):
            st.instance_usage([sid])


def test_shapes_carry_their_format(tmp_path, base) -> None:
    """A frame's shape row starts with its tag and format (SHAPE_MAGIC); one written before
    tags (the zlib stream alone) reads as format 1 and the snapshots on it read as they were;
    a newer format is one line asking for a newer beamalloc."""
    path = tmp_path / "w.db"
    with Store(path) as st:
        sid = st.add_sample(_sample(base, T0), derive(base), force_keep=True)
        shapes = [r[0] for r in st.db.execute("SELECT data FROM shapes")]
        assert shapes and all(b.startswith(b"BAS\x01") for b in shapes)
        want = st.snapshot(sid).to_json()
        st.db.execute("UPDATE shapes SET data = substr(data, 5)")  # as written before tags
        assert st.db.execute("SELECT data FROM shapes").fetchone()[0][:1] == b"\x78"
    with Store(path, readonly=True) as st:  # a new Store: no shape cached
        assert st.snapshot(sid).to_json() == want
    with Store(path) as st:
        st.db.execute("UPDATE shapes SET data = CAST(X'42415302' || data AS BLOB)")  # "BAS", 2
    with Store(path, readonly=True) as st, pytest.raises(
            StoreError, match=r"holds a snapshot's shape of format 2 .*upgrade beamalloc"):
        st.snapshot(sid)


def test_summary(tmp_path, base) -> None:
    with Store(tmp_path / "w.db") as st:
        p0 = derive(base)
        pts = [(T0 + i, dict(p0, **{"binary_alloc.allocated": 1000, "binary_alloc.used": u}))
               for i, u in enumerate([100, 900, 500, 1000, 250])]
        st.add_points(NODE, pts)
        out = summarize(st.series(NODE, max_points=None))
        b = out["types"]["binary_alloc"]
        assert (b["usage_min"], b["usage_median"], b["usage_max"]) == (0.1, 0.5, 1.0)
        assert (b["peak_unused"], b["peak_unused_at"]) == (900, T0)
        assert out["peak_rss_gap"] == base.rss - p0["allocated"]


def test_chunk_codec_with_missing_keys() -> None:
    ts = [5, 7, 12]
    pts = [{"a": 1, "b": -4}, {"a": 3}, {"a": 2, "b": 2**40}]
    assert decode_chunk(encode_chunk(ts, pts)) == (ts, {"a": [1, 3, 2], "b": [-4, None, 2**40]})


def test_gaps(tmp_path, base) -> None:
    with Store(tmp_path / "w.db") as st:
        _fill(st, base, 2)
        st.open_gap(NODE, T0 + 60, "node went down")
        st.open_gap(NODE, T0 + 90, "still down")  # already open: no second gap
        assert st.list_nodes()[0]["down_since"] == T0 + 60
        st.close_gap(NODE, T0 + 200, "restarted (os pid 1 -> 2)")
        st.add_gap(NODE, T0 + 300, T0 + 310, "restarted (os pid 2 -> 3)")
        assert st.gaps(NODE) == [
            {"start": T0 + 60, "end": T0 + 200, "reason": "restarted (os pid 1 -> 2)"},
            {"start": T0 + 300, "end": T0 + 310, "reason": "restarted (os pid 2 -> 3)"},
        ]
        assert st.gaps(NODE, T0 + 250, T0 + 400)[0]["start"] == T0 + 300
        assert st.list_nodes()[0]["down_since"] is None


def test_prune_keeps_what_newer_snapshots_need(tmp_path, base) -> None:
    with Store(tmp_path / "w.db", keep_every=600) as st:
        added = _fill(st, base, CHUNK + 40)  # a chunk plus recent rows, 60 s apart
        st.add_gap(NODE, T0 + 60, T0 + 120, "restarted")
        cut = T0 + (CHUNK + 10) * 60
        n = st.prune(cut)
        assert n["chunks"] == 1 and n["recent"] == 10 and n["gaps"] == 1 and n["snapshots"] > 0
        s = st.series(NODE, max_points=None)
        assert s["t"][0] == cut and len(s["t"]) == 30
        left = st.snapshots(NODE)
        # The node's key is older than the cut but still decodes every newer delta.
        assert all(st.snapshot(x["id"]).taken_at for x in left)
        assert st.latest(NODE).to_dict() == added[-1][1].to_dict()
        # Writing goes on after a prune.
        more = _sample(base, T0 + (CHUNK + 40) * 60)
        st.add_sample(more, derive(more))
        assert st.latest(NODE).taken_at == more.taken_at


def test_reopen_resumes(tmp_path, base) -> None:
    path = tmp_path / "w.db"
    with Store(path, keep_every=300) as st:
        _fill(st, base, 7)
    with Store(path, keep_every=300) as st:  # state (key, transient, counts) read back
        s = _sample(base, T0 + 7 * 60)
        st.add_sample(s, derive(s))
        assert len([x for x in st.snapshots(NODE) if not x["kept"]]) == 1
        assert st.list_nodes()[0]["samples"] == 8
    with Store(path, readonly=True) as ro:
        assert ro.latest(NODE).taken_at == s.taken_at
        with pytest.raises(sqlite3.OperationalError):
            ro.db.execute("DELETE FROM recent")


def test_schema_version_and_bad_files(tmp_path) -> None:
    path = tmp_path / "w.db"
    with Store(path) as st:
        assert st.version() == store_mod.SCHEMA_VERSION
        assert st.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema 99"):
        Store(path)
    with pytest.raises(StoreError, match="no store"):
        Store(tmp_path / "absent.db", readonly=True)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        Store(junk)


def _set_version(path, version: int) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    db.commit()
    db.close()


def _files(d) -> dict[str, bytes]:
    """The store's bytes: the database and anything written to its WAL (SQLite may leave an
    empty -wal and a -shm index behind a read-only open; neither holds data)."""
    return {p.name: p.read_bytes() for p in d.iterdir() if not p.name.endswith("-shm")
            and not (p.name.endswith("-wal") and p.stat().st_size == 0)}


def test_a_newer_store_is_never_modified(tmp_path) -> None:
    """docs/store.md: a newer store is refused (exit code 2, one line), never modified, by the
    writer (watch) and the reader (serve) alike."""
    path = tmp_path / "w.db"
    Store(path).close()
    _set_version(path, store_mod.SCHEMA_VERSION + 1)
    cookie = tmp_path.parent / f"{tmp_path.name}.cookie"  # watch checks a cookie first
    cookie.write_text("STORETESTCOOKIE")
    cookie.chmod(0o400)
    before = _files(tmp_path)
    for args in (["serve", "--store", str(path), "--port", str(_free_port())],
                 ["watch", "nobody@nohost.invalid", "--store", str(path), "--duration", "1",
                  "--cookie-file", str(cookie)]):
        r = run_cli(*args)
        assert r.returncode == 2, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("beamalloc: ") and "upgrade beamalloc" in last
        assert f"schema {store_mod.SCHEMA_VERSION + 1}" in last and "Traceback" not in r.stderr
        assert _files(tmp_path) == before, args[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_older_store_opened_read_only(tmp_path) -> None:
    """An older store opened read-only (serve) is not migrated: one line asks to open it once
    read-write (exit code 2), and the file is untouched. There is no older release to write an
    old file, so the CLI runs with its schema one version ahead and a migration to it."""
    path = tmp_path / "w.db"
    Store(path).close()
    before = _files(tmp_path)
    code = ("import sys; from beamalloc.timeseries import store as s;"
            " from beamalloc.cli import main;"
            " s.SCHEMA_VERSION += 1; s.MIGRATIONS[s.SCHEMA_VERSION] = ['CREATE TABLE x (y INT)'];"
            " sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "serve", "--store", str(path),
                        "--port", str(_free_port())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "needs migrating" in r.stderr and "read-write" in r.stderr
    assert _files(tmp_path) == before


def test_migration_from_an_empty_file(tmp_path, monkeypatch) -> None:
    # A future migration runs on the current store, once, inside one transaction.
    path = tmp_path / "w.db"
    Store(path).close()
    nxt = store_mod.SCHEMA_VERSION + 1
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", nxt)
    monkeypatch.setitem(store_mod.MIGRATIONS, nxt, ["CREATE TABLE extra (x INTEGER)"])
    with Store(path) as st:
        assert st.version() == nxt
        assert st.db.execute("SELECT count(*) FROM extra").fetchone()[0] == 0
    Store(path).close()  # already there: the migration does not run again (it would fail)


def _as_schema_2(st: Store) -> None:
    """What schema 2 wrote, made of a store written now: every snapshot a zstd JSON document,
    no shapes, rollups or chunk index (schema 3's frames re-encoded as schema 2 encoded them)."""
    import zstandard

    docs = {sid: st.snapshot(sid).to_json().encode()
            for (sid,) in st.db.execute("SELECT id FROM snapshots").fetchall()}
    for sid, doc in docs.items():
        st.db.execute("UPDATE snapshots SET data = ?, base = NULL WHERE id = ?",
                      (zstandard.ZstdCompressor(level=9).compress(doc), sid))
    st.db.execute("ALTER TABLE snapshots DROP COLUMN shape")
    st.db.execute("DROP TABLE shapes")
    st.db.execute("DROP TABLE rollups")
    st.db.execute("DROP INDEX chunks_span")


def test_migration_1_to_2_fills_the_last_samples(tmp_path, base) -> None:
    """A store written by schema 1 (no `last` table) is migrated on a read-write open; the
    nodes page's last points come from its unchunked rows, or from its chunks."""
    path = tmp_path / "w.db"
    with Store(path) as st:  # then made what schema 1 wrote: the same tables but `last`
        added = _fill(st, base, 5)
        st.add_points("other@host", [(T0 + i, {"allocated": i}) for i in range(CHUNK)])
        st.db.execute("DROP TABLE last")
        st.db.execute("ALTER TABLE snapshots DROP COLUMN usage")
        _as_schema_2(st)
    _set_version(path, 1)
    with Store(path) as st:
        assert st.version() == store_mod.SCHEMA_VERSION
        nodes = {n["node"]: n for n in st.list_nodes()}
    last = added[-1][1]
    assert nodes[NODE]["last"] == last.taken_at
    assert nodes[NODE]["point"]["binary_alloc.used"] == derive(last)["binary_alloc.used"] + 4
    assert nodes["other@host"]["point"] == {"allocated": CHUNK - 1}  # all chunked: read back
    assert nodes[NODE]["latest_snapshot"] == added[-1][0] and nodes[NODE]["findings"] is None
    with Store(path) as st:  # a snapshot of schema 1 has no stored instance usage: decoded
        assert st.instance_usage([added[-1][0]]) == {}


def test_prometheus_exposition_parses() -> None:
    """The gauges of tests/data/hand_recon.txt, whose numbers are worked out by hand in
    tests/test_metrics.py (docs/erts/recon-formulas.md §1)."""
    hand = read_file(str(DATA / "hand_recon.txt"))
    hand.node, hand.rss = NODE, 1_000_000
    p = derive(hand)
    findings, lint = active_findings(hand)
    findings.append(("R2", "binary_alloc", "info"))  # what a fragmented sample would add
    lint.append(("lmbcs-sbct", "ets_alloc"))
    reg = CollectorRegistry()
    reg.register(WatchCollector(lambda: {
        NODE: NodeStatus(NODE, up=True, last_t=T0, point=p, findings=findings, lint=lint),
        "down@host": NodeStatus("down@host")}))
    text = generate_latest(reg).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    # Counters, from the hand file's calls: binary_alloc 10 + 5 allocs, 8 + 3 frees.
    calls = {(s.labels["allocator"], s.labels["op"]): s.value
             for s in fams["beamalloc_allocator_calls"].samples if s.name.endswith("_total")}
    assert calls[("binary_alloc", "alloc")] == 15 and calls[("binary_alloc", "free")] == 11
    assert calls[("eheap_alloc", "alloc")] == 1
    hits = fams["beamalloc_mseg_cache_hits"].samples
    assert [(s.name, s.value) for s in hits] == [("beamalloc_mseg_cache_hits_total", 3.0)]
    assert [s.labels for s in fams["beamalloc_finding"].samples] == [
        {"node": NODE, "rule": r, "allocator": a, "level": lv} for r, a, lv in findings]
    assert [s.labels for s in fams["beamalloc_lint_in_force"].samples] == [
        {"node": NODE, "check": "lmbcs-sbct", "allocator": "ets_alloc"}]
    assert {s.labels["node"]: s.value for s in fams["beamalloc_up"].samples} == {
        NODE: 1.0, "down@host": 0.0}
    used = {s.labels["allocator"]: s.value for s in fams["beamalloc_used_bytes"].samples}
    # binary 0 mbcs 1000; binary 1 mbcs 500 + pool 300 + sbcs 600000; eheap 250; literal 100
    assert used == {"binary_alloc": 601800, "eheap_alloc": 250, "literal_alloc": 100}
    gap = fams["beamalloc_rss_gap_bytes"].samples
    # RSS minus every carrier: recon's 610112 plus literal_alloc's 10000
    assert [(s.labels, s.value) for s in gap] == [({"node": NODE}, 1_000_000 - 620112)]
    # A few gauges and counters per allocator type, not one series per raw statistic
    # (docs/metrics.md: 8 + 6 categories + 8 per node, 6 gauges + 3 counters per type, one per
    # finding; and beamalloc_memory_category_bytes: 6 categories, system's rest among them).
    samples = [s for f in fams.values() for s in f.samples if not s.name.endswith("_created")]
    assert len(samples) <= 8 + 6 + 6 + 8 + 9 * len(used) + 2 + len(findings) + len(lint)
    cats = {f.name: f.samples[0].value for f in fams.values()
            if f.name.startswith("beamalloc_erlang_memory_")
            and f.name != "beamalloc_erlang_memory_total_bytes"}
    assert cats == {f"beamalloc_erlang_memory_{k}_bytes": hand.memory[k] for k in hand.memory
                    if k in ("processes", "system", "binary", "ets", "atom", "code")}


@pytest.mark.parametrize("bad", ["9100", "host:", "host:99999", "host:x"])
def test_prometheus_address(bad) -> None:
    assert parse_address("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert parse_address(":9100") == ("0.0.0.0", 9100)
    with pytest.raises(InputError):
        parse_address(bad)


_KILLED_WRITER = """
import copy, os, signal, sys
from beamalloc.collector.sources import read_file
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
base = read_file(sys.argv[2])
st = Store(sys.argv[1])
for batch in range(3):
    with st.batch():
        for i in range(50):
            s = copy.deepcopy(base)
            s.node, s.taken_at = f"n{i % 5}@host", 1.7e9 + batch * 100 + i
            st.add_sample(s, derive(s))
            if batch == 2 and i == 40:  # in the middle of the open batch
                print("killing", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
"""


def test_sigkill_loses_only_the_open_batch(tmp_path) -> None:
    """docs/store.md, "Writing": a writer killed by SIGKILL in a batch loses that batch only;
    every committed sample is there, and the store opens and checks clean."""
    path = tmp_path / "w.db"
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path),
                        str(SAMPLES / "raw_allocator_dump.txt")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -9 and "killing" in r.stdout, r.stderr
    with Store(path) as st:
        assert st.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        nodes = {n["node"]: n for n in st.list_nodes()}
        assert {n: x["samples"] for n, x in nodes.items()} == {f"n{k}@host": 20 for k in range(5)}
        for k in range(5):
            t = st.series(f"n{k}@host", max_points=None)["t"]
            assert t == sorted(1.7e9 + b * 100 + i for b in (0, 1) for i in range(k, 50, 5))
            assert nodes[f"n{k}@host"]["last"] == t[-1]
            assert st.latest(f"n{k}@host").taken_at <= t[-1]


def test_a_failed_write_in_a_batch_is_undone_alone(tmp_path, base) -> None:
    with Store(tmp_path / "w.db") as st:
        with st.batch():
            s = _sample(base, T0)
            st.add_sample(s, derive(s))
            bad = _sample(base, T0 + 60)
            bad.taken_at = None
            with pytest.raises(StoreError):
                st.add_sample(bad, derive(s))
            with pytest.raises(TypeError):  # its second point fails: its first is undone too
                st.add_points(NODE, [(T0 + 120, {"allocated": 1}), (T0 + 180, {"x": object()})])
            s = _sample(base, T0 + 240)
            st.add_sample(s, derive(s))
        assert st.series(NODE, max_points=None)["t"] == [T0, T0 + 240]
        assert not st.db.in_transaction


def test_snapshots_of_a_fast_node_and_the_last_sample(tmp_path, base) -> None:
    """At 5 s, a node's snapshot is stored once a minute (latest_every) and when kept; every
    sample's numbers are; list_nodes has the last point and the stored findings."""
    with Store(tmp_path / "w.db", latest_every=60) as st:
        ids = []
        for i in range(30):
            s = _sample(base, T0 + 5 * i, grow=i)
            found = {"findings": [["R2", "binary_alloc", "warn"]], "lint": []} if i == 6 else None
            ids.append(st.add_sample(s, derive(s), findings=found))
        stored = [i for i, sid in enumerate(ids) if sid is not None]
        assert stored == [0, 12, 24]  # the key, then a transient every 60 s
        assert len(st.series(NODE, max_points=None)["t"]) == 30
        (n,) = st.list_nodes()
        assert n["point"] == derive(_sample(base, T0 + 145, grow=29))
        assert n["findings"] == {"findings": [["R2", "binary_alloc", "warn"]], "lint": []}
        assert n["latest_snapshot"] == ids[24]
        assert st.latest(NODE).taken_at == T0 + 120
        got = st.instance_usage(ids[:25])
        assert set(got) == {ids[0]}  # the kept one; the transient latest is decoded when asked
        want = instance_usage(st.snapshot(ids[0]))
        assert got[ids[0]]["calls"] == want["calls"] and want["usage"]
        assert got[ids[0]]["usage"] == {k: round(v, 3) for k, v in want["usage"].items()}
        assert st.list_nodes("absent@host") == [] and st.list_nodes(NODE) == [n]
        cols = st.series(NODE, fields={"used"}, max_points=None)["columns"]
        assert "used" in cols and "binary_alloc.used" in cols and "allocated" not in cols


def test_nodes_page_reads_the_last_rows(tmp_path, base) -> None:
    """The nodes page shows each node's last sample and its latest snapshot's verdict in the
    snapshot page's words (issue 26 item 3), never the watcher's bare rule codes."""
    from beamalloc.webui.app import create_app
    from beamalloc.webui.recommend_view import recommendations

    path = tmp_path / "w.db"
    with Store(path) as st:
        s = _sample(base, T0)
        st.add_sample(s, derive(s), findings={"findings": [["R9", "binary_alloc", "warn"]],
                                              "lint": [["migration-off", ""]]})
        other = _sample(base, T0 + 1)
        other.node = "plain@host"
        st.add_sample(other, derive(other))
    client = create_app(path).test_client()
    # a new server sends the page first and the verdicts as its script asks for them
    for ref in re.findall(r'id="nodes-pending" data-pending="([^"]*)"',
                          client.get("/").get_data(as_text=True))[0].split():
        assert client.get(f"/api/verdict?ref={ref}").status_code == 200
    html = client.get("/").get_data(as_text=True)
    assert html.count("<tr data-verdict=") == 2 and "data-pending" not in html
    assert "R9 binary_alloc" not in html and "(warn)" not in html
    for snap in (s, other):
        rec = recommendations(snap)
        assert rec is not None
        assert escape(rec["headline"]) in html


@pytest.mark.parametrize("kind", ["directory", "not a database", "under a file"])
def test_watch_with_a_store_it_cannot_use_says_one_line(tmp_path, kind) -> None:
    """Before it says "watching ...", before any node is asked: one line, exit 2."""
    bad = {"directory": tmp_path, "not a database": tmp_path / "x.db",
           "under a file": tmp_path / "file" / "w.db"}[kind]
    (tmp_path / "x.db").write_bytes(b"not sqlite at all\n" * 10)
    (tmp_path / "file").write_text("x")
    cookie = tmp_path / "cookie"  # a usable cookie (checked first), whatever HOME holds
    cookie.write_text("STORETESTCOOKIE")
    cookie.chmod(0o400)
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "watch", "nobody@nohost.invalid",
                        "--store", str(bad), "--interval", "1", "--duration", "1",
                        "--cookie-file", str(cookie)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("beamalloc: cannot open the store")
    assert "Traceback" not in r.stderr and "watching" not in r.stderr
    assert (tmp_path / "x.db").read_bytes().startswith(b"not sqlite")  # left as it was


def test_kept_snapshots_fill_their_pages(tmp_path, base, monkeypatch) -> None:
    """A node's transient latest is replaced every minute, its kept snapshots stay: numbered
    apart (kept ones below TRANSIENT_IDS, one after another), the transients' deletions leave
    no holes among the kept rows, whose pages stay full (bench_store's year projection: issue
    13). A new store has PAGE_SIZE pages and incremental auto_vacuum (prune returns pages)."""
    with Store(tmp_path / "new.db") as st:
        assert st.db.execute("PRAGMA page_size").fetchone()[0] == store_mod.PAGE_SIZE
        assert st.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    monkeypatch.setattr(store_mod, "PAGE_SIZE", 4096)  # more pages of these small rows
    rnd = random.Random(7)
    with Store(tmp_path / "w.db", keep_every=300) as st:
        for i in range(400):  # transient rows larger than the kept ones (a busy node's are)
            s = _sample(base, T0 + i * 60, grow=i)
            if i % 5:
                s.raw = f"{base.raw} %{rnd.randbytes(640).hex()}"
            st.add_sample(s, derive(s))
        rows = st.snapshots(NODE)
        kept = [r["id"] for r in rows if r["kept"]]
        assert kept == list(range(1, len(kept) + 1)) and len(kept) == 80
        assert rows[-1]["id"] > store_mod.TRANSIENT_IDS and not rows[-1]["kept"]
        # the leaves of the kept rows in the tree's order (the last, the transient's, aside)
        pages = st.db.execute("SELECT payload, unused FROM dbstat WHERE name = 'snapshots' AND "
                              "pagetype = 'leaf' ORDER BY path").fetchall()[:-1]
        payload, unused = map(sum, zip(*pages, strict=True))
        assert len(pages) >= 4 and unused < 0.15 * (payload + unused), (len(pages), unused, payload)
        assert st.snapshot(kept[-1]).taken_at == T0 + 395 * 60
        # a store of before: its transient latest numbered after the kept ones
        st.db.execute("UPDATE snapshots SET id = ? WHERE kept = 0", (kept[-1] + 1,))
    with Store(tmp_path / "w.db", keep_every=600) as st:
        ids = [st.add_sample(_sample(base, T0 + i * 60), derive(base)) for i in range(400, 406)]
        assert all(i > store_mod.TRANSIENT_IDS for i in ids[:5])  # its transient replaced
        assert ids[5] == kept[-1] + 2  # kept: not the id the transient of before had
