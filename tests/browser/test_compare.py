"""The compare page in a real Chromium over a real store of real snapshots (samples/workloads):
the picker across nodes and times works, flags read in their units, colour follows the bytes
still unused, and no Python repr or None reaches the page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from support import ROOT, serve_in_thread
from test_diff import shrunk

from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store

from .pages import screenshot, visit, wait_for

pytestmark = pytest.mark.slow

SNAPS = ROOT / "samples" / "workloads" / "snapshots"
NODE, OTHER = "app@cmp", "other@cmp"


def _as(snap: Snapshot, node: str, t: float) -> Snapshot:
    s = Snapshot.from_json(snap.to_json())
    s.node, s.taken_at = node, t
    return s


@pytest.fixture(scope="module")
def cmp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """app@cmp: binspike fragmented (A), then the issue's case: +MBacful 0 -> 40 and 3 % of the
    unused bytes handed back (B). other@cmp: the healthy workload."""
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    path: Path = tmp_path_factory.mktemp("cmp") / "watch.db"
    a = read_file(str(SNAPS / "binspike.json"))
    t0 = a.taken_at or 1.8e9
    b = shrunk(a, "binary_alloc", int(0.03 * analyze(a).totals_all.unused) // 4096 * 4096)
    for inst in b.instances("binary_alloc"):
        inst.options["acful"] = 40
    with Store(path) as st:
        for s in (_as(a, NODE, t0), _as(b, NODE, t0 + 600),
                  _as(read_file(str(SNAPS / "healthy.json")), OTHER, t0 + 30)):
            st.add_sample(s, derive(s), force_keep=True)
    srv = create_server(create_app(path), host="127.0.0.1", port=0, threads=2)
    stop = serve_in_thread(srv)
    yield f"http://127.0.0.1:{srv.socket.getsockname()[1]}"
    stop()


def _text(browser) -> str:
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "{'" not in text and "None" not in text, text[:400]
    return text


def test_picker_across_nodes(browser, cmp_server) -> None:
    visit(browser, cmp_server + "/compare", charts=False)
    text = _text(browser)
    assert "Pick A (before) and B (after)" in text
    a, b = Select(browser.find_element(By.ID, "pick-a")), Select(browser.find_element(By.ID,
                                                                                    "pick-b"))
    groups = [g.get_attribute("label") for g in
              browser.find_elements(By.CSS_SELECTOR, "#pick-a optgroup")]
    assert groups == [NODE, OTHER]  # every stored node, with its snapshots
    assert len(a.options) == 1 + 3
    a.select_by_visible_text(a.options[1].text)  # app@cmp's first snapshot
    other = next(o.text for o in b.options if o.text.startswith(OTHER))
    b.select_by_visible_text(other)
    browser.find_element(By.ID, "pick-submit").click()
    wait_for(browser, "return location.search.includes('b=')")
    visit(browser, browser.current_url)
    text = _text(browser)
    heads = browser.find_elements(By.CSS_SELECTOR, "section.compare h2")[0].text
    assert NODE in heads.splitlines()[0] and OTHER in heads.splitlines()[1]
    assert f"different nodes: A is {NODE}, B is {OTHER}" in text
    # the choice stays picked, so the next comparison starts from it
    assert Select(browser.find_element(By.ID, "pick-b")).first_selected_option.text == other


def test_three_percent_drop_is_not_green(browser, cmp_server) -> None:
    visit(browser, cmp_server + "/compare", charts=False)
    browser.find_element(By.CSS_SELECTOR, "#first-last a").click()  # app@cmp: first vs last
    wait_for(browser, "return location.search.includes('a=')")
    visit(browser, browser.current_url)
    text = _text(browser)
    v = browser.find_element(By.ID, "compare-verdict")
    assert v.get_attribute("data-outcome") == "barely_helped"
    assert "ok" not in v.get_attribute("class").split()
    head = v.find_element(By.CSS_SELECTOR, ".headline").text
    assert head.startswith("barely helped: ") and "still unused" in head and "-3.0 %" in head
    green = browser.execute_script(
        "return getComputedStyle(arguments[0]).borderLeftColor", v)
    assert green != "rgb(46, 139, 87)"  # .verdict.ok's border
    # acful is a percentage: 0 % -> 40 %, never "0 B -> 40 B"
    row = next(r.text for r in browser.find_elements(By.CSS_SELECTOR, "#compare-flags tr")
               if "+MBacful" in r.text)
    assert "0 %" in row and "40 %" in row and " B" not in row.replace("binary_alloc", "")
    assert "0 B" not in text.split("+MBacful")[1].split("\n")[0]
    # B's unused bytes are coloured by what stays unused: binary_alloc's ~160 MiB is red,
    # temp_alloc's 384 KiB is not
    cells = {r.find_element(By.TAG_NAME, "th").text:
             r.find_element(By.XPATH, "following-sibling::tr[1]/td[@data-level]")
             for r in browser.find_elements(By.CSS_SELECTOR, "#compare-types tr.first")}
    assert cells["binary_alloc"].get_attribute("data-level") == "bad"
    assert cells["temp_alloc"].get_attribute("data-level") == "ok"
    assert cells["all allocators"].get_attribute("data-level") == "bad"
    assert browser.execute_script(  # every type's rows in view, none behind a scroll box
        "const t = document.getElementById('compare-types');"
        "return t.parentElement.clientHeight >= t.offsetHeight")
    screenshot(browser, "compare-diff")


def test_legacy_ticks_and_bad_refs(browser, cmp_server) -> None:
    """The node page's ticks (r=...) still compare, earliest first; an unknown ref is a 404
    page, not a traceback."""
    visit(browser, cmp_server + "/compare?r=s2&r=s1")
    _text(browser)
    assert browser.find_element(By.ID, "compare-verdict").get_attribute(
        "data-outcome") == "barely_helped"  # s1 (before) is A though ticked second
    browser.get(cmp_server + "/compare?a=s1&b=s999999")  # a 404: its console line expected
    assert "no snapshot 999999" in _text(browser)
