"""`beamalloc report`: one self-contained HTML file to attach to a ticket.

Nothing is fetched from the network; every string that came from a snapshot is escaped. This
first version draws its bars as inline SVG; the web UI's plotly figures replace them later.
"""

from __future__ import annotations

import html
import os
from typing import Any

from beamalloc.units import human, pct

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .6em;border-bottom:1px solid #ddd}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#a60}.dim{color:#666}.bad{color:#b00}.warn{color:#a60}.ok{color:#070}
svg text{font:12px system-ui,sans-serif}
"""


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _usage_class(u: float) -> str:
    return "bad" if u < 0.5 else "warn" if u < 0.75 else "ok"


def _bars(rows: list[dict[str, Any]]) -> str:
    """Allocated vs used per allocator type, as horizontal bars."""
    if not rows:
        return ""
    top = max(r["allocated"] for r in rows) or 1
    h, width, label = 22, 520, 130
    parts = [
        f'<svg width="{label + width + 160}" height="{h * len(rows) + 10}" role="img" '
        'aria-label="allocated and used bytes per allocator">'
    ]
    for i, r in enumerate(rows):
        y = 5 + i * h
        wa = width * r["allocated"] / top
        wu = width * r["used"] / top
        parts.append(
            f'<text x="0" y="{y + 14}">{_e(r["allocator"])}</text>'
            f'<rect x="{label}" y="{y}" width="{wa:.1f}" height="{h - 6}" fill="#f2c6c6">'
            f"<title>allocated {_e(human(r['allocated']))}</title></rect>"
            f'<rect x="{label}" y="{y}" width="{wu:.1f}" height="{h - 6}" fill="#4a7ab8">'
            f"<title>used {_e(human(r['used']))}</title></rect>"
            f'<text x="{label + wa + 6:.1f}" y="{y + 14}">{_e(human(r["used"]))} of '
            f"{_e(human(r['allocated']))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[Any]], numeric_from: int = 1) -> str:
    th = "".join(
        f'<th class="{"n" if i >= numeric_from else ""}">{_e(h)}</th>'
        for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            cls = "n" if i >= numeric_from else ""
            if isinstance(c, tuple):  # (text, css class)
                cells.append(f'<td class="{cls} {c[1]}">{_e(c[0])}</td>')
            else:
                cells.append(f'<td class="{cls}">{_e(c)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_analysis(a: dict[str, Any]) -> str:
    t, os_ = a["totals"], a["os"]
    out = [
        f"<h1>{_e(a['node'])}</h1>",
        f'<p class="dim">OTP {_e(a["otp_release"] or "?")}, erts {_e(a["erts_version"] or "?")}, '
        f"{_e(a['schedulers'] or '?')} schedulers, source {_e(a['source'])}, "
        f"taken {_e(a['taken_at'] or 'unknown')}</p>",
    ]
    out += [f'<p class="note">{_e(n)}</p>' for n in a["notes"]]
    out.append(
        f"<p>The allocators hold <b>{_e(human(t['allocated']))}</b> of carriers and use "
        f'<b>{_e(human(t["used"]))}</b> (usage <b class="{_usage_class(t["usage"])}">'
        f"{_e(pct(t['usage']))}</b>): {_e(human(t['unused']))} is reserved but holds no data."
        "</p>"
    )
    out.append("<h2>Memory</h2>")
    out.append(
        _table(
            [
                "erlang:memory(total)",
                "allocated (recon)",
                "allocated (all)",
                "used",
                "unused",
                "usage",
                "RSS",
                "RSS - allocated",
            ],
            [
                [
                    human(os_["erlang_memory_total"]),
                    human(t["allocated"]),
                    human(os_["allocated_all"]),
                    human(t["used"]),
                    human(t["unused"]),
                    pct(t["usage"]),
                    human(os_["rss"]),
                    human(os_["rss_minus_allocated"]),
                ]
            ],
            numeric_from=0,
        )
    )
    out.append("<h2>Allocated and used per allocator</h2>")
    out.append(_bars(a["allocator_types"]))
    out.append(
        _table(
            [
                "allocator",
                "instances",
                "allocated",
                "used",
                "unused",
                "usage",
                "sbcs share",
                "avg mbcs block",
                "sbct",
                "lmbcs",
                "strategy",
                "pool",
                "max allocated",
            ],
            [
                [
                    r["allocator"],
                    r["instances"],
                    human(r["allocated"]),
                    human(r["used"]),
                    human(r["unused"]),
                    (pct(r["usage"]), _usage_class(r["usage"])),
                    pct(r["sbcs_share"]),
                    human(r["mbcs_average_block_size"]),
                    human(r["options"].get("sbct")),
                    human(r["options"].get("lmbcs")),
                    r["options"].get("as", "-"),
                    human(r["pool_carriers_size"]),
                    human(r["max_allocated"]),
                ]
                for r in a["allocator_types"]
            ],
        )
    )
    out.append("<h2>Per instance, worst first</h2>")
    out.append(
        _table(
            [
                "instance",
                "unused",
                "mbcs usage",
                "max mbcs usage",
                "mbcs carriers",
                "mbcs blocks",
                "sbcs usage",
                "sbcs carriers",
                "pool carriers",
                "sbcs:mbcs",
            ],
            [
                [
                    f"{r['allocator']}[{r['instance']}]",
                    human(r["unused"]),
                    (pct(r["mbcs_usage"]), _usage_class(r["mbcs_usage"])),
                    pct(r["max"]["mbcs_usage"]),
                    f"{r['mbcs_carriers']} ({human(r['mbcs_carriers_size'])})",
                    r["mbcs_blocks"],
                    pct(r["sbcs_usage"]),
                    f"{r['sbcs_carriers']} ({human(r['sbcs_carriers_size'])})",
                    "-"
                    if r["pool"] is None
                    else f"{r['pool']['carriers']} ({human(r['pool']['carriers_size'])})",
                    r["sbcs_to_mbcs"]
                    if isinstance(r["sbcs_to_mbcs"], str)
                    else f"{r['sbcs_to_mbcs']:.3g}",
                ]
                for r in a["allocators"]
            ],
        )
    )
    if a["cache_hit_rates"]:
        out.append("<h2>mseg_alloc cache</h2>")
        out.append(
            _table(
                ["instance", "hit rate", "hits", "calls", "cached segments"],
                [
                    [r["instance"], pct(r["hit_rate"]), r["hits"], r["calls"], r["cached_segments"]]
                    for r in a["cache_hit_rates"]
                ],
                numeric_from=0,
            )
        )
    return "\n".join(out)


def write_report(analyses: list[dict[str, Any]], path: str) -> None:
    title = "beamalloc report: " + ", ".join(a["node"] for a in analyses)
    body = "\n<hr>\n".join(render_analysis(a) for a in analyses)
    doc = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>{body}</body></html>\n"
    )
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(doc)
    os.replace(tmp, path)
