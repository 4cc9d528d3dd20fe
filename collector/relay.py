"""The hidden node of ours, where our own client (collector/dist.py) cannot go: TLS distribution
and any other -proto_dist, or $BEAMALLOC_HIDDEN_NODE=1 (collector/transport.py direct()).

It only RELAYS calls (collector/erlang/beamalloc_relay.erl): RelayTransport is the same
Transport as dist.Connection, so the snapshot, the scans and their reply checks are one Python
copy for both (collector/collect.py, processes.py, ets.py). A request is term_to_binary of
`{call, Id, Target, M, F, A, TimeoutMs}` made by dist.encode, one base64 line on the node's
stdin; the answer is term_to_binary of erpc's result, read by etf.decode, the decoder of
distribution replies.

The cookie reaches the node over its stdin only; it starts without -setcookie, with a
throw-away HOME (so it neither reads nor creates ~/.erlang.cookie) and without
ERL_FLAGS/ERL_AFLAGS/ERL_ZFLAGS (erlexec would copy them into its argv).

How the hidden node is held (docs/robustness.md):
- it dies with us: its stdin stays open while we live and it halts when stdin ends, which the
  kernel does when this process dies, SIGKILL included; Relay.close() also kills its process
  group (beam.smp and its erl_child_setup);
- it leaves nothing: it deletes its throw-away HOME as soon as distribution is up;
- it costs a target a bounded number of atoms: its name is one of beamalloc_1..16
  (beamalloc_link.erl picks one epmd does not list);
- run as root, it runs as `nobody` with no capability (setpriv): a target can run code on our
  side of a distribution connection (Erlang trusts both ways), and there it is nobody.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from beamalloc.collector import access as access_mod
from beamalloc.collector import dist, etf
from beamalloc.collector.access import Access
from beamalloc.collector.terms import Atom
from beamalloc.collector.transport import NodeError, scrub, start_error

ERLANG_DIR = Path(__file__).parent / "erlang"
MARK = b"BEAMALLOC-RESULT "
#: Seconds past a request's deadline before we stop waiting for the relay (it enforces the
#: deadline itself; this only covers a wedged hidden node).
KILL_GRACE = 1.0
#: The most one answer line may hold: a reply of etf.MAX_BYTES as base64 (4/3), and a little.
MAX_LINE = etf.MAX_BYTES * 4 // 3 + (1 << 20)
#: Run as root, the hidden node runs as this user (no groups, no capabilities, no new privileges).
NODE_USER = "nobody"
#: Bytes of the node's stderr kept for an error message (its last line is all we show).
STDERR_KEEP = 65536

_SCRUB_ENV = ("ERL_FLAGS", "ERL_AFLAGS", "ERL_ZFLAGS", "BEAMALLOC_COOKIE")


# ---- the node's life ---------------------------------------------------------------------

def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "beamalloc" / "ebin"


def erlang_ebin(erlc: str | None = None) -> Path:
    """The directory holding the compiled collector/erlang modules (the relay and the node's
    life), compiling them on first use.

    Keyed by the sources and the erlc binary, so an upgraded module or OTP gets a fresh build.
    """
    erlc = erlc or shutil.which("erlc")
    if not erlc:
        raise NodeError("erlc not found: install Erlang/OTP (Debian: erlang-nox) to snapshot "
                        "a node")
    sources = sorted(ERLANG_DIR.glob("*.erl"))
    digest = hashlib.sha256(os.path.realpath(erlc).encode())
    for src in sources:
        digest.update(b"\0" + src.name.encode() + b"\0" + src.read_bytes())
    key = digest.hexdigest()[:16]
    ebin = _cache_root() / key
    try:
        if all((ebin / f"{src.stem}.beam").is_file() for src in sources):
            return ebin
        ebin.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=ebin.parent))
    except OSError as e:  # a HOME we may not write (nobody, a read-only install host)
        raise NodeError(f"cannot write the hidden node's cache {ebin.parent}: "
                        f"{e.strerror or e}; set XDG_CACHE_HOME to a writable directory") from None
    try:
        r = subprocess.run([erlc, "-o", str(tmp), *map(str, sources)], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            raise NodeError(f"cannot compile the beamalloc hidden node: {last[0]}")
        try:
            tmp.rename(ebin)  # atomic; a concurrent first use may have won the race
        except OSError:
            if not (ebin / "beamalloc_relay.beam").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ebin


def _node_suffix() -> str:
    """A random tag in the hidden node's argv (`-beamalloc_run TAG`) that tests use to find their
    processes; the node's name comes from the pool, not from here."""
    return secrets.token_hex(5)


def hidden_node_argv(erl: str, long_names: bool, run: list[str],
                     ebin: str | Path | None = None, access: Access | None = None,
                     tls_optfile: str | None = None) -> list[str]:
    """argv of a hidden node of ours running `run`, e.g. ["beamalloc_relay", "main"], loading
    our modules from `ebin` (default the compiled cache), reaching targets as `access` says
    (collector/access.py; `tls_optfile` is our private copy of its option file). No cookie
    here, ever, and no node name: beamalloc_link:start/0 starts distribution under a pooled
    name once the node is up.
    start_hidden_node() runs it."""
    access = access or Access()
    host: list[str] = []
    if long_names:  # the target uses long names (net_kernel refuses to mix the two)
        fqdn = socket.getfqdn()
        host = ["-beamalloc_host",
                fqdn if "." in fqdn else "::1" if access.ipv6 else "127.0.0.1"]
    return [
        erl, "-hidden", "-noshell", "-boot", "no_dot_erlang",
        # One scheduler and no busy-waiting: the node only waits on the network, and should
        # not take CPU from the node it is looking at.
        "+S", "1", "+SDcpu", "1", "+SDio", "1", "+A", "1",
        "+sbwt", "none", "+sbwtdcpu", "none", "+sbwtdio", "none",
        # Accept distribution connections on loopback only: nobody needs to reach us.
        "-kernel", "inet_dist_use_interface", access_mod.loopback(access),
        *access_mod.node_args(access, tls_optfile),
        "-pa", str(ebin or erlang_ebin()),
        "-beamalloc_run", _node_suffix(), *host,
        "-run", *run,
    ]


def _node_env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB_ENV}
    env["HOME"] = home
    env["XDG_CONFIG_HOME"] = home  # OTP 26+ also looks for the cookie file here
    env["ERL_CRASH_DUMP_BYTES"] = "0"  # a crash dump would hold the cookie atom
    return env


def unprivileged() -> tuple[list[str], int, int] | None:
    """(argv prefix, uid, gid) that runs the hidden node as NODE_USER when we are root, else None
    (then it runs as the user running beamalloc, who is no more than the operator already is).

    setpriv (util-linux) changes the real and effective ids, drops every supplementary group and
    every capability (inheritable, ambient, bounding set) and sets no_new_privs, so nothing the
    node execs can gain privilege back.
    """
    if os.geteuid() != 0:
        return None
    setpriv = shutil.which("setpriv")
    if not setpriv:
        raise NodeError("running as root, beamalloc runs its hidden node as an unprivileged user "
                        "with setpriv, which is missing (Debian: util-linux)")
    try:
        pw = pwd.getpwnam(NODE_USER)
        uid, gid = pw.pw_uid, pw.pw_gid
    except KeyError:
        uid = gid = 65534  # nobody/nogroup on Debian, when the passwd entry is gone
    return ([setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
             "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs"],
            uid, gid)


def _home_parent(dropping: bool) -> str:
    """Where the throw-away HOME goes: the temporary directory, unless the node runs as
    NODE_USER and could not delete its HOME there (deleting an entry takes write permission on
    the directory: /tmp is world-writable and sticky, a private TMPDIR is not); then /tmp."""
    tmp = tempfile.gettempdir()
    if not dropping:
        return tmp
    try:
        mode = os.stat(tmp).st_mode
    except OSError:
        return "/tmp"
    return tmp if mode & 0o1003 == 0o1003 else "/tmp"  # sticky, and o+wx


def start_hidden_node(run: list[str], long_names: bool, stderr: int = subprocess.PIPE,
                      access: Access | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a hidden node of ours running `run`; return it and its throw-away HOME.

    HOME holds a copy of our compiled modules (the node may run as NODE_USER, who cannot read
    root's ~/.cache) and is the node's to delete; the caller removes it too, after killing the
    node's process group. With TLS distribution, HOME/tls holds our copy of the option file and
    the files it names (access.prepare_tls()): the node keeps it while it lives, since each new
    TLS connection reads them. stdin, stdout: pipes; the caller writes the hex cookie line first
    and keeps stdin open for as long as the node may live.
    """
    access = access or access_mod.current()
    erl = shutil.which("erl")
    if not erl:
        raise NodeError("erl not found: install Erlang/OTP (Debian: erlang-nox) to snapshot a node")
    ebin = erlang_ebin()
    drop = unprivileged()
    home = tempfile.mkdtemp(prefix="beamalloc_home_", dir=_home_parent(drop is not None))
    try:
        own = Path(home) / "ebin"
        own.mkdir()
        for beam in ebin.glob("*.beam"):
            shutil.copyfile(beam, own / beam.name)
        prefix: list[str] = []
        owner: tuple[int, int] | None = None
        if drop is not None:
            prefix, uid, gid = drop
            owner = (uid, gid)
            for path in (home, own, *own.iterdir()):
                os.chown(path, uid, gid)
        tls = access_mod.prepare_tls(access, Path(home) / "tls", owner)
        try:
            proc = subprocess.Popen(
                [*prefix, *hidden_node_argv(erl, long_names, run, own, access, tls)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                # "/" and not HOME: the node deletes HOME while it runs
                cwd="/", env={**_node_env(home), **access_mod.node_env(access)},
                start_new_session=True)
        except OSError as e:
            raise NodeError(f"cannot start {erl}: {e.strerror}") from None
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    return proc, home


def _kill_group(proc: subprocess.Popen[bytes], limit: float = 2.0) -> None:
    """SIGKILL the hidden node's process group and wait until no live member is left.

    proc.wait() only covers erl itself; erl_child_setup (beam's helper) or a subshell of the
    erl script may still be exiting, and "no process of ours left" must hold on return.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    end = time.monotonic() + limit
    while _live_members(proc.pid) and time.monotonic() < end:
        time.sleep(0.005)


def _live_members(pgid: int) -> bool:
    """Does process group `pgid` still have a member that is not a zombie?"""
    for d in os.scandir("/proc"):
        if not d.name.isdigit():
            continue
        try:
            with open(f"/proc/{d.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False




# ---- the relay ---------------------------------------------------------------------------

class Relay:
    """One hidden node relaying calls to any number of targets; thread-safe. start() boots it
    and waits until its distribution is up (or says, in one line, why it is not); close() takes
    it down with its process group and its HOME, on every way out."""

    def __init__(self, cookie: str, long_names: bool, access: Access) -> None:
        self._cookie = cookie
        self._long = long_names
        self._access = access
        self._ids = itertools.count(1)
        self._lock = threading.Condition()  # the answers
        self._wlock = threading.Lock()  # one request line at a time on the node's stdin
        self._answers: dict[str, bytes | BaseException | None] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._home = ""
        self._err = bytearray()
        self._threads: list[threading.Thread] = []
        self.ended: str | None = None  # why the relay is gone, once it is

    def start(self, deadline: float) -> None:
        """Boot the node and hand it the cookie; NodeError if it cannot serve by `deadline`."""
        self._proc, self._home = start_hidden_node(["beamalloc_relay", "main"], self._long,
                                                   access=self._access)
        assert self._proc.stdin is not None
        self._answers["0"] = None
        with contextlib.suppress(BrokenPipeError):  # a node dead at boot: its stderr says why
            self._proc.stdin.write(self._cookie.encode("utf-8").hex().encode() + b"\n")
            self._proc.stdin.flush()
        for target, name in ((self._read, "beamalloc-relay"), (self._read_err, "relay-stderr")):
            th = threading.Thread(target=target, name=name, daemon=True)
            th.start()
            self._threads.append(th)
        try:
            ready = etf.decode(self.answer("0", deadline))
        except etf.ETFError as e:
            raise NodeError(f"unreadable answer from the beamalloc hidden node: {e}") from None
        except dist.DistError as e:
            if e.kind == "timeout":
                raise NodeError("timed out starting the beamalloc hidden node") from None
            raise NodeError(scrub(str(e.detail), self._cookie)) from None
        if isinstance(ready, tuple) and len(ready) == 3 and ready[0] == "error":
            self.ended = str(start_error(str(ready[1]), ready[2], self._cookie))
            raise NodeError(self.ended)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self.ended

    def request(self, req: tuple[Any, ...]) -> str:
        """Send `req` with a fresh Id in its second place; the key answer() waits on."""
        rid = str(next(self._ids))
        line = base64.b64encode(b"\x83" + dist.encode((req[0], int(rid), *req[1:]))) + b"\n"
        with self._lock:
            if self.ended or self._proc is None or self._proc.stdin is None:
                raise dist.DistError("hidden_node", self.ended or "the beamalloc hidden node "
                                     "is not running")
            self._answers[rid] = None
            stdin = self._proc.stdin
        # Written outside the answers' lock: a large request may wait on a node that is itself
        # waiting for the reader (which takes that lock) to drain its answers.
        with self._wlock:
            try:
                stdin.write(line)
                stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.forget(rid)
                raise dist.DistError("hidden_node", "the beamalloc hidden node exited") from None
        return rid

    def answer(self, rid: str, deadline: float) -> bytes:
        """The raw answer (term_to_binary, maybe compressed) to request `rid`; a DistError
        timeout past `deadline` and KILL_GRACE (the relay enforces the deadline itself)."""
        until = deadline + KILL_GRACE
        with self._lock:
            while (got := self._answers.get(rid)) is None:
                if rid not in self._answers:
                    raise dist.DistError("hidden_node", "no such request")
                left = until - time.monotonic()
                if left <= 0:
                    self._answers.pop(rid, None)
                    raise dist.DistError("timeout", Atom("collecting"))
                self._lock.wait(left)
            del self._answers[rid]
        if isinstance(got, BaseException):
            raise got
        return got

    def forget(self, rid: str) -> None:
        with self._lock:
            self._answers.pop(rid, None)

    def _read(self) -> None:
        proc = self._proc  # close() clears self._proc while we may still read
        assert proc is not None and proc.stdout is not None
        out = proc.stdout
        while line := out.readline(MAX_LINE):
            if not line.endswith(b"\n"):  # longer than any reply we read: drop it whole
                while (more := out.readline(MAX_LINE)) and not more.endswith(b"\n"):
                    pass
                answer: bytes | BaseException = dist.DistError(
                    "call_failed", f"a reply larger than beamalloc reads "
                    f"({etf.MAX_BYTES >> 20} MiB of terms)".encode())
            if not line.startswith(MARK):
                continue
            rid, _, payload = line[len(MARK):].partition(b" ")
            key = rid.decode("ascii", "replace")
            if line.endswith(b"\n"):
                try:
                    answer = base64.b64decode(payload.strip(), validate=True)
                except ValueError as e:
                    answer = dist.DistError("call_failed", f"unreadable answer from the "
                                            f"beamalloc hidden node: {e}".encode())
            with self._lock:
                if key in self._answers:
                    self._answers[key] = answer
                    self._lock.notify_all()
        proc.wait()
        tail = self._err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        gone = dist.DistError("hidden_node", f"the beamalloc hidden node exited with status "
                              f"{proc.returncode}: {scrub(tail[0], self._cookie)[:200]}")
        with self._lock:
            self.ended = self.ended or str(gone.detail)
            for k, v in self._answers.items():
                if v is None:
                    self._answers[k] = gone
            self._lock.notify_all()

    def _read_err(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        while chunk := proc.stderr.read1(1 << 16):
            self._err += chunk
            del self._err[:-STDERR_KEEP]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with self._lock:
                self.ended = self.ended or "the beamalloc hidden node was closed"
            # killed first: a request blocked writing to its stdin then fails at once, where
            # closing the pipe would wait for it
            _kill_group(proc)
            with contextlib.suppress(OSError, ValueError):
                if proc.stdin:
                    proc.stdin.close()
            for th in self._threads:
                th.join(timeout=5)
        if self._home:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = ""


def _inflate(data: bytes) -> bytes:
    """term_to_binary's compressed form (131, 80, size, zlib) as the plain one: etf's one
    inflate (bounded by etf.MAX_BYTES, checks the stated size and zlib's end), its error the
    relay's DistError line."""
    if data[1:2] != b"P":
        return data
    try:
        return b"\x83" + etf.inflate(data)
    except etf.ETFError as e:
        raise dist.DistError("call_failed", f"unreadable answer: {e}".encode()) from None


#: The head of term_to_binary({ok, V}) (minor_version 2: `ok` a SMALL_ATOM_UTF8), uncompressed.
_OK_HEAD = b"\x83\x68\x02\x77\x02ok"


class RelayTransport:
    """A Transport (collector/transport.py) to `target` through `relay`: each call one relay
    request, its answer rex's result or a DistError as dist.Connection raises."""

    def __init__(self, relay: Relay, target: str, deadline: float) -> None:
        self.target = target
        self._relay = relay
        self._raw: set[str] = set()
        self._keys: set[str] = set()  # requests in flight, forgotten by close()
        self._closed = False
        self.deadline = deadline
        self.stats: dict[str, Any] = {"decode_s": 0.0, "bytes": 0, "messages": 0}
        rid = relay.request((Atom("connect"), Atom(target), self._ms()))
        self._raw.add(rid)
        init = self.receive(rid, deadline)
        # init's pid, as term_to_binary on our node writes a pid of the target (NEW_PID_EXT:
        # its node's atom, then id, serial and creation): the head and creation of the pids
        # we send back (pids())
        data, pos = init.data, init.pos
        if data[pos:pos + 1] != b"X" or len(data) - pos < 16:
            raise dist.DistError("bad_reply", b"the target's init is not a pid")
        self._pid_head, self._creation = data[pos:len(data) - 12], data[len(data) - 4:]

    def _ms(self) -> int:
        return max(1, int((self.deadline - time.monotonic()) * 1000))

    def send(self, m: str, f: str, args: list[Any]) -> str:
        if self._closed:
            raise dist.DistError("nodedown", b"")
        key = self._relay.request((Atom("call"), Atom(self.target), Atom(m), Atom(f), args,
                                   self._ms()))
        self._keys.add(key)
        return key

    def send_raw(self, m: str, f: str, args: list[Any]) -> str:
        key = self.send(m, f, args)
        self._raw.add(key)
        return key

    def receive(self, key: str, deadline: float) -> Any:
        raw = key in self._raw
        self._raw.discard(key)
        self._keys.discard(key)
        data = self._relay.answer(key, deadline)
        t0 = time.perf_counter()
        st = self.stats
        st["bytes"] += len(data)
        st["messages"] += 1
        if raw:
            plain = _inflate(data)
            if plain.startswith(_OK_HEAD):
                st["decode_s"] += time.perf_counter() - t0
                return dist.RawReply(plain, len(_OK_HEAD))
        try:
            reply = etf.decode(data)
        except etf.ETFError as e:
            raise dist.DistError("call_failed", f"unreadable answer: {e}".encode()) from None
        st["decode_s"] += time.perf_counter() - t0
        if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "ok":
            return reply[1]
        if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "error":
            if reply[1] == "nodedown":
                self._closed = True
            raise dist.DistError(str(reply[1]), reply[2])
        raise dist.DistError("hidden_node", "unexpected answer from the beamalloc hidden node")

    def call(self, m: str, f: str, args: list[Any], deadline: float) -> Any:
        return self.receive(self.send(m, f, args), deadline)

    def pid(self, text: str) -> dist.RawTerm:
        return dist.RawTerm(self.pids([text]).data[5:-1])

    def pids(self, texts: list[str]) -> dist.RawTerm:
        return dist.encode_pids(self._pid_head, self._creation, texts)

    @property
    def closed(self) -> bool:
        return self._closed or not self._relay.alive()

    def close(self) -> None:
        self._closed = True
        for key in self._keys:
            self._relay.forget(key)
        self._keys.clear()
