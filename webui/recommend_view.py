"""The one place the web UI and the report call the recommender (analyzer/recommend.py).

Until the recommender lands, `recommendations()` returns None and the pages say "recommender not
available" instead of failing; so does any error inside it, because a page that explains the
numbers is still worth showing when the advice cannot be computed.
"""

from __future__ import annotations

import logging
from typing import Any

from beamalloc.snapshot import Snapshot

log = logging.getLogger(__name__)

#: The output formats of `beamalloc recommend --format`, in the order the page shows them.
FORMATS = ("vm.args", "erl_flags", "rabbitmq", "mix", "flags")


def recommendations(snap: Snapshot) -> dict[str, Any] | None:
    """recommend()'s dict (with `verdict`), plus `headline` and `outputs`, or None.

    `outputs` maps each format of FORMATS to the text a user pastes into that file.
    """
    try:
        return _call(snap)
    except Exception:  # the page must render whatever the recommender does
        log.exception("recommender failed on %s", snap.node)
        return None


def _call(snap: Snapshot) -> dict[str, Any] | None:
    try:
        from beamalloc.analyzer.recommend import recommend
        from beamalloc.reporters.recommend import paste_block, verdict
    except ImportError:
        return None
    r = recommend(snap)
    flags = r.get("emulator_flags") or ""
    # `predicted` shows as its one-line summary, never as a dict (issue 17)
    recs = [{**x, "predicted": (x["predicted"] or {}).get("summary") or x["not_predicted"]}
            for x in r["recommendations"]]  # fmt: skip
    return {**r, "recommendations": recs, "headline": verdict(r),
            "outputs": {f: paste_block(flags, f) for f in FORMATS} if flags else {}}
