"""The one list of pages (PAGES) every browser check and screenshot walks, and the helpers: load
a page, wait for its plotly charts, read the console, take screenshots.

A page is a name (its screenshot's file stem) and a URL: a path on the test server, or a function
of the session (Ctx) that returns one, e.g. a report it writes. Adding a page is one line here;
tests/browser/test_every_page.py then checks it at 1400 and 1000 px and screenshots it (with
BEAMALLOC_SHOTS=docs/img/webui, into the docs).
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .conftest import SHOTS
from .png import ink


@dataclass
class Ctx:
    """What a page's URL may need: the server, its store, a directory for files it writes."""

    server: str
    store_path: Path
    tmp: Path
    made: dict[str, str] = field(default_factory=dict)

    def snapshot_ref(self, node: str) -> str:
        from beamalloc.timeseries.store import Store

        with Store(self.store_path, readonly=True) as st:
            return f"s{st.snapshots(node)[-1]['id']}"


@dataclass(frozen=True)
class Page:
    name: str
    url: str | Callable[[Ctx], str]
    charts: bool = True  # wait for every .fig to be drawn

    def address(self, ctx: Ctx) -> str:
        if callable(self.url):
            if self.name not in ctx.made:
                ctx.made[self.name] = self.url(ctx)
            return ctx.made[self.name]
        return ctx.server + self.url


def _node(name: str) -> str:
    return "/node?n=" + quote(name)


def _snapshot(node: str) -> Callable[[Ctx], str]:
    return lambda ctx: f"{ctx.server}/snapshot/{ctx.snapshot_ref(node)}"


def _compare(node: str) -> Callable[[Ctx], str]:
    """The compare page of a node's first and last stored snapshots."""
    def make(ctx: Ctx) -> str:
        from beamalloc.timeseries.store import Store

        with Store(ctx.store_path, readonly=True) as st:
            snaps = st.snapshots(node)
        return f"{ctx.server}/compare?a=s{snaps[0]['id']}&b=s{snaps[-1]['id']}"

    return make


def _whatif(node: str) -> Callable[[Ctx], str]:
    return lambda ctx: f"{ctx.server}/whatif?r={ctx.snapshot_ref(node)}"


def _report(*sources: str) -> Callable[[Ctx], str]:
    def make(ctx: Ctx) -> str:
        from beamalloc.analyzer.analysis import analyze
        from beamalloc.collector.sources import read_file
        from beamalloc.htmlreport.html import write_report

        root = Path(__file__).resolve().parents[2]
        snaps = [read_file(str(root / s)) for s in sources]
        out = ctx.tmp / f"report-{len(sources)}.html"
        write_report([analyze(s) for s in snaps], str(out), snapshots=snaps)
        return out.as_uri()

    return make


#: Every page of the web UI and the report.
PAGES: list[Page] = [
    Page("nodes", "/"),
    Page("node", _node("app@web1")),
    Page("node-holders", _node("holders@host")),  # with a watch's process scan
    Page("node-restart", _node("restart@host")),
    Page("node-one-sample", _node("one@host")),
    Page("node-two-samples", _node("two@host")),
    Page("snapshot", "/snapshot/s1"),
    Page("snapshot-advice", _snapshot("churn@host")),
    Page("snapshot-holders", _snapshot("holders@host")),  # with a watch's process scan
    Page("compare", _compare("app@web1")),
    Page("whatif", _whatif("churn@host")),
    Page("docs", "/docs/erts/tuning.md", charts=False),
    Page("upload", "/upload", charts=False),
    Page("error", "/node?n=nobody", charts=False),
    Page("report", _report("samples/workloads/snapshots/heapchurn.json")),
    Page("report-three-sources", _report("samples/otp25/recon_snapshot.txt",
                                         "samples/otp25/erl_crash.dump",
                                         "samples/workloads/snapshots/heapchurn.json")),
]

#: Widths every page is checked and shot at (CSS px).
WIDTHS = (1400, 1000)

#: plotly draws each chart into an svg.main-svg inside the figure's div; a figure with a note
#: (fewer than two points) is a .fig-note instead.
ALL_DRAWN = """
const figs = [...document.querySelectorAll('.fig')];
return figs.length > 0 && figs.every(f => f.classList.contains('fig-note') ||
                                         f.querySelector('svg.main-svg'));
"""


#: No verdict left pending (data-pending: one the page's script is fetching).
VERDICTS_IN = "return !document.querySelector('[data-pending]');"


def wait_for(drv: Any, script: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if drv.execute_script(script):
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script.strip()[:80]}")


def console_errors(drv: Any) -> list[str]:
    return [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"
            and "favicon" not in e["message"]]


def visit(drv: Any, url: str, charts: bool = True, watch: str = "") -> None:
    """Open url and wait until its charts are drawn and no verdict is pending; watch: a
    script run before the page's own."""
    drv.get_log("browser")  # drop what earlier pages logged
    if watch:
        added = drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": watch})
    drv.get(url)
    if watch:
        drv.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                            {"identifier": added["identifier"]})
    if charts:
        wait_for(drv, ALL_DRAWN)
    # a verdict the server had not computed arrives by the page's script (app.js
    # awaitVerdicts): the page as its reader sees it a second later
    wait_for(drv, VERDICTS_IN, timeout=120)
    # an error page's own status (404) is what it should answer, not an error of the page
    errors = [e for e in console_errors(drv) if not e.startswith(url + " - Failed to load")]
    assert not errors, f"console errors on {url}: {errors}"


def screenshot(drv: Any, name: str) -> float:
    """Save the whole page as SHOTS/name.png; return the share of non-background pixels."""
    m = drv.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = m.get("cssContentSize") or m["contentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 8000)}
    full = drv.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True, "clip": {**clip, "scale": 1}})
    SHOTS.mkdir(parents=True, exist_ok=True)
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


# ---- what every page must not show -------------------------------------------------------------

#: Python reprs and Nones in the text a reader sees.
TEXT_PROBLEMS = r"""
const t = document.body.innerText;
const out = [];
for (const re of [/\{'/g, /\bNone\b/g]) {
  let m;
  while ((m = re.exec(t)) !== null && out.length < 5)
    out.push(t.slice(Math.max(0, m.index - 60), m.index + 60));
}
return out;"""

#: Horizontal overflow of the page (a table or a chart wider than the window).
OVERFLOW = """
const d = document.documentElement;
const wide = [...document.querySelectorAll('body *')].filter(e =>
  e.getBoundingClientRect().right > d.clientWidth + 0.5 &&
  !(e.parentElement && e.parentElement.getBoundingClientRect().right > d.clientWidth + 0.5));
return [d.scrollWidth, d.clientWidth, wide.slice(0, 5).map(e =>
  e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' +
  Math.round(e.getBoundingClientRect().right))];"""

#: Clipped content (issue 26 item 4): a cell whose content is wider than the cell, or a cell or
#: preformatted block past the window's right edge with no scroll container around it; and a
#: scroll container that holds more than it shows without its shadow cue (style.css
#: .table-scroll, .wide, .scroll). Cells of closed <details> are not laid out and not checked.
CLIPPED = r"""
const d = document.documentElement, out = [];
const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
const box = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement)
                     if (scrolls(p)) return p;
                   return null; };
const name = e => e.tagName + (e.id ? '#' + e.id : '') + ' "' +
                  e.textContent.trim().slice(0, 40) + '"';
for (const c of document.querySelectorAll('td, th, pre, h1, h2, h3, p, li')) {
  const r = c.getBoundingClientRect();
  if (!r.width || scrolls(c)) continue;
  const b = box(c);
  if (c.scrollWidth > c.clientWidth + 1 && !b) out.push('overflows its box: ' + name(c));
  else if (r.right > d.clientWidth + 0.5 && !b) out.push('past the window: ' + name(c));
}
for (const e of document.querySelectorAll('body *')) {
  if (!scrolls(e) || e.scrollWidth <= e.clientWidth + 1 || e.tagName === 'PRE') continue;
  if (!getComputedStyle(e).backgroundImage.includes('gradient'))
    out.push('scrolls without a cue: ' + name(e));
}
return out.slice(0, 8);"""

#: Each snapshot verdict's first line and its number of why lines (a snapshot page, a report).
VERDICTS = r"""
return [...document.querySelectorAll('section.snapshot > .verdict, #node-verdict')].map(v =>
  v.id ? [v.textContent.trim(), v.parentElement.querySelectorAll('li').length]
       : [v.querySelector('.headline').textContent.trim(), v.querySelectorAll('li').length]);"""

#: Chart titles under plotly's toolbar (the modebar), by their bounding boxes: [checked, clashes].
TITLE_CLASH = r"""
let checked = 0;
const out = [];
for (const f of document.querySelectorAll('.js-plotly-plot')) {
  const m = f.querySelector('.modebar'), t = f.querySelector('.gtitle');
  if (!m || !t) continue;
  const a = m.getBoundingClientRect(), b = t.getBoundingClientRect();
  if (!a.width || !b.width) continue;
  checked++;
  if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
    out.push(f.id + ': "' + t.textContent + '"');
}
return [checked, out];"""

#: Per drawn figure: its id, the traces drawn as lines with their non-null point counts, the
#: grey gap bands, and every line segment (consecutive non-null points).
FIGURES = """
return [...document.querySelectorAll('.fig')].filter(f => f.data).map(f => ({
  id: f.id,
  note: f.classList.contains('fig-note'),
  traces: f.data.map(t => ({name: t.name || '', type: t.type, mode: t.mode || '',
                            stack: t.stackgroup || null, x: t.x || [], y: t.y || [],
                            hover: t.hovertemplate || ''})),
  gaps: (f.layout.shapes || []).filter(s => s.type === 'rect' && s.xref === 'x')
                               .map(s => [s.x0, s.x1]),
  axes: Object.keys(f._fullLayout).filter(k => /^[xy]axis[0-9]*$/.test(k)).map(k => ({
    name: k, tickvals: f.layout[k] && f.layout[k].tickvals || null,
    ticktext: f.layout[k] && f.layout[k].ticktext || null})),
  ticks: [...f.querySelectorAll('g.xtick text, g.ytick text, g.y2tick text, g.x2tick text')]
           .map(e => e.textContent),
}));"""

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _ms(x: Any) -> float:
    if isinstance(x, int | float):
        return float(x)
    from datetime import datetime

    return datetime.fromisoformat(str(x).replace(" ", "T")).timestamp() * 1000


def line_problems(figs: list[dict[str, Any]]) -> list[str]:
    """A line trace with fewer than two points, or a line segment across a gap band."""
    out = []
    for f in figs:
        for t in f["traces"]:
            if t["type"] != "scatter" or "lines" not in t["mode"]:
                continue
            n = sum(v is not None for v in t["y"])
            if n < 2:
                out.append(f"{f['id']}: {t['name']!r} drawn as a line with {n} point(s)")
            gaps = [(_ms(a), _ms(b)) for a, b in f["gaps"]]
            pts = list(zip(t["x"], t["y"], strict=False))
            for (x0, y0), (x1, y1) in itertools.pairwise(pts):
                if y0 is None or y1 is None:
                    continue
                a, b = _ms(x0), _ms(x1)
                for g0, g1 in gaps:
                    if a <= g0 and b >= g1:
                        out.append(f"{f['id']}: {t['name']!r} drawn across the gap "
                                   f"{g0:.0f}-{g1:.0f}")
    return out


def unit_problems(figs: list[dict[str, Any]]) -> list[str]:
    """SI byte ticks ("200MB", "1.5G") or SI formats in hover text; a binary tick label that
    does not sit at its own value."""
    import re

    out = []
    si = re.compile(r"^-?[\d.,]+\s?[kMGTP]B?$")
    for f in figs:
        for text in f["ticks"]:
            if si.match(text.strip()):
                out.append(f"{f['id']}: SI tick {text!r}")
        for t in f["traces"]:
            if re.search(r"%\{[xyz]:[^}]*s\}", t["hover"]):
                out.append(f"{f['id']}: SI hover format in {t['hover']!r}")
        for ax in f["axes"]:
            for v, label in zip(ax["tickvals"] or [], ax["ticktext"] or [], strict=False):
                m = re.match(r"^([\d.,]+) (B|KiB|MiB|GiB|TiB)$", label)
                if not m:
                    continue
                num = float(m.group(1).replace(",", ""))
                # bytes at num x unit, or a series already scaled to the unit (time charts)
                if abs(v - num * UNITS[m.group(2)]) > 1e-6 * max(1, v) and abs(v - num) > 1e-6:
                    out.append(f"{f['id']} {ax['name']}: tick {label!r} at {v}")
    return out

#: A rule's code (R2, R13, OOM is a word) where a reader sees it without the rule's words
#: (issue 26 item 2): every code must be a small.rule after words in the same element. Returns
#: the offending text around each bare code, at most 8.
BARE_RULES = r"""
const out = [], code = /\bR[0-9]{1,2}\b/;
const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walk.nextNode(); n && out.length < 8; n = walk.nextNode()) {
  const el = n.parentElement;
  // a citation names a section of the docs (docs/erts/tuning.md §1 R8): not a rule shown
  const text = n.data.replace(/§[0-9.]+ R[0-9]{1,2}\b/g, '');
  if (!code.test(text) || !el || el.closest('script, style, svg, .js-plotly-plot')) continue;
  if (!el.offsetParent && getComputedStyle(el).position !== 'fixed') continue;  // not shown
  const tag = el.closest('small.rule');
  const words = tag && tag.parentElement.textContent.replace(tag.textContent, '')
                                         .match(/[A-Za-z_]{3,}/g);
  if (!tag || n.data.trim() !== tag.textContent.trim() || !words || words.length < 2)
    out.push((el.textContent || n.data).trim().slice(0, 100));
}
return out;"""

#: The first line a reader sees on the page: its text up to the first line break.
FIRST_LINE = r"""
return document.body.innerText.split('\n').map(s => s.trim()).filter(s => s)[0] || '';"""
