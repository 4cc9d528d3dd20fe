"""The verdict as typed records (advice/records.py) said by one wording module
(advice/wording.py): issue 22 items 2, 4 and 7, issue 27 item 1."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from recommend_fixtures import WORKLOADS, load
from support import SAMPLES

from beamalloc.advice import wording
from beamalloc.advice.findings import Finding
from beamalloc.advice.recommend import recommend, verdict
from beamalloc.advice.records import (
    MIN_GAIN,
    NO_FLAG,
    STATES,
    UNDECIDED,
    NoFlagEntry,
    Prediction,
    Reason,
    Total,
)
from beamalloc.collector.sources import read_file
from beamalloc.flags import parse

_CACHE: dict[str, object] = {}


def rec(name: str):
    """verdict() with predictions, once per snapshot for the module (a few seconds each)."""
    if name not in _CACHE:
        _CACHE[name] = verdict(load(name))
    return _CACHE[name]


@pytest.mark.parametrize("name", [*WORKLOADS, "frag"])
def test_first_line_stands_alone(name: str) -> None:
    """State, bytes at stake, the one thing to do, in at most 100 characters; then at most
    three lines of why; the JSON is the records' own serialisation."""
    r = rec(name)
    v = r.verdict
    head, why = wording.headline(v), wording.why(v)
    assert v.state in STATES and head.startswith(v.state + ": ")
    assert len(head) <= wording.HEADLINE_MAX and len(why) <= wording.WHY_MAX
    if v.state != "HEALTHY":
        assert "MiB" in head  # the bytes at stake
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["schema"] == "beamalloc.recommend/2"
    assert doc["verdict"]["headline"] == head and doc["verdict"]["why"] == why
    assert doc["verdict"]["counts"]["advised"] == len(doc["recommendations"]) == len(v.advised)
    assert doc["verdict"]["reasons"][0]["code"] == v.reasons[0].code
    for x in doc["recommendations"]:  # per flag: effect, band, calibration, seeded from, workload
        assert set(x["effect"]) >= {"unused_saving", "band", "calibration_error", "seeded_from",
                                    "workload"}
        p = x["predicted"]
        assert p is not None and {"unused_saving", "band", "calibration", "seeded_from",
                                  "workload", "futures", "known", "known_by"} <= set(p)
    for held in doc["held_back"]:  # a reason is a code with its numbers, beside its words
        assert held["reason"]["code"] and held["why"]


def _heap_prediction() -> Prediction:
    """heapchurn's R4 prediction (held back: from counters the model misses the node)."""
    p = next(h.prediction for h in rec("heapchurn").verdict.held_back if h.rule == "R4")
    assert p is not None
    return p


def test_every_predicted_figure_carries_its_calibration_error() -> None:
    v = rec("heapchurn").verdict
    first = _heap_prediction()
    err = first.calibration_error
    assert err is not None and err == pytest.approx(abs(1 - first.fidelity), abs=0.002)
    assert f"calibration error {err * 100:.1f} %" in wording.figure(first)
    assert "calibration error" in wording.why(v)[0]


def test_findings_are_not_mutated_in_place() -> None:
    """The rules' findings stay as the rules made them: a held-back finding is a new record."""
    from beamalloc.advice.findings import facts
    from beamalloc.advice.rules import evaluate

    snap = load("frag")
    before = [f.to_json() for f in evaluate(facts(snap))]
    r = verdict(snap)
    assert [f.to_json() for f in evaluate(facts(snap))] == before
    r3 = next(f for f, _, _ in r.findings if f.rule == "R3")
    assert r3.level == "info" and r3.title.endswith("(not advised)") and r3.advice == []


def test_held_back_finding_is_worded_by_the_wording_module() -> None:
    """A held-back finding's title, topic and message are composed in advice/wording.py (the
    one home of sentences), not by the recommender: `_hold_back` returns wording's words."""
    from beamalloc.advice.recommend import _hold_back

    f = Finding("R3", "action", "binary_alloc: mostly empty carriers", "Carriers sit empty.",
                {}, ("docs/erts/tuning.md",), allocator="binary_alloc",
                topic="mostly empty carriers", about="binary_alloc")
    why = Reason("rate_low", {"rate": 2.0, "seconds": 10.0, "min_rate": 5000.0})
    words = wording.not_advised(f, why)
    assert words == {
        "title": "binary_alloc: mostly empty carriers (not advised)",
        "topic": "mostly empty carriers (not advised)",
        "message": "Carriers sit empty. Not advised: " + wording.reason(why) + ".",
    }
    assert wording.not_advised(replace(f, topic=None), why)["topic"] is None
    held, h = _hold_back(f, why, None)
    assert (held.title, held.topic, held.message) == tuple(words.values())
    assert held.level == "info" and held.advice == [] and h.reason == why


def _prediction(base: dict, **extra) -> Prediction:
    return Prediction.from_dict({**base, **extra})


def test_model_that_does_not_reproduce_the_node_decides_nothing() -> None:
    """Issue 22 item 2: where the calibration says the model does not reproduce the node, the
    verdict says so and does not decide from it, whatever its figure."""
    from beamalloc.advice.recommend import judge

    base = _heap_prediction().raw
    fnd = Finding("R4", "action", "t", "m", {}, (), "eheap_alloc")
    ok = _prediction(base, calibration={"tolerance": 0.15, "error": 0.05, "reproduces": True,
                                        "measures": {"unused": 0.05}})
    assert judge(fnd, ok, None, None, None) is None
    assert wording.calibration(ok) == "calibration error 5.0 %"
    off = _prediction(base, calibration={"tolerance": 0.15, "error": 0.4, "reproduces": False,
                                         "measures": {"unused": 0.4}})
    why = judge(fnd, off, None, None, None)
    assert why is not None and why.code == "not_reproduced"
    assert "does not reproduce eheap_alloc" in wording.reason(why)
    assert "calibration error 40.0 %" in wording.reason(why)


def test_futures_that_differ_are_both_given() -> None:
    """Issue 22 item 2/3: `known` null and the futures on either side of the floor: no flag
    decided by a coin toss; both figures, what tells them apart and the command that does."""
    from beamalloc.advice.recommend import judge

    base = _heap_prediction().raw
    futures = [{"name": "turnover", "assumes": "churn replaces the survivors",
                "unused_saving": 0.9, "band": {"unused_saving": [0.88, 0.91]}, "calibration": None},
               {"name": "kept", "assumes": "the survivors stay", "unused_saving": 0.03,
                "band": None, "calibration": None}]  # fmt: skip
    ok = {"tolerance": 0.15, "error": 0.05, "reproduces": True, "measures": {}}
    p = _prediction(base, futures=futures, known=None, calibration=ok,
                    known_by="a second sample a few seconds later: the turnover rate")
    assert p.futures_differ() and p.future("kept").unused_saving == 0.03
    fnd = Finding("R4", "action", "t", "m", {}, (), "eheap_alloc")
    why = judge(fnd, p, None, None, None)
    assert why is not None and why.code == "futures_differ"
    words = wording.reason(why)
    assert "if these blocks turn over: -90 %" in words and "if they stay: -3 %" in words
    assert "turnover rate" in words
    # once known, the known future decides (here: it turns over, so the flags pass)
    assert not _prediction(base, futures=futures, known="turnover",
                           calibration=ok).futures_differ()
    # the headline gives both, within 100 characters
    v = rec("heapchurn").verdict
    e = NoFlagEntry("eheap_alloc", 300 << 20, 400 << 20, 0.25, (), (why,), None,
                    Reason("no_carrier_data"), None, ())
    nv = replace(v, state=UNDECIDED, advised=(), no_flag_helps=(e,),
                 reasons=(Reason("futures_differ", {"unused": e.unused, **why.numbers}),))
    head = wording.headline(nv)
    assert head == ("UNDECIDED: 300.0 MiB of eheap_alloc unused; flags give -90 % if it "
                    "turns over, -3 % if kept")
    assert len(head) <= wording.HEADLINE_MAX
    assert any("recommend NODE" in x for x in wording.why(nv))  # the command that tells


def test_one_gain_floor() -> None:
    from beamalloc.advice import recommend as rc

    assert rc.MIN_GAIN is MIN_GAIN == 0.20
    assert recommend(load("heapchurn"))["verdict"]["min_gain"] == MIN_GAIN


def test_lint_wrong_setting_is_never_left_standing() -> None:
    """Issue 22 item 4: binspike under `+MBas bf` from counters. The lint says `as bf` with
    acul 0 turns migration off; the verdict weighs reverting it to OTP's default with its own
    prediction, and the verdict, the lint and the paste say the same."""
    r = rec("binspike_bf")
    v, doc = r.verdict, r.to_json()
    (rv,) = v.reverts
    # typed flags (beamalloc/flags.py), rendered only by the wording and the JSON
    assert rv.flags_in_force == tuple(parse("+MBas bf"))
    assert rv.flags == tuple(parse("+MBas aoffcbf +MBacul de"))
    assert rv.prediction is not None and rv.prediction.flags == "+MBas aoffcbf +MBacul de"
    said = wording.revert(rv)
    if rv.advised:  # then it is the advice, and the paste has it
        assert v.state == "CHANGE FLAGS" and "+MBas aoffcbf" in doc["emulator_flags"]
    else:  # then the numbers say why not, everywhere the setting is named
        assert rv.prediction.unused_saving < MIN_GAIN and v.state in (NO_FLAG, UNDECIDED)
        assert f"below the {wording.share(MIN_GAIN)} a restart is for" in said
        assert any(wording.revert_short(rv) in x for x in wording.why(v))
        assert "reverting `+MBas bf` to `+MBas aoffcbf +MBacul de` predicts" in " ".join(
            wording.why(v))
        (lint,) = [x for x in doc["lint"] if x["check"] == "migration-off"]
        assert lint["verdict"] == said
        from beamalloc.reporters.recommend import paste_of

        block = paste_of(r, "vm.args")
        assert block.startswith("# beamalloc: no +M flags to set") and said in block
    # binary:copy/1 is not offered as is under bf: the copies would land in the same holes
    codes = [x.code for x in v.no_flag_helps[0].remedies] if v.no_flag_helps else []
    assert "binary_copy" not in codes


@pytest.mark.parametrize("name", [*WORKLOADS, "frag"])
def test_verdict_lint_and_paste_agree(name: str) -> None:
    """On every workload: a migration-off setting in force on an allocator no flag helps is
    weighed (a revert with a prediction or why there is none)."""
    r = rec(name)
    no_flag = {e.allocator for e in r.verdict.no_flag_helps}
    for i in r.lint:
        if i.check == "migration-off" and i.where == "in force" and i.allocator in no_flag:
            assert any(rv.allocator == i.allocator for rv in r.verdict.reverts), name


def test_no_prose_parsed_back() -> None:
    """The in-force note comes from the record (release known or not), not from prose."""
    doc = recommend(read_file(str(SAMPLES / "recon_snapshot.txt")), predict=False)
    fin = doc["verdict"]["flags_in_force"]
    assert fin["release_known"] is False and fin["modelled"] is False
    assert fin["note"].startswith("the source does not record the OTP release")


def test_records_total() -> None:
    v = rec("frag").verdict
    assert isinstance(v.total, Total) and v.total.unused > 100 << 20


def test_revert_headline() -> None:
    """A revert that passes the floor is the advice: the headline names the setting it undoes."""
    v = rec("heapchurn").verdict
    why = Reason("reverts", {"allocator": "eheap_alloc", "unused": 287 << 20,
                             "flags_in_force": "+MHas bf", "saving": 0.62,
                             "calibration_error": 0.04})
    rv = replace(v, state="CHANGE FLAGS", reasons=(why,))
    head = wording.headline(rv)
    assert head == ("CHANGE FLAGS: `+MHas bf` leaves 287.0 MiB of eheap_alloc unused; revert it; "
                    "predicted -62 %")
    # at 80 columns the same line, shorter: the parts that fit, none cut
    assert wording.fit(wording.headline_parts(rv), 80) == (
        "CHANGE FLAGS: `+MHas bf` leaves 287.0 MiB of eheap_alloc unused; revert it")
    assert len(head) <= wording.HEADLINE_MAX
