"""Helpers: load a page, wait for its plotly charts, read the console, take screenshots."""

from __future__ import annotations

import base64
import time
from typing import Any

from .conftest import SHOTS
from .png import ink

#: plotly draws each chart into an svg.main-svg inside the figure's div.
ALL_DRAWN = """
const figs = [...document.querySelectorAll('.fig')];
return figs.length > 0 && figs.every(f => f.querySelector('svg.main-svg'));
"""


def wait_for(drv: Any, script: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if drv.execute_script(script):
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script.strip()[:80]}")


def console_errors(drv: Any) -> list[str]:
    return [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def visit(drv: Any, url: str, charts: bool = True) -> None:
    drv.get_log("browser")  # drop what earlier pages logged
    drv.get(url)
    if charts:
        wait_for(drv, ALL_DRAWN)
    errors = console_errors(drv)
    assert not errors, f"console errors on {url}: {errors}"


def screenshot(drv: Any, name: str) -> float:
    """Save the whole page as SHOTS/name.png; return the share of non-background pixels."""
    m = drv.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = m.get("cssContentSize") or m["contentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 8000)}
    full = drv.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True, "clip": {**clip, "scale": 1}})
    (SHOTS / f"{name}.png").write_bytes(base64.b64decode(full["data"]))
    # The check decodes a small copy: pure-Python PNG decoding of the full page is slow.
    small = drv.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "clip": {**clip, "height": min(clip["height"], 1600), "scale": 0.25}})
    share, colours = ink(base64.b64decode(small["data"]), step=1)
    assert share > 0.03 and colours > 8, f"{name}: screenshot looks blank ({share=}, {colours=})"
    return share


def points(drv: Any, fig_id: str) -> int:
    """Data points plotly drew in one figure: bars (g.point), markers (path.point), line
    vertices, heatmap images."""
    return drv.execute_script("""
const f = document.getElementById(arguments[0]);
if (!f) return -1;
let n = f.querySelectorAll('g.point, path.point').length;
for (const p of f.querySelectorAll('path.js-line'))
  n += (p.getAttribute('d').match(/L/g) || []).length + 1;
n += f.querySelectorAll('g.hm image, g.heatmaplayer image').length;
return n;""", fig_id)
