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
def test_a_proposal_run_beside_the_calibration_is_the_same_prediction(name: str) -> None:
    """`_history(target, ahead)` replays the proposal's likely pass with the calibration; the
    prediction is the one of a calibration alone followed by the proposal's own pass."""
    snap = load(name)
    f = facts(snap)
    flags = parse("+MBas ageffcbf +MBlmbcs 512 +MBacul de", otp=pr.otp_of(snap))
    with pr.Predictor(snap, f) as p:
        got = p.predict("binary_alloc", "R3", flags)
        h = p._histories["binary_alloc"]
    with pr.Predictor(snap, f) as q:
        q._history("binary_alloc")  # the calibration alone, nothing ahead
        want = q.predict("binary_alloc", "R3", flags)
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    if h is None:  # binspike: no history fits (no carrier bands), nothing ran ahead
        assert not p._history_runs
        return
    # the pass ahead: the kept history and the turnover's end under the proposal, cached
    family = dataclasses.replace(h.fit.base(), after=0)
    end = dataclasses.replace(h.fit.base(), after=h.fit.live).events(h.fit.modelled)
    after = pr.FlagSet(p.base.flags + flags.flags, otp=p.base.otp).render()
    assert (family, end, after) in p._history_runs
