"""The passes of several flag sets in one call (refalloc/replay.py `replay_histories_under`,
history.rs `replay_under`: a calibration and a proposal's pass side by side, issue 28 item 3)
give what each flag set's own call gives, to the byte; and a prediction whose proposal pass ran
beside the calibration is the prediction of a Predictor that ran them one after the other."""

from __future__ import annotations

import dataclasses
import json

import pytest
from recommend_fixtures import load

from beamalloc.advice import predict as pr
from beamalloc.advice.findings import facts
from beamalloc.errors import InputError
from beamalloc.flags import parse
from beamalloc.refalloc.replay import replay_histories, replay_histories_under
from beamalloc.refalloc.tracegen import History, history_params

FLAGS = ("+MBas bf", "+MBas ageffcbf +MBlmbcs 512 +MBacul de", "+MBas aoffcbf +MBacul de")


def test_flag_sets_replayed_together_are_each_replayed_alone() -> None:
    base = History(live=400, peak=5000, before=300, after=1600, mean_size=800)
    hs = [base, dataclasses.replace(base, stragglers=20, rebuild=True, phase=250, after=800)]
    jobs = [(*history_params(h, schedulers=2, seed=5),
             [1000, dataclasses.replace(h, after=0).events(2), h.events(2)]) for h in hs]
    runs = [(parse(f, otp=25), jobs[: 2 - i % 2]) for i, f in enumerate(FLAGS)]
    got = replay_histories_under(runs, 2)
    assert [len(g) for g in got] == [2, 1, 2]
    for (fs, js), g in zip(runs, got, strict=True):
        alone = replay_histories(js, fs, 2)
        for a_h, b_h in zip(g, alone, strict=True):
            assert len(a_h) == 3
            for a, b in zip(a_h, b_h, strict=True):
                assert a.native == b.native
                assert a.snapshot.to_dict() == b.snapshot.to_dict()
                assert (a.flags, a.peak, a.series) == (b.flags, b.peak, b.series)
    # one flag set's failure fails the call, named
    past = [(*history_params(base, schedulers=2, seed=5), [base.events(2) + 1])]
    with pytest.raises(InputError, match="past its"):
        replay_histories_under([(runs[0][0], jobs), (runs[1][0], past)], 2)


@pytest.mark.parametrize("name", ["churn_bf", "binspike_bf"])
def test_a_proposal_replayed_ahead_is_the_same_prediction(name: str) -> None:
    """A flag set the verdict will ask (Predictor.ahead) is replayed beside the first proposal,
    at the same points: asked next, it replays nothing more, and its prediction and the first
    one are a fresh Predictor's."""
    snap = load(name)
    f = facts(snap)
    otp = pr.otp_of(snap)
    first = parse("+MBas ageffcbf +MBlmbcs 512 +MBacul de", otp=otp)
    then = parse("+MBas aoffcbf +MBacul de", otp=otp)
    with pr.Predictor(snap, f, ahead=lambda: {"binary_alloc": [then]}) as p:
        got = [p.predict("binary_alloc", "R3", first)]
        runs = set(p._history_runs)
        got.append(p.predict("binary_alloc", "R3", then))
        assert set(p._history_runs) == runs  # nothing replayed for the second
    want = []
    for fs in (first, then):
        with pr.Predictor(snap, f) as q:
            want.append(q.predict("binary_alloc", "R3", fs))
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    if got[0]["seeded_from"] != "history":
        return
    assert got[1]["seeded_from"] == "history"
    # the turnover known, the finding is decided: what would be asked next is not replayed
    busy = pr.Turnover("binary_alloc", 5.0, 200_000, 20_000)
    with pr.Predictor(snap, f, turnover=busy, ahead=lambda: {"binary_alloc": [then]}) as p:
        p.predict("binary_alloc", "R3", first)
        after = pr.FlagSet(p.base.flags + then.flags, otp=p.base.otp).render()
        assert not [k for k in p._history_runs if k[2] == after]


def test_the_flags_a_verdict_asks_are_gathered_without_a_replay() -> None:
    """reading._asked: the verdict's proposals (R3's, and the revert a held-back R3 leaves
    to ask on a node that runs bf with acul 0), with nothing replayed."""
    from beamalloc.advice.reading import _asked

    snap = load("churn_bf")
    with pr.Predictor(snap, facts(snap)) as p:
        asked = _asked(p, None)
        assert not p._history_runs and not p._runs
    flags = [fs.render() for fs in asked["binary_alloc"]]
    assert any("ageffcbf" in x for x in flags), flags
    assert len(flags) == len(set(flags))
