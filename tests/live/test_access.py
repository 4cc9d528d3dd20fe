"""Reaching nodes run as production runs them (docs/access.md): TLS distribution with an option
file, IPv6 distribution, long names, a given epmd port and an epmd-less target, each against a
real node started that way. TLS uses certificates this test makes with openssl.

Run as root (the usual case here), the hidden node runs as nobody: the TLS tests then also show
that it reads our private copy of a 0600 root key, and that the operator's files stay as they
were.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from beamalloc.collector import access as access_mod
from beamalloc.collector import dist, live, session
from beamalloc.collector.access import Access, AccessError

from .conftest import HOST, Node
from .tls_certs import make_tls

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(check, what: str, proc: subprocess.Popen[bytes], limit: float = 20) -> None:
    end = time.monotonic() + limit
    while not check():
        if proc.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"test node: {what}")
        time.sleep(0.05)


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


@pytest.fixture
def nodes():
    """`start(args, name_flag=, host=, env=, ready=, eval_=)`: a target started as the test
    says, up once `ready(name)` holds (default: the default epmd lists it); every one is killed
    in teardown."""
    started: list[Node] = []

    def start(args: list[str], name_flag: str = "-sname", host: str = HOST,
              env: dict[str, str] | None = None, ready=None, eval_: str | None = None) -> Node:
        name = f"t_{secrets.token_hex(4)}"
        cookie = f"C{secrets.token_hex(12)}"
        argv = ["erl", name_flag, f"{name}@{host}" if name_flag == "-name" else name,
                "-setcookie", cookie, "-noshell", *args]
        if eval_:
            argv += ["-eval", eval_]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(env or {})})
        node = Node(name, cookie, proc)
        started.append(node)
        ready = ready or (lambda n: n in _epmd_names(4369))
        _until(lambda: ready(name), "did not come up", proc)
        return node

    yield start
    for n in started:
        n.stop()


def _epmd_names(port: int) -> set[str]:
    r = subprocess.run(["epmd", "-port", str(port), "-names"], capture_output=True, text=True,
                       timeout=10)
    return {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("name ")}


def _check(snap, node: str) -> None:
    """A whole snapshot: every allocator's instances, the node's own name and OTP release."""
    assert snap.node == node
    assert snap.otp_release and snap.schedulers
    kinds = {a.allocator for a in snap.allocators}
    assert {"binary_alloc", "eheap_alloc", "ets_alloc"} <= kinds, kinds


# ---- TLS ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> dict[str, Path]:
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    return make_tls(tmp_path_factory.mktemp("tls"), HOST)


@pytest.fixture(scope="module")
def tls_target(tls):
    """One TLS-only target for the module (verify_peer both ways)."""
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(
        ["erl", "-sname", name, "-setcookie", cookie, "-noshell", "-proto_dist", "inet_tls",
         "-ssl_dist_optfile", str(tls["optfile"])],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    node = Node(name, cookie, proc)
    try:
        _until(lambda: name in _epmd_names(4369), "TLS target did not come up", proc)
        yield node
    finally:
        node.stop()


def test_tls_snapshot(tls, tls_target, marker):
    """`--proto-dist inet_tls --ssl-dist-optfile F`: a whole snapshot over TLS; the key stays
    0600 and its owner's, and nothing of our copy outlives the run."""
    before = {p: (p.stat().st_mode, p.stat().st_uid) for p in tls["dir"].iterdir()}
    acc = Access(ssl_dist_optfile=str(tls["optfile"]))
    assert acc.proto == "inet_tls"  # an option file alone means TLS
    snap = live.snapshot_node(tls_target.node, tls_target.cookie, timeout=30, access=acc,
                              max_carriers=0)
    _check(snap, tls_target.node)
    after = {p: (p.stat().st_mode, p.stat().st_uid) for p in tls["dir"].iterdir()}
    assert after == before
    assert stat.S_IMODE(tls["key"].stat().st_mode) == 0o600


def test_tls_target_refuses_plain_tcp(tls_target, marker):
    """Without the options the same target is unreachable, and the message points at them."""
    with pytest.raises(live.NodeError, match="--proto-dist") as e:
        live.snapshot_node(tls_target.node, tls_target.cookie, timeout=15, access=Access(),
                           max_carriers=0)
    assert tls_target.cookie not in str(e.value)


def test_tls_session_keeps_a_private_copy(tls, tls_target, marker):
    """The watch/cluster session over TLS: two samples (two connections' worth of certificate
    reads), its copy of the option file and certificates private to the hidden node (0700 dir,
    0400 files, owned by the node's user), gone when it ends."""
    acc = Access(proto_dist="inet_tls", ssl_dist_optfile=str(tls["optfile"]))
    with session.Session(tls_target.cookie, access=acc) as s:
        _check(s.snapshot(tls_target.node, timeout=30), tls_target.node)
        copy = Path(s._relay._home) / "tls"
        st = copy.stat()
        assert stat.S_IMODE(st.st_mode) == 0o700
        files = sorted(copy.iterdir())
        assert len(files) == 7  # 3 files x server and client, and the option file
        uid = 65534 if os.geteuid() == 0 else os.geteuid()
        assert {(f.stat().st_uid, stat.S_IMODE(f.stat().st_mode)) for f in files} == {(uid, 0o400)}
        conf = (copy / "ssl_dist.conf").read_text()
        assert str(tls["dir"]) not in conf and str(copy) in conf
        assert s.snapshot(tls_target.node, timeout=30).node == tls_target.node
        home = Path(s._relay._home)
    assert not home.exists()


def test_tls_bad_option_files_are_one_line(tls, tmp_path):
    """A missing option file, or one naming a file we cannot read: AccessError (exit 2), one
    line naming the file, before any node starts."""
    with pytest.raises(AccessError, match="does not exist") as e:
        live.snapshot_node(f"x@{HOST}", "c", access=Access(ssl_dist_optfile=str(tmp_path / "no")))
    assert "\n" not in str(e.value)
    bad = tmp_path / "bad.conf"
    bad.write_text(tls["optfile"].read_text().replace(str(tls["dir"] / "ca.pem"),
                                                      str(tmp_path / "gone.pem")))
    with pytest.raises(AccessError, match=r"cacertfile \S*/gone\.pem does not exist \(named in"):
        live.snapshot_node(f"x@{HOST}", "c", access=Access(ssl_dist_optfile=str(bad)))
    with pytest.raises(AccessError, match="not --proto-dist inet6_tcp"):
        Access(proto_dist="inet6_tcp", ssl_dist_optfile=str(bad))


def test_tls_option_file_ssl_refuses(tmp_path, tls_target, marker):
    """An option file ssl cannot use fails distribution on our side with its reason, not as
    'all 16 names are taken' (what every name's failure used to add up to)."""
    broken = tmp_path / "broken.conf"
    broken.write_text("[{server, [{certfile, \n")
    with pytest.raises(live.NodeError, match="cannot start Erlang distribution") as e:
        live.snapshot_node(tls_target.node, tls_target.cookie, timeout=20, max_carriers=0,
                           access=Access(ssl_dist_optfile=str(broken)))
    assert "names" not in str(e.value)


# ---- IPv6 and long names ------------------------------------------------------------------

def _written(path: Path, wait: float = 10) -> list[str]:
    """What a probe wrote: it writes on nodeup, which may come after our snapshot returns."""
    end = time.monotonic() + wait
    while not (path.exists() and path.read_text()) and time.monotonic() < end:
        time.sleep(0.05)
    return path.read_text().split()


def _probe_ready(out: Path):
    """A `ready` for nodes(): listed by epmd and its probe listening (it creates `out`).
    Our own client connects within milliseconds of epmd listing the node, before the
    target's -eval would otherwise have run."""
    return lambda name: name in _epmd_names(4369) and out.exists()


def _family_probe(out: Path) -> str:
    """-eval for a target that writes the peer address of each node that connects to it: an
    8-tuple is IPv6."""
    return ("spawn(fun() -> ok = net_kernel:monitor_nodes(true, [{node_type, all}]), "
            f"ok = file:write_file(\"{out}\", \"\"), "
            "L = fun L() -> receive {nodeup, N, _} -> "
            "case net_kernel:node_info(N, address) of "
            "{ok, {net_address, {IP, _}, _, _, _}} -> "
            f"file:write_file(\"{out}\", io_lib:format(\"~w~n\", [IP]), [append]); "
            "_ -> gone end, L() end end, "  # a connection already closed: no address
            "L() end).")


def test_ipv6_distribution(nodes, tmp_path, marker, way):
    """A target run with -proto_dist inet6_tcp: `--proto-dist inet6_tcp` reaches it, and the
    target sees an inet6 connection."""
    seen = tmp_path / "families"
    t = nodes(["-proto_dist", "inet6_tcp"], eval_=_family_probe(seen), ready=_probe_ready(seen))
    snap = live.snapshot_node(t.node, t.cookie, timeout=30, max_carriers=0,
                              access=Access(proto_dist="inet6_tcp"))
    _check(snap, t.node)
    if way == "direct":
        # Our client is gone before the probe can ask for its address: hold one open. The
        # held one reuses the snapshot's name, and a nodeup the target handles while it is
        # still tearing the first down finds no address ("gone", nothing written): once more
        # on a new connection then (an IPv4 peer would write a 4-tuple, never nothing).
        for _ in range(3):
            conn = dist.Connection(t.node, t.cookie, Access(proto_dist="inet6_tcp"),
                                   time.monotonic() + 30, live.NAME_POOL, False)
            try:  # the snapshot's own connection may have been seen too
                if got := _written(seen):
                    break
            finally:
                conn.close()
            time.sleep(0.5)
        assert set(got) == {"{0,0,0,0,0,0,0,1}"}  # ::1, our loopback
    else:
        # The relay's hidden node halts once the snapshot is read: a nodeup the target handles
        # after that finds no address ("gone", nothing written; 2 runs in 10 since the snapshot
        # got faster). Read once more then: each read is a new hidden node's connection.
        got = _written(seen, wait=3)
        for _ in range(3):
            if got:
                break
            _check(live.snapshot_node(t.node, t.cookie, timeout=30, max_carriers=0,
                                      access=Access(proto_dist="inet6_tcp")), t.node)
            got = _written(seen, wait=3)
        assert set(got) == {"{0,0,0,0,0,0,0,1}"}


def test_ipv6_long_names(nodes, marker, way):
    """A long name on an IPv6 address (`t@::1`): the colon means long names."""
    t = nodes(["-proto_dist", "inet6_tcp"], name_flag="-name", host="::1")
    node = f"{t.name}@::1"
    _check(live.snapshot_node(node, t.cookie, timeout=30, max_carriers=0,
                              access=Access(proto_dist="inet6_tcp")), node)


def test_long_names(nodes, tmp_path, marker, way):
    """A long name (`-name t@127.0.0.1`): our hidden node connects under a long name too
    (`beamalloc_N@` this host's domain name, or 127.0.0.1 on a host without one), as the target
    sees it."""
    seen = tmp_path / "names"
    t = nodes([], name_flag="-name", host="127.0.0.1", eval_=_name_probe(seen),
              ready=_probe_ready(seen))
    node = f"{t.name}@127.0.0.1"
    _check(live.snapshot_node(node, t.cookie, timeout=30, max_carriers=0, access=Access()), node)
    (ours,) = _written(seen)
    fqdn = socket.getfqdn()
    assert ours.startswith("beamalloc_")
    assert ours.endswith("@" + (fqdn if "." in fqdn else "127.0.0.1")), ours


def test_long_names_without_a_dot(nodes, marker, way):
    """`-name t@localhost`: a long-named node refuses hosts without a dot, so a short name
    reaches it, as the name says."""
    t = nodes([], name_flag="-name", host="localhost")
    node = f"{t.name}@localhost"
    _check(live.snapshot_node(node, t.cookie, timeout=30, max_carriers=0, access=Access()), node)


def _name_probe(out: Path) -> str:
    """-eval for a target that writes the name of each node that connects to it."""
    return ("spawn(fun() -> ok = net_kernel:monitor_nodes(true, [{node_type, all}]), "
            f"ok = file:write_file(\"{out}\", \"\"), "
            "L = fun L() -> receive {nodeup, N, _} -> "
            f"file:write_file(\"{out}\", io_lib:format(\"~s~n\", [N]), [append]), L() end end, "
            "L() end).")


# ---- epmd on another port, and no epmd at all ----------------------------------------------

@pytest.fixture
def private_epmd():
    """An epmd of the test's own on a free port (killed in teardown)."""
    port = _free_port()
    subprocess.run(["epmd", "-port", str(port), "-daemon"], check=True, timeout=10)
    end = time.monotonic() + 10
    while not _listening(port) and time.monotonic() < end:
        time.sleep(0.05)
    yield port
    subprocess.run(["epmd", "-port", str(port), "-kill"], capture_output=True, timeout=10)


def test_epmd_port(nodes, private_epmd, marker, way):
    """A target registered with an epmd on another port (ERL_EPMD_PORT): `--epmd-port P`
    finds it there; the default epmd does not know it."""
    port = private_epmd
    env = {"ERL_EPMD_PORT": str(port)}
    t = nodes([], env=env, ready=lambda name: name in _epmd_names(port))
    assert t.name not in _epmd_names(4369)
    with pytest.raises(live.NodeError, match="no node named"):
        live.snapshot_node(t.node, t.cookie, timeout=15, max_carriers=0, access=Access())
    _check(live.snapshot_node(t.node, t.cookie, timeout=30, max_carriers=0,
                              access=Access(epmd_port=port)), t.node)


def test_epmd_less(nodes, marker, way):
    """A target run with -start_epmd false -erl_epmd_port P, registered with no epmd at all:
    `--dist-port P` connects to the port directly (beamalloc_epmd.erl)."""
    port, nowhere = _free_port(), _free_port()
    t = nodes(["-start_epmd", "false", "-erl_epmd_port", str(port)],
              env={"ERL_EPMD_PORT": str(nowhere)},  # no epmd there: the target registers nowhere
              ready=lambda name: _listening(port))
    assert t.name not in _epmd_names(4369)
    with pytest.raises(live.NodeError, match="no node named"):
        live.snapshot_node(t.node, t.cookie, timeout=15, max_carriers=0, access=Access())
    _check(live.snapshot_node(t.node, t.cookie, timeout=30, max_carriers=0,
                              access=Access(dist_port=port)), t.node)
    with session.Session(t.cookie, access=Access(dist_port=port)) as s:  # watch's path
        _check(s.snapshot(t.node, timeout=30), t.node)


def test_epmd_less_nothing_listening(marker, way):
    """An epmd-less port nothing listens on: one line naming the port."""
    port = _free_port()
    with pytest.raises(live.NodeError, match=f"epmd-less, port {port}.*no node answered"):
        live.snapshot_node(f"nobody_{secrets.token_hex(3)}@{HOST}", "c", timeout=15,
                           max_carriers=0, access=Access(dist_port=port))


# ---- configuration ------------------------------------------------------------------------

def test_access_from_environment(monkeypatch):
    env = {"BEAMALLOC_PROTO_DIST": "inet6_tls", "BEAMALLOC_SSL_DIST_OPTFILE": "/x.conf",
           "ERL_EPMD_PORT": "4400", "BEAMALLOC_DIST_PORT": "9100"}
    a = access_mod.from_env(env)
    assert (a.proto, a.tls, a.ipv6, a.epmd_port, a.dist_port) == (
        "inet6_tls", True, True, 4400, 9100)
    assert access_mod.node_args(a, "/copy.conf") == [
        "-proto_dist", "inet6_tls", "-ssl_dist_optfile", "/copy.conf",
        "-epmd_module", "beamalloc_epmd", "-beamalloc_dist_port", "9100"]
    with pytest.raises(AccessError, match="TCP port"):
        access_mod.from_env({"BEAMALLOC_DIST_PORT": "http"})
    with pytest.raises(AccessError, match="without _dist"):
        Access(proto_dist="inet_tls_dist")
    with pytest.raises(AccessError, match="1-65535"):
        Access(epmd_port=70000)
    monkeypatch.setenv("BEAMALLOC_DIST_PORT", "9101")
    assert access_mod.current().dist_port == 9101  # a caller that passes none: the environment


def test_tls_no_such_node(tls, marker):
    """A name epmd does not list, over TLS: 'no node named', not 'went away during the
    handshake' (inet_tls_dist reports the missing port as a failed setup step)."""
    with pytest.raises(live.NodeError, match=r"no node named .*over inet_tls"):
        live.snapshot_node(f"nobody_{secrets.token_hex(3)}@{HOST}", "c", timeout=15,
                           max_carriers=0, access=Access(ssl_dist_optfile=str(tls["optfile"])))


def test_prepare_tls_rewrites_every_file_option(tmp_path):
    """certs_keys maps, binary paths and relative paths are copied and renamed too, and the
    copy is still a file Erlang consults to the same options but the paths."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.pem", "b.key", "c.pem"):
        (src / name).write_text(f"-----{name}-----\n")
    conf = src / "dist.conf"
    conf.write_text('[{client, [{certs_keys, [#{certfile => "a.pem", keyfile => <<"'
                    f'{src}/b.key">>}}]}}, {{cacertfile, "{src}/c.pem"}}, '
                    '{verify, verify_peer}]}].\n')
    cwd = os.getcwd()
    os.chdir(src)  # relative paths are ours, not the hidden node's (/)
    try:
        copy = access_mod.prepare_tls(Access(ssl_dist_optfile=str(conf)), tmp_path / "tls", None)
    finally:
        os.chdir(cwd)
    assert copy is not None
    r = subprocess.run(["erl", "-noshell", "-eval", f'io:format("~p~n", [file:consult("{copy}")]),'
                        " halt()."], capture_output=True, text=True, timeout=60)
    out = r.stdout
    assert out.startswith("{ok,") and "verify_peer" in out, out + r.stderr
    assert str(src) not in out
    files = re.findall(r'"(/[^"]+)"', out)
    assert len(files) == 3 and all(Path(f).parent == tmp_path / "tls" for f in files)
    assert sorted(Path(f).read_text() for f in files) == sorted(
        f"-----{n}-----\n" for n in ("a.pem", "b.key", "c.pem"))


def test_a_name_given_back_is_the_next_runs(private_epmd):
    """A run's name is free once the run has closed (collector/dist.py Local.close): the next
    run on the host takes the same name, not the next one, which would be one more atom on
    every target it reaches (tests/live/test_target_growth.py). epmd reads a connection it has
    just accepted only in its next select round, and then in slot order, so the next run's
    ALIVE2 can be read before the end of the last run's socket: made certain here by a lower
    free slot and epmd stopped across the close."""
    port = private_epmd
    access = Access(epmd_port=port)
    [pid] = [int(p) for p in subprocess.run(["pgrep", "-f", f"epmd -port {port} "],
                                            capture_output=True, text=True).stdout.split()]
    low = socket.create_connection(("127.0.0.1", port))  # takes the lowest free slot
    first = dist.Local(access, time.monotonic() + 10, live.NAME_POOL, False)
    low.close()
    time.sleep(0.3)  # epmd frees that slot: the next run's connection gets it
    os.kill(pid, signal.SIGSTOP)
    woken = threading.Timer(0.3, os.kill, (pid, signal.SIGCONT))
    woken.start()
    try:
        first.close()  # its end and the next run's ALIVE2 wait for epmd together
        second = dist.Local(access, time.monotonic() + 10, live.NAME_POOL, False)
    finally:
        woken.join()
        os.kill(pid, signal.SIGCONT)
    try:
        assert second.name == first.name, (first.name, second.name)
    finally:
        second.close()
