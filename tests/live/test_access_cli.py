"""The access options and `beamalloc snippet` through the CLI, as users run them
(docs/access.md): each live command reaches a node started the matching way, bad options are one
line and exit 2, and a snippet file is a SOURCE for every command."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support import run_cli

from beamalloc.collector import snippet

from .conftest import HOST, Node, start_node
from .test_access import _listening, _until
from .test_snippet import remote_shell
from .tls_certs import make_tls

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def _env(tmp_path: Path, cookie: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("BEAMALLOC_") and k != "ERL_EPMD_PORT"}
    env.update(HOME=str(tmp_path), BEAMALLOC_COOKIE=cookie, **extra)
    return env


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("beamalloc: "), r.stderr
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def epmd_less():
    """A target registered with no epmd, on its own port."""
    port, nowhere = _free_port(), _free_port()
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(
        ["erl", "-sname", name, "-setcookie", cookie, "-noshell", "-start_epmd", "false",
         "-erl_epmd_port", str(port)], env={**os.environ, "ERL_EPMD_PORT": str(nowhere)},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    node = Node(name, cookie, proc)
    try:
        _until(lambda: _listening(port), "epmd-less target did not listen", proc)
        yield node, port
    finally:
        node.stop()


@pytest.mark.parametrize("command", ["snapshot", "analyze", "recommend", "report"])
def test_every_live_command_takes_dist_port(command, epmd_less, tmp_path) -> None:
    node, port = epmd_less
    out = {"snapshot": ["--json"], "analyze": ["--json"], "recommend": ["--json", "--no-predict",
           "--rate-seconds", "0"], "report": ["-o", str(tmp_path / "r.html")]}[command]
    env = _env(tmp_path, node.cookie)
    r = run_cli(command, node.node, *out, "--timeout", "30", env=env)
    assert r.returncode == 3, r.stderr  # without the option: no epmd knows it
    assert "no node named" in _one_line(r)
    r = run_cli(command, node.node, *out, "--timeout", "30", "--dist-port", str(port), env=env)
    assert r.returncode == 0, r.stderr
    if command == "snapshot":
        assert json.loads(r.stdout)["node"] == node.node
    if command == "report":
        assert node.node in (tmp_path / "r.html").read_text()


def test_environment_gives_the_same(epmd_less, tmp_path) -> None:
    node, port = epmd_less
    r = run_cli("snapshot", node.node, "--json", "--timeout", "30",
                env=_env(tmp_path, node.cookie, BEAMALLOC_DIST_PORT=str(port)))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["node"] == node.node


def test_watch_over_tls(tmp_path) -> None:
    """`watch --ssl-dist-optfile F` on a TLS-only node: samples land in the store."""
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = make_tls(certs, HOST)
    t = start_node(["-proto_dist", "inet_tls", "-ssl_dist_optfile", str(tls["optfile"])])
    try:
        db = tmp_path / "w.db"
        r = run_cli("watch", t.node, "--ssl-dist-optfile", str(tls["optfile"]), "--interval",
                    "1", "--duration", "6", "--store", str(db), "--carriers-every", "0",
                    "--timeout", "20", env=_env(tmp_path, t.cookie), timeout=90)
        assert r.returncode == 0, r.stderr
        try:
            from beamalloc.timeseries.store import Store
        except ImportError:  # before the layers moved it
            from beamalloc.collector.store import Store
        with Store(db, readonly=True) as st:
            counts = {n["node"]: n["samples"] for n in st.list_nodes()}
        assert counts.get(t.node, 0) >= 2, counts
    finally:
        t.stop()


def test_ipv6_through_the_cli(tmp_path) -> None:
    t = start_node(["-proto_dist", "inet6_tcp"])
    try:
        r = run_cli("analyze", t.node, "--json", "--proto-dist", "inet6_tcp", "--timeout", "30",
                    env=_env(tmp_path, t.cookie))
        assert r.returncode == 0, r.stderr
    finally:
        t.stop()


@pytest.mark.parametrize(("args", "says"), [
    (["--epmd-port", "0"], "1-65535"),
    (["--dist-port", "x"], "invalid"),
    (["--proto-dist", "inet_tls_dist"], "without _dist"),
    (["--ssl-dist-optfile", "/nonexistent/ssl.conf"], "does not exist"),
    (["--proto-dist", "inet6_tcp", "--ssl-dist-optfile", "/x.conf"], "TLS distribution"),
])
def test_bad_access_options_are_one_line(args, says, tmp_path) -> None:
    r = run_cli("snapshot", f"x_{secrets.token_hex(3)}@{HOST}", *args,
                env=_env(tmp_path, "cookie"))
    assert r.returncode == 2, r.stderr
    assert says in _one_line(r)


def test_snippet_command_and_its_file_as_source(tmp_path) -> None:
    """`beamalloc snippet -o F` prints the one line (stdout, alone), typed into `erl -remsh`
    it writes F, and every command reads F as SOURCE."""
    out = tmp_path / "node.etf"
    r = run_cli("snippet", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == snippet.erlang_expression(str(out)) + "\n"
    assert "remote_console" in r.stderr
    r2 = run_cli("snippet", "--elixir")
    assert r2.returncode == 0 and r2.stdout == snippet.elixir_expression() + "\n"
    bad = run_cli("snippet", "-o", "/tmp/it's.etf")
    assert bad.returncode == 2 and "single quote" in _one_line(bad)

    t = start_node()
    try:
        remote_shell(["erl", "-sname", f"t_sh_{secrets.token_hex(4)}", "-setcookie", t.cookie,
                      "-hidden", "-remsh", t.node], [r.stdout.strip()],
                     prompt=f"({t.node})1>".encode(),
                     until=re.compile(rb"\{beamalloc_snippet,\"[^\"]*\",\s*\d+\}"))
    finally:
        t.stop()
    env = _env(tmp_path, "unused")
    s = run_cli("snapshot", str(out), "--json", env=env)
    assert s.returncode == 0, s.stderr
    doc = json.loads(s.stdout)
    assert doc["node"] == t.node and doc["os_pid"] == t.pid
    assert any("beamalloc snippet" in n for n in doc.get("notes", []))
    a = run_cli("analyze", str(out), "--json", env=env)
    assert a.returncode == 0, a.stderr
    rec = run_cli("recommend", str(out), "--json", "--no-predict", env=env)
    assert rec.returncode == 0, rec.stderr
    rep = run_cli("report", str(out), "-o", str(tmp_path / "r.html"), env=env)
    assert rep.returncode == 0, rep.stderr
    # a file that starts like one and is not: one line, exit 2
    junk = tmp_path / "junk.etf"
    junk.write_bytes(b"\x83h\x02d\x00\x03abcj" + b"\x00" * 10)
    j = run_cli("analyze", str(junk), env=env)
    assert j.returncode == 2 and str(junk) in _one_line(j)


def test_tls_copy_goes_with_a_killed_watch(tmp_path) -> None:
    """`watch` over TLS killed with SIGKILL once it samples: its hidden node halts at the end of
    its stdin and takes HOME, our copy of the TLS files with it (docs/access.md)."""
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    from beamalloc.timeseries.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="t_ba_tmp_", dir="/tmp"))
    tmp.chmod(0o1777)  # like /tmp: where the HOME goes even when the node runs as nobody
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = make_tls(certs, HOST)
    t = start_node(["-proto_dist", "inet_tls", "-ssl_dist_optfile", str(tls["optfile"])])
    db = tmp_path / "w.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "beamalloc.cli", "watch", t.node, "--ssl-dist-optfile",
         str(tls["optfile"]), "--interval", "1", "--store", str(db), "--carriers-every", "0"],
        env={**_env(tmp_path, t.cookie), "TMPDIR": str(tmp)}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def sampled() -> bool:
            if not db.exists():
                return False
            with contextlib.suppress(Exception), Store(db, readonly=True) as st:
                return any(n["samples"] >= 1 for n in st.list_nodes())
            return False

        _until(sampled, "watch over TLS wrote no sample", proc, limit=60)
        copies = list(tmp.glob("beamalloc_home_*/tls/ssl_dist.conf"))
        assert len(copies) == 1, list(tmp.iterdir())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        end = time.monotonic() + 10
        while any(tmp.iterdir()) and time.monotonic() < end:
            time.sleep(0.05)
        assert list(tmp.iterdir()) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        t.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_cluster_snapshot_epmd_less(epmd_less, tmp_path) -> None:
    """`snapshot --cluster` goes through the session: it takes --dist-port too."""
    node, port = epmd_less
    r = run_cli("snapshot", node.node, "--cluster", "--json", "--dist-port", str(port),
                "--timeout", "30", env=_env(tmp_path, node.cookie))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["node"] for s in doc["snapshots"]] == [node.node] and doc["errors"] == {}


def test_epmd_port_through_the_cli(tmp_path) -> None:
    """A target registered with an epmd of the test's own on another port: `--epmd-port`."""
    port = _free_port()
    subprocess.run(["epmd", "-port", str(port), "-daemon"], check=True, timeout=10)
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(["erl", "-sname", name, "-setcookie", cookie, "-noshell"],
                            env={**os.environ, "ERL_EPMD_PORT": str(port)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t = Node(name, cookie, proc)
    try:
        from .test_access import _epmd_names

        _until(lambda: name in _epmd_names(port), "target did not register", proc)
        r = run_cli("recommend", t.node, "--json", "--no-predict", "--rate-seconds", "0",
                    "--epmd-port", str(port), "--timeout", "30", env=_env(tmp_path, cookie))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["node"] == t.node
    finally:
        t.stop()
        subprocess.run(["epmd", "-port", str(port), "-kill"], capture_output=True, timeout=10)
