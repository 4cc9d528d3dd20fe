"""The one place the web UI and the report call the recommender (advice/recommend.py).

An error inside it makes `recommendations()` return None and the pages say "recommender not
available" instead of failing, because a page that explains the numbers is still worth showing
when the advice cannot be computed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from beamalloc.advice import wording
from beamalloc.advice.records import Prediction
from beamalloc.reporters.recommend import FORMATS, predicted_line
from beamalloc.snapshot import Snapshot
from beamalloc.units import count, exact_bytes, human
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
    from beamalloc.reporters.recommend import paste_of, said, verdict

    turn = measure_turnover(earlier, snap) if earlier is not None else None
    with exact_bytes(False):  # the verdict's own words, human as the terminal's (`--bytes`)
        r = recommend(snap, processes=processes, turnover=turn)
    v = r.records.verdict
    # the document as `recommend --json` prints it, with the words the pages say beside it;
    # the pages read the records (pagedata.advice_view), never this dict
    return Document({**r, "headline": verdict(r.records), "why": said(wording.why, v),
                     "outputs": {f: paste_of(r.records, f) for f in FORMATS} if v.advised
                     else {}}, r.records)  # fmt: skip


#: What the prediction table shows per measure: its label, the Measures field, and whether it
#: is a size (human) or a count.
_MEASURES = (("carriers", "carriers_size", True), ("unused", "unused", True),
             ("peak carriers", "peak_carriers_size", True),
             ("carrier calls", "carrier_calls", False))


def prediction_view(p: Prediction | None) -> dict[str, Any] | None:
    """A flag's prediction (the Prediction record, advice/records.py) as a small table: what
    the replay did, then per measure before, after and the change, for the fitted workload and
    its best case."""
    if p is None:
        return None
    runs = [("fitted", p.replayed)] + ([("best case", p.best_case)] if p.best_case else [])
    rows = []
    for label, key, sized in _MEASURES:
        fmt = human if sized else count
        cells = []
        for _, r in runs:
            ch = r.change_pct.get(key)
            cells.append({"before": fmt(getattr(r.before, key)),
                          "after": fmt(getattr(r.after, key)),
                          "change": "-" if ch is None else wording.change(ch / 100),
                          "good": ch is not None and ch < 0})
        rows.append({"name": label, "cells": cells})
    m = p.replayed.model
    how = (f"replay of {m.generator} ({count(m.events)} events), seeded from "
           f"{p.seeded_from or '?'}, workload {p.workload or '?'}, {wording.calibration(p)}")
    return {"summary": predicted_line(p), "how": how, "runs": [r for r, _ in runs],
            "rows": rows, "fitted_to": m.fitted_to, "not_modelled": p.not_modelled,
            "flags": p.flags_after or p.flags}
