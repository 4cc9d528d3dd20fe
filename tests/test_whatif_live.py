"""The what-if page over a real node: binspike (samples/workloads/binspike.erl) sampled twice
into a real store, its live snapshots carrying instrument:carriers/1's data, so the page shows
the carrier-seeded prediction (the node's own carriers rebuilt, docs/recommend.md), exactly as
`beamalloc recommend` computes it for the same snapshot and flags."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from test_whatif import expected, sets_of, text_of

from beamalloc.advice.recommend import recommend
from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector import live
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.webui.app import create_app

pytestmark = [pytest.mark.live, pytest.mark.slow]


def test_live_node_seeded_prediction_on_the_page(tmp_path):
    path = tmp_path / "watch.db"
    with WorkloadNode("binspike", env={"BURST": "40000"}) as wl:
        wl.wait_ready()
        with Store(path) as st:
            for _ in range(2):
                snap = live.snapshot_node(wl.node, wl.cookie, timeout=60.0)
                st.add_sample(snap, derive(snap), force_keep=True)
    assert snap.carriers, "a live snapshot reads the node's carriers"
    app = create_app(path)
    c = app.test_client()
    ref = re.findall(r'<option value="(s[0-9]+)"', c.get("/whatif").text)[0]
    with Store(path, readonly=True) as st:
        stored = st.snapshot(int(ref[1:]))
    rec = recommend(stored)
    r3 = next(f for f in rec["findings"] if f["rule"] == "R3" and f["predicted"])
    p = r3["predicted"]
    # its stragglers' history from an empty VM (issue 22) where the read fits it, else its carriers
    assert p["seeded_from"] in ("carriers", "history")
    # the typed set alone (go=1, no candidate ticked): its numbers are R3's own prediction
    page = c.get("/whatif?" + urlencode({"r": ref, "go": "1",
                                         "f": " ".join(r3["candidate_flags"])}))
    assert page.status_code == 200
    shown = sets_of(page.text)
    assert list(shown) == [p["flags"]] and 'data-set="typed"' in page.text
    assert shown[p["flags"]]["binary_alloc"] == expected(p)
    t = text_of(page.text)
    assert ("from_carriers trace from the node's own carriers" if p["seeded_from"] == "carriers"
            else "from an empty VM") in t, t
    assert f"2 samples of {stored.node} in the store" in t
    assert "None" not in t and "{'" not in t
