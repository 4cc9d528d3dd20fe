"""The process and ETS scans `recommend NODE` starts beside its first read (advice/reading.py
`Reader.scans_beside`, `_Beside`): when they run, and that a scan's result or error reaches the
caller as the call in its own thread would have given it."""

from __future__ import annotations

import io
import threading

import pytest

from beamalloc.advice.reading import Reader, ReadOptions, _Beside
from beamalloc.collector.transport import ENV_HIDDEN_NODE
from beamalloc.console import Terminal
from beamalloc.errors import InputError


def test_a_read_beside_gives_its_result_and_raises_its_error_in_the_caller() -> None:
    started = threading.Event()

    def slow() -> int:
        started.wait(5)
        return 42

    def bad() -> None:
        raise InputError("the node went away")

    b = _Beside({"table": slow, "ets": bad})
    started.set()
    assert b.get("table") == 42
    with pytest.raises(InputError, match="went away"):
        b.get("ets")
    assert b.get("table") == 42  # read again: the same result, no second scan


def _reader(processes: bool) -> Reader:
    return Reader(ReadOptions(processes=processes), Terminal(io.StringIO(), io.StringIO()))


def test_scans_run_beside_only_for_a_live_node_read_with_processes_over_our_client(
        monkeypatch) -> None:  # fmt: skip
    """(Where they run, recommend NODE's live tests and tests/e2e read the node through them.)"""
    monkeypatch.delenv(ENV_HIDDEN_NODE, raising=False)
    assert _reader(True).scans_beside("dump.txt") is None  # a file: nothing to scan
    assert _reader(False).scans_beside("n@h") is None  # --no-processes
    monkeypatch.setenv(ENV_HIDDEN_NODE, "1")  # the relay boots a hidden node per connection
    assert _reader(True).scans_beside("n@h") is None
