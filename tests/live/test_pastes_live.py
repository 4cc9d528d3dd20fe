"""Every paste format in force on a real install (beamalloc/pastes.py; issue 26 item 5), and the
cookie sources of a release (collector/cookie.py; item 6).

Each test pastes the block `recommend --format F` prints where F says (after flags already
there, which it must override), starts the real program (erl with an args file or ERL_FLAGS, a
mix release, rabbitmq-server, ejabberd), reads binary_alloc's options in force back with
beamalloc's own snapshot and compares them with the flags. rabbitmq-server and ejabberd are
Debian packages that `make setup` does not install (each enables a system service); their
tests skip without them. Every instance runs on random names and ports, in a scratch directory
(as the package's own user, with HOME there: no cookie file or pid file lands elsewhere), and
is stopped by its test.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from otp import HOST, Node, _wait_registered, epmd_names, start_node
from support import run_cli

from beamalloc import flags as fl
from beamalloc.analyzer.options import first_scheduler_options
from beamalloc.collector.live import snapshot_node
from beamalloc.pastes import FORMATS, render

pytestmark = [pytest.mark.live, pytest.mark.slow]

#: The flags pasted: none is a default of OTP 25, RabbitMQ or ejabberd, so finding all three in
#: force shows the block was read, and read last.
PASTED = ["+MBas aobf", "+MBsbct 256", "+MBlmbcs 1024"]
#: Flags already there, which the pasted block must override.
BEFORE = ["+MBas bf", "+MBlmbcs 4096"]
WANT = fl.FlagSet.parse(" ".join(PASTED)).fields()["B"]  # sizes in bytes, acul 0 with aobf


def binary_alloc_options(node: str, cookie: str) -> dict[str, object]:
    """binary_alloc's options in force, read by beamalloc's own snapshot."""
    snap = snapshot_node(node, cookie, timeout=30, max_carriers=0)
    opts = first_scheduler_options(snap)["binary_alloc"]
    return {k: opts.get(k) for k in WANT}


def test_every_format_is_checked_here() -> None:
    checked = {"flags", "vm.args", "erl_flags", "mix", "rabbitmq", "ejabberd"}
    assert set(FORMATS) == checked, "a new paste format needs its in-force test here"


# ---- erl: the command line, an args file, ERL_FLAGS ------------------------------------------


def test_flags_line_in_force() -> None:
    with start_node(args=[*" ".join(BEFORE).split(), *render(PASTED, "flags").split()]) as n:
        assert binary_alloc_options(n.node, n.cookie) == WANT


def test_vm_args_in_force(tmp_path: Path) -> None:
    args = tmp_path / "vm.args"
    args.write_text("\n".join(["## the release's own", *BEFORE, "", render(PASTED, "vm.args")])
                    + "\n")
    with start_node(args=["-args_file", str(args)]) as n:
        assert binary_alloc_options(n.node, n.cookie) == WANT


def test_erl_flags_in_force() -> None:
    """The block runs in a real shell, after an ERL_FLAGS that was already set (kept) and
    before an erl whose command line has its own +M flags (overridden)."""
    name, cookie = f"t_ef_{secrets.token_hex(4)}", f"C{secrets.token_hex(12)}"
    script = "\n".join(['export ERL_FLAGS="-env BEAMALLOC_T kept"', render(PASTED, "erl_flags"),
                        f'exec erl -sname {name} -setcookie {cookie} -noshell {" ".join(BEFORE)}'])
    env = {k: v for k, v in os.environ.items() if k not in ("ERL_AFLAGS", "ERL_ZFLAGS")}
    proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    n = Node(name, cookie, proc)
    try:
        _wait_registered(n)
        assert binary_alloc_options(n.node, n.cookie) == WANT
        assert n.eval('os:getenv("BEAMALLOC_T")').strip() == '"kept"'
    finally:
        n.stop()


# ---- services of Debian packages, run as their own user -------------------------------------


@dataclass
class Service:
    """A service started by a test: its process group is sent TERM (the wrapper scripts trap it
    and stop the node), then KILL; its scratch directory goes with it."""

    node: str
    cookie: str
    proc: subprocess.Popen[bytes]
    scratch: Path

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.scratch / "out").read_text(errors="replace")[-600:]
        return ""

    def wait_registered(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.node.partition("@")[0] not in epmd_names():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.node} did not register with epmd: {self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=wait)
                break
        shutil.rmtree(self.scratch, ignore_errors=True)


def _needs(user: str, program: str, package: str) -> None:
    if not Path(program).exists():
        pytest.skip(f"{package} is not installed (`apt-get install {package}`; not in make "
                    "setup: it enables a system service)")
    if os.geteuid() != 0:
        pytest.skip(f"{package} runs as its user {user}: starting it needs root")


def _scratch(user: str, cookie: str) -> Path:
    """A directory owned by `user` holding its HOME's cookie file (mode 0400)."""
    d = Path(tempfile.mkdtemp(prefix="beamalloc-paste-"))
    (d / ".erlang.cookie").write_text(cookie)
    (d / ".erlang.cookie").chmod(0o400)
    pw = pwd.getpwnam(user)
    for p in (d, d / ".erlang.cookie"):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    d.chmod(0o755)
    return d


def _start(user: str, env: dict[str, str], argv: list[str], scratch: Path, node: str,
           cookie: str) -> Service:
    pinned = [f"{k}={v}" for k, v in {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                      "HOME": str(scratch), "LANG": "C.UTF-8", **env}.items()]
    with open(scratch / "out", "wb") as out:
        proc = subprocess.Popen(["runuser", "-u", user, "--", "env", "-i", *pinned, *argv],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=scratch)
    return Service(node, cookie, proc, scratch)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chown_tree(path: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")]:
        os.chown(p, pw.pw_uid, pw.pw_gid)


def test_rabbitmq_in_force() -> None:
    """The block appended to a copy of the installed rabbitmq-env.conf; rabbitmq-server's own
    allocator defaults (+MBas ageffcbf +MBlmbcs 512) come before it on erl's command line."""
    server = "/usr/lib/rabbitmq/bin/rabbitmq-server"
    _needs("rabbitmq", server, "rabbitmq-server")
    cookie, name = f"C{secrets.token_hex(12)}", f"t_rmq_{secrets.token_hex(4)}"
    d = _scratch("rabbitmq", cookie)
    conf = d / "rabbitmq-env.conf"
    installed = Path("/etc/rabbitmq/rabbitmq-env.conf")
    conf.write_text((installed.read_text() if installed.exists() else "")
                    + "\n" + render(PASTED, "rabbitmq") + "\n")
    env = {"RABBITMQ_CONF_ENV_FILE": str(conf), "RABBITMQ_NODENAME": name,
           "RABBITMQ_MNESIA_BASE": str(d / "mnesia"), "RABBITMQ_LOG_BASE": str(d / "log"),
           "RABBITMQ_NODE_PORT": str(_free_port()), "RABBITMQ_DIST_PORT": str(_free_port()),
           "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"), "RABBITMQ_PID_FILE": str(d / "pid"),
           "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins")}
    _chown_tree(d, "rabbitmq")
    svc = _start("rabbitmq", env, [server], d, f"{name}@{HOST}", cookie)
    try:
        svc.wait_registered()
        assert binary_alloc_options(svc.node, cookie) == WANT
    finally:
        svc.stop()


def test_ejabberd_in_force() -> None:
    """The block appended to a copy of the installed ejabberdctl.cfg, after its own
    ERL_OPTIONS line; ejabberd runs on a minimal configuration that listens nowhere."""
    ctl = "/usr/sbin/ejabberdctl"
    _needs("ejabberd", ctl, "ejabberd")
    cookie, node = f"C{secrets.token_hex(12)}", f"t_ejd_{secrets.token_hex(4)}@{HOST}"
    d = _scratch("ejabberd", cookie)
    (d / "spool").mkdir()
    (d / "logs").mkdir()
    (d / "ejabberd.yml").write_text("hosts:\n  - localhost\nloglevel: info\nlisten: []\n"
                                    "modules: {}\nacme:\n  auto: false\n")
    installed = Path("/etc/ejabberd/ejabberdctl.cfg")
    cfg = installed.read_text() if installed.exists() else ""
    assert "ERL_OPTIONS=" in cfg, "the installed ejabberdctl.cfg sets ERL_OPTIONS: it is extended"
    # this instance's own files (the installed ones name /etc and /run), then the block at the end
    cfg = re.sub(r"(?m)^(EJABBERD_CONFIG_PATH|EJABBERD_PID_PATH)=.*$", "", cfg)
    (d / "ejabberdctl.cfg").write_text(
        f"{cfg}\nEJABBERD_CONFIG_PATH={d / 'ejabberd.yml'}\nEJABBERD_PID_PATH={d / 'pid'}\n"
        + render(PASTED, "ejabberd") + "\n")
    _chown_tree(d, "ejabberd")
    argv = [ctl, "-c", str(d / "ejabberdctl.cfg"), "-s", str(d / "spool"), "-l", str(d / "logs"),
            "-n", node, "foreground"]
    svc = _start("ejabberd", {}, argv, d, node, cookie)
    try:
        svc.wait_registered()
        assert binary_alloc_options(node, cookie) == WANT
    finally:
        svc.stop()


# ---- a mix release: its vm.args.eex, and where its cookie is read from -----------------------


@dataclass
class Release:
    root: Path  # RELEASE_ROOT
    cookie: str  # what releases/COOKIE holds
    node: Node


@pytest.fixture(scope="module")
def mix_release() -> Iterator[Release]:
    """A mix release built with the block added to rel/vm.args.eex after flags already there,
    started (`bin/app start`) on a random short name with the cookie of its releases/COOKIE."""
    if not shutil.which("mix"):
        pytest.skip("no mix on PATH (Debian's elixir package: make setup installs it)")
    d = Path(tempfile.mkdtemp(prefix="beamalloc-mix-"))
    env = {**os.environ, "HOME": str(d), "MIX_HOME": str(d / ".mix"), "MIX_ENV": "prod"}
    for k in ("ERL_FLAGS", "ERL_AFLAGS", "ERL_ZFLAGS", "RELEASE_COOKIE", "BEAMALLOC_COOKIE"):
        env.pop(k, None)
    try:
        for argv, cwd in ((["mix", "new", "app"], d), (["mix", "release.init"], d / "app")):
            subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, timeout=120)
        eex = d / "app" / "rel" / "vm.args.eex"
        eex.write_text(eex.read_text() + "\n".join(["", *BEFORE, "", render(PASTED, "mix"), ""]))
        subprocess.run(["mix", "release", "--overwrite", "--quiet"], cwd=d / "app", env=env,
                       check=True, capture_output=True, timeout=300)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(d, ignore_errors=True)
        out = getattr(e, "stderr", b"") or getattr(e, "stdout", b"") or b""
        why = out.decode(errors="replace")
        raise RuntimeError(f"building the mix release failed: {why}") from None
    root = d / "app" / "_build" / "prod" / "rel" / "app"
    cookie = (root / "releases" / "COOKIE").read_text().strip()
    name = f"t_mix_{secrets.token_hex(4)}"
    proc = subprocess.Popen([str(root / "bin" / "app"), "start"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,
                            env={**env, "RELEASE_NODE": name, "RELEASE_DISTRIBUTION": "sname"})
    node = Node(name, cookie, proc, scratch=d)
    try:
        _wait_registered(node, timeout=60)
        yield Release(root, cookie, node)
    finally:
        node.stop()


def test_mix_vm_args_eex_in_force(mix_release: Release) -> None:
    vm_args = next((mix_release.root / "releases").glob("*/vm.args")).read_text()
    assert vm_args.rstrip().endswith(PASTED[-1])  # mix release copied the block
    n = mix_release.node
    assert binary_alloc_options(n.node, n.cookie) == WANT


def _snapshot_cli(node: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`beamalloc snapshot NODE` with only the cookie sources in `env` (HOME empty)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("BEAMALLOC_COOKIE", "RELEASE_COOKIE", "RELEASE_ROOT")}
    home = tempfile.mkdtemp(prefix="beamalloc-home-")
    try:
        return run_cli("snapshot", node, "--max-carriers", "0", *args, timeout=120,
                       env={**base, "HOME": home, **env})
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_cookie_from_release_root(mix_release: Release) -> None:
    r = _snapshot_cli(mix_release.node.node, {"RELEASE_ROOT": str(mix_release.root)})
    assert r.returncode == 0, r.stderr
    assert f'"node": "{mix_release.node.node}"' in r.stdout


def test_cookie_from_release_cookie(mix_release: Release) -> None:
    r = _snapshot_cli(mix_release.node.node, {"RELEASE_COOKIE": mix_release.cookie})
    assert r.returncode == 0, r.stderr


def test_cookie_file_of_the_release(mix_release: Release) -> None:
    cookie_file = mix_release.root / "releases" / "COOKIE"
    r = _snapshot_cli(mix_release.node.node, {}, "--cookie-file", str(cookie_file))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("source, hidden", [("RELEASE_COOKIE", "0"), ("BEAMALLOC_COOKIE", "0"),
                                            ("RELEASE_ROOT", "0"), ("RELEASE_COOKIE", "1")])
def test_rejected_cookie_names_its_source(mix_release: Release, source: str, hidden: str,
                                          tmp_path: Path) -> None:
    """A wrong cookie: exit 3 and one line naming the source tried, never the cookie; through
    our own client and through the hidden node (BEAMALLOC_HIDDEN_NODE=1) alike."""
    wrong = f"W{secrets.token_hex(12)}"
    value = wrong
    if source == "RELEASE_ROOT":  # a release directory whose COOKIE is not the node's
        (tmp_path / "releases").mkdir()
        (tmp_path / "releases" / "COOKIE").write_text(wrong)
        value = str(tmp_path)
    r = _snapshot_cli(mix_release.node.node, {source: value, "BEAMALLOC_HIDDEN_NODE": hidden})
    said = {"RELEASE_COOKIE": "$RELEASE_COOKIE", "BEAMALLOC_COOKIE": "$BEAMALLOC_COOKIE",
            "RELEASE_ROOT": f"$RELEASE_ROOT/releases/COOKIE ({tmp_path}/releases/COOKIE)"}[source]
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        f"beamalloc: authentication failed with the cookie from {said}: the node is up but "
        f"rejected our cookie ({mix_release.node.node})"]
    assert wrong not in r.stderr + r.stdout and wrong[1:9] not in r.stderr

