"""The snapshot without a hidden node (collector/dist.py): the same Snapshot as the hidden
node's, the same one-line errors, no BEAM booted on our side, the name pool kept."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from beamalloc.collector import build, dist, etf, live
from beamalloc.collector.access import Access
from beamalloc.collector.terms import Atom

from .conftest import HOST, epmd_names, start_node

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def _skeleton(x: object) -> object:
    """The snapshot's JSON with every number as 0 and the per-type block maps (which appear
    as a node allocates) left out: what two snapshots taken a moment apart share exactly."""
    if isinstance(x, dict):
        return {k: sorted(set(v.values())) if k == "port_names" else _skeleton(v)
                for k, v in x.items()  # ports by their drivers: each read has its own link
                if k not in ("blocks", "raw", "carriers", "tagged_blocks", "rss",
                             "rss_lazyfree", "mem_available", "taken_at")}
    if isinstance(x, list):
        return [_skeleton(v) for v in x]
    if isinstance(x, str):  # erts_mmap is kept as text
        return re.sub(r"\d+", "0", x)
    if isinstance(x, bool) or not isinstance(x, int | float):
        return x
    return 0


def test_same_snapshot_as_the_hidden_node(monkeypatch, tmp_path: Path, otp_release) -> None:
    """Direct and through a hidden node, one after the other on the same node (+S 16, atags
    on, carriers read; OTP 25, 27 and 29): the JSON is byte for byte the same once the numbers
    that moved in between are masked; the options, the instances and the node facts are equal
    outright."""
    t = start_node(["+S", "16", "+Muatags", "true"], release=otp_release)
    try:
        direct = live.snapshot_node(t.node, t.cookie, timeout=30)
        monkeypatch.setenv(live.ENV_HIDDEN_NODE, "1")
        hidden = live.snapshot_node(t.node, t.cookie, timeout=30)
    finally:
        t.stop()
    a, b = json.loads(direct.to_json()), json.loads(hidden.to_json())
    ja = json.dumps(_skeleton(a), sort_keys=True)
    jb = json.dumps(_skeleton(b), sort_keys=True)
    assert ja == jb
    assert [(x.allocator, x.instance, x.options) for x in direct.allocators] == \
        [(x.allocator, x.instance, x.options) for x in hidden.allocators]
    assert len(direct.allocators) > 16 * 8 and direct.otp_release == otp_release
    assert (direct.otp_release, direct.erts_version, direct.schedulers, direct.os_pid) == \
        (hidden.otp_release, hidden.erts_version, hidden.schedulers, hidden.os_pid)
    assert direct.carriers and hidden.carriers and a["tagged_blocks"] and b["tagged_blocks"]
    # the raw term: the same keys in the same order
    keys = re.compile(r"\{(\w+),")
    assert keys.findall(direct.raw or "")[:12] == keys.findall(hidden.raw or "")[:12]
    assert re.sub(r"\d+", "0", direct.raw or "")[:2000] == \
        re.sub(r"\d+", "0", hidden.raw or "")[:2000]


def test_no_hidden_node_and_the_name_is_freed(no_hidden_node) -> None:
    """The target sees `beamalloc_N@host`, a hidden node (not in nodes()), and epmd lists
    the name while the snapshot runs only."""
    seen = Path(f"/tmp/beamalloc_direct_{secrets.token_hex(4)}")
    probe = ("spawn(fun() -> ok = net_kernel:monitor_nodes(true, [{node_type, all}]), "
             f"file:write_file(\"{seen}\", \"ready\\n\"), "
             "L = fun L() -> receive {nodeup, N, Info} -> "
             f"file:write_file(\"{seen}\", io_lib:format(\"~s ~p ~p~n\", "
             "[N, proplists:get_value(node_type, Info), nodes()]), [append]), L() end end, "
             "L() end).")
    t = start_node([], eval_=probe)
    try:
        end = time.monotonic() + 10
        while not seen.exists() and time.monotonic() < end:  # the probe listens
            time.sleep(0.05)
        before = {n for n in epmd_names() if n.startswith("beamalloc_")}
        snap = live.snapshot_node(t.node, t.cookie, timeout=30, max_carriers=0)
        assert snap.node == t.node and snap.allocators
        end = time.monotonic() + 5
        while seen.read_text().count("\n") < 2 and time.monotonic() < end:
            time.sleep(0.05)
        name, kind, visible = seen.read_text().splitlines()[1].split(maxsplit=2)
        assert re.fullmatch(rf"beamalloc_\d+@{HOST}", name), name
        assert kind == "hidden" and visible.strip() == "[]"
        after = {n for n in epmd_names() if n.startswith("beamalloc_")}
        assert after <= before  # our name went with the connection
    finally:
        t.stop()
        seen.unlink(missing_ok=True)


def test_errors_are_the_same_lines(no_hidden_node) -> None:
    t = start_node([])
    try:
        with pytest.raises(live.NodeError, match=r"authentication failed: the node is up but "
                                                 r"rejected our cookie"):
            live.snapshot_node(t.node, "not-the-cookie", timeout=15, max_carriers=0)
        with pytest.raises(live.NodeError, match=rf"no node named nope_x on host {HOST} "
                                                 rf"\(epmd there knows .*{t.name}"):
            live.snapshot_node(f"nope_x@{HOST}", t.cookie, timeout=15, max_carriers=0)
    finally:
        t.stop()
    with pytest.raises(live.NodeError, match="cannot reach epmd on host"):
        live.snapshot_node("a@no-such-host.invalid", "c", timeout=15, max_carriers=0)


def test_a_node_that_stops_answering_is_a_timeout(no_hidden_node) -> None:
    """SIGSTOP the target after the handshake: the snapshot ends at its deadline, one line."""
    t = start_node([])
    try:
        subprocess.run(["kill", "-STOP", str(t.pid)], check=True)
        start = time.monotonic()
        with pytest.raises(live.NodeError, match="timed out after 2 s"):
            live.snapshot_node(t.node, t.cookie, timeout=2, max_carriers=0)
        assert time.monotonic() - start < 10
    finally:
        t.stop()


def test_a_target_that_does_not_know_the_cookie_is_refused() -> None:
    """The handshake checks the target's digest too: a listener that accepts our challenge
    reply but answers a wrong ack is not taken for the node."""
    import socket
    import struct
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def fake() -> None:
        c, _ = srv.accept()
        with c:
            n = struct.unpack(">H", c.recv(2))[0]
            c.recv(n)
            c.sendall(struct.pack(">H", 3) + b"sok")
            name = b"fake@x"
            body = (b"N" + struct.pack(">QIIH", dist.FLAGS, 12345, 1, len(name)) + name)
            c.sendall(struct.pack(">H", len(body)) + body)
            n = struct.unpack(">H", c.recv(2))[0]
            c.recv(n)
            c.sendall(struct.pack(">H", 17) + b"a" + b"\0" * 16)
            time.sleep(0.5)

    th = threading.Thread(target=fake, daemon=True)
    th.start()
    with pytest.raises(live.NodeError, match="authentication failed"):
        live.snapshot_node(f"fake@{HOST}", "cookie", timeout=10, max_carriers=0,
                           access=Access(dist_port=port))
    th.join(5)
    srv.close()


def test_one_frozen_reply_is_the_same_snapshot_both_ways(otp_release) -> None:
    """The same data both ways, byte for byte: the target freezes one collection (the agent's
    keys, its own allocator data) as a term and as term_to_binary of it (what the hidden node
    sends us); our client reads the term over distribution. Both decode to equal terms of the
    same types, and build the same Snapshot JSON, byte for byte."""
    freeze = (
        "Allocs = [sys_alloc, mseg_alloc, erts_mmap, alloc_util "
        "| erlang:system_info(alloc_util_allocators)], "
        "R = [{node, node()}, {alloc_util_allocators, erlang:system_info(alloc_util_allocators)}, "
        "{memory, erlang:memory()}, {otp_release, erlang:system_info(otp_release)}, "
        "{version, erlang:system_info(version)}, {wordsize, erlang:system_info(wordsize)}, "
        "{schedulers, erlang:system_info(schedulers)}, {os_pid, os:getpid()}, "
        "{allocators, [{A, erlang:system_info({allocator, A})} || A <- Allocs]}, "
        "{sampled_at_us, os:system_time(microsecond)}], "
        "persistent_term:put(frozen, R), "
        "persistent_term:put(frozen_etf, term_to_binary(R)).")
    t = start_node(["+S", "8", "+Muatags", "true"], eval_=freeze, release=otp_release)
    deadline = time.monotonic() + 30
    try:
        conn = None
        while conn is None:  # the -eval runs after epmd lists the node
            conn = dist.Connection(t.node, t.cookie, Access(), deadline, live.NAME_POOL, False)
            if conn.call("persistent_term", "get", [Atom("frozen"), Atom("none")],
                         deadline) == "none":
                conn.close()
                conn = None
                time.sleep(0.1)
        try:
            over_dist = conn.call("persistent_term", "get", [Atom("frozen")], deadline)
            blob = conn.call("persistent_term", "get", [Atom("frozen_etf")], deadline)
        finally:
            conn.close()
    finally:
        t.stop()
    as_agent = etf.decode(blob)
    assert repr(over_dist) == repr(as_agent)  # equal, and the same types (Atom vs str)
    a = build.build_snapshot(t.node, over_dist, taken_at=1.0)
    b = build.build_snapshot(t.node, as_agent, taken_at=1.0)
    assert a.to_json() == b.to_json()
    assert len(a.allocators) >= 8 * 8 and a.raw and a.raw == b.raw
