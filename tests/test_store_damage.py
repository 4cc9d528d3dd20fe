"""A damaged or foreign watch store (issue 25 item 7): one line and exit 2 from the CLI, a 4xx
page from the web UI, never a traceback or a 500, and bounded reads of its blobs. Each case
is a real store (tests/browser/synth.py writes it through Store) with one thing broken by
SQL, as a disk error, another program or a hand edit would break it."""

from __future__ import annotations

import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest
import zstandard
from browser.synth import build_store
from support import run_capped

from beamalloc.timeseries import frames

NODE = "synth@host"

#: name -> SQL run on a copy of a good store
DAMAGE: dict[str, list[tuple[str, tuple]]] = {
    "schema_text": [("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'", ())],
    "schema_negative": [("UPDATE meta SET value = '-1' WHERE key = 'schema_version'", ())],
    "snapshot_junk_blob": [("UPDATE snapshots SET data = ?", (b"\x00junk" * 10,))],
    "snapshot_text_blob": [("UPDATE snapshots SET data = 'text, not a frame'", ())],
    "snapshot_missing_base": [("DELETE FROM snapshots WHERE base IS NULL", ())],
    "snapshot_bomb": [("UPDATE snapshots SET data = ?, base = NULL",
                       (zstandard.ZstdCompressor(level=19).compress(b" " * (256 << 20)),))],
    "snapshot_not_json": [("UPDATE snapshots SET data = ?, base = NULL",
                           (zstandard.ZstdCompressor().compress(b'{"schema": [[[[}'),))],
    "chunk_junk": [("UPDATE chunks SET data = ?", (b"junk",))],
    "chunk_bomb": [("UPDATE chunks SET data = ?", (zlib.compress(b"[" * (64 << 20), 9),))],
    "chunk_wrong_shape": [("UPDATE chunks SET data = ?",
                           (zlib.compress(b'{"k": ["a"], "t": [1, 2], "v": [["x"]]}'),))],
    "recent_junk": [("UPDATE recent SET data = 'not json'", ())],
    "recent_extreme_t": [("UPDATE recent SET t = 9223372036854775807 WHERE rowid = "
                          "(SELECT max(rowid) FROM recent)", ())],
    "last_junk": [("UPDATE last SET point = '[1, 2', findings = 'x'", ())],
    "usage_junk": [("UPDATE snapshots SET usage = ?", (b"junk",))],
    "gap_junk": [("INSERT INTO gaps (node_id, start, end, reason) SELECT id, 'x', NULL, 5 "
                  "FROM nodes", ())],
    # schema 3's frames (timeseries/frames.py): the shape, the header, the parts
    "shape_missing": [("DELETE FROM shapes", ())],
    "shape_junk": [("UPDATE shapes SET data = ?", (zlib.compress(b'[["x"]]'),))],
    "shape_wrong": [("UPDATE shapes SET data = ?",
                     (zlib.compress(b'[[["a",1,[],[],[],null,[],null,null]],[]]'),))],
    "frame_cut": [("UPDATE snapshots SET data = substr(data, 1, 12)", ())],
    "frame_header_lies": [("UPDATE snapshots SET data = ? WHERE base IS NULL",
                           (frames.pack(b"", b"", frames.MAX_VALUES + 1, False),))],
    "frame_values_bomb": [("UPDATE snapshots SET data = ?, base = NULL", (frames.pack(
        zstandard.ZstdCompressor().compress(b"{}\n"),
        zstandard.ZstdCompressor(level=19).compress(bytes(256 << 20)), 1000, False),))],
}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("store") / "good.db"
    build_store(p, node=NODE, days=0.3, interval=60, snapshot_every=600, gap=True)
    return p


def _damaged(good: Path, tmp_path: Path, case: str) -> Path:
    p = tmp_path / "damaged.db"
    shutil.copy(good, p)
    db = sqlite3.connect(p)
    for sql, args in DAMAGE[case]:
        db.execute(sql, args)
    db.commit()
    db.close()
    return p


@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_diff_on_a_damaged_store_is_one_line(case: str, good: Path, tmp_path: Path) -> None:
    p = _damaged(good, tmp_path, case)
    rc, out, err, rss = run_capped("diff", "--node", NODE, "--store", str(p), timeout=60)
    assert "Traceback" not in err
    if rc == 0:  # what diff reads was not damaged (a gap, a chunk: diff reads snapshots)
        assert out
        return
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("beamalloc: ") and str(p) in lines[0]
    assert rss < 300 << 20, f"peak {rss >> 20} MiB"


@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_pages_on_a_damaged_store_are_never_500(case: str, good: Path, tmp_path: Path) -> None:
    from beamalloc.webui.app import create_app

    p = _damaged(good, tmp_path, case)
    c = create_app(p).test_client()
    h = {"Host": "127.0.0.1:8050"}
    for url in ("/", f"/node?n={NODE}", f"/api/node?n={NODE}", f"/api/node/last?n={NODE}",
                "/api/nodes"):
        r = c.get(url, headers=h)
        assert r.status_code < 500, (url, r.status_code, r.get_data(as_text=True)[:300])
        assert r.status_code in (200, 400, 404), (url, r.status_code)


def test_a_foreign_database_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "foreign.db"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('schema_version', 'v2-of-something-else')")
    db.commit()
    db.close()
    rc, _, err, _ = run_capped("diff", "--node", NODE, "--store", str(p), timeout=60)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "schema version" in err
