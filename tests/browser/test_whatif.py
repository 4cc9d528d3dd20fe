"""The what-if page in a real browser (headless chromium) over a real waitress server and store:
it draws, a typed flag set replays and shows recommend's own numbers, a bad set gets its one
message, no chart draws a line of one point or across the restart gap; screenshots at 1400 and
1000 px (issue 15, item 4)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote_plus

import pytest
from selenium.webdriver.common.by import By
from support import serve_in_thread
from test_whatif import WORSE, build_store

from beamalloc.advice.recommend import recommend
from beamalloc.timeseries.store import Store
from beamalloc.units import human

from .pages import screenshot, visit, wait_for

pytestmark = pytest.mark.slow

#: Per history chart, per trace in the plot (the legend's samples left out): the vertices of each
#: piece of line plotly drew (a line broken at a gap is two pieces) and its markers.
LINES = """
return [...document.querySelectorAll('#whatif-history .fig')].map(f => ({
  id: f.id,
  traces: [...f.querySelectorAll('.scatterlayer g.trace')].map(t => ({
    pieces: [...t.querySelectorAll('path.js-line')].map(
      p => ((p.getAttribute('d') || '').match(/[ML]/g) || []).length),
    markers: t.querySelectorAll('path.point').length,
  })),
}));"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    path = tmp_path_factory.mktemp("whatif-browser") / "watch.db"
    snap = build_store(path)
    srv = create_server(create_app(path), host="127.0.0.1", port=0, threads=4)
    stop = serve_in_thread(srv)
    yield f"http://127.0.0.1:{srv.socket.getsockname()[1]}", path, snap.node
    stop()


def _latest(path: Path, node: str):
    with Store(path, readonly=True) as st:
        sid = st.snapshots(node)[-1]["id"]
        return f"s{sid}", st.snapshot(sid)


def _page_text(drv) -> str:
    return drv.find_element(By.TAG_NAME, "main").text


def test_whatif_draws_replays_a_typed_set_and_refuses_a_bad_one(browser, site):
    url, path, node = site
    ref, snap = _latest(path, node)
    rec = recommend(snap)
    r3 = next(f for f in rec["findings"] if f["rule"] == "R3")
    p = r3["predicted"]
    try:
        browser.set_window_size(1400, 1000)
        visit(browser, f"{url}/whatif", charts=False)
        assert node in browser.find_element(By.ID, "pick-ref").text
        browser.find_element(By.ID, "pick-submit").click()
        wait_for(browser, "return !!document.getElementById('whatif-results')", timeout=120)

        # A typed set: R3's candidate flags in the rule's own order, candidates unticked.
        for box in browser.find_elements(By.CSS_SELECTOR, "input[name=c]"):
            if box.is_selected():
                box.click()
        field = browser.find_element(By.ID, "flags-0")
        field.clear()
        field.send_keys(" ".join(r3["candidate_flags"]))
        browser.find_element(By.ID, "flags-1").send_keys(WORSE)
        browser.find_element(By.ID, "whatif-submit").click()
        wait_for(browser, "return document.querySelectorAll('[data-set=typed]').length == 2",
                 timeout=120)
        visit(browser, browser.current_url)  # the charts drawn, no console errors
        typed, worse = browser.find_elements(By.CSS_SELECTOR, "[data-set=typed]")
        assert typed.get_attribute("data-flags") == p["flags"]
        assert typed.get_attribute("data-worse") == "0"
        # The 64 MiB carriers: the replay grows the unused bytes; red, and said not to be advice.
        assert worse.get_attribute("data-worse") == "1"
        mark = worse.find_element(By.CSS_SELECTOR, ".wi-worse")
        assert mark.is_displayed() and "Not a recommendation" in mark.text
        assert mark.value_of_css_property("color") == "rgba(176, 42, 26, 1)"
        table = typed.find_element(By.CSS_SELECTOR, "table[data-allocator=binary_alloc]")
        for side in ("before", "after"):
            cells = table.find_elements(By.CSS_SELECTOR, f"tr[data-side={side}] td.n")
            carriers, used, unused = (int(c.get_attribute("data-bytes")) for c in cells[:3])
            assert carriers == p[side]["carriers_size"]
            assert unused == p[side]["unused"] and used == carriers - unused
            assert cells[2].text == human(p[side]["unused"])
        text = _page_text(browser)
        assert "{'" not in text and "None" not in text
        assert "Predictions, not advice" in text and "200,000 events" in text

        # The measured history: binary units, no one-point line, no line across the gap.
        figs = browser.execute_script(LINES)
        assert figs, "the history charts are drawn"
        for f in figs:
            assert f["traces"], f
            for tr in f["traces"]:
                # six samples, a restart between the third and the fourth: two pieces
                assert len(tr["pieces"]) == 2, f"{f['id']}: a line drawn across the gap: {tr}"
                assert all(n >= 2 for n in tr["pieces"]), f"{f['id']}: a one-point line: {tr}"
                assert tr["markers"] == 6, tr
        ticks = browser.execute_script(
            "return [...document.querySelectorAll('#whatif-history .ytick text')]"
            ".map(t => t.textContent)")
        assert ticks and all(re.fullmatch(r"0|[0-9.]+ (KiB|MiB|GiB)", t) for t in ticks), ticks
        screenshot(browser, "whatif-1400")
        browser.set_window_size(1000, 1000)
        visit(browser, browser.current_url)
        screenshot(browser, "whatif-1000")

        # A bad set: one message, HTTP 400 (the page still renders, without a traceback).
        field = browser.find_element(By.ID, "flags-0")
        field.clear()
        field.send_keys("+MBas zzz")
        browser.get_log("browser")
        browser.find_element(By.ID, "whatif-submit").click()
        wait_for(browser, "return !!document.getElementById('whatif-error')")
        errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert all("status of 400" in e for e in errors), errors  # the page's own status only
        assert f"r={ref}&" in browser.current_url
        assert f"f={quote_plus('+MBas zzz')}" in browser.current_url
        msg = browser.find_element(By.ID, "whatif-error").text
        assert msg.startswith("flag set 1 is not valid:") and "bad value 'zzz' for +MBas" in msg
        assert "Traceback" not in browser.page_source
        assert not browser.find_elements(By.CSS_SELECTOR, "[data-set=typed]")
        screenshot(browser, "whatif-error")
    finally:
        browser.set_window_size(1360, 1000)
