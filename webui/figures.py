"""Every chart of the web UI and of the HTML report, as plotly figure dicts (issue 6, must-hold 4).

Figures are plain `{"data", "layout"}` dicts, the JSON plotly.js takes: building them is cheap
(no graph_objects validation on a 10k-point series) and they serialize as they are. Every string
that came from a snapshot goes through `_t()`: plotly.js reads a subset of HTML in labels and
hover text, so `<`, `>` and `&` must arrive as entities.

Snapshot figures read the analysis dict (docs/analysis-schema.md); node figures read the store's
`series()` columns (timeseries/series.py keys) and a few sampled snapshots; compare figures read a
list of analyses with a label each, so a replay result (a Snapshot with source "replay") compares
like any other snapshot.
"""

from __future__ import annotations

import html
import itertools
import math
from typing import Any

from beamalloc.analyzer.rules import R2_MBCS_USAGE_PROBLEM, R2_USAGE_SUSPECT
from beamalloc.flags import UINT_MAX
from beamalloc.units import human

Figure = dict[str, Any]

USED = "#3b6fb6"
UNUSED = "#e8a0a0"
POOL = "#c9a0dc"
SBCS = "#f0b860"
PALETTE = ("#3b6fb6", "#e07b39", "#4c9a5b", "#b8455b", "#7a5cb0", "#8c6d46", "#d16aa8",
           "#6f7f8f", "#a8a83a", "#3aa8a8")
#: Usage 0-100 %: red below R2's problem threshold, amber to its suspect one, green above (the
#: tables' colours, analyzer/rules.py usage_level).
USAGE_SCALE = [[0, "#b2182b"], [R2_MBCS_USAGE_PROBLEM, "#f4a582"], [R2_USAGE_SUSPECT, "#fee08b"],
               [0.9, "#a6d96a"], [1, "#1a9850"]]
#: Allocator types drawn separately in the stacked series; the rest are summed as "other".
TOP_TYPES = 8


def _t(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _layout(title: str, height: int = 360, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "height": height,
        "margin": {"l": 130, "r": 30, "t": 50, "b": 45},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "legend": {"orientation": "h", "y": -0.18, "itemsizing": "constant"},
        "hovermode": "closest",
    }
    base.update(kw)
    return base


def _bytes_axis(**kw: Any) -> dict[str, Any]:
    # Binary prefixes in tick labels would need tickvals; plotly's SI "B" ticks (k, M, G) are
    # close enough on an axis, and every hover shows the exact KiB/MiB value.
    return {"ticksuffix": "B", "tickformat": "~s", "gridcolor": "#eee", "rangemode": "tozero",
            **kw}


# ---- one snapshot --------------------------------------------------------------------------


def memory_layers(a: dict[str, Any]) -> Figure:
    """RSS vs allocated vs erlang:memory(total) vs used: where the node's memory goes."""
    os_, t = a["os"], a["totals_all"]
    rows = [
        ("RSS (the OS)", os_["rss"], "#555"),
        ("allocated (carriers)", t["allocated"], UNUSED),
        ("erlang:memory(total)", os_["erlang_memory_total"], "#8fb3e0"),
        ("used (blocks)", t["used"], USED),
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
                          height=70 + 45 * len(rows), xaxis=_bytes_axis(), showlegend=False,
                          margin={"l": 160, "r": 30, "t": 40, "b": 30}),
    }


def allocator_usage(a: dict[str, Any]) -> Figure:
    """Used and unused bytes per allocator type, worst (most unused) on top."""
    rows = [r for r in a["allocator_types"] if r["allocated"] > 0][::-1]
    names = [_t(r["allocator"]) for r in rows]
    used = [r["used"] for r in rows]
    unused = [r["unused"] for r in rows]
    usage = [f"{100 * r['usage']:.1f}%" for r in rows]
    return {
        "data": [
            {"type": "bar", "orientation": "h", "name": "used", "y": names, "x": used,
             "marker": {"color": USED}, "customdata": [[human(u), p] for u, p in
                                                          zip(used, usage, strict=True)],
             "hovertemplate": "%{y}: used %{customdata[0]} (usage %{customdata[1]})"
                              "<extra></extra>"},
            {"type": "bar", "orientation": "h", "name": "unused (reserved, no data)", "y": names,
             "x": unused, "marker": {"color": UNUSED},
             "text": [human(u) for u in unused], "textposition": "outside",
             "hovertemplate": "%{y}: unused %{text}<extra></extra>"},
        ],
        "layout": _layout("Allocated per allocator: used vs unused", barmode="stack",
                          height=90 + 26 * len(rows), xaxis=_bytes_axis()),
    }


def _instance_usage(r: dict[str, Any]) -> float:
    alloc = r["mbcs_carriers_size"] + r["sbcs_carriers_size"]
    return (r["mbcs_block_size"] + r["sbcs_block_size"]) / alloc if alloc else 1.0


def instance_heatmap(a: dict[str, Any]) -> Figure:
    """Usage of every instance: allocator type × instance number; one bad scheduler stands out."""
    rows = [r for r in a["allocators"] if r["mbcs_carriers_size"] + r["sbcs_carriers_size"]]
    types = [t["allocator"] for t in a["allocator_types"]
             if any(r["allocator"] == t["allocator"] for r in rows)][::-1]
    insts = sorted({r["instance"] for r in rows})
    z: list[list[float | None]] = [[None] * len(insts) for _ in types]
    text: list[list[str]] = [[""] * len(insts) for _ in types]
    ti = {t: i for i, t in enumerate(types)}
    ii = {n: i for i, n in enumerate(insts)}
    for r in rows:
        y, x = ti[r["allocator"]], ii[r["instance"]]
        z[y][x] = round(100 * _instance_usage(r), 1)
        text[y][x] = (f"{_t(r['allocator'])}[{r['instance']}]: usage {z[y][x]}%, unused "
                      f"{human(r['unused'])} of "
                      f"{human(r['mbcs_carriers_size'] + r['sbcs_carriers_size'])}")
    return {
        "data": [{
            "type": "heatmap", "x": [str(n) for n in insts], "y": [_t(t) for t in types],
            "z": z, "text": text, "hovertemplate": "%{text}<extra></extra>",
            "zmin": 0, "zmax": 100, "colorscale": USAGE_SCALE,
            "colorbar": {"title": {"text": "usage %"}, "thickness": 12},
            "xgap": 1, "ygap": 1,
        }],
        "layout": _layout("Usage per instance (instance 0 serves non-scheduler threads)",
                          height=110 + 24 * len(types),
                          xaxis={"title": {"text": "instance"}, "type": "category"}),
    }


def instance_bars(a: dict[str, Any], top: int = 20) -> Figure:
    """The instances holding the most unused bytes."""
    rows = [r for r in a["allocators"] if r["unused"] > 0][:top][::-1]
    names = [f"{_t(r['allocator'])}[{r['instance']}]" for r in rows]
    used = [r["mbcs_block_size"] + r["sbcs_block_size"] for r in rows]
    return {
        "data": [
            {"type": "bar", "orientation": "h", "name": "used", "y": names, "x": used,
             "marker": {"color": USED}, "text": [human(u) for u in used],
             "hovertemplate": "%{y}: used %{text}<extra></extra>", "textposition": "none"},
            {"type": "bar", "orientation": "h", "name": "unused", "y": names,
             "x": [r["unused"] for r in rows], "marker": {"color": UNUSED},
             "text": [human(r["unused"]) for r in rows], "textposition": "outside",
             "hovertemplate": "%{y}: unused %{text}<extra></extra>"},
        ],
        "layout": _layout(f"The {len(rows)} instances with the most unused bytes",
                          barmode="stack", height=90 + 24 * max(len(rows), 1),
                          xaxis=_bytes_axis()),
    }


def block_sizes(a: dict[str, Any]) -> Figure:
    """Average block sizes against sbct and lmbcs (log scale), per allocator type.

    A block at or above sbct gets a carrier of its own; mbcs blocks near lmbcs fit badly into
    multiblock carriers (docs/erts/alloc_util.md §3).
    """
    rows = [r for r in a["allocator_types"] if r["mbcs_blocks"] or r["sbcs_blocks"]][::-1]
    ys = [_t(r["allocator"]) for r in rows]

    def series(name: str, vals: list[Any], symbol: str, color: str, size: int = 11) -> dict:
        pts = [(v, y) for v, y in zip(vals, ys, strict=True)
               if isinstance(v, int | float) and 0 < v < UINT_MAX]  # ~0: infinite, no mark
        return {"type": "scatter", "mode": "markers", "name": name,
                "x": [p[0] for p in pts], "y": [p[1] for p in pts],
                "text": [human(p[0]) for p in pts],
                "hovertemplate": "%{y} " + name + ": %{text}<extra></extra>",
                "marker": {"symbol": symbol, "size": size, "color": color,
                           "line": {"width": 2, "color": color}}}

    return {
        "data": [
            series("avg mbcs block", [r["mbcs_average_block_size"] for r in rows], "circle",
                   USED),
            series("avg sbcs block", [r["sbcs_average_block_size"] for r in rows], "diamond",
                   SBCS),
            series("sbct", [r["options"].get("sbct") for r in rows], "line-ns-open", "#b00",
                   22),
            series("lmbcs", [r["options"].get("lmbcs") for r in rows], "line-ns-open", "#333",
                   22),
        ],
        "layout": _layout("Average block size vs sbct (red) and lmbcs (black)",
                          height=110 + 28 * len(rows),
                          xaxis={"type": "log", "ticksuffix": "B", "tickformat": "~s",
                                 "gridcolor": "#eee"},
                          yaxis={"type": "category", "categoryarray": ys,
                                 "categoryorder": "array"}),
    }


def carrier_kinds(a: dict[str, Any]) -> Figure:
    """Per allocator type: multiblock carriers, pooled carriers and single-block carriers."""
    rows = [r for r in a["allocator_types"] if r["allocated"] > 0][::-1]
    ys = [_t(r["allocator"]) for r in rows]
    own = [r["mbcs_carriers_size"] - r["pool_carriers_size"] for r in rows]
    pool = [r["pool_carriers_size"] for r in rows]
    sbcs = [r["sbcs_carriers_size"] for r in rows]

    def bar(name: str, vals: list[int], color: str) -> dict:
        return {"type": "bar", "orientation": "h", "name": name, "y": ys, "x": vals,
                "marker": {"color": color}, "text": [human(v) for v in vals],
                "textposition": "none",
                "hovertemplate": "%{y}: " + name + " %{text}<extra></extra>"}

    return {
        "data": [bar("multiblock carriers", own, USED), bar("in the carrier pool", pool, POOL),
                 bar("single-block carriers", sbcs, SBCS)],
        "layout": _layout("Carriers: multiblock, pooled (abandoned) and single-block",
                          barmode="stack", height=90 + 26 * len(rows), xaxis=_bytes_axis()),
    }


#: Golden-ratio steps: a deterministic, even spread of carriers of one size along the x axis.
_PHI = 0.6180339887498949


#: Up to this many carriers the map draws every carrier as one SVG mark (no WebGL needed: a
#: report opens in any browser, headless or remote); above it, a density of counts.
MAP_MARKS = 6000


def carrier_map(m: dict[str, Any]) -> Figure:
    """One allocator's carriers (analysis `carriers.allocators[i]`): size against fill, owned
    and pooled apart, with the fill's distribution beside (counts per 5 % of fill).

    Up to MAP_MARKS carriers, every carrier is one mark. Carrier sizes repeat (a few size
    classes), so marks of one size are spread over ±12 % of it (log axis): a column of marks is
    one size; marks shrink and fade as their number grows, so thousands read as a density.
    Above MAP_MARKS, a heatmap counts carriers per size (powers of two) and 5 % of fill.
    """
    pts = m["map"]
    n = len(pts["size"])
    size, opacity = (9, 0.85) if n <= 60 else (6, 0.6) if n <= 1000 else (4, 0.4)
    traces: list[dict[str, Any]] = []
    if n > MAP_MARKS:
        traces.append(_carrier_density(pts))
    for pooled, name, color in ((False, "owned by an instance", USED),
                                (True, "in the carrier pool", POOL)):
        idx = [i for i in range(n) if pts["in_pool"][i] == pooled]
        if not idx:
            continue
        ys = [100 * pts["fill"][i] for i in idx]
        if n <= MAP_MARKS:
            xs = [pts["size"][i] * (1 + 0.24 * (((k * _PHI) % 1.0) - 0.5))
                  for k, i in enumerate(idx)]
            traces.append({
                "type": "scatter", "mode": "markers", "name": f"{name} ({len(idx)})",
                "x": xs, "y": ys, "legendgroup": name,
                "marker": {"color": color, "size": size, "opacity": opacity,
                           "line": {"width": 0}},
                "customdata": [[human(pts["size"][i]), pts["blocks"][i],
                                "-" if pts["instance"][i] is None else pts["instance"][i]]
                               for i in idx],
                "hovertemplate": "carrier %{customdata[0]}, %{y:.1f}% full, %{customdata[1]} "
                                 "blocks, instance %{customdata[2]}<extra>" + _t(name)
                                 + "</extra>",
            })
        traces.append({
            "type": "histogram", "y": ys, "xaxis": "x2", "yaxis": "y",
            "name": f"{name} ({len(idx)})", "legendgroup": name, "showlegend": n > MAP_MARKS,
            "marker": {"color": color}, "ybins": {"start": 0, "end": 100.0001, "size": 5},
            "opacity": 0.8,
            "hovertemplate": "%{x} carriers %{y}% full<extra>" + _t(name) + "</extra>",
        })
    cl = m["classification"]
    title = f"{_t(m['allocator'])}: {n} carriers, {_t(cl['kind'])}"
    # Ticks at powers of two (carrier sizes are multiples of 64 KiB or of pages): plotly's
    # log ticks would crowd 50k, 60k, ... together.
    lo = max(1, min(pts["size"], default=1) * 0.8)
    hi = max(pts["size"], default=1) * 1.25
    ticks = [1 << k for k in range(12, 44) if lo / 2 <= 1 << k <= hi * 2]
    if len(ticks) > 8:
        ticks = ticks[::2]
    shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 0.78, "yref": "y", "y0": 10,
               "y1": 10, "line": {"color": "#b2182b", "width": 1, "dash": "dot"}}]
    return {
        "data": traces,
        "layout": _layout(title, height=380, barmode="stack", shapes=shapes,
                          margin={"l": 60, "r": 20, "t": 50, "b": 45},
                          xaxis={"type": "log", "domain": [0, 0.78], "tickvals": ticks,
                                 "ticktext": [human(t) for t in ticks], "gridcolor": "#eee",
                                 "range": [math.log10(lo), math.log10(hi)],
                                 "title": {"text": "carrier size"}},
                          xaxis2={"domain": [0.82, 1], "gridcolor": "#eee",
                                  "title": {"text": "carriers"}},
                          yaxis={"range": [-3, 103], "ticksuffix": "%", "gridcolor": "#eee",
                                 "title": {"text": "fill (allocated / size)"}}),
    }


def _carrier_density(pts: dict[str, list[Any]]) -> dict[str, Any]:
    """Counts of carriers per size (powers of two, drawn at the bin's geometric middle) and
    5 % of fill: the map of more carriers than marks can show."""
    bins: dict[tuple[int, int], int] = {}
    for sz, f in zip(pts["size"], pts["fill"], strict=True):
        key = (max(1, sz).bit_length() - 1, min(19, int(f * 20)))
        bins[key] = bins.get(key, 0) + 1
    ks = sorted({k for k, _ in bins})
    xs = [float(1 << k) * 1.41 for k in ks]
    ys = [2.5 + 5 * j for j in range(20)]
    z = [[bins.get((k, j)) for k in ks] for j in range(20)]
    return {"type": "heatmap", "x": xs, "y": ys, "z": z, "name": "carriers",
            "colorscale": [[0, "#f0e6f6"], [1, "#3b1f5c"]], "showscale": False, "xgap": 2,
            "hovertemplate": "%{z} carriers of about %{x:.3s}B, %{y:.1f}% full<extra></extra>"}


def shown_carrier_maps(a: dict[str, Any]) -> list[dict[str, Any]]:
    """The allocators whose carrier map a page shows: those worth a class, else the one with
    the most unused bytes; none without carrier data."""
    ms = (a.get("carriers") or {}).get("allocators") or []
    return [m for m in ms if m["classification"]["kind"] != "compact"] or ms[:1]


def carrier_maps(a: dict[str, Any]) -> dict[str, Figure]:
    """`cmap-<i>`: the map of shown_carrier_maps(a)[i]."""
    return {f"cmap-{i}": carrier_map(m) for i, m in enumerate(shown_carrier_maps(a))}


def snapshot_figures(a: dict[str, Any]) -> dict[str, Figure]:
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


def _ms_dates(ts: list[float]) -> list[float]:
    """Unix seconds → milliseconds: plotly reads numbers on a date axis as ms since the epoch."""
    return [round(t * 1000) for t in ts]


def _time_layout(title: str, height: int = 330, **kw: Any) -> dict[str, Any]:
    kw.setdefault("margin", {"l": 70, "r": 30, "t": 50, "b": 40})
    return _layout(title, height=height, hovermode="x unified",
                   xaxis={"type": "date", "gridcolor": "#eee"}, **kw)


def _gap_shapes(series: dict[str, Any]) -> list[dict[str, Any]]:
    shapes = []
    end_of_data = series["t"][-1] if series["t"] else None
    for g in series.get("gaps") or []:
        end = g["end"] if g["end"] is not None else end_of_data
        if end is None:
            continue
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "y0": 0, "y1": 1,
                       "x0": round(g["start"] * 1000), "x1": round(end * 1000),
                       "fillcolor": "#999", "opacity": 0.18, "line": {"width": 0}})
    return shapes


def memory_over_time(series: dict[str, Any]) -> Figure:
    x = _ms_dates(series["t"])
    cols = series["columns"]
    traces = []
    for key, name, color, dash in (("rss", "RSS", "#555", "solid"),
                                   ("allocated", "allocated", "#c0392b", "solid"),
                                   ("erlang_total", "erlang:memory(total)", "#8fb3e0", "dot"),
                                   ("used", "used", USED, "solid")):
        if any(v is not None for v in cols.get(key) or []):
            traces.append({"type": "scatter", "mode": "lines", "name": name, "x": x,
                           "y": cols[key], "line": {"color": color, "dash": dash, "width": 1.6}})
    if series.get("max") and series["max"].get("allocated"):
        traces.append({"type": "scatter", "mode": "lines", "name": "allocated (bucket max)",
                       "x": x, "y": series["max"]["allocated"],
                       "line": {"color": "#c0392b", "width": 0.8, "dash": "dot"}})
    return {"data": traces,
            "layout": _time_layout("RSS, allocated and used over time", yaxis=_bytes_axis(),
                                   shapes=_gap_shapes(series))}


def _types_by_size(cols: dict[str, list[int | None]]) -> list[str]:
    names = sorted({k.partition(".")[0] for k in cols if k.endswith(".allocated")})
    return sorted(names, key=lambda n: max((v or 0) for v in cols[f"{n}.allocated"]) if
                  cols[f"{n}.allocated"] else 0, reverse=True)


def allocators_over_time(series: dict[str, Any]) -> Figure:
    """Stacked: per allocator type, used (solid) and unused (light) bytes."""
    x = _ms_dates(series["t"])
    cols = series["columns"]
    names = _types_by_size(cols)
    shown, rest = names[:TOP_TYPES], names[TOP_TYPES:]
    traces = []

    def col(name: str, field: str) -> list[int | None]:
        return cols.get(f"{name}.{field}") or [None] * len(x)

    def stacked(label: str, group: str, ys: list[int | None], color: str, op: float) -> None:
        traces.append({"type": "scatter", "mode": "lines", "stackgroup": "one", "name": label,
                       "legendgroup": group, "x": x, "y": ys, "line": {"width": 0},
                       "fillcolor": _rgba(color, op),
                       "hovertemplate": label + ": %{y:.3~s}B<extra></extra>"})

    for i, name in enumerate(shown):
        alloc, used = col(name, "allocated"), col(name, "used")
        color = PALETTE[i % len(PALETTE)]
        stacked(f"{_t(name)} used", name, used, color, 0.9)
        stacked(f"{_t(name)} unused", name, _minus(alloc, used), color, 0.3)
    if rest:
        alloc = _sum_cols([col(n, "allocated") for n in rest])
        used = _sum_cols([col(n, "used") for n in rest])
        stacked(f"{len(rest)} others used", "other", used, "#888888", 0.9)
        stacked(f"{len(rest)} others unused", "other", _minus(alloc, used), "#888888", 0.3)
    return {"data": traces,
            "layout": _time_layout("Allocated per allocator, stacked: used (dark) and unused "
                                   "(light)", height=400, yaxis=_bytes_axis(),
                                   shapes=_gap_shapes(series))}


def sbcs_share_over_time(series: dict[str, Any]) -> Figure:
    """Share of each allocator's carrier bytes that sit in single-block carriers."""
    x = _ms_dates(series["t"])
    cols = series["columns"]
    traces = []
    for i, name in enumerate(_types_by_size(cols)[:TOP_TYPES]):
        alloc, sb = cols.get(f"{name}.allocated") or [], cols.get(f"{name}.sbcs") or []
        ys = [None if a in (None, 0) or s is None else round(s / a, 4)
              for a, s in zip(alloc, sb, strict=True)]
        if any(y for y in ys):
            traces.append({"type": "scatter", "mode": "lines", "name": _t(name), "x": x,
                           "y": ys, "line": {"color": PALETTE[i % len(PALETTE)], "width": 1.4}})
    return {"data": traces,
            "layout": _time_layout("Single-block carrier share of allocated (sbcs / all)",
                                   yaxis={"tickformat": ".0%", "range": [0, 1],
                                          "gridcolor": "#eee"},
                                   shapes=_gap_shapes(series))}


def mseg_over_time(series: dict[str, Any]) -> Figure:
    """mseg_alloc cache hit rate and mseg_alloc calls per second, between consecutive points."""
    t = series["t"]
    cols = series["columns"]
    hits = cols.get("mseg_hits") or [None] * len(t)
    calls = cols.get("mseg_calls") or [None] * len(t)
    x, rate, per_s = [], [], []
    for i in range(1, len(t)):
        h0, h1, c0, c1 = hits[i - 1], hits[i], calls[i - 1], calls[i]
        dt = t[i] - t[i - 1]
        if None in (h0, h1, c0, c1) or dt <= 0 or c1 < c0:  # a restart resets the counters
            x.append(round(t[i] * 1000))
            rate.append(None)
            per_s.append(None)
            continue
        x.append(round(t[i] * 1000))
        dc = c1 - c0
        rate.append(round((h1 - h0) / dc, 4) if dc > 0 else None)
        per_s.append(round(dc / dt, 3))
    return {
        "data": [
            {"type": "scatter", "mode": "lines", "name": "cache hit rate", "x": x, "y": rate,
             "line": {"color": "#4c9a5b", "width": 1.4}},
            {"type": "scatter", "mode": "lines", "name": "mseg_alloc calls/s", "x": x,
             "y": per_s, "yaxis": "y2", "line": {"color": "#888", "width": 1, "dash": "dot"}},
        ],
        "layout": _time_layout("mseg_alloc segment cache: hit rate and calls per second",
                               yaxis={"tickformat": ".0%", "range": [0, 1.02],
                                      "gridcolor": "#eee"},
                               yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero",
                                       "title": {"text": "calls/s"}},
                               shapes=_gap_shapes(series)),
    }


def instance_heatmap_over_time(samples: list[tuple[float, dict[str, float]]]) -> Figure:
    """Usage per instance (rows) over the sampled snapshots (columns)."""
    keys = sorted({k for _, u in samples for k in u}, key=_instance_sort_key, reverse=True)
    z = [[u.get(k) for _, u in samples] for k in keys]
    return {
        "data": [{"type": "heatmap", "x": [round(t * 1000) for t, _ in samples],
                  "y": [_t(k) for k in keys],
                  "z": [[None if v is None else round(100 * v, 1) for v in row] for row in z],
                  "zmin": 0, "zmax": 100, "colorscale": USAGE_SCALE,
                  "colorbar": {"title": {"text": "usage %"}, "thickness": 12},
                  "hovertemplate": "%{y} at %{x}: usage %{z}%<extra></extra>"}],
        "layout": _time_layout(f"Usage per instance over {len(samples)} stored snapshots",
                               height=120 + 14 * len(keys),
                               margin={"l": 130, "r": 30, "t": 50, "b": 40}),
    }


def call_rates(samples: list[tuple[float, dict[str, int]]]) -> Figure:
    """alloc + free + realloc calls per second per allocator type, between sampled snapshots."""
    names = sorted({k for _, c in samples for k in c})
    traces = []
    for i, name in enumerate(names):
        x, y = [], []
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if name in c0 and name in c1 and t1 > t0:
                d = c1[name] - c0[name]
                x.append(round(t1 * 1000))
                y.append(round(d / (t1 - t0), 2) if d >= 0 else None)  # < 0: a restart
        if any(y):
            traces.append({"type": "scatter", "mode": "lines+markers", "name": _t(name),
                           "x": x, "y": y, "marker": {"size": 4},
                           "line": {"color": PALETTE[i % len(PALETTE)], "width": 1.4}})
    return {"data": traces,
            "layout": _time_layout("Allocator calls per second (alloc + free + realloc)",
                                   yaxis={"rangemode": "tozero", "gridcolor": "#eee"})}


def node_figures(series: dict[str, Any], instance_samples: list[tuple[float, dict[str, float]]],
                 call_samples: list[tuple[float, dict[str, int]]]) -> dict[str, Figure]:
    figs = {
        "memory": memory_over_time(series),
        "stacked": allocators_over_time(series),
        "sbcs": sbcs_share_over_time(series),
        "mseg": mseg_over_time(series),
    }
    if instance_samples:
        figs["inst_heatmap"] = instance_heatmap_over_time(instance_samples)
    if len(call_samples) > 1:
        figs["calls"] = call_rates(call_samples)
    return figs


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
             "textposition": "outside", "hovertemplate": "%{y}: unused %{text}<extra></extra>"},
        ],
        "layout": _layout("Latest sample of each node: used vs unused", barmode="stack",
                          height=90 + 28 * max(len(rows), 1), xaxis=_bytes_axis(),
                          margin={"l": 220, "r": 40, "t": 50, "b": 45}),
    }


# ---- two or more snapshots -----------------------------------------------------------------


def compare_totals(analyses: list[dict[str, Any]], labels: list[str]) -> Figure:
    """RSS, allocated, used and unused of each snapshot side by side."""
    keys = (("RSS", lambda a: a["os"]["rss"]),
            ("allocated", lambda a: a["totals_all"]["allocated"]),
            ("erlang:memory(total)", lambda a: a["os"]["erlang_memory_total"]),
            ("used", lambda a: a["totals_all"]["used"]),
            ("unused", lambda a: a["totals_all"]["unused"]))
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
                       "hovertemplate": _t(label) + " %{x}: %{text}<extra></extra>"})
    return {"data": traces,
            "layout": _layout("Totals side by side", barmode="group", yaxis=_bytes_axis(),
                              margin={"l": 60, "r": 30, "t": 50, "b": 45}, height=380,
                              legend={"orientation": "h", "y": -0.15})}


def compare_allocators(analyses: list[dict[str, Any]], labels: list[str]) -> Figure:
    """Unused bytes per allocator type in each snapshot (the thing a flag change should move)."""
    order: dict[str, int] = {}
    for a in analyses:
        for r in a["allocator_types"]:
            order[r["allocator"]] = max(order.get(r["allocator"], 0), r["allocated"])
    names = [n for n, v in sorted(order.items(), key=lambda kv: -kv[1]) if v > 0]
    traces = []
    for i, (a, label) in enumerate(zip(analyses, labels, strict=True)):
        by = {r["allocator"]: r for r in a["allocator_types"]}
        unused = [by[n]["unused"] if n in by else 0 for n in names]
        usage = [f"{100 * by[n]['usage']:.1f}%" if n in by else "-" for n in names]
        traces.append({"type": "bar", "name": _t(label), "x": [_t(n) for n in names],
                       "y": unused, "marker": {"color": PALETTE[i % len(PALETTE)]},
                       "customdata": [[human(u), p] for u, p in zip(unused, usage, strict=True)],
                       "hovertemplate": _t(label) + " %{x}: unused %{customdata[0]}, usage "
                                                    "%{customdata[1]}<extra></extra>"})
    return {"data": traces,
            "layout": _layout("Unused bytes per allocator", barmode="group",
                              yaxis=_bytes_axis(), height=380,
                              margin={"l": 60, "r": 30, "t": 50, "b": 80})}


def compare_figures(analyses: list[dict[str, Any]], labels: list[str]) -> dict[str, Figure]:
    return {"cmp_totals": compare_totals(analyses, labels),
            "cmp_allocators": compare_allocators(analyses, labels)}


# ---- helpers -------------------------------------------------------------------------------


def _instance_sort_key(k: str) -> tuple[str, int]:
    name, _, n = k.rstrip("]").partition("[")
    return (name, -int(n) if n.isdigit() else 0)


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _minus(a: list[int | None], b: list[int | None]) -> list[int | None]:
    return [None if x is None or y is None else x - y for x, y in zip(a, b, strict=True)]


def _sum_cols(cols: list[list[int | None]]) -> list[int | None]:
    return [None if all(v is None for v in vs) else sum(v or 0 for v in vs)
            for vs in zip(*cols, strict=True)]
