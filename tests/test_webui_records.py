"""The snapshot and what-if pages read the recommendation's typed records (issue 27 item 1):
rendered from records whose JSON dict was emptied or altered, a page is the same to the byte;
a finding's candidate flags are typed Flags, which the what-if matches without parsing text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask import render_template

import beamalloc.advice.predict as predict
from beamalloc.advice.predict import Turnover
from beamalloc.advice.recommend import Document
from beamalloc.advice.records import Found
from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file
from beamalloc.flags import Flag, FlagError, FlagSet
from beamalloc.units import human
from beamalloc.webui import recommend_view, whatif
from beamalloc.webui.app import create_app
from beamalloc.webui.pagedata import snapshot_view

SNAPS = Path(__file__).resolve().parent.parent / "samples" / "workloads" / "snapshots"
#: Two reads of the node: binary_alloc's survivors turn over, so churn_bf's flags are advised.
BUSY = Turnover("binary_alloc", 5.0, 200_000, 20_000)


@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    """The web UI's recommendation (recommend_view) of three snapshots: flags advised (with a
    measured turnover), a revert weighed, no flag helps."""
    mp = pytest.MonkeyPatch()
    mp.setattr(predict, "measure_turnover", lambda earlier, snap: BUSY)
    out = {}
    try:
        for name in ("churn_bf", "binspike_bf", "churn_kept"):
            snap = read_file(str(SNAPS / f"{name}.json"))
            doc = recommend_view.recommendations(snap, None, earlier=snap)
            assert doc is not None, name
            out[name] = (snap, doc)
    finally:
        mp.undo()
    return out


def _page(snap: Any, doc: Document) -> str:
    app = create_app(None)
    v = snapshot_view(snap, analyze(snap), rec=doc)
    with app.test_request_context():
        return render_template("snapshot.html", v=v, ref="x", figures="{}")


@pytest.mark.parametrize("name", ["churn_bf", "binspike_bf", "churn_kept"])
def test_snapshot_page_reads_the_records_only(docs, name: str) -> None:
    snap, doc = docs[name]
    v = doc.records.verdict
    page = _page(snap, doc)
    if name == "churn_bf":  # the table, each flag's prediction, the paste blocks
        assert len(v.advised) > 1 and 'class="recs"' in page and 'class="output"' in page
        for r in v.advised:
            assert f"<code>{r.flag} {r.value}</code>" in page
        assert "together with" in page  # one replay's table, under the first of its flags
    assert "<h3>Findings</h3>" in page
    assert page.count('<li class="') >= len(doc.records.findings)
    # the JSON beside the records, emptied or every value replaced: the same page
    assert _page(snap, Document({}, doc.records)) == page
    assert _page(snap, Document(dict.fromkeys(doc, "ALTERED"), doc.records)) == page


def test_prediction_table_is_the_records(docs) -> None:
    """The prediction table's figures are the Prediction record's, whatever its JSON says."""
    _, doc = docs["churn_bf"]
    p = next(r.prediction for r in doc.records.verdict.advised if r.prediction)
    view = recommend_view.prediction_view(p)
    assert view is not None and view["runs"][0] == "fitted"
    unused = next(row for row in view["rows"] if row["name"] == "unused")["cells"][0]
    assert unused["after"] == human(p.replayed.after.unused)
    assert f"{p.replayed.model.events:,} events" in view["how"]


def test_candidates_are_typed_and_the_whatif_parses_none(docs, monkeypatch) -> None:
    """Each finding keeps its candidate flags as Flags (records.Found); `recommend --json`
    renders them; the what-if matches a typed set against them with no flag text parsed."""
    _, doc = docs["churn_bf"]
    rec = doc.records
    found = [x for x in rec.findings if len(x.candidates)]
    assert found and all(isinstance(x, Found) and isinstance(x.candidates, FlagSet)
                         and all(isinstance(f, Flag) for f in x.candidates) for x in found)
    assert [x["candidate_flags"] for x in doc["findings"]] == [
        [f.render() for f in x.candidates] for x in rec.findings]
    assert all(isinstance(f, Flag) for h in rec.verdict.held_back for f in h.flags)

    def refuse(*args: Any, **kw: Any) -> FlagSet:
        raise FlagError("no flag text is parsed back")

    monkeypatch.setattr(whatif, "parse", refuse)
    x = next(x for x in found if x.prediction is not None)
    typed = FlagSet(tuple(reversed(x.candidates.flags)), otp=x.candidates.otp)
    assert whatif._rule_for(rec, x.finding.allocator, typed) == x.finding.rule
    sets = whatif.candidate_sets(rec)
    assert [c["flags"] for c in sets if c["id"] == f"{x.finding.rule}-{x.finding.allocator}"] \
        == [x.prediction.flags]


def test_whatif_page_reads_the_records_only() -> None:
    """The what-if page of an upload, its recommendation's JSON emptied or altered in the
    page's cache: the same page (candidate sets, judgements, the verdict, the rows)."""
    import io

    c = create_app(None).test_client()
    data = (SNAPS / "binspike.json").read_bytes()
    r = c.post("/whatif/upload", data={"file": (io.BytesIO(data), "binspike.json")},
               content_type="multipart/form-data")
    url = r.headers["Location"]
    page = c.get(url).text
    assert 'class="wi-set' in page and "not advised: " in page
    cache = c.application.extensions["beamalloc.whatif"].recommendations
    ref = url.rsplit("=", 1)[-1]
    doc = cache[ref]
    for bare in (Document({}, doc.records), Document(dict.fromkeys(doc, "ALTERED"), doc.records)):
        cache[ref] = bare
        assert c.get(url).text == page
