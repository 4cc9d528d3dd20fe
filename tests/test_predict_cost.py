"""What makes `recommend` cheaper must not change what it says (issue 22's cost line, issue 28
item 3): a replay's checkpoints are the end states of the trace's prefixes, the histories of
one family are prefixes of its longest, and a verdict on a Predictor warmed ahead (the
command's first read, replayed while it waits for the second) is the fresh verdict, with no
replay left to do."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from recommend_fixtures import load

from beamalloc.advice import predict as pr
from beamalloc.advice.findings import facts
from beamalloc.advice.recommend import recommend
from beamalloc.errors import InputError
from beamalloc.flags import parse
from beamalloc.refalloc.replay import replay_checkpoints, replay_histories, replay_snapshot
from beamalloc.refalloc.tracegen import History, events, history, history_params

FLAGS = ("+MBas bf", "+MBas ageffcbf +MBlmbcs 512 +MBacul de")


def _same(a: Any, b: Any) -> None:
    """Two ReplayResults hold the same model state (the series differ: a checkpoint's ends
    where the prefix was reached, not at a final sample)."""
    assert a.snapshot.to_dict()["allocators"] == b.snapshot.to_dict()["allocators"]
    assert a.snapshot.to_dict()["mseg"] == b.snapshot.to_dict()["mseg"]
    assert a.native["carriers"] == b.native["carriers"]
    assert a.native["live_blocks"] == b.native["live_blocks"]
    assert a.native["events"] == b.native["events"]


@pytest.mark.parametrize("flags", FLAGS)
def test_a_checkpoint_is_the_replay_of_the_shorter_history(tmp_path: Path, flags: str) -> None:
    """A history with more churn after the drop holds the shorter one as its prefix (the
    events and their count), and the replay's checkpoint at that count is the shorter
    history's own replay, under any strategy."""
    base = History(live=400, peak=5000, before=300, after=0, mean_size=800)
    afters = (0, 200, 400, 1600)
    paths = {}
    for a in afters:
        h = dataclasses.replace(base, after=a)
        paths[a] = tmp_path / f"h{a}.batr"
        assert history(paths[a], h, schedulers=2, seed=5) == h.events(2)
    longest = list(events(paths[afters[-1]]))
    for a in afters[:-1]:
        assert list(events(paths[a])) == longest[: dataclasses.replace(base, after=a).events(2)]
    counts = [dataclasses.replace(base, after=a).events(2) for a in afters[:-1]]
    got = replay_checkpoints(paths[afters[-1]], flags, counts, schedulers=2)
    assert len(got) == len(counts)
    for a, r in zip(afters[:-1], got, strict=True):
        _same(r, replay_snapshot(paths[a], flags, schedulers=2))
    assert got[0].native["events"] < got[-1].native["events"]


def test_checkpoints_refuse_what_they_cannot_give(tmp_path: Path) -> None:
    h = History(live=50, peak=400, before=0, after=10)
    path = tmp_path / "h.batr"
    n = history(path, h, schedulers=1)
    with pytest.raises(InputError, match="past the trace"):
        replay_checkpoints(path, None, [n + 1], schedulers=1)
    with pytest.raises(InputError, match="ascending"):
        replay_checkpoints(path, None, [n, 1], schedulers=1)
    csv = tmp_path / "t.csv"
    csv.write_text("t_ns,op,allocator,instance,type,size,id,new_id\n")
    with pytest.raises(InputError, match="binary trace"):
        replay_checkpoints(csv, None, [0])
    assert replay_checkpoints(path, None, [0, n], schedulers=1)[0].native["events"] == 0


@pytest.mark.parametrize("flags", FLAGS)
def test_histories_replayed_unwritten_and_forked_are_their_traces_replayed(
        tmp_path: Path, flags: str) -> None:  # fmt: skip
    """The calibration's histories, replayed without a file, their shared events up to the
    drop once and each forked from there on two threads, give what their written traces'
    replays give at every checkpoint, to the byte: the series and the footprint too."""
    base = History(live=400, peak=5000, before=300, after=1600, mean_size=800)
    family = [base, dataclasses.replace(base, stragglers=20, rebuild=True, phase=250, after=800),
              dataclasses.replace(base, stragglers=20, rebuild=True, phase=750, after=800),
              dataclasses.replace(base, mean_size=900)]  # another prefix: its own replay
    fs = parse(flags, otp=25)
    jobs, want = [], []
    for i, h in enumerate(family):
        path = tmp_path / f"h{i}.batr"
        n = history(path, h, schedulers=2, seed=5)
        # inside the shared prefix, just after the drop, and the end
        cps = [1000, dataclasses.replace(h, after=0).events(2), n]
        want.append(replay_checkpoints(path, fs, cps, schedulers=2))
        jobs.append((*history_params(h, schedulers=2, seed=5), cps))
    got = replay_histories(jobs, fs, 2)
    assert [len(g) for g in got] == [3] * len(family)
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert a.native == b.native
            assert a.snapshot.to_dict() == b.snapshot.to_dict()
            assert (a.flags, a.peak, a.series) == (b.flags, b.peak, b.series)
    past = [(*history_params(base, schedulers=2, seed=5), [base.events(2) + 1])]
    with pytest.raises(InputError, match="past its"):
        replay_histories(past, fs, 2)


@pytest.mark.parametrize("name", ["churn_bf", "binspike_bf"])
def test_a_warmed_predictor_gives_the_fresh_verdict_and_replays_nothing_more(name: str) -> None:
    """The command's workflow: a verdict on the first read alone fills the Predictor's caches
    (in a thread, while the node is read again); the verdict with the turnover measured then
    says what a fresh Predictor says, and replays nothing the first did not."""
    snap = load(name)
    busy = pr.Turnover("binary_alloc", 5.0, 200_000, 20_000)
    fresh = recommend(snap, turnover=busy)
    with pr.Predictor(snap, facts(snap)) as p:
        recommend(snap, predictor=p)  # the verdict run ahead, no turnover yet
        runs, histories = len(p._history_runs), len(p._histories)
        p.turnover = busy
        warm = recommend(snap, turnover=busy, predictor=p)
        assert (len(p._history_runs), len(p._histories)) == (runs, histories)
    assert json.dumps(warm, sort_keys=True) == json.dumps(fresh, sort_keys=True)
