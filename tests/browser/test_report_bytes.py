"""`beamalloc report --bytes` (issue 26 item 2) in a real browser at 1400 and 1000 px: the exact
bytes beside each size widen the cells, and still no table is clipped, nothing overflows the
page, and the verdict is the one line it is without them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import run_cli

from .pages import CLIPPED, OVERFLOW, VERDICTS, WIDTHS, visit

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "samples/otp25/erl_crash.dump",
           ROOT / "samples/workloads/snapshots/heapchurn.json"]


@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"{w}px")
def test_report_with_bytes_reads_at_every_width(browser, tmp_path: Path, width: int) -> None:
    out = tmp_path / "r.html"
    r = run_cli("report", *map(str, SOURCES), "-o", str(out), "--bytes", timeout=300)
    assert r.returncode == 0, r.stderr
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    try:
        visit(browser, out.as_uri())
        text = browser.execute_script("return document.body.innerText")
        assert len(re.findall(r"\d MiB \(\d{1,3}(,\d{3})+ B\)", text)) > 20
        scroll, client, wide = browser.execute_script(OVERFLOW)
        assert scroll <= client, f"{scroll} px wide in {client}: {wide}"
        assert not browser.execute_script(CLIPPED)
        for head, why in browser.execute_script(VERDICTS):
            assert len(head) <= 100 and why <= 3 and " B)" not in head, head
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
