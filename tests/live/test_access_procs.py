"""The process scan reaches nodes run as production runs them, with the same access settings as
the snapshot (docs/access.md): both go through session.with_transport() with the access passed once.
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
from beamalloc.collector import live, processes, relay, transport
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
    # A caller that passes no access gets the environment's (access.current()), the scan as
    # the snapshot.
    monkeypatch.setenv(access_mod.ENV_DIST_PORT, str(port))
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


# ---- our own client and the hidden node: one answer ----------------------------------------

@pytest.fixture(scope="module")
def holders_node():
    """samples/workloads/holders.erl: named holders of shared and exclusive binaries, 60 equal
    idle workers (ties at the ranking's boundary), a growing mailbox."""
    from otp import start_workload

    with start_workload("25", "holders", env={"ROUTER": "4000", "CACHE": "1000", "PEAK": "2000",
                                              "WORKERS": "60"}) as w:
        w.wait_ready()
        yield w


def _both(node, monkeypatch, fn):
    """fn() over our own client (no BEAM may boot: it fails), then with a hidden node."""
    monkeypatch.delenv(live.ENV_HIDDEN_NODE, raising=False)
    with monkeypatch.context() as m:
        m.setattr(relay, "start_hidden_node", _refuse)
        direct = fn()
    monkeypatch.setenv(live.ENV_HIDDEN_NODE, "1")
    return direct, fn()


def _refuse(*a, **k):
    raise AssertionError("a hidden node was started on plain TCP")


def test_direct_scan_is_the_hidden_nodes(holders_node, monkeypatch) -> None:
    """The process scan over collector/dist.py gives what the same scan through the hidden
    node's relay gives: the same count, binaries deduplicated by address across processes to
    the same bytes, the same groups, the same reported processes with the same figures (ties at the
    boundary broken alike), and activity for every scanned process. What may differ is what
    the node did between the two reads: the reductions each process spent answering the first
    scan's process_info, the mailbox that grows, and which of the processes that ran between
    the reads were idle at each."""
    w = holders_node
    d, h = _both(w, monkeypatch, lambda: processes.scan_node(w.node, w.cookie, timeout=60))
    growing = "slow_consumer"
    assert d.count == h.count and d.scanned == h.scanned and d.complete and h.complete
    assert (d.binary_bytes, d.binary_count) == (h.binary_bytes, h.binary_count)
    assert d.binary_bytes > 4000 * 1000  # the router's binaries, counted once
    assert d.wordsize == h.wordsize
    # Idle is a state of the moment (waiting, mailbox empty): only a process that ran between
    # the reads can have changed it, and one that ran spent more reductions than the one the
    # first read's process_info signal cost each process.
    assert d.activity is not None and h.activity is not None
    ran = sum(h.activity[p][0] - d.activity[p][0] > 1 for p in set(d.activity) & set(h.activity))
    assert abs(d.idle_count - h.idle_count) <= ran

    def groups(t):
        return {g.initial_call: (g.count, g.binary_bytes, sorted(g.names)) for g in t.groups}
    assert groups(d) == groups(h)
    idle = [(g.initial_call, g.idle_count) for g in d.groups]
    assert sum(abs(n - next(g.idle_count for g in h.groups if g.initial_call == c))
               for c, n in idle) <= ran
    dp, hp = {p.pid: p for p in d.procs}, {p.pid: p for p in h.procs}
    assert set(dp) == set(hp) and len(dp) > 30
    for pid, p in dp.items():
        q = hp[pid]
        assert (p.name, p.initial_call, p.binary_bytes, p.binary_count,
                p.binary_exclusive_bytes) == (q.name, q.initial_call, q.binary_bytes,
                                              q.binary_count, q.binary_exclusive_bytes)
        if p.name != growing:
            assert (p.memory, p.total_heap_bytes, p.message_queue_len) == (
                q.memory, q.total_heap_bytes, q.message_queue_len), p.name
            assert abs(p.reductions - q.reductions) <= 50, p.name  # a scan costs a few
    # activity: pid -> (reductions, queue) of every process scanned, ours of the moment aside
    assert len(d.activity) == d.scanned and len(h.activity) == h.scanned
    assert len(set(d.activity) & set(h.activity)) >= d.scanned - 2
    router = next(p for p in d.procs if p.name == "leaky_router")
    assert d.activity[router.pid][1] == 0 and d.activity[router.pid][0] > 0


def test_direct_ets_scan_is_the_hidden_nodes(holders_node, monkeypatch) -> None:
    """The ETS scan both ways: the same tables, bytes, owners; an id reads as the target writes
    it over our own client (#Ref<0.…>), with the hidden node's index for the target through
    the hidden node."""
    from beamalloc.collector.ets import scan_ets

    w = holders_node
    d, h = _both(w, monkeypatch, lambda: scan_ets(w.node, w.cookie, timeout=60))
    assert {k: d[k] for k in ("count", "read", "bytes")} == {k: h[k] for k in
                                                            ("count", "read", "bytes")}
    assert d["count"] >= 15 and d["memory_ets"] > 0 and h["memory_ets"] > 0

    def rows(x):
        return [(t["name"], t["owner"], t["type"], t["protection"], t["objects"], t["bytes"],
                 t["table"].split(".", 1)[1]) for t in x["tables"]]
    assert rows(d) == rows(h)
    assert all(t["table"].startswith("#Ref<0.") and t["owner"].startswith("<0.")
               for t in d["tables"])


# ---- no BEAM of ours boots on plain TCP --------------------------------------------------

def _beams_under(root: int) -> set[int]:
    """beam.smp processes among the descendants of `root` (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    exe: dict[int, bytes] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    stat = f.read()
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    exe[int(d)] = f.read().split(b"\0", 1)[0]
            except OSError:
                continue
            ppid = int(stat.rsplit(b")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            todo.append(c)
            if exe.get(c, b"").endswith((b"beam.smp", b"erlexec", b"/erl")):
                out.add(c)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("command", ["recommend", "analyze", "snapshot"])
def test_no_beam_boots_for_a_live_command(holders_node, command, tmp_path) -> None:
    """`beamalloc recommend NODE`, `analyze NODE` (the snapshot, the process scan, the ETS
    scan) and `snapshot NODE` start no BEAM of ours on plain TCP: every descendant of the
    command is watched while it runs (a hidden node lives for at least its boot, ~0.4 s; the
    watch looks every few ms).
    The same watch sees the hidden node with $BEAMALLOC_HIDDEN_NODE=1, so it can fail."""
    import sys

    w = holders_node
    env = {k: v for k, v in os.environ.items() if k != live.ENV_HIDDEN_NODE}
    env.update(BEAMALLOC_COOKIE=w.cookie, HOME=str(tmp_path))

    def watch(extra_env: dict[str, str]) -> tuple[int, set[int]]:
        out = ["-o", str(tmp_path / "s.json")] if command == "snapshot" else ["--json"]
        proc = subprocess.Popen([sys.executable, "-m", "beamalloc.cli", command, w.node,
                                 *out, "--timeout", "60"], env={**env, **extra_env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen: set[int] = set()
        try:
            while proc.poll() is None:
                seen |= _beams_under(proc.pid)
                time.sleep(0.005)
            return proc.wait(), seen
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    rc, seen = watch({})
    assert rc == 0 and seen == set(), f"{command} booted a BEAM on plain TCP: {seen}"
    rc, seen = watch({live.ENV_HIDDEN_NODE: "1"})
    assert rc == 0 and seen, "the watch did not see the hidden node it was told to use"


# ---- where our client cannot go: the hidden node, and what a target can do to it ----------

@pytest.mark.skipif(os.geteuid() != 0, reason="the hidden node drops privileges only when "
                    "beamalloc runs as root")
@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")
@pytest.mark.slow
def test_tls_target_calls_back_into_the_scans_hidden_node(tmp_path) -> None:
    """A TLS target (our client speaks no TLS: the scan boots its hidden node) runs code on
    that hidden node the moment it connects, as an attacker would: it gets nobody, no group,
    no capability, no_new_privs, no operator's file, and of our HOME only the TLS files our
    node needs (docs/robustness.md, "What a target can do to us"); the scan still answers."""
    from support import assert_unprivileged

    from beamalloc.collector.terms import parse_term

    from .test_reach_back import ATTACK
    from .tls_certs import make_tls

    tls = make_tls(tmp_path, socket.gethostname().split(".")[0])
    secret = tmp_path / "operator.cookie"
    secret.write_text("operator secret\n")
    secret.chmod(0o600)
    out = tmp_path / "attack.txt"
    # 200,000 idle processes: the scan's hidden node lives a second or more, the attack takes
    # milliseconds (a one-shot node lives only as long as its scan)
    ready = tmp_path / "ready"
    eval_ = ATTACK.format(secret=secret, out=out).replace("\n", " ").replace(
        "receive {nodeup", "[spawn(fun() -> receive _ -> ok end end) || _ <- lists:seq(1, "
        f"200000)], ok = file:write_file(\"{ready}\", \"\"), receive {{nodeup", 1)
    assert str(ready) in eval_
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(["erl", "-sname", name, "-setcookie", cookie, "-noshell",
                             "+P", "1000000", "-proto_dist", "inet_tls",
                             "-ssl_dist_optfile", str(tls["optfile"]), "-eval", eval_],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t = Node(name, cookie, proc)
    try:
        end = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < end, "target did not come up"
            time.sleep(0.05)
        acc = Access(proto_dist="inet_tls", ssl_dist_optfile=str(tls["optfile"]))
        assert not transport.direct(acc)
        scan = processes.scan_node(t.node, cookie, timeout=60, access=acc)
        assert scan.node == t.node and scan.count > 200_000 and scan.scanned > 0
        end = time.monotonic() + 30
        while not out.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert out.exists(), "the target's attack did not run"
    finally:
        t.stop()
    got = assert_unprivileged(dict(parse_term(out.read_text())))
    # Over TLS the HOME stays while the node lives, holding only our copy of the option file
    # and the files it names (each new TLS connection reads them): readable by the target's
    # code there, key included (docs/robustness.md says so)
    assert got["home_listing"] == ("ok", ["tls"]), got["home_listing"]


def test_direct_scans_leave_the_target_as_it_was(holders_node, monkeypatch) -> None:
    """The scan and the ETS scan over our own client load nothing on the target and leave
    nothing there: after a first scan (its connection's name is a new atom there once), another
    adds no atom, no loaded module, no process, no ETS table, no registered name."""
    from beamalloc.collector import dist
    from beamalloc.collector.ets import scan_ets
    from beamalloc.collector.terms import Atom

    monkeypatch.delenv(live.ENV_HIDDEN_NODE, raising=False)
    w = holders_node
    deadline = time.monotonic() + 60
    conn = dist.Connection(w.node, w.cookie, Access(), deadline, live.NAME_POOL, False)

    def state() -> tuple[int, ...]:
        calls = [("erlang", "system_info", [Atom("atom_count")]), ("erlang", "loaded", []),
                 ("erlang", "system_info", [Atom("process_count")]), ("ets", "all", []),
                 ("erlang", "registered", [])]
        got = [conn.call(m, f, a, deadline) for m, f, a in calls]
        return (got[0], len(got[1]), got[2], len(got[3]), len(got[4]))

    try:
        def both() -> None:
            processes.scan_node(w.node, w.cookie, timeout=60)
            scan_ets(w.node, w.cookie, timeout=60)

        both()  # our pooled names are atoms there from now on
        time.sleep(0.2)  # rex's processes of the last calls end after their replies
        before = state()
        both()
        time.sleep(0.2)
        assert state() == before
    finally:
        conn.close()
