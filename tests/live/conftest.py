"""Real BEAM nodes for the live-collector tests (started by tests/otp.py, on any release).

The test's own nodes (targets, probes) get their cookie on the command line; only the node that
beamalloc starts must never have it there. Every node started here is killed in teardown.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from otp import HOST, Node, epmd_names, erl_eval, start_node

from beamalloc.collector import live, relay

__all__ = ["HOST", "Node", "epmd_names", "erl_eval", "start_node"]


def cmdlines() -> Iterator[tuple[int, bytes]]:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                yield int(d.name), (d / "cmdline").read_bytes()
            except OSError:
                continue


def ours(marker: str) -> list[int]:
    """Pids of processes whose argv holds `beamalloc_` and this test's marker."""
    return [pid for pid, cmd in cmdlines() if b"beamalloc_" in cmd and marker.encode() in cmd]


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Name this test's hidden nodes beamalloc_<marker>…, and check none outlives the test.
    Snapshots go through a hidden node ($BEAMALLOC_HIDDEN_NODE=1) unless the test also asks
    for `way` (after `marker`), which runs it both ways."""
    tag = f"t{secrets.token_hex(4)}"
    monkeypatch.setenv(live.ENV_HIDDEN_NODE, "1")
    monkeypatch.setattr(relay, "_node_suffix", lambda: f"{tag}{secrets.token_hex(2)}")
    assert ours(tag) == []
    yield tag
    assert ours(tag) == [], "a beamalloc hidden node outlived snapshot_node()"


@pytest.fixture(params=["direct", "hidden"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Plain TCP distribution is reached two ways (collector/live.py): our own client
    (collector/dist.py) and, with $BEAMALLOC_HIDDEN_NODE=1, a hidden node. Both are tested."""
    if request.param == "hidden":
        monkeypatch.setenv(live.ENV_HIDDEN_NODE, "1")
    else:
        monkeypatch.delenv(live.ENV_HIDDEN_NODE, raising=False)
    return request.param


@pytest.fixture
def hidden(marker: str) -> object:
    """`hidden()`: pids of this test's beamalloc hidden nodes still alive."""
    return lambda: ours(marker)


@pytest.fixture
def node_factory() -> Iterator[type]:
    started: list[Node] = []

    def factory(*args: str, eval_: str | None = None, wait: bool = True,
                cookie: str | None = None) -> Node:
        n = start_node(list(args), eval_, wait, cookie)
        started.append(n)
        return n

    yield factory
    for n in started:
        n.stop()


@pytest.fixture(scope="module")
def target() -> Iterator[Node]:
    """An ordinary node with 4 schedulers, shared by the read-only tests of a module."""
    n = start_node(["+S", "4"])
    yield n
    n.stop()


@pytest.fixture(scope="module")
def any_target(otp_release: str) -> Iterator[Node]:
    """`target` under each test release in turn (OTP 25, 27, 29: tests/otp.py)."""
    n = start_node(["+S", "4"], release=otp_release)
    yield n
    n.stop()


@pytest.fixture
def probe() -> object:
    """`probe(node, expr)`: evaluate expr on a separate node, `T` bound to the target."""
    return erl_eval


@pytest.fixture
def no_hidden_node(monkeypatch):
    """Fail the test if anything starts a hidden node."""
    def refuse(*a, **k):
        raise AssertionError("a hidden node was started")
    monkeypatch.setattr(relay, "start_hidden_node", refuse)
