"""Each fault gives NodeError naming its cause (a stalled node: "timed out after T s"), leaving no
hidden node. That the call returns at all is what a stall could break; how fast is not asserted.

The `marker` fixture names this test's hidden nodes and asserts in teardown that no process
with `beamalloc_<marker>` in its argv is left.
"""

from __future__ import annotations

import os
import secrets
import signal
import time

import pytest

from beamalloc.collector import live, relay

pytestmark = pytest.mark.live

TIMEOUT = 3.0


def _fails(node: str, cookie: str, timeout: float = TIMEOUT) -> str:
    with pytest.raises(live.NodeError) as ei:
        live.snapshot_node(node, cookie, timeout=timeout)
    msg = str(ei.value)
    assert "\n" not in msg and cookie not in msg
    return msg


def test_no_such_node(target, marker, way) -> None:
    name = f"nobody_{secrets.token_hex(3)}"
    host = target.node.split("@")[1]
    msg = _fails(f"{name}@{host}", target.cookie)
    assert msg.startswith(f"no node named {name} on host {host}")
    assert target.name in msg  # what epmd does know


def test_host_unreachable(marker, way) -> None:
    msg = _fails("someone@nohost.invalid", "whatever")
    assert msg.startswith("cannot reach epmd on host nohost.invalid")


def test_wrong_cookie(target, marker, way) -> None:
    wrong = f"W{secrets.token_hex(10)}"
    msg = _fails(target.node, wrong)
    assert msg.startswith("authentication failed: the node is up but rejected our cookie")
    assert target.cookie not in msg


def test_target_halts_mid_snapshot(node_factory, marker, way, tmp_path) -> None:
    # Halts as soon as any node, hidden ones included, connects; rex first stops serving, so
    # that our own client's calls (collector/dist.py, through rex) cannot finish before it.
    ready = tmp_path / "ready"
    n = node_factory(eval_="ok = net_kernel:monitor_nodes(true, [{node_type, all}]), "
                           f"ok = file:write_file(\"{ready}\", \"\"), "
                           "receive {nodeup, _, _} -> erlang:suspend_process(whereis(rex)), "
                           "erlang:halt() end.")
    end = time.monotonic() + 20  # epmd lists it before its -eval listens; our client is fast
    while not ready.exists():
        assert time.monotonic() < end, "the target's -eval did not start"
        time.sleep(0.02)
    msg = _fails(n.node, n.cookie)
    assert msg == f"node {n.node} went down during the snapshot"


def test_target_stalls(node_factory, marker, way) -> None:
    n = node_factory()
    os.kill(n.pid, signal.SIGSTOP)  # registered with epmd, accepts TCP, never answers
    msg = _fails(n.node, n.cookie)
    assert msg.startswith(f"timed out after {TIMEOUT:g} s")
    assert n.node in msg


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_interrupt_kills_hidden_node(node_factory, marker, hidden, monkeypatch, exc) -> None:
    """An exception while the agent runs still kills its process group (`marker` checks)."""
    n = node_factory()
    os.kill(n.pid, signal.SIGSTOP)  # keep the agent busy until we interrupt it

    def interrupted(*a: object, **kw: object) -> None:  # while we wait for the agent's answer
        deadline = time.monotonic() + 60
        while not hidden() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert hidden(), "the hidden node never started"
        raise exc("interrupted")

    monkeypatch.setattr(relay.Relay, "answer", interrupted)
    with pytest.raises(exc):
        live.snapshot_node(n.node, n.cookie, timeout=TIMEOUT)
    assert hidden() == []


def test_an_agent_cache_we_cannot_write_is_one_line(monkeypatch, tmp_path) -> None:
    """A HOME or XDG_CACHE_HOME we may not write (nobody's, a read-only install host): a
    NodeError saying what to set, not an OSError's traceback (root bypasses modes, so the
    cache is put below a plain file)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))
    with pytest.raises(live.NodeError, match="set XDG_CACHE_HOME to a writable directory"):
        relay.erlang_ebin()
