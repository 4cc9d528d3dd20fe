"""A node's charts in a real browser (issue 15, item 4): a restart breaks every line, the mseg
chart of an idle cache still draws its hit rate with its right axis inside the figure, heatmap
cells start at their snapshot, and the page refreshes while a watch writes (and stops after)."""

from __future__ import annotations

import threading
import time
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By
from support import serve_in_thread

from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.webui.data import Data

from .pages import visit, wait_for
from .synth import base_snapshot, snapshot_at

pytestmark = pytest.mark.slow


def test_restart_breaks_the_lines(browser, server):
    visit(browser, f"{server}/node?n={quote('restart@host')}")
    # one gap band (the restart), and the RSS path is drawn as two pieces, not one
    bands = browser.execute_script(
        "return document.getElementById('fig-memory').layout.shapes.length")
    assert bands == 1
    pieces = browser.execute_script("""
const f = document.getElementById('fig-memory');
const i = f.data.findIndex(t => t.name === 'RSS');
const ps = f.querySelectorAll('g.scatterlayer g.trace')[i].querySelectorAll('path.js-line');
return [...ps].reduce((n, p) => n + (p.getAttribute('d').match(/M/g) || []).length, 0);""")
    assert pieces == 2
    # the stacked areas: one stack group per stretch between breaks
    groups = browser.execute_script("""
return new Set(document.getElementById('fig-stacked').data.map(t => t.stackgroup)).size;""")
    assert groups == 2


def test_idle_mseg_cache_is_drawn_inside_its_figure(browser, server):
    """restart@host never calls mseg_alloc between samples: its hit rate since start is still a
    line, the calls/s line says none, and the right axis' labels are inside the figure."""
    visit(browser, f"{server}/node?n={quote('restart@host')}")
    got = browser.execute_script("""
const f = document.getElementById('fig-mseg');
const svg = f.querySelector('svg.main-svg').getBoundingClientRect();
const right = [...f.querySelectorAll('g.y2tick text')].map(e => e.getBoundingClientRect().right);
const title = f.querySelector('.g-y2title text');
return {rate: f.data[0].y.filter(v => v !== null).length, name: f.data[1].name,
        right: Math.max(...right), svg: svg.right,
        title: title ? title.getBoundingClientRect().right : null, ticks: right.length};""")
    assert got["rate"] >= 2
    assert got["name"].endswith("(none in this range)")
    assert got["ticks"] >= 2 and got["right"] <= got["svg"]
    assert got["title"] is not None and got["title"] <= got["svg"]


def test_heatmap_cells_start_at_their_snapshot(browser, server, store_path):
    usage, _ = Data(store_path).node_samples("app@web1", None, None)
    visit(browser, f"{server}/node?n={quote('app@web1')}")
    got = browser.execute_script("""
const f = document.getElementById('fig-inst_heatmap');
return {x: f.data[0].x, cols: f.data[0].z[0].length, edges: f.calcdata[0][0].x.slice(0, 3)};""")
    # one edge more than columns: cell i spans [snapshot i, snapshot i+1)
    assert got["cols"] == len(usage) and len(got["x"]) == len(usage) + 1
    assert got["x"][:-1] == [round(t * 1000) for t, _ in usage]
    assert got["x"][-1] > got["x"][-2]
    # plotly drew them as edges, not as centres (a centre would start half a cell earlier)
    assert got["edges"] == got["x"][:3]


def test_node_page_refreshes_while_a_watch_writes(browser, tmp_path):
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    db = tmp_path / "live.db"
    base = base_snapshot("live@host")
    t0 = time.time() - 3

    def sample(st: Store, i: int, t: float) -> None:
        snap = snapshot_at(base, t, i)
        st.add_sample(snap, derive(snap), force_keep=i % 3 == 0)

    with Store(db) as st:
        for i in range(3):
            sample(st, i, t0 + i)
    srv = create_server(create_app(db), host="127.0.0.1", port=0, threads=2)
    stop_server = serve_in_thread(srv)
    stop = threading.Event()

    def watch() -> None:  # what `beamalloc watch --interval 1` does to the store
        with Store(db) as st:
            for i in range(3, 60):
                if stop.wait(1.0):
                    return
                sample(st, i, time.time())

    writer = threading.Thread(target=watch, daemon=True)
    try:
        url = f"http://127.0.0.1:{srv.socket.getsockname()[1]}/node?n={quote('live@host')}"
        visit(browser, url)
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-refresh") == "2.0"
        assert browser.find_element(By.ID, "live").text.startswith("live:")
        before = browser.execute_script(
            "return document.getElementById('fig-memory').data[0].x.length")
        head = browser.find_element(By.ID, "node-headline").text
        writer.start()
        # new samples reach the charts without a reload
        wait_for(browser, f"return document.getElementById('fig-memory').data[0].x.length > "
                          f"{before + 1}", timeout=30)
        assert browser.execute_script("return performance.getEntriesByType('navigation')"
                                      ".length") == 1
        assert browser.find_element(By.ID, "node-headline").text.startswith("Latest sample:")
        assert head  # the headline element is the one the refresh rewrites
        # the nodes page reloads while the watch writes
        visit(browser, url.split("/node")[0] + "/")
        # live: the mean sampling interval so far, which grows with how long the first page took
        # (the writer starts after it), never below REFRESH_MIN
        assert float(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refresh")) >= 2
        browser.execute_script("window.beforeReload = 1")
        wait_for(browser, "return window.beforeReload === undefined && "
                          "document.getElementById('live') !== null", timeout=30)
        stop.set()
        writer.join()
        # the watch stopped: after 3 quiet intervals both pages stop polling and say so
        for page in (url, url.split("/node")[0] + "/"):
            visit(browser, page)
            wait_for(browser, "return document.body.getAttribute('data-refresh') === '0'",
                     timeout=40)
            assert "not refreshing" in browser.find_element(By.ID, "live").text
    finally:
        stop.set()
        stop_server()
