"""The process scan reaches nodes run as production runs them, with the same access settings as
the snapshot (docs/access.md): both go through live.run_hidden() with the access passed once.
Before, the scan started its hidden node without them and failed where the snapshot worked."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time

import pytest

from beamalloc.collector import access as access_mod
from beamalloc.collector import live, processes
from beamalloc.collector.access import Access

from .conftest import Node

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int, family: int = socket.AF_INET, host: str = "127.0.0.1") -> bool:
    try:
        with socket.socket(family) as s:
            s.settimeout(0.5)
            s.connect((host, port))
            return True
    except OSError:
        return False


def _start(args: list[str], ready, env: dict[str, str] | None = None) -> Node:
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(["erl", "-sname", name, "-setcookie", cookie, "-noshell", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **(env or {})})
    node = Node(name, cookie, proc)
    end = time.monotonic() + 20
    while not ready():
        if proc.poll() is not None or time.monotonic() > end:
            node.stop()
            raise RuntimeError("test node did not come up")
        time.sleep(0.05)
    return node


@pytest.fixture
def epmd_less():
    port, nowhere = _free_port(), _free_port()
    node = _start(["-start_epmd", "false", "-erl_epmd_port", str(port)],
                  ready=lambda: _listening(port),
                  env={"ERL_EPMD_PORT": str(nowhere)})  # the target registers nowhere
    yield node, port
    node.stop()


def _scan_ok(t: processes.ProcessTable, node: str) -> None:
    assert t.node == node and t.complete
    # a bare node runs a few dozen processes; the scan's own erpc helpers may die meanwhile
    assert t.count >= 20 and t.scanned + t.died == t.count
    assert any(p.name == "code_server" for p in t.procs)


def test_scan_of_an_epmd_less_node(epmd_less, monkeypatch) -> None:
    """`--dist-port P` reaches an epmd-less node for the scan as for the snapshot; without it
    both say there is no such node."""
    t, port = epmd_less
    with pytest.raises(live.NodeError, match="no node named"):
        processes.scan_node(t.node, t.cookie, timeout=15, access=Access())
    _scan_ok(processes.scan_node(t.node, t.cookie, timeout=30, access=Access(dist_port=port)),
             t.node)
    # The CLI configures the access once per run: the scan follows it without being told.
    monkeypatch.setattr(access_mod, "_configured", Access(dist_port=port))
    _scan_ok(processes.scan_node(t.node, t.cookie, timeout=30), t.node)
    snap = live.snapshot_node(t.node, t.cookie, timeout=30, max_carriers=0)
    assert snap.node == t.node


def test_scan_of_an_ipv6_node() -> None:
    """A node run with -proto_dist inet6_tcp is scanned with `--proto-dist inet6_tcp`."""
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(["erl", "-sname", name, "-setcookie", cookie, "-noshell",
                             "-proto_dist", "inet6_tcp"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t = Node(name, cookie, proc)
    try:
        end = time.monotonic() + 20
        while name not in _names():
            assert proc.poll() is None and time.monotonic() < end, "target did not come up"
            time.sleep(0.05)
        _scan_ok(processes.scan_node(t.node, t.cookie, timeout=30,
                                     access=Access(proto_dist="inet6_tcp")), t.node)
    finally:
        t.stop()


def _names() -> set[str]:
    r = subprocess.run(["epmd", "-names"], capture_output=True, text=True, timeout=10)
    return {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("name ")}


def test_scan_of_an_ipv6_long_name() -> None:
    """`t@::1`: the colon makes it a long name for the scan's hidden node too (the scan used
    to look for a dot only, and started its node with short names)."""
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(["erl", "-name", f"{name}@::1", "-setcookie", cookie, "-noshell",
                             "-proto_dist", "inet6_tcp"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t = Node(name, cookie, proc)
    node = f"{name}@::1"
    try:
        end = time.monotonic() + 20
        while name not in _names():
            assert proc.poll() is None and time.monotonic() < end, "target did not come up"
            time.sleep(0.05)
        _scan_ok(processes.scan_node(node, cookie, timeout=30,
                                     access=Access(proto_dist="inet6_tcp")), node)
    finally:
        t.stop()
