"""`recommend NODE`'s second read when only the turnover is asked for (collector/counters.py,
advice/reading.py `Reader.turnover`): binary_alloc's counters read again over one connection
until they show what is waited for, on a real node."""

from __future__ import annotations

import io
import time

import pytest

from beamalloc.advice.predict import measure_turnover
from beamalloc.advice.reading import Reader, ReadOptions
from beamalloc.collector.counters import read_until
from beamalloc.collector.live import snapshot_node
from beamalloc.console import Terminal
from beamalloc.snapshot import Snapshot

pytestmark = pytest.mark.live


def test_the_counters_are_read_until_they_show_it(target) -> None:
    first = snapshot_node(target.node, target.cookie, timeout=30.0, max_carriers=0)
    seen: list[Snapshot] = []

    def at_once(s: Snapshot) -> bool:
        seen.append(s)
        return True

    got = read_until(target.node, target.cookie, "binary_alloc", at_once, 5.0, timeout=30.0)
    assert seen == [got]  # what was waited for came at the first read: no second
    scheds = [i for i in got.instances("binary_alloc") if i.instance >= 1]
    assert len(scheds) == 4 and got.node == first.node  # the target runs 4 schedulers
    assert got.taken_at is not None and first.taken_at is not None
    assert got.taken_at > first.taken_at
    # the same counters the snapshot reads, only later: they never go down
    assert sum(i.calls.get("binary_alloc", 0) for i in scheds) >= sum(
        i.calls.get("binary_alloc", 0) for i in first.instances("binary_alloc")
        if i.instance >= 1)

    seen.clear()
    t = time.monotonic()
    never = read_until(target.node, target.cookie, "binary_alloc",
                       lambda s: bool(seen.append(s)), 0.3, timeout=30.0, every=0.05)  # fmt: skip
    assert len(seen) >= 2 and never is seen[-1]  # read again until the time was up
    assert time.monotonic() - t >= 0.3  # it does not give up before


def test_an_idle_node_shows_no_turnover(target, monkeypatch: pytest.MonkeyPatch) -> None:
    """The target does nothing: its counters never show a turnover, so the reads go on to the
    end of the interval, and the verdict's turnover says it cannot tell."""
    monkeypatch.setenv("BEAMALLOC_COOKIE", target.cookie)  # the reader's way to the cookie
    reader = Reader(ReadOptions(timeout=30.0), Terminal(io.StringIO(), io.StringIO()))
    first = snapshot_node(target.node, target.cookie, timeout=30.0, max_carriers=0)
    turn = reader.turnover(target.node, first, 0.5)
    assert turn is not None and turn.idle and turn.known is None
    assert turn.seconds >= 0.49 and "idle between two reads" in turn.line
    assert measure_turnover(first, first) is None  # one read is no interval
