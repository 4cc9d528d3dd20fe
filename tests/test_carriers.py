"""Per-carrier data without a node: the model and its JSON, the collector's reading of
instrument's answers (known and unknown shapes), the analyzer's classes, the store and the
terminal map (issue 17, items 1, 2 and 7)."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from support import DATA, ROOT

from beamalloc.analyzer.analysis import analyze
from beamalloc.analyzer.carriers import (
    COMPACT,
    FREE_INSIDE,
    SCATTERED,
    STRAGGLERS,
    AllocatorCarrierMap,
    CarrierPoints,
    CarrierSection,
    Classification,
    FillBand,
    carrier_map,
)
from beamalloc.collector.instrument import add_carriers
from beamalloc.collector.sources import read_file
from beamalloc.collector.terms import Atom
from beamalloc.reporters.analyze import render
from beamalloc.snapshot import Carrier, FreeHistogram, Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store

MIB = 1 << 20
HIST = FreeHistogram(256, (0,) * 17 + (1,))


def _snap(carriers: list[Carrier] | None) -> Snapshot:
    s = read_file(str(DATA / "hand_recon.txt"))
    s.carriers = carriers
    return s


def _c(size: int, fill: float, pooled: bool = False, blocks: int = 100) -> Carrier:
    return Carrier("binary_alloc", 1, pooled, size, blocks, int(size * fill), HIST)


def test_histogram_buckets_follow_the_vm() -> None:
    # erl_alloc_util.c: slot = floor(log2(size // unit + 1)); the last slot is open.
    h = FreeHistogram(256, (0,) * 18)
    assert h.bounds(0) == (0, 256)
    assert h.bounds(1) == (256, 768)
    assert h.bounds(6) == (63 * 256, 127 * 256)
    assert h.bounds(17) == ((2**17 - 1) * 256, None)
    for size in (1, 255, 256, 767, 768, 65_200, 8 * MIB):
        slot = min((size // 256 + 1).bit_length() - 1, 17)
        lo, hi = h.bounds(slot)
        assert lo <= size and (hi is None or size < hi)


def test_json_round_trip_and_largest() -> None:
    cs = [_c(8 * MIB, 0.01, True, 3), Carrier("eheap_alloc", None, False, 65536, 1, 65536,
                                                  FreeHistogram(256, (0, 0)), 0, 0)]
    s = _snap(cs)
    s.carriers_skipped = 12
    back = Snapshot.from_json(s.to_json())
    assert back.carriers == cs and back.carriers_skipped == 12
    assert back.carriers[0].free_histogram.largest() == ((2**17 - 1) * 256, None)
    assert back.carriers[1].free_histogram.largest() is None
    assert Snapshot.from_json(_snap(None).to_json()).carriers is None


def test_store_round_trip(tmp_path) -> None:
    s = _snap([_c(8 * MIB, 0.01, True, 3), _c(MIB, 0.9)])
    s.taken_at = 1_700_000_000.0
    with Store(tmp_path / "w.db") as st:
        sid = st.add_sample(s, derive(s), force_keep=True)
        assert st.snapshot(sid).carriers == s.carriers


def _ok(inst: int, tuples: list) -> tuple:
    return (inst, (Atom("ok"), (128, tuples)))


def test_reads_otp25_and_otp22_shapes() -> None:
    t25 = (Atom("binary_alloc"), Atom("true"), 8388608, 0,
           [(Atom("binary_alloc"), 3, 2432), (Atom("ets_alloc"), 1, 96)], tuple([0] * 18))
    t22 = (Atom("eheap_alloc"), 262144, 0, 4200, 5, Atom("false"), tuple([0] * 14))
    s = _snap(None)
    add_carriers(s, {"carriers": [_ok(1, [t25]), _ok(0, [t22]),
                                  (2, (Atom("error"), Atom("not_enabled")))],
                     "carrier_hist": (128, 18)})
    assert s.carriers_unavailable is None
    by = {c.allocator: c for c in s.carriers}
    b = by["binary_alloc"]
    assert (b.instance, b.in_pool, b.size, b.blocks, b.blocks_size, b.foreign_size) == (
        1, True, 8388608, 4, 2528, 96)
    assert b.free_histogram.start == 256  # the scan doubles histogram_start
    e = by["eheap_alloc"]
    assert (e.instance, e.in_pool, e.blocks, e.blocks_size) == (0, False, 5, 4200)


@pytest.mark.parametrize("answers, why", [
    ([_ok(1, [(Atom("binary_alloc"), 1, 2)])], "does not read"),  # a tuple of another shape
    ([_ok(1, [(Atom("binary_alloc"), Atom("maybe"), 1, 0, [], (0,))])], "does not read"),
    ([(0, (Atom("exception"), Atom("error"), Atom("undef")))], "no instrument module"),
    ([(0, (Atom("exception"), Atom("error"), (Atom("badarg"), 1)))], "failed on the target"),
    ([(0, (Atom("error"), Atom("whatever")))], "{error, whatever}"),
    ([(0, "surprise")], "shape this beamalloc does not read"),
    (["not a pair"], "unknown shape"),
])
def test_unknown_shapes_are_a_note(answers, why) -> None:
    s = _snap(None)
    add_carriers(s, {"carriers": answers, "carrier_hist": (128, 18)})
    assert s.carriers is None
    assert why in (s.carriers_unavailable or "")
    assert [n for n in s.notes if "per-carrier" in n] == [f"no per-carrier data: "
                                                          f"{s.carriers_unavailable}"]
    assert s.allocators  # the rest of the snapshot stays


def test_cap_note() -> None:
    s = _snap(None)
    add_carriers(s, {"carriers": [], "carrier_hist": (128, 18), "carriers_cap": 100,
                     "carriers_skipped": [(Atom("binary_alloc"), 1, 70_000),
                                          (Atom("binary_alloc"), 2, 30_000)]})
    assert s.carriers == [] and s.carriers_skipped == 100_000
    assert any("capped at 100 carriers: 100000 carriers of binary_alloc[1], binary_alloc[2]"
               in n for n in s.notes)


def test_classes() -> None:
    # 30 pooled carriers at 1 % pinned by a few blocks beside 2 full ones: stragglers
    strag = [_c(8 * MIB, 0.012, True, 8) for _ in range(30)] + [_c(8 * MIB, 0.87)] * 2
    cm = carrier_map(_snap(strag))["binary_alloc"]
    assert cm.classification.kind == STRAGGLERS
    assert cm.sparse == 30 and cm.sparse_pooled == 30 and cm.pinning_blocks == 240
    assert cm.pinning_bytes == 30 * int(8 * MIB * 0.012)
    assert [b.pooled for b in cm.bands] == [30, 0, 0, 0, 0, 0]
    assert [b.owned for b in cm.bands] == [0, 0, 0, 0, 2, 0]
    assert cm.largest_free == ((2**17 - 1) * 256, None)
    # sparse but crowded: 2 MiB carriers at 4 % holding 40 blocks each (a block in every
    # 512 KiB of each): the scatter workload's map, which no carrier size empties
    crowded = [_c(2 * MIB, 0.04, True, 40) for _ in range(40)]
    cm = carrier_map(_snap(crowded))["binary_alloc"]
    assert cm.classification.kind == SCATTERED and cm.sparse == 40 and cm.sparse_crowded == 40
    assert cm.unused_sparse_crowded == cm.unused_sparse == 40 * (2 * MIB - int(2 * MIB * 0.04))
    # ... and three blocks in each 2 MiB carrier are stragglers again
    cm = carrier_map(_snap([_c(2 * MIB, 0.004, True, 3) for _ in range(40)]))["binary_alloc"]
    assert cm.classification.kind == STRAGGLERS and cm.sparse_crowded == 0
    # survivors everywhere: every carrier a third full
    cm = carrier_map(_snap([_c(8 * MIB, 0.33) for _ in range(20)]))["binary_alloc"]
    assert cm.classification.kind == SCATTERED and cm.sparse == 0
    # carriers 80 % full, many of them: free space inside carriers
    cm = carrier_map(_snap([_c(8 * MIB, 0.8) for _ in range(40)]))["binary_alloc"]
    assert cm.classification.kind == FREE_INSIDE
    # 95 % full: little to win
    cm = carrier_map(_snap([_c(8 * MIB, 0.95) for _ in range(10)]))["binary_alloc"]
    assert cm.classification.kind == COMPACT
    # a single-block carrier is not counted among multiblock carriers
    sbc = Carrier("binary_alloc", 1, False, 2 * MIB, 1, 2 * MIB - 64, FreeHistogram(256, (0,)))
    cm = carrier_map(_snap([sbc]))["binary_alloc"]
    assert (cm.sbcs, cm.mbcs, cm.unused) == (1, 0, 0)
    assert carrier_map(_snap(None)) == {}


def test_analysis_json_and_terminal_map() -> None:
    strag = [_c(8 * MIB, 0.012, True, 8) for _ in range(30)] + [_c(4 * MIB, 0.87)] * 2
    a = analyze(_snap(strag))
    c = json.loads(json.dumps(a.to_json()))["carriers"]
    assert c["available"] and c["count"] == 32 and c["skipped"] == 0
    b = c["allocators"][0]
    assert b["allocator"] == "binary_alloc" and b["classification"]["kind"] == STRAGGLERS
    assert len(b["map"]["size"]) == 32 and sum(b["map"]["in_pool"]) == 30
    for width in (80, 100):
        out = io.StringIO()
        render(a, Console(file=out, width=width), top=5, details=True)  # the map: --details
        text = out.getvalue()
        assert max(len(ln) for ln in text.splitlines()) <= width
        assert "binary_alloc: stragglers" in text
        lines = text.splitlines()
        pooled = next(ln for ln in lines if re.match(r"\s+pooled\s+30 ", ln))
        owned = next(ln for ln in lines if re.match(r"\s+owned\s+2 ", ln))
        assert sum(ch in "▁▂▃▄▅▆▇█" for ch in pooled) == 30  # one mark per carrier
        assert sum(ch in "▁▂▃▄▅▆▇█" for ch in owned) == 2
    na = analyze(_snap(None))
    assert na.carriers.available is False
    out = io.StringIO()
    render(na, Console(file=out, width=80), top=5, details=True)
    assert "no per-carrier data" in out.getvalue()


@pytest.mark.parametrize("n", [10, 7000])
def test_carrier_map_figure_is_valid_plotly(n) -> None:
    import plotly.graph_objects as go

    from beamalloc.webui import figures

    cs = [_c(1 << (18 + i % 6), (i % 97) / 97, i % 3 == 0) for i in range(n)]
    a = analyze(_snap(cs))
    figs = figures.carrier_maps(a)
    assert list(figs) == ["cmap-0"]
    f = figs["cmap-0"]
    go.Figure(f)  # raises on any property plotly does not know
    kinds = [t["type"] for t in f["data"]]
    if n <= figures.MAP_MARKS:  # one mark per carrier
        assert sum(len(t["x"]) for t in f["data"] if t["type"] == "scatter") == n
    else:  # a density: the counts still add up to every carrier
        assert "scatter" not in kinds
        hm = next(t for t in f["data"] if t["type"] == "heatmap")
        assert sum(v for row in hm["z"] for v in row if v) == n


def test_terminal_pages_and_report_render_the_carrier_records_not_their_json(monkeypatch) -> None:
    """Issue 27 item 1: every reader of the carriers section takes the records' attributes.
    With every carrier record's JSON emptied, the terminal map, the page data, the figures and
    the HTML report come out the same (a reader of the dict would fail or change them)."""
    from beamalloc.advice import wording
    from beamalloc.htmlreport.html import render_report
    from beamalloc.webui import figures, pagedata

    strag = [_c(8 * MIB, 0.012, True, 8) for _ in range(30)] + [_c(4 * MIB, 0.87)] * 2
    analyses = [analyze(_snap(strag)),
                analyze(read_file(str(ROOT / "samples/workloads/snapshots/churn_kept.json")))]

    def rendered() -> list[str]:
        out = []
        for a in analyses:
            term = io.StringIO()
            render(a, Console(file=term, width=100), top=5, details=True)
            out += [term.getvalue(), json.dumps(pagedata.carrier_view(a)),
                    json.dumps(figures.carrier_maps(a)), *wording.analysis_lines(a),
                    re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "WHEN", render_report([a]))]
        return out

    before = rendered()
    assert re.search(r"\s+pooled\s+30 ", before[0]) and "or more" in before[0]  # open range
    assert any("Inside binary_alloc's carriers: scattered" in x for x in before)
    for cls in (CarrierSection, AllocatorCarrierMap, CarrierPoints, FillBand, Classification):
        monkeypatch.setattr(cls, "to_json", lambda self: {})
    assert analyses[0].to_json()["carriers"] == {}  # emptied indeed
    assert rendered() == before
