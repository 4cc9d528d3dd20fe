"""The process scans a watch stores (timeseries/scans.py) and the pages that read them (issue 26
item 3): real SQLite through the real Store, a real ProcessTable (the OTP 25 crash dump's =proc
sections; the live scans: tests/live/test_watch_holders.py).

What must hold: a scan reads back as it was written (less its per-process activity); a node's
scans are kept one per KEEP_EVERY with only its latest between; a sample finds the latest scan
at or before it (or the one its own poll took just after it); an old store without the table
opens and reads; a damaged row is one line, and the page still renders; the snapshot and node
pages of a watched node name the holders of that scan, with its age.
"""

from __future__ import annotations

import dataclasses
import html
import re
import sqlite3
import time
from pathlib import Path

import pytest
from browser.synth import T0, build_store

from beamalloc.advice.holders import processes_json
from beamalloc.collector.procdump import read_procdump
from beamalloc.collector.processes import ProcessTable
from beamalloc.reporters.analyze import holder_rows
from beamalloc.timeseries import scans
from beamalloc.timeseries.store import Store
from beamalloc.webui.app import create_app

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "samples" / "otp25" / "erl_crash.dump"
NODE = "app@web1"


@pytest.fixture(scope="module")
def table() -> ProcessTable:
    t = read_procdump(DUMP)
    assert t.procs and t.groups
    t.activity = {p.pid: (1, 0) for p in t.procs}  # what a live scan carries, not stored
    return t


def test_a_scan_reads_back_as_written(table: ProcessTable) -> None:
    back = scans.decode(scans.encode(table))
    assert back == dataclasses.replace(table, activity=None)
    assert processes_json(back) == processes_json(dataclasses.replace(table, activity=None))


def test_one_scan_kept_per_hour_and_the_latest(tmp_path: Path, table: ProcessTable) -> None:
    with Store(tmp_path / "w.db") as st:
        for i in range(13):  # every 5 minutes for an hour: the first kept, then the latest
            scans.add(st.db, NODE, T0 + 300 * i, table)
        scans.add(st.db, "other@host", T0, table)
        rows = st.db.execute("SELECT t, kept FROM process_scans WHERE node = ? ORDER BY t",
                             (NODE,)).fetchall()
        assert rows == [(T0 * 1000, 1), ((T0 + 3600) * 1000, 1)]
        scans.add(st.db, NODE, T0 + 3900, table)
        assert st.db.execute("SELECT count(*) FROM process_scans WHERE node = ?",
                             (NODE,)).fetchone()[0] == 3
        # the latest at or before a time, or the one taken just after a sample by its poll
        assert scans.at_or_before(st.db, NODE, T0 - 61) is None
        assert scans.at_or_before(st.db, NODE, T0 - 5).t == T0
        assert scans.at_or_before(st.db, NODE, T0 + 1800).t == T0
        assert scans.at_or_before(st.db, NODE, T0 + 10**6).t == T0 + 3900
        assert scans.at_or_before(st.db, "nobody@host", T0 + 10**6) is None
        assert scans.prune(st.db, T0 + 1) == 2  # this node's first and the other's
        assert scans.at_or_before(st.db, NODE, T0 + 1800) is None


def test_processes_every_is_checked_in_one_line() -> None:
    from test_option_ranges import _run

    for bad in ("-1", "86401", "nan", "x"):
        code, err = _run(["watch", "nobody@nohost.invalid", f"--processes-every={bad}"])
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "--processes-every" in lines[0], (bad, err)


def test_a_failed_scan_is_said_and_tried_again_when_due() -> None:
    """A scan that fails (here: the watch's session is not running) is one line through the
    watch's events, writes nothing, and waits for its next due time; the samples go on."""
    from beamalloc.collector.session import Session

    said: list[str] = []
    jobs: list[object] = []
    sc = scans.Scanner("c" * 20, every=300)
    session = Session("c" * 20)  # not started
    assert sc.due(NODE)
    sc.sampled(NODE, session, 1.0, jobs.append, said.append)
    assert jobs == [] and len(said) == 1 and said[0].startswith(f"{NODE}: no process scan")
    assert "\n" not in said[0]
    # (last + 300) - last may round below 300: a second either side of the period
    assert not sc.due(NODE) and not sc.due(NODE, now=sc.last[NODE] + 299)
    assert sc.due(NODE, now=sc.last[NODE] + 301)
    sc.sampled(NODE, session, 1.0, jobs.append, said.append)  # not due: not tried
    assert len(said) == 1
    assert not scans.Scanner("c" * 20, every=0).due(NODE)  # 0: never
    # a fleet's next scans are spread over the period: each node's phase, up to half of it
    before = time.monotonic()
    for i in range(40):
        sc.sampled(f"n{i}@host", session, 1.0, jobs.append, said.append)
    took = time.monotonic() - before  # a phase 0 node sampled late in the loop: -took
    phases = [before - sc.last[f"n{i}@host"] for i in range(40)]
    assert all(-took <= p <= 150 for p in phases) and len({round(p / 15) for p in phases}) >= 8


def test_age_in_words() -> None:
    assert scans.age_text(0.2) == "taken with this sample"
    assert scans.age_text(-3) == "3 s after this sample"
    assert scans.age_text(240) == "4.0 min before this sample"
    assert scans.age_text(9000) == "2.5 h before this sample"
    assert scans.age_text(0.2, "the latest snapshot") == "taken with the latest snapshot"
    assert scans.age_text(240, "the latest snapshot") == "4.0 min before the latest snapshot"
    assert scans.age_text(40 * 60) == "40 min before this sample"


def test_a_store_without_the_table_reads_and_gains_it(tmp_path: Path, table: ProcessTable
                                                      ) -> None:  # fmt: skip
    path = tmp_path / "old.db"
    with Store(path) as st:
        st.db.execute("DROP TABLE process_scans")  # a store written before scans were
    with Store(path, readonly=True) as ro:
        assert scans.at_or_before(ro.db, NODE, T0) is None
    with Store(path) as st:  # its next read-write open (a watch) creates it
        scans.add(st.db, NODE, T0, table)
        assert scans.at_or_before(st.db, NODE, T0).table.count == table.count


def test_a_damaged_scan_is_one_line(tmp_path: Path) -> None:
    with Store(tmp_path / "d.db") as st:
        for blob in (b"not zlib", sqlite3.Binary(b"x\x9c" + b"\0" * 9), "text"):
            st.db.execute("DELETE FROM process_scans")
            st.db.execute("INSERT INTO process_scans VALUES (?, ?, 1, ?)",
                          (NODE, T0 * 1000, blob))
            with pytest.raises(scans.ScanError) as e:
                scans.at_or_before(st.db, NODE, T0)
            assert "\n" not in str(e.value) and "damaged" in str(e.value)


def test_a_scan_row_carries_its_format(tmp_path: Path, table: ProcessTable) -> None:
    """A scan row starts with its tag and format (SCAN_MAGIC, as the store's chunks); one
    written before tags (the zlib stream alone) still reads, as format 1; a newer format is one
    line asking for a newer beamalloc, never read as this layout; the tag with no format byte
    is damage."""
    import json
    import zlib

    blob = scans.encode(table)
    assert blob.startswith(b"BAP\x01") and blob[4:5] == b"\x78"
    doc = dataclasses.asdict(dataclasses.replace(table, activity=None))
    old = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)  # before tags
    with Store(tmp_path / "w.db") as st:
        for data in (old, blob):
            st.db.execute("DELETE FROM process_scans")
            st.db.execute("INSERT INTO process_scans VALUES (?, ?, 1, ?)", (NODE, T0 * 1000, data))
            got = scans.at_or_before(st.db, NODE, T0)
            assert got is not None and got.table == dataclasses.replace(table, activity=None)
        for data, words in ((b"BAP\x02" + blob[4:], "of format 2 (this beamalloc reads format "
                             "1): upgrade beamalloc"), (b"BAP", "damaged")):
            st.db.execute("UPDATE process_scans SET data = ?", (data,))
            with pytest.raises(scans.ScanError) as e:
                scans.at_or_before(st.db, NODE, T0)
            assert words in str(e.value) and "\n" not in str(e.value)


def _page_store(tmp_path: Path, table: ProcessTable, damaged: bool = False) -> Path:
    path = tmp_path / "w.db"
    build_store(path, node=NODE, days=0.1, gap=False)
    with Store(path) as st:
        last = st.snapshots(NODE)[-1]
        if damaged:
            st.db.execute("INSERT INTO process_scans VALUES (?, ?, 1, ?)",
                          (NODE, round((last["t"] - 240) * 1000), b"damaged"))
        else:
            scans.add(st.db, NODE, last["t"] - 240, table)
    return path


def test_snapshot_and_node_pages_name_the_scans_holders(tmp_path: Path,
                                                        table: ProcessTable) -> None:
    path = _page_store(tmp_path, table)
    with Store(path, readonly=True) as st:
        snaps = st.snapshots(NODE)
    client = create_app(path).test_client()
    want = [r["name"] or r["pid"] for r in holder_rows(processes_json(table), 5)]
    page = html.unescape(client.get(f"/snapshot/s{snaps[-1]['id']}").get_data(as_text=True))
    section = page[page.index('id="holders"'):page.index("Where the memory is")]
    assert 'id="holders-none"' not in section
    assert re.search(r"From the watch's process scan of \S+ \S+ UTC, 4\.0 min before this "
                     "sample", section), section[:400]
    assert f"read all {table.count} processes" in section
    for name in want[:3]:
        assert f"<td>{name}</td>" in section, name  # the page unescaped: "<0.9.0>" as is
    # an earlier sample, before any scan: says so, names none
    early = html.unescape(client.get(f"/snapshot/s{snaps[0]['id']}").get_data(as_text=True))
    assert 'id="holders-none"' in early and "carries no process scan" in early
    assert "--processes-every" in early
    node = client.get(f"/node?n={NODE}").get_data(as_text=True)
    part = node[node.index('id="node-holders"'):node.index("Stored snapshots")]
    assert "4.0 min before the latest snapshot" in part
    got = [html.unescape(x) for x in re.findall(r"<tr><td>([^<]+)</td><td>", part)]
    assert got == want, (got, want)


def test_a_damaged_scan_leaves_the_page_whole(tmp_path: Path, table: ProcessTable) -> None:
    path = _page_store(tmp_path, table, damaged=True)
    with Store(path, readonly=True) as st:
        sid = st.snapshots(NODE)[-1]["id"]
    client = create_app(path).test_client()
    r = client.get(f"/snapshot/s{sid}")
    assert r.status_code == 200 and 'id="holders-none"' in r.get_data(as_text=True)
    assert client.get(f"/node?n={NODE}").status_code == 200
