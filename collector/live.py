"""Snapshot a running node over Erlang distribution, read-only (docs/design.md, "What it does" 1).

Two ways, the same Snapshot (tests/live/test_direct.py compares them):

- plain TCP distribution (IPv4 or IPv6, any epmd port, epmd-less): collector/dist.py, our own
  client, connects as a hidden `beamalloc_N` and asks kernel's rex for the same BIF calls the
  agent makes (collect_direct); no BEAM boots on our side, which was most of a cold snapshot
  (tests/bench/bench_snapshot_s64.py);
- TLS distribution (and any other -proto_dist), or $BEAMALLOC_HIDDEN_NODE=1: a hidden node of
  ours, as below.

A local hidden node runs collector/erlang/beamalloc_agent.erl: it connects to the target, calls
BIFs there through erpc (nothing is loaded on the target) and prints the collected terms as one
line of base64 ETF. The cookie reaches the agent over its stdin only; the hidden node starts
without -setcookie, with a throw-away HOME (so it neither reads nor creates ~/.erlang.cookie) and
without ERL_FLAGS/ERL_AFLAGS/ERL_ZFLAGS (erlexec would copy them into its argv).

How the hidden node is held (docs/robustness.md):
- it dies with us: its stdin stays open while we live and it halts when stdin ends, which the
  kernel does when this process dies, SIGKILL included; every path out of snapshot_node() also
  kills its process group (beam.smp and its erl_child_setup);
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
import re
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beamalloc.collector import access as access_mod
from beamalloc.collector import dist, etf
from beamalloc.collector.access import Access
from beamalloc.collector.cookie import check_cookie, source_of
from beamalloc.collector.instrument import add_carriers, port_origins
from beamalloc.collector.system_info import add_system_info, memory_from_term
from beamalloc.collector.terms import Atom, Opaque, format_term, proplist
from beamalloc.errors import InputError, NodeUnavailable
from beamalloc.limits import MAX_CARRIERS
from beamalloc.snapshot import Snapshot, SnapshotError, describe, wrapped

ERLANG_DIR = Path(__file__).parent / "erlang"
MARK = b"BEAMALLOC-RESULT "
#: Seconds the agent keeps for itself before our deadline, to print why it gave up.
AGENT_MARGIN = 0.3
#: Seconds past the deadline before we stop waiting for the agent and kill it.
KILL_GRACE = 1.0
#: The most the agent may print: its answer is the target's reply as base64 of ETF (4/3 of
#: etf.MAX_BYTES), a few lines besides.
MAX_AGENT_OUTPUT = etf.MAX_BYTES * 4 // 3 + (1 << 20)
#: Our hidden nodes are named beamalloc_1 .. beamalloc_POOL (the ?POOL of beamalloc_link.erl).
NAME_POOL = 16
#: Run as root, the hidden node runs as this user (no groups, no capabilities, no new privileges).
NODE_USER = "nobody"
#: Bytes of the agent's stderr kept for an error message (its last line is all we show).
STDERR_KEEP = 65536

# The host may be an IPv6 address (`app@::1`, long names over inet6_tcp).
_NODE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.+-]*)@([A-Za-z0-9_:][A-Za-z0-9_.:-]*)\Z")
_SCRUB_ENV = ("ERL_FLAGS", "ERL_AFLAGS", "ERL_ZFLAGS", "BEAMALLOC_COOKIE")


class NodeError(NodeUnavailable):
    """The node is unreachable, rejected the cookie, went down or stalled (one line, exit 3)."""


class NodeNameError(InputError):
    """Not a node name of the form name@host."""


def split_node(node: str) -> tuple[str, str]:
    m = _NODE.match(node)
    if not m:
        raise NodeNameError(f"not a node name (name@host): {node!r}")
    return m.group(1), m.group(2)


# ---- the agent ---------------------------------------------------------------------------

def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "beamalloc" / "ebin"


def erlang_ebin(erlc: str | None = None) -> Path:
    """The directory holding the compiled collector/erlang modules (the one-shot agent and the
    long-lived session), compiling them on first use.

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
        raise NodeError(f"cannot write the agent's cache {ebin.parent}: "
                        f"{e.strerror or e}; set XDG_CACHE_HOME to a writable directory") from None
    try:
        r = subprocess.run([erlc, "-o", str(tmp), *map(str, sources)], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            raise NodeError(f"cannot compile the beamalloc agent: {last[0]}")
        try:
            tmp.rename(ebin)  # atomic; a concurrent first use may have won the race
        except OSError:
            if not (ebin / "beamalloc_agent.beam").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ebin


def _local_host_names() -> set[str]:
    fqdn = socket.getfqdn()
    host = socket.gethostname()
    return {host, host.split(".")[0], fqdn, fqdn.split(".")[0], "localhost", "127.0.0.1", "::1"}


def _node_suffix() -> str:
    """A random tag in the hidden node's argv (`-beamalloc_run TAG`) that tests use to find their
    processes; the node's name comes from the pool, not from here."""
    return secrets.token_hex(5)


def hidden_node_argv(erl: str, long_names: bool, run: list[str],
                     ebin: str | Path | None = None, access: Access | None = None,
                     tls_optfile: str | None = None) -> list[str]:
    """argv of a hidden node of ours (the one-shot agent or the watch session) running `run`,
    e.g. ["beamalloc_agent", "main", Target, DeadlineMs], loading our modules from `ebin` (default
    the compiled cache), reaching targets as `access` says (collector/access.py; `tls_optfile`
    is our private copy of its option file). No cookie here, ever, and no node name:
    beamalloc_link:start/1 starts distribution under a pooled name once the node is up.
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


def _agent_env(home: str) -> dict[str, str]:
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
                cwd="/", env={**_agent_env(home), **access_mod.node_env(access)},
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


def run_hidden(module: str, node: str, cookie: str, timeout: float, args: list[str],
               access: Access | None = None,
               timings: dict[str, float] | None = None) -> tuple[Any, float]:
    """Run one of our one-shot modules (beamalloc_agent, beamalloc_procs: `Module:main/1`
    with the target, a deadline and `args`) on a hidden node that reaches `node` as `access`
    says (default access.current()); return its reply term and the time it finished. The one
    place the one-shot hidden node is started, fed its cookie and killed. `timings`, when
    given, gets the reply's decoding time and size (snapshot_node's)."""
    start = time.time()
    deadline = start + timeout
    run = [module, "main", node, str(int((deadline - AGENT_MARGIN) * 1000)), *args]
    proc: subprocess.Popen[bytes] | None = None
    home = ""
    try:
        access = access or access_mod.current()
        proc, home = start_hidden_node(run, access_mod.is_long_host(split_node(node)[1]),
                                       access=access)
        assert proc.stdin is not None
        try:  # stdin stays open: its end is the node's signal that we are gone
            proc.stdin.write(cookie.encode("utf-8").hex().encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the node died at boot; its stderr says why
        out, err = _read_output(proc, deadline + KILL_GRACE, node, timeout)
        done = time.time()
    finally:
        if proc is not None:
            _kill_group(proc)
        if home:
            shutil.rmtree(home, ignore_errors=True)
    for line in out.splitlines():
        if line.startswith(MARK):
            try:
                t0 = time.perf_counter()
                reply = etf.decode(base64.b64decode(line[len(MARK):], validate=True))
                if timings is not None:
                    timings.update(decode_s=time.perf_counter() - t0, bytes=len(line))
                return reply, done
            except (ValueError, etf.ETFError) as e:
                raise NodeError(f"unreadable answer from the beamalloc agent: {e}") from None
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
    raise NodeError(f"the beamalloc agent exited with status {proc.poll()} and no answer: "
                    f"{_scrub(tail[0], cookie)[:200]}")


def _read_output(proc: subprocess.Popen[bytes], until: float, node: str,
                 timeout: float) -> tuple[bytes, bytes]:
    """The node's stdout up to its end and what its stderr said meanwhile (the last
    STDERR_KEEP bytes), without closing its stdin (communicate() would)."""
    assert proc.stdout is not None and proc.stderr is not None
    out: list[bytes] = []
    size = 0
    err = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        stdout_open = True
        while stdout_open:
            left = until - time.time()
            if left <= 0:
                raise NodeError(f"timed out after {timeout:g} s talking to {node} "
                                "(the agent did not finish)")
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if key.fileobj is proc.stdout:
                    if chunk:
                        out.append(chunk)
                        size += len(chunk)
                        if size > MAX_AGENT_OUTPUT:  # the target's reply, base64: bounded
                            raise NodeError(f"{node} sent a reply larger than beamalloc reads "
                                            f"({etf.MAX_BYTES >> 20} MiB of terms)")
                    else:
                        stdout_open = False
                elif chunk:
                    err += chunk
                    del err[:-STDERR_KEEP]
                else:
                    sel.unregister(proc.stderr)
    # stdout ends when the node exits; what stderr still holds is read without waiting for an
    # end a stray grandchild could hold off.
    with contextlib.suppress(OSError):
        os.set_blocking(proc.stderr.fileno(), False)
        while chunk := os.read(proc.stderr.fileno(), 1 << 16):
            err += chunk
            del err[:-STDERR_KEEP]
    return b"".join(out), bytes(err)


def _scrub(text: str, cookie: str) -> str:
    """`text` without any piece of the cookie: plain, as the hex the agent reads, or as the
    list of character codes Erlang prints for a string (`~p` of a list of integers); any run of
    4 or more characters found in one of those forms becomes `***` (a truncated print of the
    cookie is still a secret). Over-redacting a message is the safe side."""
    if not cookie:
        return text
    for form in (cookie, cookie.encode("utf-8", "surrogatepass").hex(),
                 ",".join(str(ord(c)) for c in cookie)):
        text = _redact(text, form, min(4, len(form)))
    return text


def _redact(text: str, secret: str, least: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        j = i + least
        if j <= len(text) and text[i:j] in secret:
            while j < len(text) and text[i:j + 1] in secret:
                j += 1
            out.append("***")
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# ---- errors ------------------------------------------------------------------------------

def _text(v: Any, cookie: str = "") -> str:
    text = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    return _scrub(text, cookie)


#: Names of epmd's list an error line shows (a hostile epmd listed 20,000).
SHOW_NAMES = 10


def _error(node: str, kind: str, detail: Any, timeout: float, cookie: str,
           access: Access | None = None) -> NodeError:
    """The one-line message for the agent's `{error, Kind, Detail}`.

    Free-form details (exit reasons) are scrubbed of the cookie: a crash reason can quote a
    function's arguments. A connection that failed names the access options it used.
    """
    name, host = split_node(node)
    how = (access or Access()).describe()
    if kind == "connect_failed" and how:
        return NodeError(f"cannot connect to {node} ({how}): "
                         f"{_text(detail, cookie)[:200] or 'no reason given'}")
    if kind == "no_such_node":
        others = sorted(_text(n)[:64] for n in detail if not _text(n).startswith("beamalloc_"))
        shown = ", ".join(others[:SHOW_NAMES]) + (f" and {len(others) - SHOW_NAMES} more"
                                                  if len(others) > SHOW_NAMES else "")
        known = f"epmd there knows {shown}" if others else "epmd there knows no node"
        if how:  # which epmd we asked, or that the node may be epmd-less
            known += f"; {how}"
        return NodeError(f"no node named {name} on host {host} ({known})")
    if kind == "host_unreachable":
        return NodeError(f"cannot reach epmd on host {host}: the host is unreachable or no "
                         f"Erlang node runs there ({_text(detail)})")
    if kind == "bad_cookie":  # which source was tried, never the cookie (collector/cookie.py)
        src = source_of(cookie)
        return NodeError(f"authentication failed{f' with the cookie from {src}' if src else ''}: "
                         f"the node is up but rejected our cookie ({node})")
    if kind == "nodedown":
        return NodeError(f"node {node} went down during the snapshot")
    if kind == "timeout":
        what = "connecting to" if detail == "connecting" else "waiting for allocator data from"
        return NodeError(f"timed out after {timeout:g} s {what} {node}")
    if kind == "connect_failed":  # epmd knows the node, the handshake failed: a hint
        return NodeError(f"cannot connect to {node}: {_text(detail, cookie)[:160]} (a node run "
                         "with TLS or IPv6 distribution needs --proto-dist, docs/access.md)")
    if kind == "call_failed":
        return NodeError(f"a call on {node} failed: {_text(detail, cookie)[:200]}")
    if kind == "bad_reply":
        return NodeError(f"{node} sent a reply no Erlang node sends: {_text(detail)[:200]}")
    if kind == "no_cookie":
        return NodeError("the beamalloc agent received no cookie")
    if kind == "died_in_handshake":
        return NodeError(f"node {node} went away during the connection handshake (epmd listed "
                         f"it when we connected, and no longer does: "
                         f"{_text(detail, cookie)[:160]})")
    if kind in ("names_in_use", "no_distribution"):
        return start_error(kind, detail, cookie)
    return NodeError(f"the beamalloc agent failed ({kind}): {_text(detail, cookie)[:200]}")


def start_error(kind: str, detail: Any, cookie: str = "") -> NodeError:
    """The message for a hidden node that could not start distribution on our side."""
    if kind == "no_cookie":
        return NodeError("the beamalloc hidden node received no cookie")
    if kind == "names_in_use":
        return NodeError(f"all {NAME_POOL} beamalloc node names (beamalloc_1..{NAME_POOL}) are "
                         "registered with epmd on this host: as many beamalloc runs at once, "
                         "or nodes of that name; retry when one ends")
    return NodeError(f"cannot start Erlang distribution on this host: "
                     f"{_text(detail, cookie)[:200]}")


# ---- the snapshot without a hidden node -------------------------------------------------

#: The tables erts sizes at boot for its limits, and what they hold (analyzer/limits.py).
LIMIT_KEYS = ("process_limit", "port_limit", "process_count", "port_count")
#: instrument:carriers/1 histograms, as beamalloc_agent.erl's ?HIST_START and ?HIST_WIDTH.
HIST_START, HIST_WIDTH = 128, 18
#: beamalloc_agent.erl's ?MAX_TAGGED_BLOCKS (why: there).
MAX_TAGGED_BLOCKS = 500_000
_SIMPLE = (("memory", "erlang", "memory", []),
           ("otp_release", "erlang", "system_info", [Atom("otp_release")]),
           ("version", "erlang", "system_info", [Atom("version")]),
           ("wordsize", "erlang", "system_info", [Atom("wordsize")]),
           ("schedulers", "erlang", "system_info", [Atom("schedulers")]),
           *((k, "erlang", "system_info", [Atom(k)]) for k in LIMIT_KEYS),
           ("os_pid", "os", "getpid", []))
_FIXED = ("sys_alloc", "mseg_alloc", "erts_mmap", "alloc_util")


#: Set to 1, every snapshot goes through a hidden node, as before collector/dist.py: the
#: escape hatch should a target refuse our own client (and what the hidden node's tests use).
ENV_HIDDEN_NODE = "BEAMALLOC_HIDDEN_NODE"


def direct(access: Access) -> bool:
    """Does collector/dist.py reach the target, rather than a hidden node? For plain TCP
    distribution, IPv4 or IPv6, any epmd port, epmd-less; TLS distribution (and a vendor's
    -proto_dist) keep the hidden node (docs/access.md), as does $BEAMALLOC_HIDDEN_NODE=1."""
    return (access.proto in ("inet_tcp", "inet6_tcp")
            and os.environ.get(ENV_HIDDEN_NODE, "").strip() != "1")


def _us() -> int:
    return time.time_ns() // 1000


def _result(v: Any) -> Any:
    """rex's answer as erpc's: `{badrpc, {'EXIT', X}}` is an exception on the target."""
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "badrpc":
        try:
            why = format_term(v[1])
        except TypeError:  # a map (OTP 24+ error_info): said without it
            why = "an exception on the target"
        raise dist.DistError("call_failed", why[:2000].encode())
    return v


def _instrument_result(v: Any) -> Any:
    """As beamalloc_agent:instrument_response/1: an exception is a value, not a failure."""
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "badrpc":
        why = v[1]
        if isinstance(why, tuple) and len(why) == 2 and why[0] == "EXIT":
            x = why[1]
            if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], list):
                return (Atom("exception"), Atom("error"), x[0])
            return (Atom("exception"), Atom("exit"), x)
        return (Atom("exception"), Atom("throw"), why)
    return v


#: The most allocators a node lists in alloc_util_allocators (OTP 25 has 12, with every
#: optional one on 14): a reply listing more is not a node's, and each name is one request.
MAX_ALLOCATORS = 64
#: An allocator's name, as alloc_util names them (and no other text: it becomes a request).
_ALLOC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: The most erlang:memory() entries (OTP 25 has 11).
MAX_MEMORY_KEYS = 64


def _bad_reply(what: str, v: Any) -> dist.DistError:
    """A reply of the wrong shape: described, never quoted (docs/robustness.md)."""
    return dist.DistError("bad_reply", f"{what}: {describe(v)}".encode())


def _check_utils(v: Any) -> list[Atom]:
    if not (isinstance(v, list) and len(v) <= MAX_ALLOCATORS
            and all(type(a) is Atom and _ALLOC_NAME.fullmatch(a) for a in v)):
        raise _bad_reply(f"alloc_util_allocators is not a list of at most {MAX_ALLOCATORS} "
                         "allocator names", v)
    return list(dict.fromkeys(v))


def _is_text(v: Any, limit: int = 64) -> bool:
    return type(v) is str and len(v) <= limit and v.isprintable()


#: What each of _SIMPLE's replies must be (erlang:memory/0, system_info/1, os:getpid/0).
_SHAPES: dict[str, tuple[str, Any]] = {
    "memory": (f"a list of at most {MAX_MEMORY_KEYS} {{atom, integer}} pairs",
               lambda v: isinstance(v, list) and len(v) <= MAX_MEMORY_KEYS and all(
                   isinstance(x, tuple) and len(x) == 2 and type(x[0]) is Atom
                   and _int(x[1]) is not None for x in v)),
    "otp_release": ("a release string", _is_text),
    "version": ("a version string", _is_text),
    "wordsize": ("4 or 8", lambda v: _int(v) in (4, 8)),
    "schedulers": ("a scheduler count", lambda v: _int(v) is not None and 1 <= v <= 1024),
    "os_pid": ("a process id", lambda v: _is_text(v, 10) and v.isdigit()),
    **{k: ("a count", lambda v: _int(v) is not None and 0 <= v < 1 << 32) for k in LIMIT_KEYS},
}


def _check_reply(key: Any, v: Any) -> Any:
    """`v` if it has the shape `key`'s reply must have; else bad_reply (exit 3)."""
    if isinstance(key, tuple):  # {allocator, A}: its info list, or false when not started
        if not (isinstance(v, list) or v == "false"):
            raise _bad_reply(f"system_info({{allocator, {key[1]}}}) is not a list", v)
        return v
    what, ok = _SHAPES[str(key)]
    if not ok(v):
        raise _bad_reply(f"{key} is not {what}", v)
    return v


def collect_direct(conn: dist.Connection, target: str, cap: int, deadline: float,
                   main_us: int, connected_us: int) -> Any:
    """beamalloc_agent:collect/2 over our own connection: the same requests, all in flight at
    once, and the same `{ok, [{Key, Value}]}` reply, so build_snapshot() cannot tell the two
    apart (tests/live/test_direct.py compares them). Every reply is checked for its shape
    before use (a target could send anything: issue 25), and the deadline between steps."""
    util_key = conn.send("erlang", "system_info", [Atom("alloc_util_allocators")])
    started = _us()
    reqs = [(Atom(k), conn.send(m, f, a)) for k, m, f, a in _SIMPLE]
    reqs += [((Atom("allocator"), Atom(a)),
              conn.send("erlang", "system_info", [(Atom("allocator"), Atom(a))]))
             for a in _FIXED]
    utils = _check_utils(_result(conn.receive(util_key, deadline)))
    reqs += [((Atom("allocator"), a),
              conn.send("erlang", "system_info", [(Atom("allocator"), a)])) for a in utils]
    results = [(k, _check_reply(k, _result(conn.receive(r, deadline)))) for k, r in reqs]
    dist.check_deadline(deadline, "collecting")
    done = _us()
    scalars = [(k, v) for k, v in results if isinstance(k, Atom)]
    allocs = [(k[1], v) for k, v in results if isinstance(k, tuple)]
    otp = next((v for k, v in scalars if k == "otp_release"), None)
    carriers = _carriers_direct(conn, [(a, v) for a, v in allocs if a in utils], cap, deadline,
                                otp)
    return (Atom("ok"), [(Atom("node"), Atom(target)), (Atom("alloc_util_allocators"), utils),
                         *scalars, (Atom("allocators"), allocs), *carriers,
                         (Atom("sampled_at_us"), (started + done) // 2),
                         (Atom("timings"), [(Atom("main"), main_us),
                                            (Atom("connected"), connected_us),
                                            (Atom("calls_sent"), started),
                                            (Atom("replies_in"), done)]),
                         (Atom("collect_us"), done - started)])


def _keyfind(key: str, items: Any) -> tuple[Any, ...] | None:
    """lists:keyfind(Key, 1, Items): the first tuple whose first element is Key."""
    for it in items if isinstance(items, list) else []:
        if isinstance(it, tuple) and it and it[0] == key:
            return it
    return None


def _stat(key: str, sec: Any) -> int:
    """A count of a section, 0 when absent or wrapped (a negative counter of the VM read as
    unsigned: never summed raw, snapshot.wrapped)."""
    it = _keyfind(key, sec)
    v = it[1] if it and len(it) in (2, 4) else None
    return v if _int(v) is not None and v >= 0 and not wrapped(v) else 0


def _section(key: str, props: list[Any]) -> tuple[int, int]:
    it = _keyfind(key, props)
    if it and len(it) == 2 and isinstance(it[1], list):
        return _stat("carriers", it[1]), _stat("carriers_size", it[1])
    return 0, 0


def _carriers_direct(conn: dist.Connection, allocs: list[tuple[Any, Any]], cap: int,
                     deadline: float, otp: Any = None) -> list[Any]:
    """beamalloc_agent:carriers/4 (its comment says why each step is as it is)."""
    if cap <= 0:
        return []
    insts = []
    for a, info in allocs:
        for e in info if isinstance(info, list) else []:
            if isinstance(e, tuple) and len(e) == 3 and e[0] == "instance":
                sections = [_section(k, e[2]) for k in ("mbcs", "sbcs", "mbcs_pool")]
                n, size = sum(c for c, _ in sections), sum(b for _, b in sections)
                if n > 0:
                    insts.append((a, e[1], n, size))
    # lists:sort with {S1, N1} >= {S2, N2}: largest bytes first, then count; stable otherwise
    insts.sort(key=lambda x: (x[3], x[2]), reverse=True)
    take, skip, left = [], [], cap
    for x in insts:
        if x[2] <= left:
            left -= x[2]
            take.append(x)
        else:
            skip.append(x)
    by_inst: dict[int, list[Any]] = {}
    for a, i, _, _ in reversed(take):  # the agent folds over its reversed take list
        by_inst.setdefault(i, []).insert(0, a)
    started = _us()
    reqs = [(i, conn.send("instrument", "carriers",
                          [{Atom("scheduler_ids"): [i],
                            Atom("allocator_types"): list(reversed(by_inst[i])),
                            Atom("histogram_start"): HIST_START,
                            Atom("histogram_width"): HIST_WIDTH}]))
            for i in sorted(by_inst)]
    tagged = [a for a, info in allocs if isinstance(info, list) and _atags_on(info)]
    blocks = sum(_block_count(e[2]) for a, info in allocs if a in tagged
                 for e in info if isinstance(e, tuple) and len(e) == 3 and e[0] == "instance")
    if not tagged:
        areq: Any = Atom("none")
    elif blocks > MAX_TAGGED_BLOCKS:
        areq = (Atom("skipped"), blocks)
    else:
        opts = {Atom("allocator_types"): tagged, Atom("histogram_start"): HIST_START,
                Atom("histogram_width"): HIST_WIDTH}
        if isinstance(otp, str) and otp.isdigit() and int(otp) >= 27:  # OTP-18577
            opts[Atom("flags")] = [Atom("per_port")]
        areq = conn.send("instrument", "allocations", [opts])
    got = [(i, _instrument_result(conn.receive(r, deadline))) for i, r in reqs]
    tags = _instrument_result(conn.receive(areq, deadline)) if type(areq) is str else areq
    ports = port_origins(tags)
    names = _port_names(conn, ports, deadline) if ports else []
    return [(Atom("carriers"), got),
            (Atom("carriers_skipped"), [(a, i, n) for a, i, n, _ in skip]),
            (Atom("carriers_cap"), cap),
            (Atom("carrier_hist"), (HIST_START, HIST_WIDTH)),
            (Atom("allocation_tags"), tags),
            (Atom("port_names"), names),
            (Atom("carriers_us"), _us() - started)]


def _port_names(conn: dist.Connection, ports: list[str], deadline: float) -> list[Any]:
    """beamalloc_agent:port_names/2: erlang:port_info(Port, name) of `ports` ("#Port<0.N>"),
    each sent back as the target encoded it in erlang:ports()'s reply (the decoder keeps a port
    as its text only); a port gone from that list is left out, and an odd answer gives []: the
    names are a courtesy, the tags stand without them."""
    raw = _raw_ports(_result(conn.receive(conn.send_raw("erlang", "ports", []), deadline)))
    # a port closed since its blocks were counted is not listed: it stays unnamed
    ports = [p for p in ports if raw and p in raw]
    if not ports:
        return []
    arg = dist.RawTerm(b"\x6c" + struct.pack(">I", len(ports))
                       + b"".join(raw[p] for p in ports) + b"\x6a")
    names = _result(conn.receive(conn.send(
        "lists", "zipwith", [dist.Export("erlang", "port_info", 2), arg,
                             [Atom("name")] * len(ports)]), deadline))
    if not (isinstance(names, list) and len(names) == len(ports)):
        return []
    return [(Opaque(p), n) for p, n in zip(ports, names, strict=True)]


def _raw_ports(r: Any) -> dict[str, bytes] | None:
    """erlang:ports()'s reply as it came (dist.RawReply): "#Port<0.N>" -> that port's
    encoding (NEW_PORT_EXT or V4_PORT_EXT: the node's atom, the number, the creation); None
    for a reply of another shape."""
    if not isinstance(r, dist.RawReply):
        return None
    data, pos = r.data, r.pos
    if data[pos:pos + 1] == b"\x6a":
        return {}
    if data[pos:pos + 1] != b"\x6c" or len(data) < pos + 5:
        return None
    n = struct.unpack_from(">I", data, pos + 1)[0]
    at, out = pos + 5, {}
    for _ in range(n):
        tag, kind = data[at:at + 1], data[at + 1:at + 2]
        if tag not in (b"Y", b"x") or kind not in (b"v", b"w"):
            return None
        alen = (struct.unpack_from(">H", data, at + 2)[0] + 3 if kind == b"v"
                else data[at + 2] + 2) if len(data) > at + 3 else 0
        body = 8 if tag == b"Y" else 12
        end = at + 1 + alen + body
        if not alen or end > len(data):
            return None
        num = (struct.unpack_from(">I", data, at + 1 + alen)[0] if tag == b"Y"
               else struct.unpack_from(">Q", data, at + 1 + alen)[0])
        out[f"#Port<0.{num}>"] = data[at:end]
        at = end
    return out if data[at:at + 1] == b"\x6a" else None


def _block_count(props: Any) -> int:
    total = 0
    for it in props if isinstance(props, list) else []:
        if isinstance(it, tuple) and len(it) == 2 and it[0] in ("mbcs", "sbcs", "mbcs_pool") \
                and isinstance(it[1], list):
            for b in it[1]:
                if isinstance(b, tuple) and len(b) == 2 and b[0] == "blocks" \
                        and isinstance(b[1], list):
                    total += sum(_stat("count", t[1]) for t in b[1]
                                 if isinstance(t, tuple) and len(t) == 2
                                 and isinstance(t[1], list))
    return total


def _atags_on(info: list[Any]) -> bool:
    for e in info:
        if isinstance(e, tuple) and len(e) == 3 and e[0] == "instance":
            it = _keyfind("options", e[2])
            if it and len(it) == 2 and isinstance(it[1], list) \
                    and any(isinstance(o, tuple) and o == ("atags", "true") for o in it[1]):
                return True
    return False


def _connect(node: str, cookie: str, access: Access, deadline: float) -> dist.Connection:
    """A fresh connection to `node` under a pooled name of ours, long or short as its host is."""
    return dist.Connection(node, cookie, access, deadline, NAME_POOL,
                           access_mod.is_long_host(split_node(node)[1]))


def _run_direct(node: str, cookie: str, timeout: float, max_carriers: int,
                access: Access, timings: dict[str, float]) -> tuple[Any, float]:
    """The agent's reply, obtained by collector/dist.py instead of a hidden node."""
    main_us = _us()
    deadline = time.monotonic() + timeout
    conn = None
    try:
        try:
            conn = _connect(node, cookie, access, deadline)
            connected = _us()
            reply = collect_direct(conn, node, max(0, max_carriers), deadline, main_us,
                                   connected)
            timings.update(connect=(connected - main_us) / 1e6, **conn.stats)
        except dist.DistError as e:
            reply = (Atom("error"), Atom(e.kind), e.detail)
    finally:
        if conn is not None:
            conn.close()
    return reply, time.time()


def with_connection(node: str, cookie: str, timeout: float, access: Access,
                    work: Callable[[dist.Connection, float], Any]) -> Any:
    """`work(conn, deadline)` on a fresh connection to `node`, closed on every way out; a
    failure is the one-line NodeError (exit 3) the hidden node's would be: the process scan,
    the ETS scan and the GC probe over our own client (collector/processes.py, ets.py)."""
    split_node(node)
    check_cookie(cookie, "the cookie")
    deadline = time.monotonic() + timeout
    conn = None
    try:
        conn = _connect(node, cookie, access, deadline)
        return work(conn, deadline)
    except dist.DistError as e:
        if e.kind == "timeout" and e.detail != "connecting":
            raise NodeError(f"timed out after {timeout:g} s reading the processes of "
                            f"{node}") from None
        if e.kind == "nodedown":
            raise NodeError(f"node {node} went down while its processes were read") from None
        raise _error(node, e.kind, e.detail, timeout, cookie, access) from None
    finally:
        if conn is not None:
            conn.close()


# ---- the snapshot ------------------------------------------------------------------------

def _rss(pid: int | None, node: str) -> int | None:
    """VmRSS of `pid` if it is a beam process of `node` on this host, else None."""
    if pid is None:
        return None
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    if not os.path.basename(argv[0]).startswith(b"beam"):
        return None
    name, host = split_node(node)
    local = _local_host_names()
    for flag, value in itertools.pairwise(argv):
        if flag in (b"-sname", b"-name"):
            got = value.decode("utf-8", "replace")
            got_name, _, got_host = got.partition("@")
            if got_name != name or (got_host and got_host != host):
                return None
            if not got_host and host not in local:
                return None
            break
    else:  # distribution started at run time: the host must at least be this one
        if host not in local:
            return None
    return _kb_field(status, "VmRSS")


def _container(snap: Snapshot, limits: dict[str, int]) -> None:
    """The node's memory cgroup and open-file limit (collector/cgroup.py), same host only."""
    from beamalloc.collector.cgroup import read_cgroup, read_nofile

    assert snap.os_pid is not None
    cg = read_cgroup(snap.os_pid)
    if cg is not None:
        snap.extra["cgroup"] = cg.to_json()
    if (nofile := read_nofile(snap.os_pid)) is not None:
        limits["nofile"] = nofile


def _kb_field(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def _os_memory(pid: int | None) -> tuple[int | None, int | None]:
    """(LazyFree of `pid` from smaps_rollup, the host's MemAvailable); None where unreadable.
    smaps_rollup is one read however many mappings beam.smp has (Linux >= 4.14)."""
    out: list[int | None] = []
    for path, key in ((f"/proc/{pid}/smaps_rollup", "LazyFree"), ("/proc/meminfo", "MemAvailable")):
        try:
            out.append(_kb_field(Path(path).read_text(), key))
        except OSError:
            out.append(None)
    return out[0], out[1]


def _str(v: Any) -> str | None:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v) if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def raw_text(term: Any) -> str:
    """Exactly `format_term(term)`: the one term-text writer (collector/native/src/term_text.rs)."""
    return format_term(term)


def build_snapshot(node: str, term: Any, taken_at: float | None = None) -> Snapshot:
    """A Snapshot from the agent's `[{Key, Value}]` list (see beamalloc_agent.erl)."""
    p = proplist(term)
    pid = p.get("os_pid")
    sampled = _int(p.get("sampled_at_us"))
    snap = Snapshot(
        node=node,
        source="live",
        # The agent stamps the middle of its calls with the same wall clock as time.time().
        taken_at=sampled / 1e6 if sampled is not None else taken_at,
        otp_release=_str(p.get("otp_release")),
        erts_version=_str(p.get("version")),
        wordsize=_int(p.get("wordsize")),
        schedulers=_int(p.get("schedulers")),
        os_pid=int(pid) if isinstance(pid, str) and pid.isdigit() and len(pid) <= 10 else None,
        memory=memory_from_term(p.get("memory", [])),
    )
    allocs = p.get("allocators", [])
    for entry in allocs if isinstance(allocs, list) else []:
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Atom):
            add_system_info(snap, str(entry[0]), entry[1])
    limits = {k: v for k in LIMIT_KEYS if (v := _int(p.get(k))) is not None}
    snap.rss = _rss(snap.os_pid, node)
    if snap.rss is not None:  # the same host: what the OS could take back, and has
        snap.rss_lazyfree, snap.mem_available = _os_memory(snap.os_pid)
        _container(snap, limits)
    if limits:
        snap.extra["limits"] = limits
    add_carriers(snap, p)
    # Carriers are in snap.carriers, whole; as text they would double the raw term.
    snap.raw = raw_text([x for x in term if not (isinstance(x, tuple) and x
                                                 and x[0] in _CARRIER_KEYS)]
                        if isinstance(term, list) else term)
    # The ranges every reader checks (docs/robustness.md, "Ranges"): a reply outside them is
    # one line naming the node, as a file would be.
    try:
        snap.check()
    except SnapshotError as e:
        raise SnapshotError(f"{node}: {e}") from None
    return snap


_CARRIER_KEYS = ("carriers", "carriers_skipped", "carrier_hist", "allocation_tags",
                 "port_names")


def build_peer_snapshot(node: str, term: Any, taken_at: float | None = None) -> Snapshot:
    """build_snapshot of what a node sent: out of range there is the peer's fault (exit 3)."""
    try:
        return build_snapshot(node, term, taken_at)
    except InputError as e:
        raise NodeError(f"{node} sent a reply no Erlang node sends: "
                        f"{str(e).removeprefix(node + ': ')}") from None


#: The most members `snapshot --cluster` reads: each is a connection and a snapshot.
MAX_CLUSTER = 1024


def cluster_members(node: str, names: Any) -> list[str]:
    """`node` and the names of its nodes() reply, which must be a list of at most MAX_CLUSTER
    node names (a target could list a million, each a snapshot)."""
    if not (isinstance(names, list) and len(names) <= MAX_CLUSTER
            and all(type(n) is Atom and n.isprintable() and "@" in n for n in names)):
        raise NodeError(f"{node} sent a reply no Erlang node sends: nodes() is not a list of "
                        f"at most {MAX_CLUSTER} node names")
    return list(dict.fromkeys([node, *(str(n) for n in names)]))


def snapshot_node(node: str, cookie: str, timeout: float = 10.0,
                  max_carriers: int = MAX_CARRIERS, access: Access | None = None,
                  timings: dict[str, float] | None = None) -> Snapshot:
    """Snapshot `node`'s allocators; NodeError (one line, naming the cause) within `timeout`.

    With `max_carriers` > 0 (the default) the snapshot also reads up to that many carriers
    with OTP's instrument:carriers/1 (collector/instrument.py); 0 skips them. `access`: how to
    reach it (TLS, IPv6, epmd port, epmd-less); default access.current(). `timings`, when
    given, is filled with where the time went, in seconds (connect, decode_s, build,
    carriers_s, the bytes received): tests/bench/bench_snapshot_s64.py reads it.
    """
    split_node(node)
    check_cookie(cookie, "the cookie")
    access = access or access_mod.current()
    timings = {} if timings is None else timings
    if direct(access):
        reply, done = _run_direct(node, cookie, timeout, max_carriers, access, timings)
    else:
        reply, done = run_hidden("beamalloc_agent", node, cookie, timeout,
                                 [str(max(0, max_carriers))], access, timings)
    if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "ok":
        t0 = time.perf_counter()
        snap = build_peer_snapshot(node, reply[1], taken_at=done)
        timings["build"] = time.perf_counter() - t0
        timings["carriers_s"] = next(
            (x[1] / 1e6 for x in reply[1] if isinstance(x, tuple) and len(x) == 2
             and x[0] == "carriers_us" and isinstance(x[1], int)), 0.0)
        return snap
    if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "error":
        raise _error(node, str(reply[1]), reply[2], timeout, cookie, access)
    raise NodeError("unexpected answer from the beamalloc agent")
