"""Ports and drivers as holders, on real nodes (issue 24 item 2): from OTP 27 instrument tags a
driver's blocks per port (`flags => [per_port]`, OTP-18577), and beamalloc names the port and
its driver; before, the driver by name. Read as users run it, over our own client and over the
hidden node's relay (BEAMALLOC_HIDDEN_NODE=1, collector/relay.py), which must agree.

The node holds a TCP socket in `{packet, 4}` mode that received a header announcing 64 MiB and
20 MiB of it: inet_drv allocates the whole packet's buffer (a drv_binary of the port) and
waits for the rest. The socket is registered as `big_port`, so the test asks the node itself
which port it is."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from otp import Node, release_params, start_node
from support import run_cli

from .conftest import erl_eval

pytestmark = pytest.mark.live

#: The packet the header announces, and what is sent of it.
PACKET, SENT = 64 << 20, 20 << 20
BUFFER_EVAL = (
    "spawn(fun() -> register(port_keeper, self()), "
    "{ok, L} = gen_tcp:listen(0, [binary, {packet, 4}, {active, true}]), "
    "{ok, P} = inet:port(L), "
    "{ok, S} = gen_tcp:connect(\"127.0.0.1\", P, [binary, {packet, raw}]), "
    "{ok, A} = gen_tcp:accept(L), register(big_port, A), "
    f"ok = gen_tcp:send(S, [<<{PACKET}:32>>, binary:copy(<<1>>, {SENT})]), "
    "receive stop -> ok end end).")


def _analyze(node: Node, tmp: Path, hidden: bool) -> dict:
    env = {**os.environ, "BEAMALLOC_COOKIE": node.cookie, "HOME": str(tmp)}
    if hidden:
        env["BEAMALLOC_HIDDEN_NODE"] = "1"
    r = run_cli("analyze", node.node, "--json", "--no-processes", "--timeout", "60", env=env,
                timeout=180)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _binary_holders(a: dict) -> list[dict]:
    return next(c for c in a["categories"]["categories"] if c["name"] == "binary")["holders"]


@pytest.mark.parametrize("otp_release", release_params(), indirect=True)
def test_a_ports_buffer_is_named_with_its_driver(otp_release: str, tmp_path: Path) -> None:
    n = start_node([], eval_=BUFFER_EVAL, release=otp_release)
    try:
        port = ""
        for _ in range(100):  # the eval registers the port once the packet is under way
            port = erl_eval(n, "rpc:call(T, erlang, port_to_list, "
                            "[rpc:call(T, erlang, whereis, [big_port])])").strip().strip('"')
            if port.startswith("#Port<"):
                break
            time.sleep(0.1)
        assert port.startswith("#Port<"), port
        time.sleep(0.5)  # the 20 MiB cross loopback
        got = {}
        for hidden in (False, True):
            a = _analyze(n, tmp_path, hidden)
            assert a["os"]["rss"] is not None
            holders = _binary_holders(a)
            if int(otp_release) >= 27:
                h = next((x for x in holders if x["kind"] == "port"), None)
                assert h is not None, holders
                # the port the node registered, its driver read by port_info/2
                assert h["name"] == f"{port} (tcp_inet)", (h, port)
                # instrument's histogram: at least its bucket's low edge (the last of 18
                # doubling buckets from 128 B: 128 x (2^17 - 1) B, 16 MiB less 128 B), never
                # more than the buffer
                assert (16 << 20) - 128 <= h["bytes"] <= PACKET, h
                assert "per port" in h["detail"]
                # the largest holder of the node, whatever its kind (the buffer is the bulk
                # of erlang:memory(binary))
                c = a["categories"]
                assert c["largest"]["kind"] == "port", c["largest"]
                got[hidden] = h
            else:
                # OTP 25: no per-port tags, the driver by its name
                h = next((x for x in holders if x["kind"] == "origin"
                          and x["name"] == "tcp_inet"), None)
                assert h is not None and h["bytes"] >= 8 << 20, holders
                assert not any(x["kind"] == "port" for x in holders)
                got[hidden] = h
        # our own client and the hidden node read the same port and driver
        assert got[False]["name"] == got[True]["name"]
        # the terminal says it in words
        env = {**os.environ, "BEAMALLOC_COOKIE": n.cookie, "HOME": str(tmp_path),
               "COLUMNS": "100"}
        r = run_cli("analyze", n.node, "--details", "--no-processes", env=env, timeout=180)
        assert r.returncode == 0, r.stderr
        flat = " ".join(r.stdout.split())
        if int(otp_release) >= 27:
            assert f"Port {port} (tcp_inet) holds at least" in flat, flat[:2000]
        else:
            assert "tcp_inet" in flat
    finally:
        n.stop()
