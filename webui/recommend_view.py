"""The one place the web UI and the report call the recommender (analyzer/recommend.py).

An error inside it makes `recommendations()` return None and the pages say "recommender not
available" instead of failing, because a page that explains the numbers is still worth showing
when the advice cannot be computed.
"""

from __future__ import annotations

import logging
from typing import Any

from beamalloc.reporters.recommend import FORMATS
from beamalloc.snapshot import Snapshot

log = logging.getLogger(__name__)


def recommendations(snap: Snapshot,
                    processes: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """recommend()'s dict (with `verdict`), plus `headline` and `outputs`, or None.

    `outputs` maps each format of FORMATS to the text a user pastes into that file. `processes`
    (the analysis' holders section, where it has one) joins the verdict as in the terminal.
    """
    try:
        return _call(snap, processes)
    except Exception:  # the page must render whatever the recommender does
        log.exception("recommender failed on %s", snap.node)
        return None


def _call(snap: Snapshot, processes: dict[str, Any] | None) -> dict[str, Any]:
    from beamalloc.analyzer.recommend import recommend
    from beamalloc.reporters.recommend import paste_block, verdict

    r = recommend(snap, processes=processes)
    flags = r.get("emulator_flags") or ""
    # `predicted` shows as its one-line summary, never as a dict (issue 17)
    recs = [{**x, "predicted": (x["predicted"] or {}).get("summary") or x["not_predicted"]}
            for x in r["recommendations"]]  # fmt: skip
    return {**r, "recommendations": recs, "headline": verdict(r),
            "outputs": {f: paste_block(flags, f) for f in FORMATS} if flags else {}}
