"""Control, bidi and zero-width characters from outside never reach a chart raw (webui/figures.py
`_t`, through beamalloc/console.py `clean` as the pages show every value): a snapshot whose
allocator, process and ETS table names and node name carry U+202E (which reorders a label),
U+200B (which hides in it), ESC and NUL renders every page and the report with none of them in
any figure's JSON, decoded as plotly.js reads it, and with the label shown visible instead.
Browser-free (Flask's test client); tests/browser/test_figure_controls.py draws one page.

Such names reach a page whatever the readers refuse: an upload cache or a store of another
program's, a process scan's names (stored without the snapshot's checks).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file
from beamalloc.htmlreport.html import render_report
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.webui.app import create_app

ROOT = Path(__file__).resolve().parent.parent
FRAG = ROOT / "samples" / "workloads" / "snapshots" / "frag.json"
DUMP = ROOT / "samples" / "otp25" / "erl_crash.dump"
#: Each must never reach a figure raw.
BAD = ("\u202e", "\u200b", "\x1b", "\x00")
HOSTILE = "\u202eevil\u200b\x1b[31m\x00"
#: The allocators renamed: the most unused bytes (carrier maps, top instances) and another.
RENAMED = {"binary_alloc": f"binary{HOSTILE}_alloc", "ets_alloc": f"ets{HOSTILE}_alloc"}
T0 = 1_700_000_000.0


def hostile(snap: Snapshot, node: str = "n@h") -> Snapshot:
    """`snap` with hostile allocator, carrier, process and table names and node name."""
    from browser.synth import with_carriers

    if not snap.carriers:
        with_carriers(snap, 40)
    snap.node = f"{node.split('@')[0]}{HOSTILE}@{node.split('@')[1]}"
    for a in snap.allocators:
        a.allocator = RENAMED.get(a.allocator, a.allocator)
    snap.carriers = [type(c)(RENAMED.get(c.allocator, c.allocator), *[
        getattr(c, f) for f in ("instance", "in_pool", "size", "blocks", "blocks_size",
                                "free_histogram", "foreign_size", "unscanned")])
        for c in snap.carriers or []]
    for key in ("ets", "dump_procs"):  # a crash dump's tables and processes, by name
        for row in (snap.extra.get(key) or {}).get("top", []):
            for k in ("name", "Name", "table", "registered_name"):
                if isinstance(row.get(k), str):
                    row[k] += HOSTILE
    return snap


def strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for k, x in v.items() for s in (*strings(k), *strings(x))]
    if isinstance(v, list | tuple):
        return [s for x in v for s in strings(x)]
    return []


def figure_strings(page: str) -> list[str]:
    """Every string of the page's figures, as plotly.js gets them (the JSON decoded)."""
    m = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)
    assert m, "no figures on the page"
    return strings(json.loads(m.group(1)))


def assert_clean(page: str, named: int = 1) -> None:
    got = figure_strings(page)
    for s in got:
        for c in BAD:
            assert c not in s, (repr(c), s)
    # the renamed allocators' labels are there, their characters shown visible
    shown = [s for s in got if "\\u202eevil\\u200b\\x1b[31m\\x00" in s]
    assert len(shown) >= named, shown[:3]


@pytest.fixture(scope="module")
def app_and_refs(tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[Any, list[str], list[str]]:
    path = tmp_path_factory.mktemp("store") / "w.db"
    with Store(path) as st:
        for i in range(3):  # a node with hostile names, watched: the node page's charts
            snap = hostile(Snapshot.from_json(FRAG.read_text()), "app@web")
            snap.taken_at = T0 + 60 * i
            st.add_sample(snap, derive(snap), force_keep=True)
        ids = [f"s{x['id']}" for x in st.snapshots(snap.node)]
    assert len(ids) == 3
    app = create_app(path)
    refs = []
    for i, snap in enumerate((hostile(Snapshot.from_json(FRAG.read_text())),
                              hostile(read_file(str(DUMP))))):
        ref = f"u{i:032d}"
        app.extensions["beamalloc"].uploads.get_or(ref, lambda s=snap: s)  # as an upload
        refs.append(ref)
    return app, refs, ids


def test_snapshot_pages_figures_hold_no_control(app_and_refs) -> None:
    app, refs, _ = app_and_refs
    c = app.test_client()
    for ref in refs:
        r = c.get(f"/snapshot/{ref}")
        assert r.status_code == 200
        assert_clean(r.get_data(as_text=True), named=3)
    # what-if charts a stored node's history only: an upload's page names no allocator there
    for url, named in ((f"/compare?a={refs[0]}&b={refs[1]}", 2), (f"/whatif?r={refs[0]}", 0)):
        r = c.get(url)
        assert r.status_code == 200, url
        assert_clean(r.get_data(as_text=True), named)


def test_store_pages_figures_hold_no_control(app_and_refs) -> None:
    """The nodes page and the node's page chart the store's series, whose names (allocator
    types, the node) no reader checked; its stored snapshots the store's reader refuses."""
    app, _, ids = app_and_refs
    c = app.test_client()
    node = f"app{HOSTILE}@web"
    assert c.get(f"/snapshot/{ids[0]}").status_code == 404
    for url in ("/", f"/node?n={quote(node)}"):
        r = c.get(url)
        assert r.status_code == 200, url
        assert_clean(r.get_data(as_text=True))


def test_the_report_figures_hold_no_control() -> None:
    snaps = [hostile(Snapshot.from_json(FRAG.read_text())), hostile(read_file(str(DUMP)))]
    assert_clean(render_report([analyze(s) for s in snaps], snaps), named=4)


def test_clean_shows_zero_width_and_bidi_marks() -> None:
    """The one cleaning (beamalloc/console.py) covers what hides or reorders a label besides
    the C0/C1 controls and the bidi overrides: zero-width characters, bidi marks, separators."""
    from beamalloc.console import clean

    assert clean("a\u200bb\u200ec\u2060d\ufeffe\u061cf\u2028g\u200dh") == (
        "a\\u200bb\\u200ec\\u2060d\\ufeffe\\u061cf\\u2028g\\u200dh")
    assert clean("ok é ü 漢字 →") == "ok é ü 漢字 →"
