"""The compare page and the report's comparison read advice/diff.py (Flask's test client over a
real store and real uploads; the browser test is tests/browser/test_compare.py)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from support import ROOT, SAMPLES

from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file
from beamalloc.htmlreport.html import render_report
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.webui.app import create_app

SNAPS = ROOT / "samples" / "workloads" / "snapshots"


def _text(page: str) -> str:
    body = page.split("<main>", 1)[-1]
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))
    assert "{'" not in text and "None" not in text
    return text


def test_uploads_compare_with_the_diff_verdict() -> None:
    c = create_app(None).test_client()
    with open(SNAPS / "binspike.json", "rb") as f1, open(SNAPS / "binspike_bf.json", "rb") as f2:
        r = c.post("/upload", data={"file": [f1, f2]})
    assert r.status_code == 303
    page = c.get(r.headers["Location"]).get_data(as_text=True)
    text = _text(page)
    assert 'data-outcome="unchanged"' in page
    assert "no change: 172.3 MiB unused before and after" in text
    assert "+MBacul binary_alloc 60 % 0 % percent" in text
    assert "uploaded files ·" in text  # the uploads are in the picker


def test_picker_keeps_a_single_choice(tmp_path: Path) -> None:
    db = tmp_path / "watch.db"
    snap = read_file(str(SNAPS / "healthy.json"))
    with Store(db) as st:
        st.add_sample(snap, derive(snap), force_keep=True)
    c = create_app(db).test_client()
    page = c.get("/compare?a=s1").get_data(as_text=True)
    assert '<option value="s1" selected>' in page
    assert "Pick A (before) and B (after)" in _text(page)
    assert 'id="first-last"' not in page  # one snapshot: no first-against-last link
    assert c.get("/compare?a=s1&b=s2").status_code == 404


def test_report_of_three_sources_names_the_pair() -> None:
    paths = [SNAPS / "binspike.json", SNAPS / "healthy.json", SAMPLES / "recon_snapshot.txt"]
    snaps = [read_file(str(p)) for p in paths]
    page = render_report([analyze(s) for s in snaps], snaps)
    sec = page[page.index('<section class="compare">'):]
    sec = sec[:sec.index("</section>")]
    text = _text(sec)
    assert 'Below, "A" is A and "B" is C' in text
    assert "Every snapshot's totals" in text and "Compare 3 snapshots" in text
    assert "the OTP version of B is unknown" in text
