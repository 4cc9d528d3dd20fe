"""The one place the web UI and the report call the recommender (advice/recommend.py).

An error inside it makes `recommendations()` return None and the pages say "recommender not
available" instead of failing, because a page that explains the numbers is still worth showing
when the advice cannot be computed.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from beamalloc.advice import wording
from beamalloc.advice.records import Prediction
from beamalloc.reporters.recommend import FORMATS, predicted_line
from beamalloc.snapshot import Snapshot
from beamalloc.units import exact_bytes, human
from beamalloc.webui.data import Data

if TYPE_CHECKING:
    from beamalloc.advice.recommend import Document

log = logging.getLogger(__name__)


def recommendations(snap: Snapshot, processes: dict[str, Any] | None = None,
                    earlier: Snapshot | None = None) -> Document | None:
    """recommend()'s Document (with `verdict`), plus `headline` and `outputs`, or None; its
    typed records (`.records`) kept, which the pages read (issue 27 item 1).

    `outputs` maps each format of FORMATS to the text a user pastes into that file. `processes`
    (the analysis' holders section, where it has one) joins the verdict as in the terminal.
    `earlier` (a watched node's previous sample) gives the turnover, as `recommend NODE` reading
    the node twice does.
    """
    try:
        return _call(snap, processes, earlier)
    except Exception:  # the page must render whatever the recommender does
        log.exception("recommender failed on %s", snap.node)
        return None


def recommendations_of(d: Data, ref: str) -> Document | None:
    """recommendations() for a stored snapshot or an upload, computed once per ref: the snapshot
    page, the node page, the nodes page and what-if say the same verdict from the same inputs
    (the holders, a watched node's previous sample). Raises NotFound for an unknown ref."""
    def make() -> Document | None:
        snap, a = d.analysis(ref)
        return recommendations(snap, a.processes, d.previous(ref, snap))

    return d.verdicts.get_or(ref, make)


def _call(snap: Snapshot, processes: dict[str, Any] | None,
          earlier: Snapshot | None) -> Document:
    from beamalloc.advice.predict import measure_turnover
    from beamalloc.advice.recommend import Document, recommend
    from beamalloc.reporters.recommend import paste, said, verdict

    turn = measure_turnover(earlier, snap) if earlier is not None else None
    with exact_bytes(False):  # the verdict's own words, human as the terminal's (`--bytes`)
        r = recommend(snap, processes=processes, turnover=turn)
    # `predicted` shows as its one-line summary, never as a dict (issue 17); `prediction` is its
    # table (pagedata.prediction_view), before/after per measure.
    recs = [{**x, "predicted": predicted_line(a.prediction) if a.prediction
             else x["not_predicted"],
             "prediction": prediction_view(x["predicted"])}
            for a, x in zip(r.records.verdict.advised, r["recommendations"],
                            strict=True)]  # fmt: skip
    # Flags predicted together share one replay: its table once, under the first of them.
    seen: dict[str, str] = {}
    for rec, x in zip(recs, r["recommendations"], strict=True):
        p = x["predicted"]
        key = json.dumps(p, sort_keys=True, default=str) if p else ""
        if key and key in seen:
            rec["prediction"] = {"same_as": seen[key]}
        elif key:
            seen[key] = f"{x['flag']} {x['value']}"
    v = r.records.verdict
    return Document({**r, "recommendations": recs, "headline": verdict(r.records),
                     "why": said(wording.why, v),
                     "outputs": {f: paste(r, f) for f in FORMATS} if v.advised else {}},
                    r.records)


def prediction_view(p: dict[str, Any] | None) -> dict[str, Any] | None:
    """A flag's prediction (advice/predict.py) as a small table: what the replay did, then
    per measure before, after and the change, for the fitted workload and its best case."""
    if not p:
        return None
    m = p.get("model") or {}
    runs = [("fitted", p)] + ([("best case", p["best_case"])] if p.get("best_case") else [])
    measures = (("carriers", "carriers_size", True), ("unused", "unused", True),
                ("peak carriers", "peak_carriers_size", True),
                ("carrier calls", "carrier_calls", False))
    rows = []
    for label, key, sized in measures:
        cells = []
        for _, r in runs:
            b, af = (r.get("before") or {}).get(key), (r.get("after") or {}).get(key)
            ch = (r.get("change_pct") or {}).get(key)
            fmt = human if sized else (lambda v: "-" if v is None else f"{v:,}")
            cells.append({"before": fmt(b), "after": fmt(af),
                          "change": "-" if ch is None else wording.change(ch / 100),
                          "good": ch is not None and ch < 0})
        rows.append({"name": label, "cells": cells})
    rec = Prediction.from_dict(p)
    how = (f"replay of {m.get('generator', '?')} ({m.get('events', 0):,} events), seeded from "
           f"{rec.seeded_from or '?'}, workload {rec.workload or '?'}, "
           f"{wording.calibration(rec)}")
    return {"summary": predicted_line(rec), "how": how, "runs": [r for r, _ in runs],
            "rows": rows, "fitted_to": m.get("fitted_to"), "not_modelled": p.get("not_modelled"),
            "flags": p.get("flags_after") or p.get("flags") or ""}
