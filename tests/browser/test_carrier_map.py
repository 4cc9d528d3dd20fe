"""The carrier map (issue 17, item 7) in a real browser: every carrier one mark, pooled apart,
for 10 carriers in the HTML report and 5,000 uploaded to the web UI; a snapshot without
carrier data says why instead."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from beamalloc.analyzer.analysis import analyze
from beamalloc.htmlreport.html import write_report

from .conftest import SHOTS
from .pages import screenshot, visit, wait_for
from .png import ink
from .synth import base_snapshot, with_carriers

pytestmark = pytest.mark.slow

#: Marks drawn per trace of one carrier-map figure (plotly draws each marker as a path.point).
MARKS = """
const f = document.getElementById(arguments[0]);
if (!f || !f.data) return null;
const traces = [...f.querySelectorAll('g.scatterlayer g.trace')];
return f.data.filter(t => t.type === 'scatter').map((t, i) =>
  [t.name, traces[i].querySelectorAll('path.point').length]);"""


def _check_map(drv, fig_id: str, snap, shot: str) -> None:
    got = dict(drv.execute_script(MARKS, fig_id))
    pooled = sum(c.in_pool for c in snap.carriers)
    owned = len(snap.carriers) - pooled
    want = {}
    if owned:
        want[f"owned by an instance ({owned})"] = owned
    if pooled:
        want[f"in the carrier pool ({pooled})"] = pooled
    assert got == want
    el = drv.find_element(By.ID, fig_id)
    drv.execute_script("arguments[0].scrollIntoView()", el)
    png = el.screenshot_as_png
    drv.execute_script("window.scrollTo(0, 0)")  # the page screenshot clips from the top
    (SHOTS / f"{shot}.png").write_bytes(png)
    share, colours = ink(png, step=2)
    assert share > 0.02 and colours > 4, f"{shot}: the map looks blank"


def test_report_map_of_10_carriers(browser, tmp_path):
    snap = with_carriers(base_snapshot("ten@host"), 10)
    out = tmp_path / "report.html"
    write_report([analyze(snap)], str(out), snapshots=[snap])
    visit(browser, out.as_uri())
    _check_map(browser, "fig-s0-cmap-0", snap, "carrier-map-10")
    text = browser.find_element(By.ID, "s0-cmap-0-text").text
    # the sparse carriers hold a 900-byte block per 10-100 KiB of them: crowded, so scattered
    assert "binary_alloc, what the map shows: scattered" in text and "would have to move" in text
    screenshot(browser, "report-carriers-10")


def test_upload_map_of_5000_carriers(browser, server, tmp_path):
    snap = with_carriers(base_snapshot("five-thousand@host"), 5000)
    path = tmp_path / "carriers.json"
    path.write_text(snap.to_json())
    visit(browser, server + "/upload", charts=False)
    browser.find_element(By.ID, "file").send_keys(str(path))
    browser.find_element(By.ID, "upload-submit").click()
    wait_for(browser, "return location.pathname.startsWith('/snapshot/u')")
    visit(browser, browser.current_url)
    _check_map(browser, "fig-cmap-0", snap, "carrier-map-5000")


def test_no_carrier_data_says_why(browser, tmp_path):
    snap = base_snapshot("recon@host")  # a recon file has no per-carrier data
    out = tmp_path / "report.html"
    write_report([analyze(snap)], str(out), snapshots=[snap])
    visit(browser, out.as_uri())
    msg = browser.find_element(By.ID, "s0-carriers-na").text
    assert "No per-carrier data" in msg and "live node" in msg
    assert browser.execute_script("return document.getElementById('fig-s0-cmap-0')") is None
