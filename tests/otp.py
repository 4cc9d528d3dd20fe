"""Real BEAM nodes under OTP 25, 27 or 29: the one home of how a test starts, reaches and stops a
node, and of which releases this machine runs.

OTP 25 is the system's `erl` (Debian 12). OTP 27 (Debian 13) and OTP 29 (Debian forky) are
chroots that `make setup` provisions in /var/cache/beamalloc/otpNN (Makefile, `otp-runtimes`;
docs/erts/releases.md §1). A node started in a chroot is a plain process of this host: it
registers with the host's epmd, is reached on localhost like any other and is traced through
/proc/PID/root. Running a chroot needs root; without it, or without the runtime, the tests of
that release skip and say why.

    n = start_workload("29", "binspike", flags=["+MBas", "aobf"], env={"BURST": "40000"})
    try:
        n.wait_ready()
        snap = snapshot_node(n.node, n.cookie)
        n.eval("erlang:system_info(otp_release)")   # evaluated on the node, as Erlang text
    finally:
        n.stop()

Workload modules (samples/workloads/*.erl) are compiled by the release's own erlc, once per
release and test session. Node names are random; every node is killed with its process group.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "samples" / "workloads"
HOST = socket.gethostname().split(".")[0]
#: Where `make setup` keeps the chroot runtimes (Makefile, OTP_CACHE).
CACHE = Path(os.environ.get("BEAMALLOC_OTP_CACHE", "/var/cache/beamalloc"))
#: The releases a test can ask for: the system's, then the chroots.
RELEASES = ("25", "27", "29")
#: Runtimes beside the releases, by name -> the release they run: OTP 27 and 29 whose beam.smp
#: keeps its symbols (Makefile, `otp-sym`; docs/erts/releases.md §5), for the tracer's .symtab.
VARIANTS = {"27sym": "27", "29sym": "29"}
SYSTEM = "25"
READY = "ready"  # what a workload prints once settled (samples/workloads/wl.hrl)


@dataclass(frozen=True)
class Runtime:
    """How to run one release's programs: directly, or under `chroot ROOT`."""

    release: str
    root: Path | None = None  # None: the system's own erl

    def argv(self, *args: str) -> list[str]:
        return ["chroot", str(self.root), *args] if self.root else list(args)

    def scratch(self) -> tuple[Path, str]:
        """A new directory the release's programs can read: (its path here, its path there)."""
        here = Path(tempfile.mkdtemp(prefix="beamalloc-otp-",
                                     dir=self.root / "tmp" if self.root else None))
        os.chmod(here, 0o755)
        return here, (f"/{here.relative_to(self.root)}" if self.root else str(here))


def missing(release: str) -> str | None:
    """Why `release` cannot run here, or None."""
    if release not in RELEASES and release not in VARIANTS:
        return f"OTP {release} is not one of the test releases {RELEASES} or {tuple(VARIANTS)}"
    if release == SYSTEM:
        return None if shutil.which("erl") and shutil.which("erlc") else "no erl/erlc on PATH"
    root = CACHE / f"otp{release}"
    stamp = root / ".beamalloc-ready"
    if not stamp.exists():
        return f"no OTP {release} runtime in {root} (`make setup` provisions it, as root)"
    if os.geteuid() != 0:
        return f"OTP {release} runs in a chroot ({root}): needs root"
    got, want = stamp.read_text().strip(), VARIANTS.get(release, release)
    if got != want:
        return f"{root} holds OTP {got!r}, not {want}"
    return None


def available() -> list[str]:
    return [r for r in RELEASES if missing(r) is None]


@functools.cache
def runtime(release: str) -> Runtime:
    """The runtime of `release`; skips the calling test where it is missing."""
    why = missing(release)
    if why:
        pytest.skip(why)
    if release == SYSTEM:
        return Runtime(release)
    root = CACHE / f"otp{release}"
    # erts reads /proc (cpu topology, its own limits) and the tracer finds the node's files
    # through /proc/PID/root: a chroot's /proc is mounted once and left for the next session.
    if not os.path.ismount(root / "proc"):
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    return Runtime(release, root)


def release_params(releases: Sequence[str] = RELEASES) -> list[object]:
    """pytest params over `releases`, ids otp25/otp27/otp29, each skipped with its reason where
    it is missing: `@pytest.mark.parametrize("otp_release", release_params(), indirect=True)`
    or the `otp_release` fixture (all three)."""
    out = []
    for r in releases:
        why = missing(r)
        out.append(pytest.param(r, id=f"otp{r}",
                                marks=[pytest.mark.skip(reason=why)] if why else []))
    return out


@pytest.fixture(scope="session", params=release_params())
def otp_release(request: pytest.FixtureRequest) -> str:
    """Each test release in turn ("25", "27", "29"); session-scoped, so module fixtures (a
    workload node shared by a module's tests) can be started once per release."""
    return request.param


# --- nodes --------------------------------------------------------------------------------


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
    """A node started by a test: its name, cookie and process (killed with its group)."""

    name: str
    cookie: str
    proc: subprocess.Popen[bytes]
    release: str = SYSTEM
    stopped: bool = False
    extra: list[str] = field(default_factory=list)
    scratch: Path | None = None  # removed by stop()
    output: list[str] = field(default_factory=list)  # lines read by wait_ready()

    @property
    def node(self) -> str:
        return f"{self.name}@{HOST}"

    @property
    def pid(self) -> int:
        return self.proc.pid  # chroot and erl exec erlexec, which execs beam.smp: same pid

    def eval(self, expr: str, timeout: float = 20) -> str:
        """Erlang expression `expr` evaluated on this node itself, its value printed with ~p.
        The text is parsed on the probe node and the abstract form is sent: a term that reads
        the same on every release, where a fun would not."""
        expr = expr.strip().removesuffix(".") + "."
        q = '"' + expr.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return erl_eval(self, f"begin {{ok, Ts, _}} = erl_scan:string({q}), "
                              "{ok, Es} = erl_parse:parse_exprs(Ts), "
                              "element(2, erpc:call(T, erl_eval, exprs, [Es, []])) end",
                        timeout)

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait for the workload's "ready" line on its stdout (wl.hrl: after it settled)."""
        assert self.proc.stdout is not None, "not a workload node (no stdout to read)"
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"{self.node} (OTP {self.release}) not ready in {timeout} s:"
                                   f" {self.output[-3:]}")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"{self.node} (OTP {self.release}) exited: "
                                   f"{[*self.output, buf.decode(errors='replace')][-3:]}")
            buf += chunk
            *lines, buf = buf.split(b"\n")
            self.output += [ln.decode(errors="replace").strip() for ln in lines]
            if READY in self.output:
                return

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.stopped = True

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    for k in ("ERL_FLAGS", "ERL_AFLAGS", "ERL_ZFLAGS"):  # the test says every flag itself
        env.pop(k, None)
    return env


def _wait_registered(node: Node, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while node.name not in epmd_names():
        if node.proc.poll() is not None or time.monotonic() > deadline:
            node.stop()
            raise RuntimeError(f"test node {node.name} (OTP {node.release}) did not register "
                               "with epmd")
        time.sleep(0.02)


def start_node(args: Sequence[str] = (), eval_: str | None = None, wait: bool = True,
               cookie: str | None = None, name: str | None = None,
               release: str = SYSTEM) -> Node:
    """`erl -sname NAME -setcookie COOKIE -noshell ARGS` under `release` (name and cookie random
    unless given; a fixed name restarts a node under its old name), registered with epmd."""
    rt = runtime(release)
    name = name or f"t_{secrets.token_hex(4)}"
    cookie = cookie or f"C{secrets.token_hex(12)}"
    argv = rt.argv("erl", "-sname", name, "-setcookie", cookie, "-noshell", *args)
    if eval_:
        argv += ["-eval", eval_]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=_env(None))
    node = Node(name, cookie, proc, release)
    if wait:
        _wait_registered(node)
    return node


_ebins: dict[str, tuple[Path, str]] = {}


def compile_workload(release: str, module: str) -> str:
    """samples/workloads/MODULE.erl compiled by `release`'s erlc (once per session): the ebin
    directory as that release's erl sees it."""
    rt = runtime(release)
    if release not in _ebins:
        _ebins[release] = rt.scratch()
        atexit.register(shutil.rmtree, _ebins[release][0], True)
    here, there = _ebins[release]
    if not (here / f"{module}.beam").exists():
        for f in (f"{module}.erl", "wl.hrl"):
            shutil.copy(WORKLOADS / f, here / f)
        r = subprocess.run(rt.argv("erlc", "-o", there, f"{there}/{module}.erl"),
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"OTP {release} erlc {module}.erl: {r.stdout}{r.stderr}")
    return there


def start_workload(release: str, module: str, function: str = "main", args: str = "",
                   flags: Sequence[str] = (), env: Mapping[str, str] | None = None,
                   name: str | None = None, stdin: bool = False,
                   cgroup: Path | None = None) -> Node:
    """A node running `module:function(args)` (samples/workloads, `args` as Erlang text) under
    `release` with emulator `flags`, registered with epmd. Its stdout is kept: `wait_ready()`
    reads it; with `stdin` the test drives it through `proc.stdin` (binchurn, spikes); with
    `cgroup` (a cgroup directory) it joins that cgroup before erl starts, so all it allocates
    is charged there."""
    rt = runtime(release)
    ebin = compile_workload(release, module)
    name = name or f"t_wl_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    argv = rt.argv("erl", "-sname", name, "-setcookie", cookie, "-noshell", "-pa", ebin,
                   *flags, "-eval", f"{module}:{function}({args})")
    if cgroup is not None:  # the shell joins, then execs (chroot) erl: beam.smp keeps its pid
        argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=_env(env))
    node = Node(name, cookie, proc, release)
    _wait_registered(node)
    return node


def erl_eval(target: Node, expr: str, timeout: float = 20) -> str:
    """Evaluate `expr` (with `T` bound to the target node) on a separate probe node (the
    system's OTP: distribution works across the releases)."""
    code = (f"T = '{target.node}', R = ({expr}), io:format(\"~p~n\", [R]), halt().")
    r = subprocess.run(
        ["erl", "-sname", f"t_probe_{secrets.token_hex(4)}", "-setcookie", target.cookie,
         "-hidden", "-noshell", "-eval", code],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        # a probe that fails (noconnection) halts through init's crash path: without this it
        # writes an erl_crash.dump into the caller's directory (the checkout)
        env={**os.environ, "ERL_CRASH_DUMP_SECONDS": "0"},
    )
    if r.returncode != 0:
        raise RuntimeError(f"probe failed: {r.stderr.strip()[-300:]}")
    return r.stdout
