"""A node that fails after its first read (issue 27 item 1, the noticed items): `recommend NODE`
starts the replays of the first read's prediction in a thread while it reads the node again
(advice/reading.py `_Ahead`); when the node then fails (its process scan answers garbage: a
NodeError, exit 3) the command leaves at once, the replays abandoned rather than waited for:
their files are removed as it leaves, the thread ends at its next step, and the command's one
line and exit 3 are as for any peer that fails.

The node is the hostile fake peer (tests/test_hostile_peer.py), speaking the real protocol and
answering the snapshot's calls with the binary_alloc of a fragmented node (a real live read,
samples/workloads/snapshots/frag.json), so that the rules propose flags and their replays take
seconds; its process scan answers an integer where a list of pids belongs.
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import support
import test_hostile_peer as hp

from beamalloc.collector import dist
from beamalloc.collector.terms import Atom, parse_term

FRAG = support.ROOT / "samples" / "workloads" / "snapshots" / "frag.json"


def _etf(t: Any) -> bytes:
    """A parsed term as the node sends it (dist.encode, with Erlang strings)."""
    if isinstance(t, str) and not isinstance(t, Atom):
        return b"\x6b" + struct.pack(">H", len(t)) + t.encode("latin-1")
    if isinstance(t, tuple):
        return b"\x68" + bytes([len(t)]) + b"".join(_etf(x) for x in t)
    if isinstance(t, list):
        return (b"\x6c" + struct.pack(">I", len(t)) + b"".join(_etf(x) for x in t) + b"\x6a"
                if t else b"\x6a")
    return dist.encode(t)


@pytest.fixture
def peer(monkeypatch: pytest.MonkeyPatch):
    """The fake node: a fragmented node's binary_alloc and memory, then a broken scan."""
    from beamalloc.collector import live

    monkeypatch.delenv(live.ENV_HIDDEN_NODE, raising=False)
    raw = {str(k): v for k, v in (x for x in parse_term(json.loads(FRAG.read_text())["raw"] + ".")
                                  if isinstance(x, tuple) and len(x) == 2)}
    binary = dict((str(a), info) for a, info in raw["allocators"])["binary_alloc"]
    which = hp._which

    def which_binary(m: str, f: str, args: Any) -> str:  # the fake answers one allocator
        k = which(m, f, args)
        return "binary_alloc" if k == "allocator" and str(args[0][1]) == "binary_alloc" else k

    monkeypatch.setattr(hp, "_which", which_binary)
    p = hp.FakePeer(answers={"alloc_util_allocators": _etf([Atom("binary_alloc")]),
                             "binary_alloc": _etf(binary), "memory": _etf(raw["memory"]),
                             "processes": b"\x61\x2a"})  # the scan: an integer, not pids
    yield p
    p.close()


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "beamalloc-replays-ahead"]


def test_a_node_failing_after_its_first_read_is_not_waited_for(
        peer: hp.FakePeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from beamalloc.advice.reading import Reader, ReadOptions, RecommendOptions, recommend_source
    from beamalloc.collector.access import Access
    from beamalloc.collector.live import NodeError
    from beamalloc.console import Terminal

    cookie = tmp_path / "cookie"
    cookie.write_text(hp.COOKIE)
    cookie.chmod(0o600)
    files = tmp_path / "tmp"
    files.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(files))  # the Predictor's files, watched
    opts = ReadOptions(timeout=hp.TIMEOUT, max_carriers=0, processes=True,
                       access=Access(epmd_port=peer.epmd_port, cookie_file=str(cookie)))
    reader = Reader(opts, Terminal(io.StringIO(), io.StringIO(), quiet=True))
    assert not _ahead_threads()
    with pytest.raises(NodeError, match="reply"):
        recommend_source(reader, "hostile@localhost", RecommendOptions())
    ahead = _ahead_threads()
    try:
        # the replays were running when the node failed, and still are: not waited for
        assert ahead and ahead[0].is_alive()
        assert not list(files.iterdir())  # their files removed as the command left
    finally:
        for t in ahead:
            t.join(120)  # they end at their next step, on their own
    assert not any(t.is_alive() for t in ahead)
    assert not list(files.iterdir())  # nothing made after the command left


def test_the_command_says_one_line_and_exits_3(peer: hp.FakePeer, tmp_path: Path) -> None:
    cookie = tmp_path / "cookie"
    cookie.write_text(hp.COOKIE)
    cookie.chmod(0o600)
    rc, out, err, _ = support.run_capped(
        "recommend", "hostile@localhost", "--cookie-file", str(cookie), "--epmd-port",
        str(peer.epmd_port), "--timeout", str(hp.TIMEOUT), "--max-carriers", "0",
        timeout=120)
    lines = err.strip().splitlines()
    assert rc == 3, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("beamalloc: ") and "reply" in lines[0], err
    assert "Traceback" not in err and not out


@pytest.mark.parametrize("again", [False, True])
def test_a_trace_written_as_the_predictor_exits_is_removed(
        again: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the test above once lost: the replay thread makes the Predictor's directory
    and writes a trace while the command's exit removes it. Whatever the order, nothing is
    left, and the thread is told (an error, dropped by the abandoned thread): its writes fail
    in the removed directory, or it finds the Predictor exited once its trace is written."""
    from recommend_fixtures import load

    from beamalloc.advice import predict as pr
    from beamalloc.advice.findings import facts

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    writing, exited = threading.Event(), threading.Event()

    def slow_write(model: Any, snap: Any, path: Path, seed: int) -> int:
        path.write_bytes(b"half a trace")
        writing.set()
        assert exited.wait(30)
        if again:  # the writer made its file again after the exit (mkdir included)
            path.parent.mkdir(exist_ok=True)
        path.with_suffix(".more").write_bytes(b"the rest")
        return 1

    monkeypatch.setattr(pr, "_write", slow_write)
    snap = load("frag")
    model = pr.Model("stationary_mix", (("n", 1),), 1.0, "a test")
    p = pr.Predictor(snap, facts(snap)).__enter__()
    errors: list[BaseException] = []

    def replay() -> None:
        try:
            p._trace(model)
        except (RuntimeError, OSError) as e:
            errors.append(e)

    t = threading.Thread(target=replay)
    t.start()
    assert writing.wait(30)
    p.__exit__(None, None, None)
    exited.set()
    t.join(30)
    assert len(errors) == 1
    assert isinstance(errors[0], OSError if not again else RuntimeError), errors
    assert not list(tmp_path.iterdir())
    with pytest.raises(RuntimeError, match="context manager"):  # after the exit: refused
        p._trace(model)
    assert not list(tmp_path.iterdir())
