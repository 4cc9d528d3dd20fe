"""A snapshot page with advice in a real browser (issue 15, item 4): colour by unused bytes as
well as by usage, the two allocated totals explained, each flag's prediction as a table."""

from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By

from beamalloc.advice.rules import usage_level

from .pages import Ctx, visit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def advised(browser, server, store_path, tmp_path_factory) -> dict:
    ref = Ctx(server, store_path, tmp_path_factory.mktemp("snap")).snapshot_ref("churn@host")
    visit(browser, f"{server}/snapshot/{ref}")
    return json.loads(browser.execute_script(
        f"return fetch('/api/snapshot/{ref}').then(r => r.text())"))


def test_colour_weighs_unused_bytes(browser, advised):
    rows = {r["allocator"]: r for r in advised["allocator_types"]}
    got = browser.execute_script("""
return [...document.querySelectorAll('table.types tbody tr')].map(tr =>
  [tr.cells[0].textContent.replace(' *', ''), tr.cells[5].className]);""")
    assert len(got) == len(rows)
    for name, cls in got:
        r = rows[name]
        assert cls.split()[-1] == usage_level(r["usage"], r["unused"]), name
    # temp_alloc: 0 % used of 384 KiB is not red; binary_alloc's 235 MiB unused is
    cls = dict(got)
    assert rows["temp_alloc"]["usage"] < 0.5 and rows["temp_alloc"]["unused"] < 1 << 20
    assert cls["temp_alloc"].endswith("ok")
    assert cls["binary_alloc"].endswith("bad")
    # the per-instance heatmap agrees: temp_alloc cells are out of the red, binary_alloc's not
    z = browser.execute_script("""
const d = document.getElementById('fig-heatmap').data[0];
const out = {};
d.y.forEach((name, i) => { out[name] = d.z[i].filter(v => v !== null); });
return out;""")
    assert min(z["temp_alloc"]) >= 80
    assert min(z["binary_alloc"]) < 50


def test_two_totals_say_why(browser, advised):
    t, all_ = advised["totals"]["allocated"], advised["os"]["allocated_all"]
    assert all_ != t
    verdict = browser.find_element(By.CSS_SELECTOR, "ul.evidence").text  # under the verdict
    assert "Two totals:" in verdict and "recon_alloc counts" in verdict
    assert "literal_alloc" in verdict  # the type recon leaves out, named


def test_predictions_are_tables(browser, advised):
    tables = browser.find_elements(By.CSS_SELECTOR, "table.prediction")
    recs = browser.find_elements(By.CSS_SELECTOR, "table.recs td.flag")
    # churn's four flags are predicted together: one table, the others point to it
    assert len(recs) == 4 and len(tables) == 1
    assert "together with +MBas ageffcbf" in browser.find_elements(
        By.CSS_SELECTOR, "tr.pred")[1].text
    text = tables[0].text
    for word in ("before", "after", "change", "carriers", "unused", "MiB", "calibration error",
                 "workload fitted"):
        assert word in text, word
    # short: a table per flag, not thousands of pixels of a dict
    assert max(t.size["height"] for t in tables) < 400
