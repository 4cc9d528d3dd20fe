"""Control characters from outside on the pages (issue 27 item 1): a node name, a crash dump's
slogan, a note, a process's name carrying an escape sequence, a bell, a carriage return or a
bidi override are shown visible and harmless, `\\x1b` as the terminal shows them
(beamalloc/console.py `clean`, through the templates' finalize, webui/filters.py), on the
server's pages and in the static report. Browser-free: Flask's test client.

Such strings reach a page whatever the readers refuse: a store or upload cache of another
program's, a process scan's names (stored without the snapshot's checks), a query string.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file
from beamalloc.htmlreport.html import render_report
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.webui.app import create_app
from beamalloc.webui.filters import visible

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "samples" / "otp25" / "erl_crash.dump"
#: what must never reach the page raw, and how the page shows each
RAW = {"\x1b[31m": "\\x1b[31m", "\x07": "\\x07", "\r": "\\x0d", "\u202e": "\\u202e"}
HOSTILE = "red\x1b[31mbell\x07cr\rrlo\u202eend"
T0 = 1_700_000_000.0


def _hostile_dump():
    snap = read_file(str(DUMP))
    snap.node = f"dump{HOSTILE}@host"
    snap.extra["slogan"] = f"Kernel pid terminated ({HOSTILE})"
    snap.notes.append(f"a note {HOSTILE}")
    return snap


def _assert_visible(page: str, at_least: int) -> None:
    for raw, shown in RAW.items():
        assert raw not in page, repr(raw)
        assert page.count(shown) >= at_least, (shown, page.count(shown))


def test_the_snapshot_page_shows_controls_visible() -> None:
    snap = _hostile_dump()
    app = create_app(None)
    data = app.extensions["beamalloc"]
    ref = "u" + "0" * 32
    data.uploads.get_or(ref, lambda: snap)  # as a parsed upload is kept
    r = app.test_client().get(f"/snapshot/{ref}")
    assert r.status_code == 200
    page = r.get_data(as_text=True)
    assert f"dump{visible(HOSTILE)}@host" in page  # the title and heading, escaped alike
    _assert_visible(page, at_least=3)  # node name, slogan, note (each at least once)


def test_a_stored_node_name_is_shown_visible(tmp_path: Path) -> None:
    """A store of another program's names a node so (its samples' numbers carry no check of
    the name): the nodes page and the node's page show it visible."""
    node = f"x{HOSTILE}@h"
    snap = read_file(str(DUMP))
    with Store(tmp_path / "w.db") as st:
        st.add_points(node, [(T0 + 60 * i, derive(snap)) for i in range(3)])
    c = create_app(tmp_path / "w.db").test_client()
    for url in ("/", f"/node?n={quote(node)}"):
        r = c.get(url)
        assert r.status_code == 200, url
        _assert_visible(r.get_data(as_text=True), at_least=1)


def test_the_report_shows_controls_visible() -> None:
    snap = _hostile_dump()
    _assert_visible(render_report([analyze(snap)], [snap]), at_least=3)


def test_visible_keeps_markup_and_line_breaks() -> None:
    from markupsafe import Markup

    assert visible(HOSTILE) == "red\\x1b[31mbell\\x07cr\\x0drlo\\u202eend"
    assert visible("+MBas ageffcbf\n+MBlmbcs 512\n") == "+MBas ageffcbf\n+MBlmbcs 512\n"
    assert visible(Markup("<a>\x07</a>")) == Markup("<a>\x07</a>")  # our own HTML, as is
    assert visible(3) == 3
