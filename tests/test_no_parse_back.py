"""Typed records end to end (issue 27 item 1): code that needs a flag's parameter or a line's
cut asks the record, never the text it was rendered to."""

from __future__ import annotations

from recommend_fixtures import load

from beamalloc.advice import wording
from beamalloc.advice.recommend import Rate, verdict
from beamalloc.analyzer.death import Death
from beamalloc.flags import Flag


def test_a_recommendation_keeps_its_typed_flag_out_of_its_json() -> None:
    snap = load("healthy")
    for m in snap.mseg:
        m.calls["mseg_alloc"], m.cache_hits = 50_000, 5_000
    v = verdict(snap, rate=Rate(5.0, {}, 120.0)).verdict
    (rec,) = v.advised
    assert rec.setting == Flag("M", "mcs", 30) and (rec.flag, rec.value) == ("+MMmcs", "30")
    assert "setting" not in rec.to_json()
    # the speed trade's cost is computed from the typed value (R6: the extra cached segments)
    (trades,) = [r.numbers["trades"] for r in v.reasons if r.code == "speed_trade"]
    assert [t["rule"] for t in trades] == ["R6"] and trades[0]["resident"] > 0


def test_the_slogan_line_follows_the_cut_not_three_dots() -> None:
    """A slogan that ends in "..." of its own but fits is not said twice; one death_line cuts
    is said whole under it."""
    fits = Death("crash", "init terminating in do_boot ...", "a crash")
    assert wording.death_line(fits).endswith("do_boot ...")
    assert not any(x.startswith("Slogan:") for x in wording.death_why(fits))
    long = Death("crash", "init terminating in do_boot " + "x" * 200, "a crash")
    assert wording.death_line(long).endswith("...")
    assert sum(x.startswith("Slogan:") for x in wording.death_why(long)) == 1
