"""A watched node's pages name who holds the memory, as the terminal does (issue 26 item 3).

samples/workloads/holders.erl on the system's OTP: `beamalloc watch` runs as users run it,
scanning the node's processes on its first sample and again after --processes-every; then
`recommend NODE` names its top holders in the terminal, and the snapshot and node pages of the
watched node (the Flask app over the same store) name the same processes, from the stored
scan, with its age."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest
from otp import SYSTEM, start_workload
from support import run_cli

from beamalloc.timeseries import scans
from beamalloc.timeseries.store import Store
from beamalloc.webui.app import create_app

pytestmark = pytest.mark.live


def _cookie_file(tmp_path: Path, cookie: str) -> str:
    f = tmp_path / "cookie"
    f.write_text(cookie)
    f.chmod(0o400)
    return str(f)


def test_watched_node_pages_name_the_holders_the_cli_names(tmp_path: Path) -> None:
    env = {"ROUTER": "20000", "CACHE": "5000", "PEAK": "10000", "WORKERS": "50"}
    with start_workload(SYSTEM, "holders", env=env) as w:
        w.wait_ready()
        f = _cookie_file(tmp_path, w.cookie)
        db = tmp_path / "w.db"
        r = run_cli("watch", w.node, "--store", str(db), "--cookie-file", f, "--interval", "1",
                    "--duration", "7", "--processes-every", "3", "--carriers-every", "0",
                    timeout=120)
        assert r.returncode == 0, r.stderr
        assert "no process scan" not in r.stderr, r.stderr
        cli = run_cli("recommend", w.node, "--cookie-file", f, "--rate-seconds", "0",
                      "--no-predict", env={**os.environ, "COLUMNS": "100"}, timeout=120)
        assert cli.returncode == 0, cli.stderr
    # the terminal's top holders: the rows of its "Top holders" table
    text = cli.stdout
    table = text[text.index("Top holders (live)"):].splitlines()[2:5]
    named = [ln.split()[0] for ln in table]
    assert named[:2] == ["leaky_router", "bin_cache"], text
    with Store(db, readonly=True) as st:
        rows = st.db.execute("SELECT t, kept FROM process_scans WHERE node = ? ORDER BY t",
                             (w.node,)).fetchall()
        # the first sample's scan, kept; the latest (3 s on or later) replacing none before it
        assert len(rows) == 2 and [k for _, k in rows] == [1, 0], rows
        latest = st.snapshots(w.node)[-1]
        found = scans.at_or_before(st.db, w.node, latest["t"])
        assert found is not None and found.table.source == "live" and found.table.complete
    client = create_app(db).test_client()
    page = client.get(f"/snapshot/s{latest['id']}").get_data(as_text=True)
    section = html.unescape(page[page.index('id="holders"'):page.index("Where the memory is")])
    assert re.search(r"From the watch's process scan of [^,]+ UTC, (taken with|\d+ s (before|"
                     r"after)) this sample", section), section[:300]
    for name in named[:2]:  # the two that hold the most, whichever read: in its tables
        assert f"<td>{name}</td>" in section, name
    for name in named:  # the third grows (a mailbox): named, if not yet in the top rows
        assert name in section, name
    node = client.get(f"/node?n={w.node}").get_data(as_text=True)
    part = node[node.index('id="node-holders"'):node.index("Stored snapshots")]
    on_page = [html.unescape(x) for x in re.findall(r"<tr><td>([^<]+)</td><td>", part)]
    assert on_page[:2] == named[:2] and len(on_page) == 5, (on_page, named)


def test_through_the_hidden_node_the_scans_leave_the_samples_going(tmp_path: Path) -> None:
    """With the hidden node (TLS's way, forced here), a scan boots a hidden node of its own in a
    thread of its own: it is stored, and the node's samples go on meanwhile."""
    with start_workload(SYSTEM, "holders", env={"WORKERS": "10"}) as w:
        w.wait_ready()
        db = tmp_path / "w.db"
        r = run_cli("watch", w.node, "--store", str(db), "--cookie-file",
                    _cookie_file(tmp_path, w.cookie), "--interval", "1", "--duration", "10",
                    "--carriers-every", "0",
                    env={**os.environ, "BEAMALLOC_HIDDEN_NODE": "1"}, timeout=120)
    assert r.returncode == 0, r.stderr
    with Store(db, readonly=True) as st:
        samples = {n["node"]: n["samples"] for n in st.list_nodes()}[w.node]
        t = st.db.execute("SELECT t FROM process_scans WHERE node = ?", (w.node,)).fetchall()
        found = scans.at_or_before(st.db, w.node, st.snapshots(w.node)[-1]["t"])
    assert len(t) == 1 and found is not None and found.table.complete
    assert samples >= 4, samples  # not held up by the scan's hidden node
