"""A page opened first after the server starts (issue 28 item 5): the node page and the nodes page
render at once without the verdicts not computed yet, say so, and the verdicts arrive by
/api/verdict (what the page's script asks) or on a reload (a thread computes them); the nodes
page reads a few keys of each node's last point in SQLite and the whole point of the rows it
shows. A real store and the Flask app; the browser side is tests/browser/test_pages.py."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from browser.synth import build_store

from beamalloc.timeseries.store import Store, StoreError
from beamalloc.webui.app import create_app
from beamalloc.webui.data import _LRU, MISSING

NODE = "app@web1"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cold") / "watch.db"
    build_store(path, node=NODE, days=0.1)
    return path


def _latest(store_path: Path) -> str:
    with Store(store_path, readonly=True) as st:
        return f"s{st.list_nodes(NODE)[0]['latest_snapshot']}"


def _verdict_line(html: str) -> str | None:
    m = re.search(r'id="node-verdict">([^<]*)<', html)
    return m.group(1) if m else None


def test_node_page_first_then_its_verdict(store_path) -> None:
    ref = _latest(store_path)
    c = create_app(store_path).test_client()  # a new server: nothing computed
    html = c.get("/node?n=app%40web1").get_data(as_text=True)
    # the page is whole without the verdict: the latest sample's line is its first line
    assert f'id="node-verdict-pending" data-pending="{ref}"' in html
    assert _verdict_line(html) is None
    assert re.search(r'class="headline" id="node-headline">Latest sample: ', html)
    got = c.get(f"/api/verdict?ref={ref}").get_json()
    assert got["state"] and got["verdict"].startswith(got["state"]) and got["severity"]
    html = c.get("/node?n=app%40web1").get_data(as_text=True)  # what the script swaps in
    assert _verdict_line(html) == got["verdict"] and "data-pending" not in html
    assert 'class="dim" id="node-headline"' in html
    snap = c.get(f"/snapshot/{ref}").get_data(as_text=True)
    assert got["verdict"] in snap  # one story: the snapshot page's first line


def test_reload_shows_the_verdict_without_script(store_path) -> None:
    """Nothing asks /api/verdict: the thread the page started computes it, a reload shows it."""
    c = create_app(store_path).test_client()
    assert "data-pending" in c.get("/node?n=app%40web1").get_data(as_text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        html = c.get("/node?n=app%40web1").get_data(as_text=True)
        if _verdict_line(html):
            break
        time.sleep(0.2)
    assert _verdict_line(html) and "data-pending" not in html


def test_nodes_page_first_then_its_verdicts(store_path) -> None:
    ref = _latest(store_path)
    c = create_app(store_path).test_client()
    html = c.get("/").get_data(as_text=True)
    assert f'id="nodes-pending" data-pending="{ref}"' in html
    assert 'data-verdict=""' in html and f'<span class="dim" data-pending="{ref}">' in html
    got = c.get(f"/api/verdict?ref={ref}").get_json()
    html = c.get("/").get_data(as_text=True)
    assert "data-pending" not in html and f'data-verdict="{got["state"]}"' in html
    assert f">{got['verdict']}</span>" in html.replace("&#39;", "'")


def test_verdict_api_refuses_what_is_not_a_stored_snapshot(store_path) -> None:
    c = create_app(store_path).test_client()
    for ref in ("s999999", "u" + "0" * 32, "x1", "", "s" + "9" * 30):
        assert c.get(f"/api/verdict?ref={ref}").status_code == 404, ref


def test_lru_makes_a_key_once_however_many_ask() -> None:
    cache: _LRU = _LRU(4)
    made: list[int] = []
    gate = threading.Event()

    def make() -> int:
        made.append(1)
        gate.wait(5)
        return 42

    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get_or("k", make)))
               for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    assert cache.peek("k") is MISSING  # still being made
    gate.set()
    for t in threads:
        t.join(10)
    assert got == [42] * 4 and len(made) == 1 and cache.peek("k") == 42

    def fail() -> int:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        cache.get_or("j", fail)
    assert cache.get_or("j", lambda: 7) == 7  # a maker that raised lets the next one try


def test_list_nodes_point_keys_and_last_points(store_path, tmp_path) -> None:
    with Store(store_path, readonly=True) as st:
        whole = st.list_nodes()
        few = st.list_nodes(point_keys=("allocated", "used"))
        assert [{k: n["point"][k] for k in ("allocated", "used")} for n in whole] == \
            [n["point"] for n in few]
        assert st.last_points([NODE, "nobody@host"]) == {NODE: whole[0]["point"]}
        with pytest.raises(StoreError):
            st.list_nodes(point_keys=("used') --",))
    bad = tmp_path / "bad.db"
    bad.write_bytes(store_path.read_bytes())
    with Store(bad) as st:
        st.db.execute("UPDATE last SET point = 'not json'")
    with Store(bad, readonly=True) as st:
        with pytest.raises(StoreError, match="cannot read the store"):
            st.list_nodes(point_keys=("allocated",))
        with pytest.raises(StoreError):
            st.last_points([NODE])
    page = create_app(bad).test_client().get("/").get_data(as_text=True)
    assert 'id="store-problem"' in page and "Traceback" not in page
