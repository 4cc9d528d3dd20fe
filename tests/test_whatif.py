"""The what-if page without a browser: a real SQLite store holding a real workload snapshot
(samples/workloads/snapshots/binspike.json, OTP 25.2.3) sampled with a restart gap, the real
recommender and refalloc replays; every figure compared with the functions' own output."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from beamalloc.advice.findings import facts
from beamalloc.advice.predict import Predictor
from beamalloc.advice.recommend import recommend
from beamalloc.collector.sources import read_file
from beamalloc.flags import parse
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.units import human
from beamalloc.webui.app import create_app
from beamalloc.webui.whatif import MAX_TYPED

SNAPS = Path(__file__).resolve().parent.parent / "samples" / "workloads" / "snapshots"
T0 = 1_700_000_000.0
#: Sample times (s after T0): the node restarts between the third and the fourth.
TIMES = (0, 60, 120, 600, 660, 720)
GAP = (130.0, 590.0)
#: A set whose own prediction grows binary_alloc's unused bytes (carriers of 64 MiB).
WORSE = "+MBlmbcs 65536"


def build_store(path: Path) -> Snapshot:
    """binspike's snapshot as a node sampled six times, with a restart gap; returns it."""
    base = read_file(str(SNAPS / "binspike.json"))
    with Store(path) as st:
        for i, t in enumerate(TIMES):
            s = Snapshot.from_dict(base.to_dict())
            s.taken_at = T0 + t
            for inst in s.instances("binary_alloc"):  # carriers drift, so the lines move
                cs = inst.mbcs.carriers_size
                inst.mbcs.carriers_size = type(cs)(cs.current + i * (1 << 20), cs.last_max,
                                                   max(cs.max, cs.current + i * (1 << 20)))
            st.add_sample(s, derive(s), force_keep=True)
        st.add_gap(base.node, T0 + GAP[0], T0 + GAP[1], "restart")
    return base


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Snapshot]:
    path = tmp_path_factory.mktemp("whatif") / "watch.db"
    return path, build_store(path)


@pytest.fixture(scope="module")
def app(store):
    return create_app(store[0], upload_limit=4 << 20)


@pytest.fixture(scope="module")
def ref(app) -> str:
    page = app.test_client().get("/whatif").text
    refs = re.findall(r'<option value="(s[0-9]+)"', page)
    assert len(refs) == len(TIMES)
    return refs[0]  # the latest first


@pytest.fixture(scope="module")
def stored(store, ref) -> Snapshot:
    with Store(store[0], readonly=True) as st:
        return st.snapshot(int(ref[1:]))


@pytest.fixture(scope="module")
def rec(stored) -> dict:
    return recommend(stored)


def text_of(page: str) -> str:
    main = page.split("<main>", 1)[1].split("</main>", 1)[0]
    main = re.sub(r"<style>.*?</style>", " ", main, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", main)))


def sets_of(page: str) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """{flags: {allocator: {"before"/"after": {"carriers", "used", "unused"}}}} as shown."""
    out: dict = {}
    for block in page.split('<div class="wi-set')[1:]:
        flags = html.unescape(re.search(r'data-flags="([^"]*)"', block).group(1))
        for table in re.findall(r'<table class="data" data-allocator="([^"]+)">(.*?)</table>',
                                block, flags=re.S):
            alloc, body = table
            sides = {}
            for side, cells in re.findall(r'data-side="(before|after)"[^>]*>(.*?)</tr>', body,
                                          flags=re.S):
                nums = [int(x) for x in re.findall(r'data-bytes="(-?[0-9]+)"', cells)]
                sides[side] = dict(zip(("carriers", "used", "unused"), nums, strict=True))
            out.setdefault(flags, {})[alloc] = sides
    return out


def expected(p: dict) -> dict[str, dict[str, int]]:
    return {side: {"carriers": p[side]["carriers_size"],
                   "used": p[side]["carriers_size"] - p[side]["unused"],
                   "unused": p[side]["unused"]} for side in ("before", "after")}


def url(ref: str, *flags: str, **kw: str) -> str:
    return "/whatif?" + urlencode([("r", ref), *(("f", f) for f in flags), *kw.items()])


def test_picker_lists_the_stored_snapshots_and_the_nav_links_it(app, stored):
    page = app.test_client().get("/whatif")
    assert page.status_code == 200
    assert stored.node in page.text
    assert '<a href="/whatif">What if</a>' in app.test_client().get("/").text


def test_the_floor_reads_as_the_verdict_says_it(app, ref):
    """One formatter per kind of number (issue 27 item 1): the page states the gain floor as
    the verdict's sentences do ("20 %"), not as a usage ("20.0 %")."""
    from beamalloc.advice import wording
    from beamalloc.advice.records import MIN_GAIN

    page = app.test_client().get(url(ref)).text
    assert f"at least {wording.share(MIN_GAIN)} of its allocator" in page
    assert wording.share(MIN_GAIN) == "20 %" and wording.share(0.854) == "85 %"


def test_candidates_are_recommends_own_predictions(app, ref, rec):
    page = app.test_client().get(url(ref)).text
    shown = sets_of(page)
    predicted = [f for f in rec["findings"] if f["predicted"] is not None]
    assert predicted, "binspike's R3 and R10 are replayed by recommend"
    for f in predicted:
        p = f["predicted"]
        assert shown[p["flags"]][p["allocator"]] == expected(p), f["rule"]
    # recommend's judgement beside each: binspike's R3 is held back, with recommend's reason
    held = {h["rule"]: h["why"] for h in rec["held_back"]}
    for rule, why in held.items():
        assert f"not advised: {why}" in text_of(page), rule


def test_typed_set_equal_to_a_findings_flags_gives_its_numbers(app, ref, rec):
    r3 = next(f for f in rec["findings"] if f["rule"] == "R3")
    flags = " ".join(r3["candidate_flags"])  # as a user would type them, in another order
    page = app.test_client().get(url(ref, flags, go="1"))  # no candidate ticked: typed only
    assert page.status_code == 200
    shown = sets_of(page.text)
    assert list(shown) == [r3["predicted"]["flags"]]
    assert shown[r3["predicted"]["flags"]]["binary_alloc"] == expected(r3["predicted"])
    assert human(r3["predicted"]["after"]["unused"]) in text_of(page.text)


def test_typed_set_matches_the_predictor(app, ref, stored):
    page = app.test_client().get(url(ref, "+MBas ageffcbf +MBlmbcs 1024", go="1")).text
    rule = re.search(r"replayed on recommend's trace for its rule (R[0-9]+)",
                     text_of(page)).group(1)
    fs = parse("+MBas ageffcbf +MBlmbcs 1024")
    with Predictor(stored, facts(stored)) as pr:
        p = pr.predict("binary_alloc", rule, fs)
    assert sets_of(page)[fs.render()]["binary_alloc"] == expected(p)


@pytest.mark.slow
def test_a_set_that_makes_memory_worse_is_marked_and_never_advice(app, ref, stored):
    fs = parse(WORSE)
    with Predictor(stored, facts(stored)) as pr:
        p = pr.predict("binary_alloc", "R3", fs)
    assert p["unused_saving"] < 0, "precondition: the replay says 64 MiB carriers waste more"
    page = app.test_client().get(url(ref, WORSE, "+MBas ageffcbf", go="1")).text
    blocks = {html.unescape(re.search(r'data-flags="([^"]*)"', b).group(1)): b
              for b in page.split('<div class="wi-set')[1:]}
    bad = blocks[fs.render()]
    assert 'data-worse="1"' in bad and "Makes memory worse in the replay" in bad
    assert f"{-100 * p['unused_saving']:.0f} %" in bad
    assert "advised by recommend" not in bad
    assert 'data-worse="0"' in blocks["+MBas ageffcbf"]


@pytest.mark.parametrize("flags, words", [
    ("+MBas zzz", "bad value 'zzz' for +MBas"),
    ("+MQas bf", "unknown allocator letter 'Q'"),
    ("+MBfoo 1", "unknown parameter 'foo'"),
    ("+MBlmbcs", "+MBlmbcs expects a value"),
    ("rm -rf /", "unexpected 'rm'"),
    ("+MBsbct 99999999999999999999", "bad value"),
    ("+MBas bf " * 60, "at most 400 characters"),
])
def test_bad_flags_get_one_clear_message(app, ref, flags, words):
    page = app.test_client().get(url(ref, flags, go="1"))  # no candidate ticked
    assert page.status_code == 400
    msg = html.unescape(re.search(r'id="whatif-error">([^<]*)<', page.text).group(1))
    assert msg.startswith("flag set 1 is not valid: ") and words in msg, msg
    assert "Traceback" not in page.text and "FlagError" not in page.text
    assert 'data-set="typed"' not in page.text  # nothing replayed for a bad set
    assert "Nothing replayed: correct the flag set above." in text_of(page.text)


def test_too_many_sets_are_refused(app, ref):
    page = app.test_client().get(url(ref, *["+MBas bf"] * (MAX_TYPED + 1)))
    assert page.status_code == 400
    assert f"at most {MAX_TYPED} per request" in text_of(page.text)


@pytest.mark.slow
def test_replays_are_cached_per_snapshot_and_flags(app, ref):
    c = app.test_client()
    c.get(url(ref, "+MBsbct 512"))
    state = app.extensions["beamalloc.whatif"]
    before = state.replays
    again = c.get(url(ref, "+MBsbct 512"))
    assert state.replays == before  # served from the cache
    c.get(url(ref, "+MBsbct 1024"))
    assert state.replays == before + 1  # a new set: one replay, recommend's is cached
    assert again.status_code == 200


def test_no_python_reprs_in_the_page(app, ref, rec):
    r3 = next(f for f in rec["findings"] if f["rule"] == "R3")
    for u in (url(ref), url(ref, " ".join(r3["candidate_flags"]), WORSE, "+MMmcs 20"),
              "/whatif"):
        t = text_of(app.test_client().get(u).text)
        assert "{'" not in t and "None" not in t and "[]" not in t, u


def test_history_is_the_nodes_measured_series(app, ref, stored):
    page = app.test_client().get(url(ref)).text
    figs = json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>',
                                page, flags=re.S).group(1))
    assert figs, "the node's history is charted"
    fig = next(iter(figs.values()))
    assert "binary_alloc" in fig["layout"]["title"]["text"]
    for tr in fig["data"]:
        ys = tr["y"]
        assert sum(v is not None for v in ys) == len(TIMES)
        cut = ys.index(None)  # the restart gap breaks the line between the 3rd and 4th sample
        assert cut == 3 and GAP[0] * 1000 < tr["x"][cut] - T0 * 1000 < GAP[1] * 1000
    ticks = fig["layout"]["yaxis"]["ticktext"]
    assert all(re.fullmatch(r"0|[0-9.]+ (KiB|MiB|GiB)", t) for t in ticks), ticks
    assert f"{len(TIMES)} samples of {stored.node}" in text_of(page)


@pytest.mark.slow
def test_upload_then_whatif(app):
    c = app.test_client()
    data = (SNAPS / "heapchurn.json").read_bytes()
    r = c.post("/whatif/upload", data={"file": (io.BytesIO(data),
                                                "heapchurn.json")},
               content_type="multipart/form-data")
    assert r.status_code == 303
    page = c.get(r.headers["Location"])
    assert page.status_code == 200
    snap = read_file(str(SNAPS / "heapchurn.json"))
    r4 = next(f for f in recommend(snap)["findings"] if f["rule"] == "R4")
    shown = sets_of(page.text)
    assert shown[r4["predicted"]["flags"]]["eheap_alloc"] == expected(r4["predicted"])
    # marked as advice exactly when recommend advises it (heapchurn from counters: undecided)
    assert ("advised by recommend" in text_of(page.text)) == bool(
        recommend(snap)["emulator_flags"])
    bad = c.post("/whatif/upload", data={"file": (io.BytesIO(b"junk"), "x.txt")},
                 content_type="multipart/form-data")
    assert bad.status_code == 400 and "Traceback" not in bad.text


def test_unknown_snapshot_is_404(app):
    assert app.test_client().get("/whatif?r=s999999").status_code == 404
    assert app.test_client().get("/whatif?r=../etc").status_code == 404


@pytest.mark.slow
def test_without_a_store_an_upload_still_replays(tmp_path):
    app = create_app(None)
    c = app.test_client()
    first = c.get("/whatif")
    assert first.status_code == 200 and "no store given" in text_of(first.text)
    data = (SNAPS / "binspike.json").read_bytes()
    r = c.post("/whatif/upload", data={"file": (io.BytesIO(data), "binspike.json")},
               content_type="multipart/form-data")
    page = c.get(r.headers["Location"] + "&" + urlencode({"f": "+MBas ageffcbf"}))
    assert page.status_code == 200
    t = text_of(page.text)
    assert "no store: the measured history comes from beamalloc watch --store" in t
    assert "+MBas ageffcbf" in sets_of(page.text)
    assert "None" not in t and "{'" not in t


def test_a_release_before_otp20_is_not_replayed_and_says_why(tmp_path):
    """The replay models OTP 25-27's allocators: the recommender's own reason, no numbers."""
    snap = read_file(str(SNAPS / "binspike.json"))
    snap.otp_release, snap.erts_version = "R16B02", "5.10.3"
    app = create_app(None)
    c = app.test_client()
    r = c.post("/whatif/upload", data={"file": (io.BytesIO(snap.to_json().encode()), "old.json")},
               content_type="multipart/form-data")
    page = c.get(r.headers["Location"] + "&" + urlencode({"f": "+MBas ageffcbf"}))
    assert page.status_code == 400
    msg = html.unescape(re.search(r'id="whatif-error">([^<]*)<', page.text).group(1))
    assert msg.startswith("not replayed: OTP R16B02") and "older than OTP 20" in msg
    assert not sets_of(page.text)


def test_picked_candidates_only(app, ref, rec):
    r3 = next(f for f in rec["findings"] if f["rule"] == "R3")
    page = app.test_client().get(url(ref, go="1", c="R3-binary_alloc")).text
    assert list(sets_of(page)) == [r3["predicted"]["flags"]]
    assert 'value="R3-binary_alloc" checked' in page and 'value="R10-binary_alloc">' in page


def test_one_sample_is_a_marker_never_a_line():
    from beamalloc.webui.figures import carrier_history

    series = {"t": [T0], "gaps": [],
              "columns": {"binary_alloc.allocated": [8 << 20], "binary_alloc.used": [1 << 20]}}
    fig = carrier_history(series, "binary_alloc", T0)
    assert [tr["mode"] for tr in fig["data"]] == ["markers", "markers"]
    assert fig["data"][1]["y"] == [7 << 20]
    assert carrier_history(series, "ets_alloc", T0) is None  # nothing stored: no chart


def test_only_replayed_sets_come_ticked(app, ref):
    """A candidate set recommend did not replay is offered unticked (issue 26 item 4): the page
    never opens on "not replayed; type its flags below"."""
    page = app.test_client().get(url(ref)).text
    boxes = re.findall(r'<input type="checkbox" name="c" value="([^"]+)"( checked)?>', page)
    assert boxes, "no candidate sets offered"
    shown = set(re.findall(r'<div class="wi-set[^"]*" data-set="([^"]+)"', page))
    for cid, ticked in boxes:
        assert bool(ticked) == (cid in shown)
    assert "did not replay it" not in page


def test_sets_recommend_did_not_replay_come_unticked():
    """A release the replay does not model: recommend proposes flags without predictions; the
    page offers them unticked and opens on "Nothing picked", not on "did not replay it"."""
    snap = read_file(str(SNAPS / "binspike.json"))
    snap.otp_release, snap.erts_version = "R16B02", "5.10.3"
    c = create_app(None).test_client()
    r = c.post("/whatif/upload", data={"file": (io.BytesIO(snap.to_json().encode()), "old.json")},
               content_type="multipart/form-data")
    page = c.get(r.headers["Location"]).text
    boxes = re.findall(r'<input type="checkbox" name="c" value="([^"]+)"( checked)?>', page)
    assert boxes and not any(ticked for _, ticked in boxes)
    assert "did not replay it" not in page and 'id="nothing-replayed"' in page
