"""Real BEAM nodes for the live-collector tests.

The test's own nodes (targets, probes) get their cookie on the command line; only the node that
beamalloc starts must never have it there. Every node started here is killed in teardown.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from beamalloc.collector import live

HOST = socket.gethostname().split(".")[0]


def epmd_names(host: str = "127.0.0.1") -> dict[str, int]:
    """Names registered with epmd (its NAMES_REQ, what `epmd -names` prints)."""
    try:
        with socket.create_connection((host, 4369), timeout=2) as s:
            s.sendall(struct.pack(">H", 1) + b"n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return {}
    out = {}
    for line in data[4:].decode("utf-8", "replace").splitlines():
        parts = line.split()  # "name NAME at port PORT"
        if len(parts) == 5 and parts[0] == "name":
            out[parts[1]] = int(parts[4])
    return out


@dataclass
class Node:
    name: str
    cookie: str
    proc: subprocess.Popen[bytes]
    stopped: bool = False
    extra: list[str] = field(default_factory=list)

    @property
    def node(self) -> str:
        return f"{self.name}@{HOST}"

    @property
    def pid(self) -> int:
        return self.proc.pid  # erl execs erlexec, which execs beam.smp: same pid

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def start_node(args: list[str] = (), eval_: str | None = None, wait: bool = True,
               cookie: str | None = None, name: str | None = None) -> Node:
    """`erl -sname NAME -setcookie COOKIE -noshell ARGS` (both random unless given; a fixed
    name restarts a node under its old name), registered with epmd."""
    name = name or f"t_{secrets.token_hex(4)}"
    cookie = cookie or f"C{secrets.token_hex(12)}"
    argv = ["erl", "-sname", name, "-setcookie", cookie, "-noshell", *args]
    if eval_:
        argv += ["-eval", eval_]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    node = Node(name, cookie, proc)
    if wait:
        deadline = time.monotonic() + 20
        while name not in epmd_names():
            if proc.poll() is not None or time.monotonic() > deadline:
                node.stop()
                raise RuntimeError(f"test node {name} did not register with epmd")
            time.sleep(0.02)
    return node


def erl_eval(target: Node, expr: str, timeout: float = 20) -> str:
    """Evaluate `expr` (with `T` bound to the target node) on a separate probe node."""
    code = (f"T = '{target.node}', R = ({expr}), io:format(\"~p~n\", [R]), halt().")
    r = subprocess.run(
        ["erl", "-sname", f"t_probe_{secrets.token_hex(4)}", "-setcookie", target.cookie,
         "-hidden", "-noshell", "-eval", code],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        raise RuntimeError(f"probe failed: {r.stderr.strip()[-300:]}")
    return r.stdout


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
    monkeypatch.setattr(live, "_node_suffix", lambda: f"{tag}{secrets.token_hex(2)}")
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


@pytest.fixture
def probe() -> object:
    """`probe(node, expr)`: evaluate expr on a separate node, `T` bound to the target."""
    return erl_eval


@pytest.fixture
def no_hidden_node(monkeypatch):
    """Fail the test if anything starts a hidden node."""
    def refuse(*a, **k):
        raise AssertionError("a hidden node was started")
    monkeypatch.setattr(live, "start_hidden_node", refuse)
