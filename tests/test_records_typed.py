"""Typed records end to end (issue 27 item 1): the analysis is a record whose to_json() is the
document, holders and findings carry as data what their words say, a table cell gets a size's
exact bytes as data, a snapshot says which allocators are off, one signed-change formatter."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from beamalloc.advice import wording
from beamalloc.advice.predict import _change_pct
from beamalloc.advice.rules import RuleSpec
from beamalloc.advice.wording import holder_label, holder_sentence
from beamalloc.analyzer.analysis import (
    EXPECTED_TYPES,
    Analysis,
    AverageBlockSize,
    CacheHitRate,
    InstanceMax,
    InstanceRow,
    PoolRow,
    SbcsToMbcs,
    Totals,
    TypeRow,
    analyze,
    coverage,
)
from beamalloc.analyzer.categories import Category, CategoryHolder, MemoryPicture, group_facts
from beamalloc.collector.sources import read_file
from beamalloc.reporters.table import _stack
from beamalloc.snapshot import Snapshot
from beamalloc.units import Sized, around, exact_bytes, human

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "samples" / "otp25" / "erl_crash.dump"
FRAG = ROOT / "samples" / "workloads" / "snapshots" / "frag.json"
HOLDER_KEYS = ["kind", "name", "bytes", "detail", "siblings", "siblings_bytes", "members"]


def test_analysis_is_a_record_and_its_json_the_document() -> None:
    a = analyze(read_file(str(FRAG)))
    assert isinstance(a, Analysis) and isinstance(a.totals, Totals)
    assert all(isinstance(r, TypeRow) for r in a.allocator_types)
    assert all(isinstance(r, InstanceRow) for r in a.allocators)
    doc = json.loads(json.dumps(a.to_json()))
    assert list(doc)[:3] == ["schema", "node", "otp_release"] and list(doc)[-1] == "defects"
    assert doc["totals"] == {"used": a.totals.used, "allocated": a.totals.allocated,
                             "unused": a.totals.unused, "usage": a.totals.usage}
    assert [r["allocator"] for r in doc["allocator_types"]] == [
        r.allocator for r in a.allocator_types]
    # worst first, as the JSON always listed them
    assert [r.unused for r in a.allocator_types] == sorted(
        (r.unused for r in a.allocator_types), reverse=True)
    assert doc["allocators"][0]["max"] == a.allocators[0].max.to_json()
    assert doc["os"]["allocated_all"] == a.totals_all.allocated


def test_holder_fields_are_data_and_the_json_is_unchanged() -> None:
    h = CategoryHolder("process_group", "feeley:link_of/3", 300 << 20, members=10_000,
                       spawned_as="erlang:apply/2", idle=9_999, scaled=True)
    h = replace(h, detail=", ".join(["spawned as erlang:apply/2", *group_facts(h)]))
    assert holder_label(h) == ("10,000 processes spawned as erlang:apply/2, most waiting in "
                               "feeley:link_of/3")
    # the facts after the label, from the fields: no detail split on ", "
    assert holder_sentence(h).endswith("(9,999 waiting with an empty mailbox, scaled from a "
                                       "sample of the processes).")
    pic = MemoryPicture(100 << 20, 50 << 20, [Category("processes", 1, 0.5, [], [h])], h)
    doc = pic.to_json()
    assert list(doc["largest"]) == HOLDER_KEYS
    assert list(doc["categories"][0]["holders"][0]) == HOLDER_KEYS
    # a detail that happens to start like a spawn call is no longer read as one
    odd = CategoryHolder("process_group", "x:y/1", 1, detail="spawned as nothing", members=2)
    assert holder_label(odd) == "2 processes of x:y/1"


def test_a_cells_exact_bytes_are_data() -> None:
    with exact_bytes():
        h = human(162_738_176)
        assert isinstance(h, Sized) and h == "155.2 MiB (162,738,176 B)"
        assert _stack(h) == "155.2 MiB\n162,738,176 B"
        cell = around("3 (", h, ") +")
        assert cell == "3 (155.2 MiB (162,738,176 B)) +"
        assert _stack(cell) == "3 (155.2 MiB) +\n162,738,176 B"
        # a size under 1 KiB is exact already: its words are never taken for exact bytes
        assert _stack(around("0 (", human(0), ")")) == "0 (0 B)"
    assert around("3 (", human(2048), ")") == "3 (2.0 KiB)" and _stack("1 (512 B)") == "1 (512 B)"


def test_a_findings_title_keeps_what_it_is_about_as_data() -> None:
    f = RuleSpec("R3", ()).finding("action", "smaller carriers", "m", {},
                                   allocator="binary_alloc", about="binary_alloc")
    assert f.title == "binary_alloc: smaller carriers" and f.topic == "smaller carriers"
    assert f.to_json()["title"] == "binary_alloc: smaller carriers" and "topic" not in f.to_json()
    plain = RuleSpec("R6", ()).finding("action", "mseg cache misses", "m", {},
                                       allocator="mseg_alloc")
    assert plain.about is None and plain.title == "mseg cache misses"


def test_disabled_allocators_are_data() -> None:
    snap = read_file(str(DUMP))
    assert snap.disabled == ["test_alloc"]
    assert Snapshot.from_json(snap.to_json()).disabled == ["test_alloc"]
    frag = read_file(str(FRAG))
    assert frag.disabled == [] and "disabled" not in frag.to_dict()
    # a cut dump: a type switched off is not one whose flags are unknown
    cut = read_file(str(DUMP))
    cut.truncated = True
    gone = "sl_alloc"  # as if the node ran +MSe false: no instance of it in the dump
    assert gone in EXPECTED_TYPES
    cut.allocators = [i for i in cut.allocators if i.allocator != gone]
    assert gone in coverage(cut).flags_unknown
    cut.disabled.append(gone)
    cut.notes = []  # the words are not read
    assert gone not in coverage(cut).flags_unknown


def test_one_signed_change_formatter() -> None:
    assert [_change_pct(x) for x in (0.3, -0.4, -45.3, 12.0, None)] == [
        "0 %", "0 %", "-45 %", "+12 %", "n/a"]


def _rendered(draw: Any) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=100, color_system=None, force_terminal=False))
    return out.getvalue()


@pytest.mark.parametrize("name", ["churn_bf", "binspike_bf", "churn_kept"])
def test_recommend_reporter_reads_the_records_only(name: str) -> None:
    """Issue 27 item 1: the terminal's recommend output comes from the typed records; the
    document beside them (`recommend --json`) is never read back: emptied, the output is the
    same, short and with --details (flags advised, a revert weighed, no flag helps)."""
    from beamalloc.advice.predict import Turnover
    from beamalloc.advice.recommend import Document, recommend
    from beamalloc.reporters.recommend import render

    busy = Turnover("binary_alloc", 5.0, 200_000, 20_000)  # two reads: the survivors turn over
    r = recommend(read_file(str(FRAG.with_name(f"{name}.json"))),
                  turnover=busy if name == "churn_bf" else None)
    v = r.records.verdict
    assert {"churn_bf": v.advised, "binspike_bf": v.reverts, "churn_kept": v.no_flag_helps}[name]
    bare = Document({}, r.records)
    for details in (False, True):
        full = _rendered(lambda c, d=details: render(r, c, details=d))  # type: ignore[misc]
        assert full == _rendered(lambda c, d=details: render(bare, c, details=d))  # type: ignore[misc]
        assert wording.headline(r.records.verdict) in full
    # `--bytes` is for the tables: the verdict's sentences read as the JSON says them
    with exact_bytes(True):
        text = " ".join(_rendered(lambda c: render(bare, c, details=True)).split())
    said = [x["why"] for x in r["verdict"]["no_flag_helps"]] + [
        x["text"] for x in r["verdict"]["reverts"]] + [r["verdict"]["flags_in_force"]["text"]]
    assert all(" ".join(x.split()) in text for x in said)


def test_the_analysis_sentences_have_one_home() -> None:
    """Issue 27 item 1: the terminal, the pages and the HTML report say the analysis in the
    wording module's sentences (advice/wording.py), not each their own."""
    from beamalloc.reporters.analyze import render
    from beamalloc.webui.pagedata import snapshot_view

    a = analyze(read_file(str(DUMP)))
    said = wording.analysis_lines(a) + wording.picture_lines(a)
    page = snapshot_view(None, a, rec=None)
    assert [*page["verdict"], *page["evidence"]][:len(said)] == said
    assert page["death"] == wording.cause_of_death(a) and page["death"]
    text = " ".join(_rendered(lambda c: render(a, c, details=True)).split())
    for line in [*wording.analysis_lines(a, short=False), *wording.cause_of_death(a)]:
        assert line in text


def test_recon_rows_max_and_pool_are_records_with_the_documents_json() -> None:
    """Issue 27 item 1: an instance's max and pool and recon_alloc's row lists are records;
    their to_json() is the document's shape (docs/analysis-schema.md), key for key."""
    a = analyze(read_file(str(FRAG)))
    doc = a.to_json()
    assert all(isinstance(r.max, InstanceMax) for r in a.allocators)
    pooled = [r for r in a.allocators if r.pool is not None]
    assert pooled and all(isinstance(r.pool, PoolRow) for r in pooled)
    assert list(doc["allocators"][0]["max"]) == [
        "sbcs_usage", "mbcs_usage", "sbcs_block_size", "sbcs_carriers_size", "mbcs_block_size",
        "mbcs_carriers_size", "mbcs_blocks", "sbcs_blocks", "mbcs_carriers", "sbcs_carriers"]
    row = next(r for r in doc["allocators"] if r["pool"] is not None)
    assert list(row["pool"]) == ["carriers", "carriers_size", "blocks", "blocks_size",
                                 "foreign_blocks"]
    assert all(set(b) == {"count", "size"} for b in row["pool"]["foreign_blocks"].values())
    assert a.cache_hit_rates and all(isinstance(r, CacheHitRate) for r in a.cache_hit_rates)
    assert list(doc["cache_hit_rates"][0]) == [
        "instance", "hit_rate", "hits", "calls", "cached_segments"]
    assert all(isinstance(r, AverageBlockSize) for r in a.average_block_sizes)
    assert list(doc["average_block_sizes"][0]) == ["allocator", "mbcs", "sbcs"]
    assert all(isinstance(r, SbcsToMbcs) for r in a.sbcs_to_mbcs)
    assert list(doc["sbcs_to_mbcs"][0]) == ["allocator", "instance", "ratio"]
    assert json.loads(json.dumps(doc)) == doc  # plain JSON: no record left inside


def test_the_time_taken_is_the_number_rendered() -> None:
    """Issue 27 item 1: the analysis keeps the Unix time; the ISO string the JSON and
    `analyze --details` show is rendered from it, never re-parsed or reformatted text."""
    from beamalloc.reporters.analyze import render

    snap = read_file(str(FRAG))
    snap.taken_at = 1714564800.25
    a = analyze(snap)
    assert a.taken_unix == 1714564800.25 and a.taken_at == "2024-05-01T12:00:00.250000Z"
    assert a.to_json()["taken_at"] == a.taken_at and "taken_unix" not in a.to_json()
    assert "taken 2024-05-01T12:00:00.250000Z" in _rendered(lambda c: render(a, c, details=True))
    assert " taken " not in _rendered(lambda c: render(a, c))  # the short header: no time
    snap.taken_at = None
    assert analyze(snap).taken_at is None


def test_an_evidence_number_is_formatted_by_its_kind_not_its_name() -> None:
    """A number carries its kind (advice/findings.py Bytes, Share), not words of its key: a
    ratio whose name says nothing of a share stays a ratio, a count named like a size stays a
    count, and the same key formats as the kind its number carries."""
    from beamalloc.advice.findings import Bytes, Share
    from beamalloc.reporters import recommend as rep

    ev = {"sbct": Bytes(2048), "hit_rate": Share(0.25), "sbcs_to_mbcs": 0.25,
          "sbcs_blocks": 3, "realloc_ratio": 0.5, "usage": 1}
    assert rep.evidence_line(ev) == (
        "sbct 2.0 KiB, hit_rate 25.0 %, sbcs_to_mbcs 0.25, sbcs_blocks 3, realloc_ratio 0.5, "
        "usage 1")
    assert rep.evidence_line({"sbct": 2048, "hit_rate": 0.25}) == "sbct 2048, hit_rate 0.25"
    # the JSON sees the numbers alone, as before they carried a kind
    assert json.dumps(ev) == json.dumps({k: v + 0 for k, v in ev.items()})
    assert (Bytes.of(None), Bytes.of("x"), Share.of(0), type(Share.of(0.5))) == (
        None, "x", 0, Share)
    assert not hasattr(rep, "NUMBER_KINDS")  # no table of keys to keep in step


def test_the_rules_give_each_evidence_number_its_kind() -> None:
    """On a fragmented node every size and share the rules put in evidence carries its kind."""
    from beamalloc.advice.findings import Bytes, Share, facts
    from beamalloc.advice.rules import evaluate

    snap = read_file(str(FRAG))
    found = evaluate(facts(snap))
    assert found
    for f in found:
        for k in ("allocated", "used", "unused", "max_allocated"):
            if k in f.evidence:
                assert type(f.evidence[k]) is Bytes, (f.rule, k)
        for k in ("usage", "mbcs_usage", "max_usage"):
            if isinstance(f.evidence.get(k), float):
                assert type(f.evidence[k]) is Share, (f.rule, k)


def test_the_lint_and_the_verdict_name_one_revert() -> None:
    """The JSON's lint line and the terminal ask the verdict for the revert (revert_of) the
    same way: each lint issue in force has the revert's text, a given one none."""
    from beamalloc.advice.recommend import recommend

    r = recommend(read_file(str(FRAG.with_name("binspike_bf.json"))),
                  given_flags="+MBas aoff +MBacul 0")
    v = r.records.verdict
    assert v.reverts
    for doc, i in zip(r["lint"], r.records.lint, strict=True):
        rv = v.revert_of(i.allocator, i.check) if i.where == "in force" else None
        assert doc["verdict"] == (None if rv is None else wording.revert(rv))
    assert any(d["verdict"] for d in r["lint"])


def test_advice_is_ordered_by_the_typed_flags_as_pasted() -> None:
    """The advised flags follow FlagSet.canonical() (the paste's order), compared as typed
    (target, param), and render to that same paste line."""
    from beamalloc.advice.predict import Turnover
    from beamalloc.advice.recommend import recommend
    from beamalloc.flags import FlagSet

    busy = Turnover("binary_alloc", 5.0, 200_000, 20_000)
    r = recommend(read_file(str(FRAG.with_name("churn_bf.json"))), turnover=busy)
    got = [x.setting for x in r.records.verdict.advised]
    assert len(got) > 1
    canon = FlagSet(tuple(got)).canonical()
    assert [(x.target, x.param) for x in got] == [(x.target, x.param) for x in canon]
    assert " ".join(x.render() for x in got) == r.records.emulator_flags


def test_a_paragraph_break_is_data_not_a_leading_newline() -> None:
    """--details starts each section on a new paragraph (an empty line before it), and no
    line of it is printed with a newline of its own text in front."""
    from beamalloc.advice.recommend import recommend
    from beamalloc.reporters.recommend import render

    r = recommend(read_file(str(FRAG.with_name("binspike_bf.json"))))
    out = _rendered(lambda c: render(r, c, details=True))
    for head in ("A setting the lint calls wrong:", "Lint (flags in force", "Paste (vm.args):"):
        assert f"\n\n{head}" in out, head
    assert "\n\n\n" not in out


def test_the_short_remedy_names_what_it_acts_on() -> None:
    """The short output's remedy cell names the holder a remedy is about, never "it"; with no
    name at hand it names the kind of thing (advice/wording.py remedy_code_short)."""
    from beamalloc.advice.recommend import recommend
    from beamalloc.advice.records import Remedy
    from beamalloc.reporters.recommend import render

    r = recommend(read_file(str(FRAG.with_name("binspike.json"))))
    v = r.records.verdict
    assert v.no_flag_helps
    gc = Remedy("gc_holder", 100 << 20, "measured by the GC probe", ("x",), False,
                "cache_server")
    entries = tuple(replace(e, remedies=(gc, *e.remedies)) for e in v.no_flag_helps)
    rec = replace(r.records, verdict=replace(v, no_flag_helps=entries))
    out = _rendered(lambda c: render(type(r)(dict(r), rec), c))
    assert "garbage-collect or hibernate cache_server" in " ".join(out.split())
    for code in ("bound_queue", "gc_holder", "bound_live_holder", "hibernate_idle"):
        said = wording.remedy_code_short(code)
        assert " it " not in f"{said} " and "{who}" not in said and "the it" not in said, said
        assert "srv" in wording.remedy_code_short(code, "srv")
