"""The nodes page of a large fleet (issue 28 item 5): a page of PAGE_ROWS rows, the headline and
the chart over every node, pages that clamp; on a real store written through Store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from beamalloc.timeseries.store import Store
from beamalloc.webui import nodes
from beamalloc.webui.app import create_app

T0 = 1_700_000_000.0
N = 2 * nodes.PAGE_ROWS + 50


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """N nodes of derived numbers only (no snapshot: no verdict to compute), every one of them
    holding far more than it uses but the first ten; the last holds the most."""
    p = tmp_path_factory.mktemp("fleet") / "fleet.db"
    with Store(p) as st, st.batch():
        for k in range(N):
            used = 900 << 20 if k < 10 else 10 << 20
            alloc = 4 << 30 if k == N - 1 else 1 << 30
            st.add_points(f"n{k:04d}@host", [(T0 + i * 60, {"allocated": alloc, "used": used,
                                                            "binary_alloc.allocated": alloc,
                                                            "binary_alloc.used": used})
                                             for i in range(3)])
    return p


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr class="[a-z]*"><td><a href="/node\?n=([^"]+)">', html)


def test_a_page_of_rows_and_a_headline_of_all(fleet: Path) -> None:
    c = create_app(fleet).test_client()
    html = c.get("/", headers={"Host": "127.0.0.1:8050"}).get_data(as_text=True)
    rows = _rows(html)
    assert len(rows) == nodes.PAGE_ROWS and rows[0] == "n0000%40host"
    bad = N - 10
    assert f"{bad} of {N} nodes hold much more memory than they use" in html
    assert f"and {bad - nodes.HEADLINE_NAMES} more." in html  # names capped, count whole
    assert f"Nodes 1–{nodes.PAGE_ROWS} of {N} (by name)" in html and 'href="/?page=2"' in html
    # the chart: the CHART_NODES with most unused, wherever they are in the table
    assert f"n{N - 1:04d}@host" in html and f"n{N - 1:04d}%40host" not in rows
    assert "n0009@host" not in html.split('id="nodes"')[1].split("</table>")[1]


def test_the_last_page_and_out_of_range_pages(fleet: Path) -> None:
    c = create_app(fleet).test_client()
    h = {"Host": "127.0.0.1:8050"}
    last = c.get("/?page=3", headers=h).get_data(as_text=True)
    assert _rows(last) == [f"n{k:04d}%40host" for k in range(2 * nodes.PAGE_ROWS, N)]
    assert 'rel="next"' not in last and 'href="/?page=2"' in last
    for page in ("99", "0", "-1", "x", "9" * 30):  # clamped or the first: never an error
        r = c.get(f"/?page={page}", headers=h)
        assert r.status_code == 200 and len(_rows(r.get_data(as_text=True))) in (50, 100)
