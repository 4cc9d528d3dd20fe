"""A snapshot page whose allocator names carry U+202E, U+200B, ESC and NUL, drawn by a real
browser: every text plotly.js drew in its charts (titles, ticks, legends) holds none of them,
and the renamed allocators' labels show them visible (`\\u202e`), as the page's tables do
(webui/figures.py `_t`; tests/test_figure_controls.py checks every page's figure JSON)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support import serve_in_thread
from test_figure_controls import BAD, FRAG, hostile

from beamalloc.snapshot import Snapshot

from .pages import visit

pytestmark = pytest.mark.slow

#: Every text of every drawn chart: SVG text (titles, ticks, legends, bar labels).
DRAWN = """
return [...document.querySelectorAll('.fig')].filter(f => f.data).flatMap(
  f => [...f.querySelectorAll('text')].map(e => f.id + ': ' + e.textContent));"""


@pytest.fixture(scope="module")
def hostile_page() -> Iterator[str]:
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    app = create_app(None)
    ref = "u" + "7" * 32
    snap = hostile(Snapshot.from_json(FRAG.read_text()))
    app.extensions["beamalloc"].uploads.get_or(ref, lambda: snap)  # as an upload is kept
    srv = create_server(app, host="127.0.0.1", port=0, threads=2)
    stop = serve_in_thread(srv)
    yield f"http://127.0.0.1:{srv.socket.getsockname()[1]}/snapshot/{ref}"
    stop()


def test_drawn_labels_hold_no_control(browser: Any, hostile_page: str) -> None:
    visit(browser, hostile_page)
    drawn: list[str] = browser.execute_script(DRAWN)
    assert len(drawn) > 20, drawn
    for text in drawn:
        for c in BAD:
            assert c not in text, (repr(c), text)
    shown = [t for t in drawn if "binary\\u202eevil\\u200b\\x1b[31m\\x00_alloc" in t]
    # the allocator axes of the usage, block size and carrier charts, the carrier map's title
    assert len(shown) >= 3, [t for t in drawn if "alloc" in t][:20]
