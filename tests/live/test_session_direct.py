"""collector/session.py: a watch's kept transports, our own client's or the relay's."""

from __future__ import annotations

import shutil
import time

import pytest

from beamalloc.collector import live
from beamalloc.collector.access import Access
from beamalloc.collector.session import Session

from .conftest import HOST, epmd_names, start_node

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def test_one_name_many_nodes_kept_and_reconnected(no_hidden_node) -> None:
    a = start_node(["+S", "2"])
    b = start_node(["+S", "3"], cookie=a.cookie)  # a cluster shares one cookie
    try:
        before = {n for n in epmd_names() if n.startswith("beamalloc_")}
        with Session(a.cookie) as s:
            ours = {n for n in epmd_names() if n.startswith("beamalloc_")} - before
            assert len(ours) == 1  # one pooled name for every target
            for _ in range(3):
                sa, sb = s.snapshot(a.node, 10), s.snapshot(b.node, 10, max_carriers=100)
                assert (sa.schedulers, sb.schedulers) == (2, 3)
                assert sa.os_pid == a.pid and sb.carriers
            conn_a = s._conns[a.node][1][0]
            s.snapshot(a.node, 10)
            assert s._conns[a.node][1][0] is conn_a  # kept, not reopened
            assert s.cluster_nodes(a.node, 10) == [a.node]
            name = b.name
            b.stop()
            with pytest.raises(live.NodeError, match=f"no node named {name}|went down"):
                s.snapshot(b.node, 10)
            assert s.snapshot(a.node, 10).node == a.node  # the others go on
            b = start_node(["+S", "3"], cookie=a.cookie, name=name)  # back, a new VM
            assert s.snapshot(b.node, 10).os_pid == b.pid
            with pytest.raises(live.NodeError, match="no node named nope_1"):
                s.snapshot(f"nope_1@{HOST}", 10)
        assert {n for n in epmd_names() if n.startswith("beamalloc_")} <= before
    finally:
        a.stop()
        b.stop()


def test_wrong_cookie_is_the_usual_line(no_hidden_node) -> None:
    t = start_node([])
    try:
        with Session("wrong-cookie") as s, \
                pytest.raises(live.NodeError, match="authentication failed"):
            s.snapshot(t.node, 10)
    finally:
        t.stop()


def test_session_chooses_its_transport(monkeypatch) -> None:
    monkeypatch.delenv(live.ENV_HIDDEN_NODE, raising=False)
    assert not Session("c", access=Access()).relayed
    assert Session("c", access=Access(proto_dist="inet_tls")).relayed
    monkeypatch.setenv(live.ENV_HIDDEN_NODE, "1")
    assert Session("c", access=Access()).relayed


def test_a_connection_the_target_dropped_is_reopened(no_hidden_node) -> None:
    """A target with net_ticktime 2 drops a connection silent for a few seconds (we answer its
    ticks only while we read); the next sample reconnects once, and says nothing."""
    t = start_node(["-kernel", "net_ticktime", "2"])
    try:
        with Session(t.cookie) as s:
            assert s.snapshot(t.node, 10).os_pid == t.pid
            first = s._conns[t.node][1][0]
            time.sleep(5)
            assert s.snapshot(t.node, 10).os_pid == t.pid
            assert s._conns[t.node][1][0] is not first  # a new connection
    finally:
        t.stop()


def test_a_node_that_was_stopped_answers_at_once_when_it_resumes(no_hidden_node) -> None:
    """A watch's flapping node (SIGSTOP, a timed-out sample, SIGCONT): when it resumes, rex
    sends the late reply and the target connects back to our name to deliver it. Our name's
    port refuses that at once, so the very next sample connects (at most a few "nok" answers
    while the target's attempt fails), instead of every sample failing for net_setuptime."""
    import os
    import signal

    n = start_node()
    try:
        with Session(n.cookie) as s:
            s.snapshot(n.node, 10)
            os.killpg(n.pid, signal.SIGSTOP)
            try:
                with pytest.raises(live.NodeError, match="timed out"):
                    s.snapshot(n.node, 1)
            finally:
                os.killpg(n.pid, signal.SIGCONT)
            for _ in range(3):  # each within its timeout, none refused
                assert s.snapshot(n.node, 3).os_pid == n.pid
    finally:
        n.stop()


def test_a_relayed_session_is_one_hidden_node_for_every_call(marker, hidden, monkeypatch,
                                                             otp_release) -> None:
    """The hidden node's kind (TLS's way, forced here): one node relays the snapshots of two
    targets (OTP 25, 27, 29), a process scan, the GC probe, the ETS scan and a call that raises
    on the target, each read by the same Python code as our own client's; when the session ends
    no hidden node is left (`marker`)."""
    from beamalloc.collector import ets, processes

    a = start_node(["+S", "2"], release=otp_release)
    b = start_node(["+S", "3"], cookie=a.cookie, release=otp_release)
    try:
        with Session(a.cookie) as s:
            assert s.relayed and len(hidden()) == 1
            for _ in range(2):
                sa, sb = s.snapshot(a.node, 20), s.snapshot(b.node, 20, max_carriers=100)
                assert (sa.schedulers, sb.schedulers) == (2, 3) and sb.carriers
            p = s.run(a.node, 20, lambda conn, deadline: processes.scan_direct(
                conn, 1000, 1000, 10, deadline), "processes")
            table = processes.table_from_term(a.node, p)
            assert table.count > 10
            pid = table.procs[0].pid  # a pid the target sent, sent back (the relay's encoding)
            probe = s.run(a.node, 20, lambda conn, deadline: processes.probe_direct(
                conn, [pid, "<0.999999.0>"], deadline), "processes")
            alive, gone = (dict(r) for r in probe["probe"])
            assert alive["pid"] == pid.encode() and "gc_us" in alive and "dead" not in alive
            assert gone == {"pid": b"<0.999999.0>", "dead": "true"}
            tables = ets.tables_from_props(s.run(a.node, 20, lambda conn, deadline:
                                                 ets.scan_direct(conn, 1000, 5, deadline)))
            assert tables["count"] > 5 and len(tables["tables"]) == 5
            # an exception on the target: rex's {badrpc, {'EXIT', _}}, one line
            with pytest.raises(live.NodeError, match=r"a call on .* failed") as relayed:
                s.run(a.node, 20, raises)
            assert s.snapshot(a.node, 20).os_pid == a.pid  # the session goes on
            assert len(hidden()) == 1
        monkeypatch.delenv(live.ENV_HIDDEN_NODE)
        with Session(a.cookie) as s, pytest.raises(live.NodeError) as direct:
            assert not s.relayed
            s.run(a.node, 20, raises)
        assert str(direct.value) == str(relayed.value)  # the same reading of the same reply
    finally:
        a.stop()
        b.stop()
    assert hidden() == []


def raises(conn: object, deadline: float) -> object:
    from beamalloc.collector import transport

    return transport.result(conn.call("erlang", "list_to_integer", [[ord("x")]], deadline))
