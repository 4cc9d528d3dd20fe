"""Every chart of the web UI and of the HTML report, as plotly figure dicts (issue 6, must-hold 4).

Figures are plain `{"data", "layout"}` dicts, the JSON plotly.js takes: building them is cheap
(no graph_objects validation on a 10k-point series) and they serialize as they are. Every string
that came from outside (a snapshot, a file, the store, a peer) goes through `_t()`, the one place
a figure's outside strings are made safe: their control, bidi and zero-width characters shown as
`\\xNN` (beamalloc/console.py `clean`, as the pages show every value: webui/filters.py
`visible`), since plotly.js draws a label's characters as they are and a U+202E would reorder
it; and `<`, `>` and `&` as entities, since plotly.js reads a subset of HTML in labels and hover
text.

Snapshot figures read the analysis (analyzer/analysis.py `Analysis`); node figures read the store's
`series()` columns (timeseries/series.py keys) and a few sampled snapshots; compare figures read a
list of analyses with a label each, so a replay result (a Snapshot with source "replay") compares
like any other snapshot.
"""

from __future__ import annotations

import bisect
import html
import itertools
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from beamalloc.advice.rules import R2_MBCS_USAGE_PROBLEM, R2_USAGE_SUSPECT, usage_level
from beamalloc.analyzer.analysis import Analysis, InstanceRow
from beamalloc.analyzer.carriers import COMPACT, AllocatorCarrierMap, CarrierPoints
from beamalloc.console import clean
from beamalloc.flags import UINT_MAX
from beamalloc.timeseries.series import instance_key, types_of
from beamalloc.units import byte_unit, human, pct, tick_label

Figure = dict[str, Any]

USED = "#3b6fb6"
UNUSED = "#e8a0a0"
POOL = "#c9a0dc"
SBCS = "#f0b860"
PALETTE = ("#3b6fb6", "#e07b39", "#4c9a5b", "#b8455b", "#7a5cb0", "#8c6d46", "#d16aa8",
           "#6f7f8f", "#a8a83a", "#3aa8a8")
#: Usage 0-100 %: red below R2's problem threshold, amber to its suspect one, green above (the
#: tables' colours, advice/rules.py usage_level).
USAGE_SCALE = [[0, "#b2182b"], [R2_MBCS_USAGE_PROBLEM, "#f4a582"], [R2_USAGE_SUSPECT, "#fee08b"],
               [0.9, "#a6d96a"], [1, "#1a9850"]]
#: The usage colour bar: colour is the usage, milder where little is unused (usage_shade).
COLORBAR = {"title": {"text": "usage %<br>(milder if<br>little unused)", "side": "top"},
            "thickness": 12}
#: Allocator types drawn separately in the stacked series; the rest are summed as "other".
TOP_TYPES = 8


def _t(s: Any) -> str:
    return html.escape(clean(str(s), limit=0), quote=True)


#: Height of plotly's toolbar (the modebar) at a figure's top: titles start below it, and the
#: plot below the title (TITLE_PX, a 15 px line).
TOOLBAR_PX, TITLE_PX = 30, 26


def _layout(title: str, height: int = 360, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        # the title sits below plotly's toolbar, never under it (a narrow chart's long title
        # ran under it); fixed margins, not title.automargin, which plotly's responsive resize
        # can send into "Something went wrong with axis scaling"
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15},
                  "yref": "container", "y": 1, "yanchor": "top", "pad": {"t": TOOLBAR_PX}},
        "height": height,
        "margin": {"l": 130, "r": 30, "t": 50, "b": 45},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "legend": {"orientation": "h", "y": -0.18, "itemsizing": "constant"},
        "hovermode": "closest",
    }
    base.update(kw)
    top = base["margin"].get("t", 0)
    if top < TOOLBAR_PX + TITLE_PX:  # the plot keeps its height: the figure grows instead
        base["margin"] = {**base["margin"], "t": TOOLBAR_PX + TITLE_PX}
        base["height"] += TOOLBAR_PX + TITLE_PX - top
    return base


# Axes of bytes carry their own binary ticks (beamalloc.units.tick_label, as every number on the
# pages is binary): an axis never says "200MB" beside a "192.3 MiB" label, as plotly's SI would.


def byte_ticks(vmax: float, vmin: float = 0.0, unit: str | None = None
               ) -> tuple[list[float], list[str]]:
    """Tick values and labels for an axis of bytes from vmin to vmax: 1-2-2.5-5 steps of one
    binary unit, e.g. 0, 50 MiB, ... 200 MiB at exactly 200 x 2^20 bytes. With `unit`, the
    data is already in that unit (a time series scaled for its hover text)."""
    if unit is None:
        unit, factor = byte_unit(max(abs(vmax), abs(vmin)))
    else:
        factor = 1
    lo, hi = vmin / factor, vmax / factor
    raw = max(hi - lo, 1e-9) / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if unit == "B":
        step = max(1, round(step))
    first = math.floor(lo / step) * step
    vals = [round(first + i * step, 6) for i in range(math.ceil((hi - first) / step) + 2)]
    return [v * factor for v in vals], [tick_label(v, unit) for v in vals]


def _bytes_axis(vmax: float, vmin: float = 0.0, room: float = 0.14,
                **kw: Any) -> dict[str, Any]:
    """An axis of bytes with binary tick labels at exactly those byte values, and `room` past
    the largest value for the labels bars carry outside (plotly would clip them)."""
    vals, text = byte_ticks(vmax, min(0.0, vmin))
    if vmax > 0 and room:
        kw.setdefault("range", [min(0.0, vmin), vmax * (1 + room)])
    return {"tickmode": "array", "tickvals": vals, "ticktext": text, "gridcolor": "#eee",
            "rangemode": "tozero", "zeroline": True, "zerolinecolor": "#ccc", **kw}


def _scaled_axis(vmax: float, unit: str, **kw: Any) -> dict[str, Any]:
    """An axis whose data is already in `unit` (time series: the hover reads %{y} MiB)."""
    vals, text = byte_ticks(vmax, 0.0, unit=unit)
    return {"tickmode": "array", "tickvals": vals, "ticktext": text, "gridcolor": "#eee",
            "rangemode": "tozero", **kw}


def _max(vals: Any) -> float:
    """The largest value (bytes, never negative), None left out; 0 for none."""
    return max(filter(None, vals), default=0)


def usage_shade(u: float, unused: int | None) -> float:
    """The colour value (0-1 on USAGE_SCALE) of a usage that wastes `unused` bytes: the usage
    itself, unless rules.usage_level weighs the bytes to a milder level; then the usage mapped
    into that level's band, so a cell is never redder than its table row."""
    ratio = usage_level(u)
    level = usage_level(u, unused)
    if level == ratio:
        return u
    lo, hi = (R2_MBCS_USAGE_PROBLEM, R2_USAGE_SUSPECT - 0.01) if level == "warn" else (0.9, 1.0)
    return lo + (hi - lo) * max(0.0, min(1.0, u))


# ---- one snapshot --------------------------------------------------------------------------


def memory_layers(a: Analysis) -> Figure:
    """RSS vs allocated vs erlang:memory(total) vs used: where the node's memory goes."""
    os_, t = a.os, a.totals_all
    rows = [
        ("RSS (the OS)", os_.rss, "#555"),
        ("allocated (carriers)", t.allocated, UNUSED),
        ("erlang:memory(total)", os_.erlang_memory_total, "#8fb3e0"),
        ("used (blocks)", t.used, USED),
    ]
    rows = [r for r in rows if r[1] is not None]
    names = [r[0] for r in rows][::-1]
    vals = [r[1] for r in rows][::-1]
    return {
        "data": [{
            "type": "bar", "orientation": "h", "y": names, "x": vals,
            "marker": {"color": [r[2] for r in rows][::-1]},
            "text": [human(v) for v in vals], "textposition": "auto",
            "hovertemplate": "%{y}: %{text}<extra></extra>",
        }],
        "layout": _layout("The node's memory, from the OS down to the blocks in use",
                          height=70 + 45 * len(rows), xaxis=_bytes_axis(_max(vals)),
                          showlegend=False,
                          margin={"l": 160, "r": 30, "t": 40, "b": 30}),
    }


def allocator_usage(a: Analysis) -> Figure:
    """Used and unused bytes per allocator type, worst (most unused) on top."""
    rows = [r for r in a.allocator_types if r.allocated > 0][::-1]
    names = [_t(r.allocator) for r in rows]
    used = [r.used for r in rows]
    unused = [r.unused for r in rows]
    usage = [pct(r.usage) for r in rows]
    return {
        "data": [
            {"type": "bar", "orientation": "h", "name": "used", "y": names, "x": used,
             "marker": {"color": USED}, "customdata": [[human(u), p] for u, p in
                                                          zip(used, usage, strict=True)],
             "hovertemplate": "%{y}: used %{customdata[0]} (usage %{customdata[1]})"
                              "<extra></extra>"},
            {"type": "bar", "orientation": "h", "name": "unused (reserved, no data)", "y": names,
             "x": unused, "marker": {"color": UNUSED},
             "text": [human(u) for u in unused], "textposition": "outside", "cliponaxis": False,
             "hovertemplate": "%{y}: unused %{text}<extra></extra>"},
        ],
        "layout": _layout("Allocated per allocator: used vs unused", barmode="stack",
                          height=90 + 26 * len(rows),
                          xaxis=_bytes_axis(_max(r.allocated for r in rows))),
    }


def _instance_usage(r: InstanceRow) -> float:
    alloc = r.mbcs_carriers_size + r.sbcs_carriers_size
    return (r.mbcs_block_size + r.sbcs_block_size) / alloc if alloc else 1.0


def instance_heatmap(a: Analysis) -> Figure:
    """Usage of every instance: allocator type × instance number; one bad scheduler stands out."""
    rows = [r for r in a.allocators if r.mbcs_carriers_size + r.sbcs_carriers_size]
    types = [t.allocator for t in a.allocator_types
             if any(r.allocator == t.allocator for r in rows)][::-1]
    insts = sorted({r.instance for r in rows})
    z: list[list[float | None]] = [[None] * len(insts) for _ in types]
    text: list[list[str]] = [[""] * len(insts) for _ in types]
    ti = {t: i for i, t in enumerate(types)}
    ii = {n: i for i, n in enumerate(insts)}
    for r in rows:
        y, x = ti[r.allocator], ii[r.instance]
        u = _instance_usage(r)
        z[y][x] = round(100 * usage_shade(u, r.unused), 1)
        text[y][x] = (f"{_t(r.allocator)}[{r.instance}]: usage {pct(u)}, unused "
                      f"{human(r.unused)} of "
                      f"{human(r.mbcs_carriers_size + r.sbcs_carriers_size)}")
    return {
        "data": [{
            "type": "heatmap", "x": [str(n) for n in insts], "y": [_t(t) for t in types],
            "z": z, "text": text, "hovertemplate": "%{text}<extra></extra>",
            "zmin": 0, "zmax": 100, "colorscale": USAGE_SCALE,
            "colorbar": COLORBAR, "xgap": 1, "ygap": 1,
        }],
        "layout": _layout("Usage per instance (instance 0 serves non-scheduler threads)",
                          height=110 + 24 * len(types),
                          xaxis={"title": {"text": "instance"}, "type": "category"}),
    }


def instance_bars(a: Analysis, top: int = 20) -> Figure:
    """The instances holding the most unused bytes."""
    rows = [r for r in a.allocators if r.unused > 0][:top][::-1]
    names = [f"{_t(r.allocator)}[{r.instance}]" for r in rows]
    used = [r.mbcs_block_size + r.sbcs_block_size for r in rows]
    return {
        "data": [
            {"type": "bar", "orientation": "h", "name": "used", "y": names, "x": used,
             "marker": {"color": USED}, "text": [human(u) for u in used],
             "hovertemplate": "%{y}: used %{text}<extra></extra>", "textposition": "none"},
            {"type": "bar", "orientation": "h", "name": "unused", "y": names,
             "x": [r.unused for r in rows], "marker": {"color": UNUSED},
             "text": [human(r.unused) for r in rows], "textposition": "outside",
             "cliponaxis": False,
             "hovertemplate": "%{y}: unused %{text}<extra></extra>"},
        ],
        "layout": _layout(f"The {len(rows)} instances with the most unused bytes",
                          barmode="stack", height=90 + 24 * max(len(rows), 1),
                          xaxis=_bytes_axis(_max(u + r.unused
                                                 for u, r in zip(used, rows, strict=True)))),
    }


def block_sizes(a: Analysis) -> Figure:
    """Average block sizes against sbct and lmbcs (log scale), per allocator type.

    A block at or above sbct gets a carrier of its own; mbcs blocks near lmbcs fit badly into
    multiblock carriers (docs/erts/alloc_util.md §3).
    """
    rows = [r for r in a.allocator_types if r.mbcs_blocks or r.sbcs_blocks][::-1]
    ys = [_t(r.allocator) for r in rows]

    def series(name: str, vals: list[Any], symbol: str, color: str, size: int = 11) -> dict:
        pts = [(v, y) for v, y in zip(vals, ys, strict=True)
               if isinstance(v, int | float) and 0 < v < UINT_MAX]  # ~0: infinite, no mark
        return {"type": "scatter", "mode": "markers", "name": name,
                "x": [p[0] for p in pts], "y": [p[1] for p in pts],
                "text": [human(p[0]) for p in pts],
                "hovertemplate": "%{y} " + name + ": %{text}<extra></extra>",
                "marker": {"symbol": symbol, "size": size, "color": color,
                           "line": {"width": 2, "color": color}}}

    data = [
            series("avg mbcs block", [r.mbcs_average_block_size for r in rows], "circle",
                   USED),
            series("avg sbcs block", [r.sbcs_average_block_size for r in rows], "diamond",
                   SBCS),
            series("sbct", [r.options.get("sbct") for r in rows], "line-ns-open", "#b00",
                   22),
            series("lmbcs", [r.options.get("lmbcs") for r in rows], "line-ns-open", "#333",
                   22),
    ]
    return {
        "data": data,
        "layout": _layout("Average block size vs sbct (red) and lmbcs (black)",
                          height=110 + 28 * len(rows),
                          xaxis=_log_bytes_axis([v for t in data for v in t["x"]]),
                          yaxis={"type": "category", "categoryarray": ys,
                                 "categoryorder": "array"}),
    }


def carrier_kinds(a: Analysis) -> Figure:
    """Per allocator type: multiblock carriers, pooled carriers and single-block carriers."""
    rows = [r for r in a.allocator_types if r.allocated > 0][::-1]
    ys = [_t(r.allocator) for r in rows]
    own = [r.mbcs_carriers_size - r.pool_carriers_size for r in rows]
    pool = [r.pool_carriers_size for r in rows]
    sbcs = [r.sbcs_carriers_size for r in rows]

    def bar(name: str, vals: list[int], color: str) -> dict:
        return {"type": "bar", "orientation": "h", "name": name, "y": ys, "x": vals,
                "marker": {"color": color}, "text": [human(v) for v in vals],
                "textposition": "none",
                "hovertemplate": "%{y}: " + name + " %{text}<extra></extra>"}

    return {
        "data": [bar("multiblock carriers", own, USED), bar("in the carrier pool", pool, POOL),
                 bar("single-block carriers", sbcs, SBCS)],
        "layout": _layout("Carriers: multiblock, pooled (abandoned) and single-block",
                          barmode="stack", height=90 + 26 * len(rows),
                          xaxis=_bytes_axis(_max(r.allocated for r in rows))),
    }


def _pow2_ticks(lo: float, hi: float) -> list[int]:
    """Powers of two from below lo to above hi, every other one when there are many."""
    lo, hi = max(1.0, lo), max(1.0, hi)
    ticks = [1 << k for k in range(0, 50) if lo / 2 <= 1 << k <= hi * 2]
    while len(ticks) > 9:
        ticks = ticks[::2]
    return ticks


def _log_bytes_axis(vals: list[float], **kw: Any) -> dict[str, Any]:
    """A log axis of bytes, ticks at powers of two labelled in KiB/MiB."""
    pos = [v for v in vals if v and v > 0]
    ticks = _pow2_ticks(min(pos, default=1), max(pos, default=1))
    return {"type": "log", "tickmode": "array", "tickvals": ticks,
            "ticktext": [tick_label(t) for t in ticks], "gridcolor": "#eee", **kw}


#: Golden-ratio steps: a deterministic, even spread of carriers of one size along the x axis.
_PHI = 0.6180339887498949


#: Up to this many carriers the map draws every carrier as one SVG mark (no WebGL needed: a
#: report opens in any browser, headless or remote); above it, a density of counts.
MAP_MARKS = 6000


def carrier_map(m: AllocatorCarrierMap) -> Figure:
    """One allocator's carriers (the analysis' `carriers.allocators[i]`): size against fill, owned
    and pooled apart, with the fill's distribution beside (counts per 5 % of fill).

    Up to MAP_MARKS carriers, every carrier is one mark. Carrier sizes repeat (a few size
    classes), so marks of one size are spread over ±12 % of it (log axis): a column of marks is
    one size; marks shrink and fade as their number grows, so thousands read as a density.
    Above MAP_MARKS, a heatmap counts carriers per size (powers of two) and 5 % of fill.
    """
    pts = m.points
    n = len(pts)
    size, opacity = (9, 0.85) if n <= 60 else (6, 0.6) if n <= 1000 else (4, 0.4)
    traces: list[dict[str, Any]] = []
    if n > MAP_MARKS:
        traces.append(_carrier_density(pts))
    for pooled, name, color in ((False, "owned by an instance", USED),
                                (True, "in the carrier pool", POOL)):
        idx = [i for i in range(n) if pts.in_pool[i] == pooled]
        if not idx:
            continue
        ys = [100 * pts.fill[i] for i in idx]
        if n <= MAP_MARKS:
            xs = [pts.size[i] * (1 + 0.24 * (((k * _PHI) % 1.0) - 0.5))
                  for k, i in enumerate(idx)]
            traces.append({
                "type": "scatter", "mode": "markers", "name": f"{name} ({len(idx)})",
                "x": xs, "y": ys, "legendgroup": name,
                "marker": {"color": color, "size": size, "opacity": opacity,
                           "line": {"width": 0}},
                "customdata": [[human(pts.size[i]), pts.blocks[i],
                                "-" if pts.instance[i] is None else pts.instance[i]]
                               for i in idx],
                "hovertemplate": "carrier %{customdata[0]}, %{y:.1f} % full, %{customdata[1]} "
                                 "blocks, instance %{customdata[2]}<extra>" + _t(name)
                                 + "</extra>",
            })
        traces.append({
            "type": "histogram", "y": ys, "xaxis": "x2", "yaxis": "y",
            "name": f"{name} ({len(idx)})", "legendgroup": name, "showlegend": n > MAP_MARKS,
            "marker": {"color": color}, "ybins": {"start": 0, "end": 100.0001, "size": 5},
            "opacity": 0.8,
            "hovertemplate": "%{x} carriers %{y} % full<extra>" + _t(name) + "</extra>",
        })
    title = f"{_t(m.allocator)}: {n} carriers, {_t(m.classification.kind)}"
    # Ticks at powers of two (carrier sizes are multiples of 64 KiB or of pages): plotly's
    # log ticks would crowd 50k, 60k, ... together.
    lo = max(1, min(pts.size, default=1) * 0.8)
    hi = max(pts.size, default=1) * 1.25
    ticks = _pow2_ticks(lo, hi)
    shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 0.78, "yref": "y", "y0": 10,
               "y1": 10, "line": {"color": "#b2182b", "width": 1, "dash": "dot"}}]
    return {
        "data": traces,
        "layout": _layout(title, height=380, barmode="stack", shapes=shapes,
                          margin={"l": 60, "r": 20, "t": 50, "b": 45},
                          xaxis={"type": "log", "domain": [0, 0.78], "tickvals": ticks,
                                 "ticktext": [tick_label(t) for t in ticks],
                                 "gridcolor": "#eee", "range": [math.log10(lo), math.log10(hi)],
                                 "title": {"text": "carrier size"}},
                          xaxis2={"domain": [0.82, 1], "gridcolor": "#eee",
                                  "title": {"text": "carriers"}},
                          yaxis={"range": [-3, 103], "ticksuffix": " %", "gridcolor": "#eee",
                                 "title": {"text": "fill (allocated / size)"}}),
    }


def _carrier_density(pts: CarrierPoints) -> dict[str, Any]:
    """Counts of carriers per size (powers of two, drawn at the bin's geometric middle) and
    5 % of fill: the map of more carriers than marks can show."""
    bins: dict[tuple[int, int], int] = {}
    for sz, f in zip(pts.size, pts.fill, strict=True):
        key = (max(1, sz).bit_length() - 1, min(19, int(f * 20)))
        bins[key] = bins.get(key, 0) + 1
    ks = sorted({k for k, _ in bins})
    xs = [float(1 << k) * 1.41 for k in ks]
    ys = [2.5 + 5 * j for j in range(20)]
    z = [[bins.get((k, j)) for k in ks] for j in range(20)]
    text = [[human(1 << k) for k in ks] for _ in range(20)]
    return {"type": "heatmap", "x": xs, "y": ys, "z": z, "name": "carriers", "text": text,
            "colorscale": [[0, "#f0e6f6"], [1, "#3b1f5c"]], "showscale": False, "xgap": 2,
            "hovertemplate": "%{z} carriers of %{text} to twice that, %{y:.1f} % full"
                             "<extra></extra>"}


def shown_carrier_maps(a: Analysis) -> list[AllocatorCarrierMap]:
    """The allocators whose carrier map a page shows: those worth a class, else the one with
    the most unused bytes; none without carrier data."""
    ms = list(a.carriers.allocators)
    return [m for m in ms if m.classification.kind != COMPACT] or ms[:1]


def carrier_maps(a: Analysis) -> dict[str, Figure]:
    """`cmap-<i>`: the map of shown_carrier_maps(a)[i]."""
    return {f"cmap-{i}": carrier_map(m) for i, m in enumerate(shown_carrier_maps(a))}


def snapshot_figures(a: Analysis) -> dict[str, Figure]:
    """The figures of a snapshot page, in the order the page shows them."""
    figs = {
        "layers": memory_layers(a),
        "allocators": allocator_usage(a),
        **carrier_maps(a),
        "heatmap": instance_heatmap(a),
        "instances": instance_bars(a),
        "blocks": block_sizes(a),
        "carriers": carrier_kinds(a),
    }
    return figs


# ---- a series of one node ------------------------------------------------------------------

#: Consecutive samples further apart than this many typical intervals are not joined by a line.
BREAK_INTERVALS = 2.5


def _ms_dates(ts: list[float]) -> list[float]:
    """Unix seconds → milliseconds: plotly reads numbers on a date axis as ms since the epoch."""
    return [round(t * 1000) for t in ts]


def _time_layout(title: str, height: int = 330, **kw: Any) -> dict[str, Any]:
    # one right margin for all: the time axes of a node page line up under each other
    kw.setdefault("margin", {"l": 130, "r": 80, "t": 50, "b": 40})
    kw.setdefault("hovermode", "x unified")
    return _layout(title, height=height,
                   xaxis={"type": "date", "gridcolor": "#eee"}, **kw)


def _typical_interval(t: list[float]) -> float | None:
    """The median time between consecutive points (bucket width when downsampled)."""
    d = sorted(b - a for a, b in itertools.pairwise(t) if b > a)
    return d[len(d) // 2] if d else None


def break_points(series: dict[str, Any]) -> list[int]:
    """Indices i where the line from point i-1 to point i must not be drawn: a gap the store
    recorded (down, unreachable, a restart) lies between them, the node's OS pid changed, or
    they are more than BREAK_INTERVALS typical intervals apart."""
    t = series["t"]
    typical = _typical_interval(t)
    starts = sorted(g["start"] for g in series.get("gaps") or [])
    pids = None if series.get("downsampled") else series["columns"].get("pid")
    out = []
    for i in range(1, len(t)):
        a, b = t[i - 1], t[i]
        k = bisect.bisect_left(starts, a)
        if ((k < len(starts) and starts[k] < b)
                or (typical is not None and b - a > BREAK_INTERVALS * typical)
                or (pids is not None and None not in (pids[i - 1], pids[i])
                and pids[i - 1] != pids[i])):
            out.append(i)
    return out


def _broken(values: list[Any], breaks: list[int]) -> list[Any]:
    """`values` with a None before each break: plotly ends the line there (connectgaps off)."""
    if not breaks:
        return list(values)
    out: list[Any] = []
    prev = 0
    for i in breaks:
        out.extend(values[prev:i])
        out.append(None)
        prev = i
    out.extend(values[prev:])
    return out


def _broken_x(t: list[float], breaks: list[int]) -> list[float]:
    """Sample times in ms with a point halfway across each break (where the None goes)."""
    x = _ms_dates(t)
    out: list[float] = []
    prev = 0
    for i in breaks:
        out.extend(x[prev:i])
        out.append(round((x[i - 1] + x[i]) / 2))
        prev = i
    out.extend(x[prev:])
    return out


def _segments(n: int, breaks: list[int]) -> list[tuple[int, int]]:
    edges = [0, *breaks, n]
    return [(a, b) for a, b in itertools.pairwise(edges) if b > a]


def _gap_shapes(series: dict[str, Any]) -> list[dict[str, Any]]:
    shapes = []
    end_of_data = series["t"][-1] if series["t"] else None
    for g in series.get("gaps") or []:
        end = g["end"] if g["end"] is not None else end_of_data
        if end is None or end < g["start"]:
            continue
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "y0": 0, "y1": 1,
                       "x0": round(g["start"] * 1000), "x1": round(end * 1000),
                       "fillcolor": "#999", "opacity": 0.3, "line": {"width": 0}})
    return shapes


def _in_unit(layout: dict[str, Any], factor: int) -> dict[str, Any]:
    """Byte series stay whole bytes in the JSON; the page divides the y values of the byte
    axis by `factor` before drawing (static/app.js), so the hover reads "%{y} MiB" and the
    server does no per-point arithmetic."""
    layout["meta"] = {**layout.get("meta", {}), "yscale": factor}
    return layout


def memory_over_time(series: dict[str, Any], breaks: list[int]) -> Figure:
    x = _broken_x(series["t"], breaks)
    cols = series["columns"]
    shown = [(key, name, color, dash) for key, name, color, dash in (
        ("rss", "RSS", "#555", "solid"), ("allocated", "allocated", "#c0392b", "solid"),
        ("erlang_total", "erlang:memory(total)", "#8fb3e0", "dot"), ("used", "used", USED, "solid"),
        # the node's memory cgroup where it has one: its charge against its limit
        ("cg_current", "cgroup charge", "#7d3c98", "solid"),
        ("cg_limit", "cgroup limit", "#7d3c98", "dash"))
        if any(v is not None for v in cols.get(key) or [])]
    peak = (series.get("max") or {}).get("allocated")
    vmax = max([_max(cols[k]) for k, *_ in shown] + [_max(peak or [])], default=0)
    unit, factor = byte_unit(vmax)
    traces = []
    for key, name, color, dash in shown:
        traces.append({"type": "scatter", "mode": "lines", "name": name, "x": x,
                       "y": _broken(cols[key], breaks),
                       "hovertemplate": "%{y:,.1f} " + unit,
                       "line": {"color": color, "dash": dash, "width": 1.6}})
    if peak:
        traces.append({"type": "scatter", "mode": "lines", "name": "allocated (bucket max)",
                       "x": x, "y": _broken(peak, breaks),
                       "hovertemplate": "%{y:,.1f} " + unit,
                       "line": {"color": "#c0392b", "width": 0.8, "dash": "dot"}})
    return {"data": traces,
            "layout": _in_unit(_time_layout("RSS, allocated and used over time",
                                            yaxis=_scaled_axis(vmax / factor, unit),
                                            shapes=_gap_shapes(series)), factor)}


def carrier_history(series: dict[str, Any], allocator: str | None,
                    at: float | None) -> Figure | None:
    """Carrier bytes and unused bytes of one allocator type (or the node) over time, for the
    what-if page, with a dashed line at the snapshot's time `at`; None when the store holds no
    point of it. Lines break where memory_over_time's do; one point is a marker, never a line."""
    cols, t = series["columns"], series["t"]
    pre = f"{allocator}." if allocator else ""
    alloc, used = cols.get(pre + "allocated"), cols.get(pre + "used")
    if not alloc or not used or all(v is None for v in alloc):
        return None
    unused = [None if a is None or u is None else a - u for a, u in zip(alloc, used, strict=True)]
    breaks = break_points(series)
    x = _broken_x(t, breaks)
    traces = []
    for name, ys, color in (("carrier size", alloc, "#c0392b"), ("unused", unused, "#e8a0a0")):
        y = _broken(ys, breaks)
        n = sum(v is not None for v in y)
        mode = "markers" if n < 2 else ("lines+markers" if n <= 60 else "lines")
        traces.append({"type": "scatter", "mode": mode, "name": name, "x": x, "y": y,
                       "line": {"color": color, "width": 1.8},
                       "marker": {"color": color, "size": 6}, "connectgaps": False,
                       "text": [human(v) if v is not None else "" for v in y],
                       "hovertemplate": name + ": %{text}<extra></extra>"})
    shapes = _gap_shapes(series)
    if at is not None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "y0": 0, "y1": 1,
                       "x0": round(at * 1000), "x1": round(at * 1000),
                       "line": {"color": "#1f2d3d", "width": 1, "dash": "dash"}})
    who = _t(allocator) if allocator else "all allocators"
    return {"data": traces,
            "layout": _time_layout(f"{who}: measured carrier size and unused bytes", height=300,
                                   yaxis=_bytes_axis(_max(alloc), room=0.08), shapes=shapes)}


def _types_by_size(cols: dict[str, list[int | None]]) -> list[str]:
    names = [n for n in types_of(cols) if f"{n}.allocated" in cols]  # the store's columns
    return sorted(names, key=lambda n: max(filter(None, cols[f"{n}.allocated"]), default=0),
                  reverse=True)


def allocators_over_time(series: dict[str, Any], breaks: list[int]) -> Figure:
    """Stacked: per allocator type, used (solid) and unused (light) bytes. Each stretch between
    breaks is its own stack group, so no area is drawn across a gap."""
    t = series["t"]
    x = _ms_dates(t)
    cols = series["columns"]
    names = _types_by_size(cols)
    shown, rest = names[:TOP_TYPES], names[TOP_TYPES:]

    def col(name: str, field: str) -> list[int | None]:
        return cols.get(f"{name}.{field}") or [None] * len(x)

    layers: list[tuple[str, str, list[int | None], str, float]] = []
    for i, name in enumerate(shown):
        alloc, used = col(name, "allocated"), col(name, "used")
        color = PALETTE[i % len(PALETTE)]
        label = _t(name)  # its legend group too: a figure holds no outside string raw
        layers.append((f"{label} used", label, used, color, 0.9))
        layers.append((f"{label} unused", label, _minus(alloc, used), color, 0.3))
    if rest:
        alloc = _sum_cols([col(n, "allocated") for n in rest])
        used = _sum_cols([col(n, "used") for n in rest])
        layers.append((f"{len(rest)} others used", "other", used, "#888888", 0.9))
        layers.append((f"{len(rest)} others unused", "other", _minus(alloc, used), "#888888",
                       0.3))
    # the top of the stack: every type's allocated bytes (used + unused of each layer pair)
    allocs = [c for n in names if (c := cols.get(f"{n}.allocated"))]
    vmax = max((sum(filter(None, vs)) for vs in zip(*allocs, strict=True)), default=0)
    unit, factor = byte_unit(vmax)
    traces = []
    for k, (a, b) in enumerate(_segments(len(x), breaks)):
        for label, group, ys, color, op in layers:
            traces.append({"type": "scatter", "mode": "lines", "stackgroup": f"s{k}",
                           "name": label, "legendgroup": group, "showlegend": k == 0,
                           "x": x[a:b], "y": ys[a:b], "line": {"width": 0},
                           "fillcolor": _rgba(color, op),
                           "hovertemplate": label + ": %{y:,.1f} " + unit + "<extra></extra>"})
    return {"data": traces,
            "layout": _in_unit(_time_layout(
                "Allocated per allocator, stacked: used (dark) and unused (light)", height=400,
                yaxis=_scaled_axis(vmax / factor, unit), shapes=_gap_shapes(series)), factor)}


def sbcs_share_over_time(series: dict[str, Any], breaks: list[int]) -> Figure:
    """Share of each allocator's carrier bytes that sit in single-block carriers."""
    x = _broken_x(series["t"], breaks)
    cols = series["columns"]
    traces = []
    for i, name in enumerate(_types_by_size(cols)[:TOP_TYPES]):
        alloc, sb = cols.get(f"{name}.allocated") or [], cols.get(f"{name}.sbcs") or []
        ys = [None if a in (None, 0) or s is None else round(s / a, 4)
              for a, s in zip(alloc, sb, strict=True)]
        if any(y for y in ys):
            traces.append({"type": "scatter", "mode": "lines", "name": _t(name), "x": x,
                           "y": _broken(ys, breaks),
                           "line": {"color": PALETTE[i % len(PALETTE)], "width": 1.4}})
    return {"data": traces,
            "layout": _time_layout("Single-block carrier share of allocated (sbcs / all)",
                                   yaxis={"tickformat": ".0%", "range": [0, 1],
                                          "gridcolor": "#eee"},
                                   shapes=_gap_shapes(series))}


def mseg_over_time(series: dict[str, Any], breaks: list[int]) -> Figure:
    """mseg_alloc's segment cache: its hit rate since the node started (recon_alloc's
    cache_hit_rates: hits / calls, so a node that has not called mseg_alloc lately still has
    one) and mseg_alloc calls per second between consecutive points."""
    t = series["t"]
    cols = series["columns"]
    hits = cols.get("mseg_hits") or [None] * len(t)
    calls = cols.get("mseg_calls") or [None] * len(t)
    rate = [None if h is None or not c else round(h / c, 4) for h, c in zip(hits, calls,
                                                                            strict=True)]
    cut = set(breaks)
    per_s: list[float | None] = [None]
    for i in range(1, len(t)):
        c0, c1, dt = calls[i - 1], calls[i], t[i] - t[i - 1]
        ok = i not in cut and None not in (c0, c1) and dt > 0 and c1 >= c0  # type: ignore
        per_s.append(round((c1 - c0) / dt, 3) if ok else None)  # type: ignore
    x = _broken_x(t, breaks)
    return {
        "data": [
            {"type": "scatter", "mode": "lines", "name": "cache hit rate (since start)", "x": x,
             "y": _broken(rate, breaks), "line": {"color": "#4c9a5b", "width": 1.6}},
            {"type": "scatter", "mode": "lines", "x": x,
             "name": "mseg_alloc calls/s" + ("" if any(per_s) else " (none in this range)"),
             "y": _broken(per_s, breaks), "yaxis": "y2",
             "line": {"color": "#888", "width": 1, "dash": "dot"}},
        ],
        "layout": _time_layout("mseg_alloc segment cache: hit rate and calls per second",
                               yaxis={"tickformat": ".0%", "range": [0, 1.02],
                                      "gridcolor": "#eee", "title": {"text": "hit rate"}},
                               yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero",
                                       "showgrid": False, "tickformat": ",.3~g",
                                       "tickmode": "auto", "nticks": 6,
                                       "automargin": True, "title": {"text": "calls/s"}},
                               legend={"orientation": "h", "y": -0.2},
                               shapes=_gap_shapes(series)),
    }


def instance_heatmap_over_time(samples: list[tuple[float, dict[tuple[str, int], float]]],
                               series: dict[str, Any] | None = None) -> Figure:
    """Usage per instance (rows) over the sampled snapshots (columns). A cell spans from its
    snapshot to the next one, [sample, next sample): the usage measured at a time holds from
    then on, so a change never shows before it happened. Colour weighs the type's unused bytes
    at that time (usage_shade): an instance cannot waste more than its whole type."""
    # (allocator, instance) pairs: by name, instance 0 on top
    keys = sorted({k for _, u in samples for k in u}, key=lambda k: (k[0], -k[1]), reverse=True)
    ts = [t for t, _ in samples]
    edges = []
    if ts:  # the last cell holds to the series' end (or one interval past a lone snapshot)
        end = series["t"][-1] if series and series["t"] else ts[-1]
        step = ts[-1] - ts[-2] if len(ts) > 1 else _typical_interval(
            series["t"] if series else []) or 60.0
        edges = [*ts, end if end > ts[-1] else ts[-1] + step]
    unused_at = _type_unused_at(series, ts) if series else [{} for _ in ts]
    z, text = [], []
    clocks = [_clock(t) for t in ts]
    wasted = [{n: f", type unused {human(w)}" for n, w in at.items()} for at in unused_at]
    for name, ix in keys:
        row, trow = [], []
        for j, (_, u) in enumerate(samples):
            v = u.get((name, ix))
            if v is None:
                row.append(None)
                trow.append("")
                continue
            row.append(round(100 * usage_shade(v, unused_at[j].get(name)), 1))
            trow.append(f"{clocks[j]}: usage {pct(v)}" + wasted[j].get(name, ""))
        z.append(row)
        text.append(trow)
    return {
        "data": [{"type": "heatmap", "x": _ms_dates(edges),
                  "y": [_t(instance_key(*k)) for k in keys],
                  "z": z, "text": text, "zmin": 0, "zmax": 100, "colorscale": USAGE_SCALE,
                  "colorbar": COLORBAR, "hovertemplate": "%{y} from %{text}<extra></extra>"}],
        "layout": _time_layout(f"Usage per instance over {len(samples)} stored snapshot"
                               f"{'s' if len(samples) != 1 else ''} (each cell: from its "
                               "snapshot to the next)",
                               height=120 + 14 * len(keys), hovermode="closest",
                               shapes=[{**g, "layer": "above", "opacity": 0.5}
                                       for g in (_gap_shapes(series) if series else [])]),
    }


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _type_unused_at(series: dict[str, Any], ts: list[float]) -> list[dict[str, int]]:
    """Per allocator type, allocated - used at the series point nearest each time."""
    st = series["t"]
    cols = series["columns"]
    names = _types_by_size(cols)
    out = []
    for t in ts:
        if not st:
            out.append({})
            continue
        i = min(bisect.bisect_left(st, t), len(st) - 1)
        if i > 0 and abs(st[i - 1] - t) < abs(st[i] - t):
            i -= 1
        row = {}
        for n in names:
            a, u = cols[f"{n}.allocated"][i], (cols.get(f"{n}.used") or [None] * len(st))[i]
            if a is not None and u is not None:
                row[n] = a - u
        out.append(row)
    return out


def call_rates(samples: list[tuple[float, dict[str, int]]],
               series: dict[str, Any] | None = None) -> Figure:
    """alloc + free + realloc calls per second per allocator type, between sampled snapshots;
    none across a gap of the series (a mean over downtime, or counters reset by a restart)."""
    names = sorted({k for _, c in samples for k in c})
    # The node page's own breaks (break_points: a recorded gap, a pid change, a long silence),
    # as spans of time: a rate between two snapshots across one is not drawn.
    t = (series or {}).get("t") or []
    spans = [(t[i - 1], t[i]) for i in break_points(series)] if series and t else []

    def across_gap(t0: float, t1: float) -> bool:
        return any(a < t1 and b > t0 for a, b in spans)

    traces = []
    for i, name in enumerate(names):
        x, y = [], []
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if name in c0 and name in c1 and t1 > t0:
                d = c1[name] - c0[name]
                x.append(round(t1 * 1000))
                y.append(round(d / (t1 - t0), 2) if d >= 0 and not across_gap(t0, t1)
                         else None)  # < 0: a restart
        if any(y):
            traces.append({"type": "scatter", "mode": "lines+markers", "name": _t(name),
                           "x": x, "y": y, "marker": {"size": 4},
                           "line": {"color": PALETTE[i % len(PALETTE)], "width": 1.4}})
    return {"data": traces,
            "layout": _time_layout("Allocator calls per second (alloc + free + realloc)",
                                   yaxis={"rangemode": "tozero", "gridcolor": "#eee"},
                                   shapes=_gap_shapes(series) if series else [])}


#: What a time chart with fewer than two points says instead of a line.
ONE_SAMPLE = "one point so far: a line needs two (the next sample draws it)"


def lines_or_note(fig: Figure, empty: str = "nothing to draw in this range",
                  one: str = ONE_SAMPLE) -> Figure:
    """A line needs two points: a line trace with fewer than two values is drawn as markers,
    and a chart with no trace of two values is not drawn at all (its `note` says why)."""
    if not fig["data"]:
        return {"data": [], "layout": fig["layout"], "note": empty}
    lines = [tr for tr in fig["data"] if tr.get("type") == "scatter"
             and "lines" in tr.get("mode", "")]
    if not lines:
        return fig
    counts = [_points(tr["y"]) for tr in lines]
    if all(c < 2 for c in counts):
        n = max(counts, default=0)
        return {"data": [], "layout": fig["layout"], "note": one if n == 1 else empty}
    for tr, c in zip(lines, counts, strict=True):
        if c < 2:
            tr["mode"] = "markers"
    return fig


def _points(ys: list[Any]) -> int:
    """How many values a trace has, counted up to two (all a line needs)."""
    n = 0
    for v in ys:
        if v is not None:
            n += 1
            if n == 2:
                break
    return n


def node_figures(series: dict[str, Any],
                 instance_samples: list[tuple[float, dict[tuple[str, int], float]]],
                 call_samples: list[tuple[float, dict[str, int]]]) -> dict[str, Figure]:
    breaks = break_points(series)
    figs = {
        "memory": memory_over_time(series, breaks),
        "stacked": allocators_over_time(series, breaks),
        "sbcs": sbcs_share_over_time(series, breaks),
        "mseg": mseg_over_time(series, breaks),
    }
    if instance_samples:
        figs["inst_heatmap"] = instance_heatmap_over_time(instance_samples, series)
    if call_samples:
        figs["calls"] = call_rates(call_samples, series)
    # calls per second need two snapshots (one rate between them)
    one = ("one snapshot so far: calls per second need two (the next kept snapshot draws "
           "the first point)" if len(call_samples) == 1 else "no rate yet: calls per second "
           "need two stored snapshots with no gap or restart between them")
    t = series["t"]
    if len(t) > 1:  # one time range for all: the charts of a node page line up
        end = round(t[-1] * 1000)
        if "inst_heatmap" in figs:  # its latest cell holds past the last point: keep it seen
            end = max(end, figs["inst_heatmap"]["data"][0]["x"][-1])
        for f in figs.values():
            f["layout"]["xaxis"]["range"] = [round(t[0] * 1000), end]
    out = {k: lines_or_note(f) for k, f in figs.items() if k != "calls"}
    if "calls" in figs:
        out["calls"] = lines_or_note(figs["calls"], one, "one rate so far, between two stored "
                                     "snapshots: a line needs two (the next kept snapshot "
                                     "draws it)")
    return out


def nodes_unused(rows: list[dict[str, Any]]) -> Figure:
    """The nodes page: used and unused bytes of each node's latest sample."""
    rows = [r for r in rows if r.get("allocated") is not None][::-1]
    ys = [_t(r["node"]) for r in rows]
    used = [r["used"] for r in rows]
    unused = [r["allocated"] - r["used"] for r in rows]
    return {
        "data": [
            {"type": "bar", "orientation": "h", "name": "used", "y": ys, "x": used,
             "marker": {"color": USED}, "text": [human(v) for v in used], "textposition": "none",
             "hovertemplate": "%{y}: used %{text}<extra></extra>"},
            {"type": "bar", "orientation": "h", "name": "unused", "y": ys, "x": unused,
             "marker": {"color": UNUSED}, "text": [human(v) for v in unused],
             "textposition": "outside", "cliponaxis": False,
             "hovertemplate": "%{y}: unused %{text}<extra></extra>"},
        ],
        "layout": _layout("Latest sample of each node: used vs unused", barmode="stack",
                          height=90 + 28 * max(len(rows), 1),
                          xaxis=_bytes_axis(_max(r["allocated"] for r in rows)),
                          margin={"l": 220, "r": 40, "t": 50, "b": 45}),
    }


# ---- two or more snapshots -----------------------------------------------------------------


def compare_totals(analyses: list[Analysis], labels: list[str]) -> Figure:
    """RSS, allocated, used and unused of each snapshot side by side."""
    keys: tuple[tuple[str, Callable[[Analysis], int | None]], ...] = (
        ("RSS", lambda a: a.os.rss),
        ("allocated", lambda a: a.totals_all.allocated),
        ("erlang:memory(total)", lambda a: a.os.erlang_memory_total),
        ("used", lambda a: a.totals_all.used),
        ("unused", lambda a: a.totals_all.unused))
    traces = []
    for i, (a, label) in enumerate(zip(analyses, labels, strict=True)):
        xs, ys = [], []
        for name, get in keys:
            v = get(a)
            if v is not None:
                xs.append(name)
                ys.append(v)
        traces.append({"type": "bar", "name": _t(label), "x": xs, "y": ys,
                       "marker": {"color": PALETTE[i % len(PALETTE)]},
                       "text": [human(v) for v in ys], "textposition": "outside",
                       "cliponaxis": False,
                       "hovertemplate": _t(label) + " %{x}: %{text}<extra></extra>"})
    return {"data": traces,
            "layout": _layout("Totals side by side", barmode="group",
                              yaxis=_bytes_axis(_max(v for t in traces for v in t["y"])),
                              margin={"l": 60, "r": 30, "t": 50, "b": 45}, height=380,
                              legend={"orientation": "h", "y": -0.15})}


def compare_allocators(analyses: list[Analysis], labels: list[str]) -> Figure:
    """Unused bytes per allocator type in each snapshot (the thing a flag change should move)."""
    order: dict[str, int] = {}
    for a in analyses:
        for r in a.allocator_types:
            order[r.allocator] = max(order.get(r.allocator, 0), r.allocated)
    names = [n for n, v in sorted(order.items(), key=lambda kv: -kv[1]) if v > 0]
    traces = []
    for i, (a, label) in enumerate(zip(analyses, labels, strict=True)):
        by = {r.allocator: r for r in a.allocator_types}
        unused = [by[n].unused if n in by else 0 for n in names]
        usage = [pct(by[n].usage) if n in by else "-" for n in names]
        traces.append({"type": "bar", "name": _t(label), "x": [_t(n) for n in names],
                       "y": unused, "marker": {"color": PALETTE[i % len(PALETTE)]},
                       "customdata": [[human(u), p] for u, p in zip(unused, usage, strict=True)],
                       "hovertemplate": _t(label) + " %{x}: unused %{customdata[0]}, usage "
                                                    "%{customdata[1]}<extra></extra>"})
    return {"data": traces,
            "layout": _layout("Unused bytes per allocator", barmode="group",
                              yaxis=_bytes_axis(_max(v for t in traces for v in t["y"])),
                              height=380,
                              margin={"l": 60, "r": 30, "t": 50, "b": 80})}


def compare_figures(analyses: list[Analysis], labels: list[str]) -> dict[str, Figure]:
    return {"cmp_totals": compare_totals(analyses, labels),
            "cmp_allocators": compare_allocators(analyses, labels)}


# ---- helpers -------------------------------------------------------------------------------


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _minus(a: list[int | None], b: list[int | None]) -> list[int | None]:
    return [None if x is None or y is None else x - y for x, y in zip(a, b, strict=True)]


def _sum_cols(cols: list[list[int | None]]) -> list[int | None]:
    return [None if all(v is None for v in vs) else sum(v or 0 for v in vs)
            for vs in zip(*cols, strict=True)]
