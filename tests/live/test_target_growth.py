"""No growth on the target (docs/robustness.md, "What we change on a target").

The target reports its own atom count, process count and loaded modules on its stdin/stdout, so
measuring it takes no distribution connection (a probe node would add its own name's atom).
The first snapshot has a cost, stated in the docs: the VM's own atoms made on the first
system_info({allocator, _}) of its life, OTP's instrument module with its atoms (carriers), and
the atom of our hidden node's name. After it, 20 snapshots, a watch-style session and the
carrier reads leave all three as they were.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from beamalloc.collector import live, session
from beamalloc.collector.access import Access
from live.conftest import HOST, epmd_names
from live.epmd_names import register

pytestmark = pytest.mark.live

STATS = ("Loop = fun L() -> case io:get_line(\"\") of eof -> halt(); _ -> "
         "io:format(\"~w ~w ~w~n\", [erlang:system_info(atom_count), "
         "erlang:system_info(process_count), length(code:all_loaded())]), L() end end, Loop().")

#: The first connection's cost, measured on OTP 25.2.3 +S 4 (docs/robustness.md): 420
#: atoms (about 400 made by the VM on its first system_info({allocator, _}), 16 by loading
#: instrument, 1 for our name), 2 modules (dist_util, which the target loads on the first
#: connection anyone makes to it, and instrument). The bounds leave room for other releases.
FIRST_ATOMS_MAX = 1000
FIRST_MODULES_MAX = 2


class Target:
    def __init__(self, epmd_port: int | None = None) -> None:
        self.name = f"t_{secrets.token_hex(4)}"
        self.cookie = f"C{secrets.token_hex(12)}"
        self.node = f"{self.name}@{HOST}"
        env = {**os.environ, "ERL_EPMD_PORT": str(epmd_port)} if epmd_port else None
        self.proc = subprocess.Popen(
            ["erl", "-sname", self.name, "-setcookie", self.cookie, "-noshell", "+S", "4",
             "-eval", STATS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + 20
        while self.name not in (_names(epmd_port) if epmd_port else epmd_names()):
            assert self.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)

    def stats(self) -> tuple[int, int, int]:
        """(atom_count, process_count, loaded modules), asked over stdin."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"?\n")
        self.proc.stdin.flush()
        a, p, m = self.proc.stdout.readline().split()
        return int(a), int(p), int(m)

    def settled(self, want: tuple[int, int, int], within: float = 10) -> tuple[int, int, int]:
        """Stats once they equal `want`, or the last ones after `within` seconds: a closed
        connection's processes on the target end a moment after our node halts."""
        deadline = time.monotonic() + within
        while (got := self.stats()) != want and time.monotonic() < deadline:
            time.sleep(0.1)
        return got

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _names(port: int) -> set[str]:
    r = subprocess.run(["epmd", "-port", str(port), "-names"], capture_output=True, text=True,
                       timeout=10)
    return {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("name ")}


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.stop()


@pytest.fixture
def private_target() -> Iterator[tuple[Target, Access]]:
    """A target registered with an epmd of the test's own (docs/access.md, "epmd on another
    port"), reached through it: no other beamalloc run on this host holds a pooled name there,
    so every snapshot takes the same name (beamalloc_1), as on a host where one runs at a
    time. On the shared epmd, a name another run holds for a moment sends a snapshot to the
    next one, a second name's atom on the target (the pool bounds them at 16)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    subprocess.run(["epmd", "-port", str(port), "-daemon"], check=True, timeout=10)
    t = Target(port)
    yield t, Access(epmd_port=port)
    t.stop()
    subprocess.run(["epmd", "-port", str(port), "-kill"], capture_output=True, timeout=10)


def test_twenty_snapshots_leave_the_target_as_the_first_did(private_target, marker,
                                                             way) -> None:
    target, access = private_target
    target.stats()  # the stats loop's own first call loads what io needs
    s0 = target.stats()
    live.snapshot_node(target.node, target.cookie, timeout=20, access=access)
    deadline = time.monotonic() + 10
    while (s1 := target.stats())[1] != s0[1] and time.monotonic() < deadline:
        time.sleep(0.1)  # the connection's processes end a moment after our node halts
    first = (s1[0] - s0[0], s1[1] - s0[1], s1[2] - s0[2])
    print(f"first snapshot's cost: {first[0]} atoms, {first[1]} processes, {first[2]} modules")
    assert 0 < first[0] <= FIRST_ATOMS_MAX and first[1] == 0 and first[2] <= FIRST_MODULES_MAX

    for _ in range(20):
        snap = live.snapshot_node(target.node, target.cookie, timeout=20, access=access)
    assert snap.carriers, "the snapshots read carriers through instrument"
    assert target.settled(s1) == s1, "20 snapshots changed the target"

    # watch's way: one long-lived hidden node, carriers on some samples
    with session.Session(target.cookie, access=access) as s:
        for i in range(10):
            s.snapshot(target.node, timeout=20, max_carriers=live.MAX_CARRIERS if i % 3 else 0)
    assert target.settled(s1) == s1, "a session's samples changed the target"


def test_two_runs_at_once_take_two_names(target, marker) -> None:
    """Concurrent runs never share a name (a second connection under the same name would take
    the first one's place on the target); each takes the lowest free one."""
    before = set(epmd_names())
    with session.Session(target.cookie) as a, session.Session(target.cookie) as b:
        sa = a.snapshot(target.node, timeout=20, max_carriers=0)
        sb = b.snapshot(target.node, timeout=20, max_carriers=0)
        ours = {n for n in set(epmd_names()) - before if n.startswith("beamalloc_")}
        assert len(ours) == 2 and ours <= {f"beamalloc_{i}" for i in range(1, live.NAME_POOL + 1)}
        # both still connected: one did not knock the other off
        sa2 = a.snapshot(target.node, timeout=20, max_carriers=0)
        sb2 = b.snapshot(target.node, timeout=20, max_carriers=0)
    assert sa.os_pid == sb.os_pid == sa2.os_pid == sb2.os_pid == target.proc.pid


def test_full_pool_is_one_clear_line(target, marker, way) -> None:
    held = []
    try:
        taken = set(epmd_names())
        for i in range(1, live.NAME_POOL + 1):
            if f"beamalloc_{i}" not in taken:
                held.append(register(f"beamalloc_{i}", 1 + i))
        with pytest.raises(live.NodeError) as ei:
            live.snapshot_node(target.node, target.cookie, timeout=20)
    finally:
        for s in held:
            s.close()
    msg = str(ei.value)
    assert msg.startswith(f"all {live.NAME_POOL} beamalloc node names") and "\n" not in msg
    assert os.environ.get("BEAMALLOC_COOKIE", target.cookie) not in msg
