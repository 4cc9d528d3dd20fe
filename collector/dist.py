"""A hidden Erlang node in Python: epmd, the distribution handshake, and calls to `rex`.

What beamalloc needs from a target over plain TCP distribution (IPv4 or IPv6, any epmd port,
epmd-less) is a handful of BIF calls; booting a BEAM of our own for them costs more than the
calls (docs/robustness.md, "The design choice"). This module speaks the protocol itself
(OTP's erl_dist_protocol, distribution version 6, OTP 23 and later):

1. our name: the first free `beamalloc_N` (N in 1..transport.NAME_POOL) registered with the epmd of
   this host (ALIVE2), held for as long as the connection lives, exactly as the hidden node
   holds its name (beamalloc_link.erl): runs of either kind never share a name;
2. the target's port: PORT_PLEASE2 to the epmd of its host (or the epmd-less port given);
3. the handshake: name, status, challenge, the MD5 digest of the cookie and the challenge
   (both ways: a target that cannot prove it knows the cookie is refused too);
4. calls: `{'$gen_call', {Pid, Ref}, {call, M, F, A, Pid}}` to the registered process `rex`,
   which spawns one process per call on the target and replies `{Ref, Result}`. rex is kernel's,
   started at boot: nothing is loaded on the target and nothing stays (docs/robustness.md,
   "What we change on a target"). Our pid is the call's group leader, and we answer no I/O
   request: every function called must do no I/O (BIFs and `instrument` do none), or its
   process would wait on the target for a reply that never comes.

What it does not do: it serves nothing. A target can send us messages, spawn requests or links;
we read and drop them (nothing runs on our side, unlike on a BEAM of our own). TLS distribution
is not spoken here: collector/relay.py's hidden node relays the same calls for it.

Flags: the OTP 25 mandatory set (and its digest bit), plus what OTP 26 made mandatory
(DFLAG_V4_NC, DFLAG_UNLINK_ID); not DFLAG_PUBLISHED (a hidden node), not DFLAG_FRAGMENTS (the
target then sends each message whole), not the atom cache (each message then starts with 112).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import socket
import struct
import time
from typing import Any

from beamalloc.collector import etf

try:  # CPython's own MD5: hashlib (and secrets, through hmac) would load OpenSSL, ~4 ms a run
    from _md5 import md5
except ImportError:  # a Python built without it
    from hashlib import md5
from beamalloc.collector.access import Access
from beamalloc.collector.terms import Atom, Opaque

DEFAULT_EPMD_PORT = 4369
DIST_VERSION = 6

F_EXTENDED_REFERENCES = 0x04
F_FUN_TAGS = 0x10
F_NEW_FUN_TAGS = 0x80
F_EXTENDED_PIDS_PORTS = 0x100
F_EXPORT_PTR_TAG = 0x200
F_BIT_BINARIES = 0x400
F_NEW_FLOATS = 0x800
F_UTF8_ATOMS = 0x10000
F_MAP_TAG = 0x20000
F_BIG_CREATION = 0x40000
F_HANDSHAKE_23 = 0x1000000
F_UNLINK_ID = 0x2000000
F_MANDATORY_25_DIGEST = 0x4000000
F_V4_NC = 0x4 << 32
FLAGS = (F_EXTENDED_REFERENCES | F_FUN_TAGS | F_NEW_FUN_TAGS | F_EXTENDED_PIDS_PORTS
         | F_EXPORT_PTR_TAG | F_BIT_BINARIES | F_NEW_FLOATS | F_UTF8_ATOMS | F_MAP_TAG
         | F_BIG_CREATION | F_HANDSHAKE_23 | F_UNLINK_ID | F_MANDATORY_25_DIGEST | F_V4_NC)

#: Largest distribution message accepted: the decoder's bound (a +S 1024 node's largest
#: system_info reply is a few MB); a target sending more is not read further.
MAX_MESSAGE = etf.MAX_BYTES


#: Atoms kept across messages (a node's replies repeat a few hundred); a target sending new
#: ones in every message would otherwise grow the cache for as long as a watch runs.
MAX_ATOM_CACHE = 65536


class DistError(Exception):
    """A failure of either transport (collector/transport.py node_error() says it in one line)."""

    def __init__(self, kind: str, detail: Any = b"") -> None:
        super().__init__(kind)
        self.kind = kind
        self.detail = detail


def epmd_port(access: Access) -> int:
    if access.epmd_port:
        return access.epmd_port
    env = os.environ.get("ERL_EPMD_PORT", "").strip()
    return int(env) if env.isdigit() else DEFAULT_EPMD_PORT


def _family(access: Access) -> socket.AddressFamily:
    return socket.AF_INET6 if access.ipv6 else socket.AF_INET


def check_deadline(deadline: float, stage: str) -> None:
    """DistError("timeout") once `deadline` has passed: between steps of work on replies that
    are already read (the reads themselves wait at most until it)."""
    _left(deadline, stage)


def _left(deadline: float, stage: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DistError("timeout", Atom(stage))
    return left


def _connect(host: str, port: int, access: Access, deadline: float, stage: str) -> socket.socket:
    try:
        # an ASCII name as bytes: getaddrinfo would load the idna codec for a str (~2 ms a run)
        infos = socket.getaddrinfo(host.encode() if host.isascii() else host, port,
                                   _family(access), socket.SOCK_STREAM)
    except OSError as e:
        # OTP resolves this host's own name to the loopback address of the family when the
        # resolver has none for it (inet_db; an /etc/hosts with IPv4 lines only, and IPv6
        # distribution): so do we.
        if host not in _own_names():
            raise DistError("host_unreachable", f"{host}: {e.strerror or e}".encode()) from None
        infos = socket.getaddrinfo(_local_epmd_host(access), port, _family(access),
                                   socket.SOCK_STREAM)
    last: OSError | None = None
    for fam, kind, proto, _, addr in infos:
        s = socket.socket(fam, kind, proto)
        try:
            s.settimeout(_left(deadline, stage))
            s.connect(addr)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except TimeoutError:
            s.close()
            raise DistError("timeout", Atom(stage)) from None
        except OSError as e:
            s.close()
            last = e
    raise ConnectionRefusedError(str(last)) if last else OSError("no address")


def _own_names() -> set[str]:
    host = socket.gethostname()
    return {host, host.split(".")[0]}


def _recv_exact(s: socket.socket, n: int, deadline: float, stage: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        s.settimeout(_left(deadline, stage))
        try:
            chunk = s.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            raise DistError("timeout", Atom(stage)) from None
        if not chunk:
            raise ConnectionResetError("closed")
        buf += chunk
    return bytes(buf)


#: epmd's NAMES reply is a line per node: a few KiB; more is not an epmd we can trust.
MAX_EPMD_REPLY = 1 << 20
#: The most names kept from it.
MAX_NAMES = 1000


def _recv_all(s: socket.socket, deadline: float, stage: str) -> bytes:
    buf = bytearray()
    while True:
        s.settimeout(_left(deadline, stage))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            raise DistError("timeout", Atom(stage)) from None
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > MAX_EPMD_REPLY:
            raise DistError("connect_failed", b"epmd's reply is too long")


# ---- epmd --------------------------------------------------------------------------------

def _epmd(host: str, access: Access, deadline: float, req: bytes) -> socket.socket:
    try:
        s = _connect(host, epmd_port(access), access, deadline, "connecting")
    except DistError:
        raise
    except OSError as e:
        raise DistError("host_unreachable",
                        f"epmd on {host}: {e.strerror or e}".encode()) from None
    s.sendall(struct.pack(">H", len(req)) + req)
    return s


def port_please(name: str, host: str, access: Access, deadline: float) -> int | None:
    """The distribution port epmd on `host` lists for `name`, or None when it lists none."""
    s = _epmd(host, access, deadline, b"z" + name.encode())
    try:
        head = _recv_exact(s, 2, deadline, "connecting")
        if head[0] != 119 or head[1] != 0:
            return None
        body = _recv_exact(s, 8, deadline, "connecting")
        port, _ntype, _proto, high, low = struct.unpack(">HBBHH", body)
        if not low <= DIST_VERSION <= high:
            raise DistError("connect_failed", f"{name}@{host} speaks distribution versions "
                                              f"{low}..{high}, not {DIST_VERSION}".encode())
        return port
    except OSError:  # epmd closed or reset: it lists no such name
        return None
    finally:
        s.close()


def names(host: str, access: Access, deadline: float) -> list[str]:
    """The node names epmd on `host` lists (NAMES_REQ)."""
    s = _epmd(host, access, deadline, b"n")
    try:
        data = _recv_all(s, deadline, "connecting")
    except OSError as e:
        raise DistError("host_unreachable", str(e).encode()) from None
    finally:
        s.close()
    out = []
    for line in data[4:].decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "name":
            out.append(parts[1])
            if len(out) == MAX_NAMES:  # a real epmd lists a host's nodes: a few
                break
    return out


def _local_epmd_host(access: Access) -> str:
    return "::1" if access.ipv6 else "127.0.0.1"


def register(pool: int, access: Access, deadline: float,
             listen_port: int) -> tuple[str, int, socket.socket]:
    """Hold the first free name beamalloc_1..beamalloc_`pool` with this host's epmd; return
    it, the creation epmd gave, and the socket that holds it (closing it frees the name).
    Starts epmd when none runs, as `erl -sname` would."""
    host = _local_epmd_host(access)
    started = False
    for i in range(1, pool + 1):
        name = f"beamalloc_{i}"
        req = (b"x" + struct.pack(">HBBHH", listen_port, 72, 0, DIST_VERSION, DIST_VERSION)
               + struct.pack(">H", len(name)) + name.encode() + b"\0\0")
        while True:
            try:
                s = _epmd(host, access, deadline, req)
                break
            except DistError as e:
                if e.kind != "host_unreachable" or started:
                    if e.kind == "host_unreachable":
                        raise DistError("no_distribution", b"epmd is not running on this "
                                        b"host and could not be started") from None
                    raise
                started = True
                _start_epmd(access, deadline)
        try:
            tag = _recv_exact(s, 2, deadline, "connecting")
            if tag[0] == 118 and tag[1] == 0:  # ALIVE2_X_RESP: u32 creation
                creation = struct.unpack(">I", _recv_exact(s, 4, deadline, "connecting"))[0]
                return name, creation, s
            if tag[0] == 121 and tag[1] == 0:  # ALIVE2_RESP: u16 creation
                creation = struct.unpack(">H", _recv_exact(s, 2, deadline, "connecting"))[0]
                return name, creation, s
        except ConnectionResetError:
            pass
        except BaseException:  # a timeout or any other failure: the socket holds the name
            s.close()
            raise
        s.close()  # taken: try the next
    raise DistError("names_in_use", pool)


def _random_bits(n: int) -> int:
    """secrets.randbits(n) (n <= 32): the OS's random bytes, without importing secrets."""
    return int.from_bytes(os.urandom(4), "big") >> (32 - n)


def _start_epmd(access: Access, deadline: float) -> None:
    import shutil  # here: a host without epmd running is rare, and these cost every run
    import subprocess

    epmd = shutil.which("epmd")
    if not epmd:
        raise DistError("no_distribution", b"epmd is not running on this host and is not "
                        b"installed")
    env = dict(os.environ)
    if access.epmd_port:
        env["ERL_EPMD_PORT"] = str(access.epmd_port)
    subprocess.run([epmd, "-daemon"], env=env, timeout=max(0.1, _left(deadline, "connecting")),
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    end = min(deadline, time.monotonic() + 1.0)
    while time.monotonic() < end:  # epmd -daemon returns before it listens
        try:
            socket.create_connection((_local_epmd_host(access), epmd_port(access)), 0.1).close()
            return
        except OSError:
            time.sleep(0.02)


# ---- the external term format, what we send ---------------------------------------------

@functools.lru_cache(maxsize=1024)
def _atom(a: str) -> bytes:
    b = a.encode("utf-8")
    return (b"\x77" + bytes([len(b)]) if len(b) < 256 else b"\x76" + struct.pack(">H", len(b))) + b


_CALL = _atom("call")


def encode(t: Any) -> bytes:
    """The few shapes our requests hold: atoms, integers, tuples, lists, maps, our pid and ref."""
    if isinstance(t, Atom):
        return _atom(t)
    if isinstance(t, bool):
        return _atom("true" if t else "false")
    if isinstance(t, int):
        if 0 <= t < 256:
            return b"\x61" + bytes([t])
        if -(1 << 31) <= t < 1 << 31:
            return b"\x62" + struct.pack(">i", t)
        mag = abs(t).to_bytes((abs(t).bit_length() + 7) // 8, "little")
        return b"\x6e" + bytes([len(mag), t < 0]) + mag
    if isinstance(t, RawTerm):
        return t.data
    if isinstance(t, Export):  # EXPORT_EXT: module atom, function atom, arity as SMALL_INTEGER
        return b"\x71" + _atom(t.module) + _atom(t.function) + b"\x61" + bytes([t.arity])
    if isinstance(t, tuple):
        head = b"\x68" + bytes([len(t)]) if len(t) < 256 else b"\x69" + struct.pack(">I", len(t))
        return head + b"".join(encode(x) for x in t)
    if isinstance(t, list):
        if not t:
            return b"\x6a"
        return b"\x6c" + struct.pack(">I", len(t)) + b"".join(encode(x) for x in t) + b"\x6a"
    if isinstance(t, dict):
        return b"\x74" + struct.pack(">I", len(t)) + b"".join(encode(k) + encode(v)
                                                             for k, v in t.items())
    raise TypeError(f"cannot encode {type(t).__name__}")


class RawTerm:
    """An already encoded term (our pid, a reference)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class RawReply:
    """A reply's result as it came: the external term at `data[pos]` (no version byte), for a
    caller that reads a large, regular reply faster than the decoder builds it."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos


class Export:
    """An external fun, `fun M:F/A`: what lists:zipwith/3 or lists:map/2 apply on the target
    to every element, with nothing of ours loaded there (the fun names a function the target
    already has)."""

    __slots__ = ("arity", "function", "module")

    def __init__(self, module: str, function: str, arity: int) -> None:
        if not 0 <= arity < 256:
            raise ValueError(f"arity {arity}")
        self.module, self.function, self.arity = module, function, arity


_PID_WORDS = struct.Struct(">II")


def encode_pids(head: bytes, creation: bytes, texts: list[str]) -> RawTerm:
    """The target's local pids "<0.X.Y>" (as our decoder writes them) as one encoded list, each
    NEW_PID_EXT as the target encodes it: `head` (tag and its node's atom), X, Y, `creation`."""
    if not texts:
        return RawTerm(b"\x6a")
    pack = _PID_WORDS.pack
    try:
        body = b"".join([head + pack(*map(int, t[3:-1].split("."))) + creation for t in texts])
    except (ValueError, TypeError, struct.error):
        raise DistError("bad_reply", b"a pid that is not the target's own") from None
    return RawTerm(b"\x6c" + struct.pack(">I", len(texts)) + body + b"\x6a")


# ---- the connection ----------------------------------------------------------------------


class _Busy(Exception):
    """The target answered our handshake "nok": its own to us is under way."""


class Local:
    """Our side: a pooled name held with this host's epmd, usable for connections to any
    number of targets (a BEAM node is one name too, whatever it connects to). close() frees
    the name."""

    def __init__(self, access: Access, deadline: float, pool: int, long_names: bool) -> None:
        # epmd registers a port, as for any node: one bound but never listening, so a target
        # that connects back to us (rex sending a reply after we gave up on a stopped node:
        # auto-connect) is refused at once. A socket that listened but never accepted would
        # hold the target's attempt for its net_setuptime (7 s), and our reconnects would be
        # answered "nok" (its own handshake to us pending) all that time.
        self._listen = socket.socket(_family(access), socket.SOCK_STREAM)
        self._epmd: socket.socket | None = None
        try:
            self._listen.bind((_local_epmd_host(access), 0))
            ours, creation, self._epmd = register(pool, access, deadline,
                                                  self._listen.getsockname()[1])
        except BaseException:
            self.close()
            raise
        self.name = f"{ours}@{_our_host(long_names, access)}"
        self.creation = creation or _random_bits(31) + 1
        self.node = _atom(self.name)

    def close(self) -> None:
        if self._epmd is not None:
            _give_back(self._epmd)
            self._epmd = None
        with contextlib.suppress(OSError):
            self._listen.close()


#: How long closing waits for epmd to let our name go (it takes well under a millisecond).
GIVE_BACK_WAIT = 1.0


def _give_back(s: socket.socket) -> None:
    """Close the socket that holds our name once epmd has let the name go. epmd unregisters a
    name when it reads the end of its socket, then closes its side (epmd_srv.c do_read), so
    the end of our stream means the name is free. Closing alone was not enough: epmd reads a
    connection it has just accepted only in its next select round, then in slot order, so the
    next run's ALIVE2 could be read first and take beamalloc_2, one more atom on every target
    (docs/robustness.md, "What we change on a target")."""
    end = time.monotonic() + GIVE_BACK_WAIT
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_WR)
        while (left := end - time.monotonic()) > 0:
            s.settimeout(left)
            if not s.recv(64):  # epmd sends nothing on this socket; bounded all the same
                break
    with contextlib.suppress(OSError):
        s.close()


class Connection:
    """One distribution connection from a hidden `beamalloc_N` of ours to `target`.

    send() + receive(): many calls in flight at once, each answered by its own Ref. close()
    (or the end of this process) ends it; the target sees us go as any node going down. With
    `local`, the connection uses that name (and leaves it held on close); else it holds a name
    of its own for its life.
    """

    def __init__(self, target: str, cookie: str, access: Access, deadline: float,
                 pool: int, long_names: bool, local: Local | None = None) -> None:
        self.target = target
        self.access = access
        name, host = target.split("@", 1)
        self._cookie = cookie.encode("latin-1")
        self._refs = itertools.count(1)
        self._pending: dict[str, Any] = {}
        #: Where the time went (tests/bench/bench_snapshot_s64.py): seconds spent decoding
        #: messages, and the bytes and messages received.
        self.stats = {"decode_s": 0.0, "bytes": 0, "messages": 0}
        self._buf = bytearray()  # what has arrived and is not read yet, from _off
        self._off = 0
        self._atoms: dict = {}  # the native decoder's atoms, kept across messages
        self._sock: socket.socket | None = None
        self._own: Local | None = None
        self._peer_pid_head, self._peer_creation = b"", b""
        self._raw: set[str] = set()  # requests whose replies stay bytes (send_raw)
        try:
            if local is None:
                local = self._own = Local(access, deadline, pool, long_names)
            self.name, self.creation, self._node = local.name, local.creation, local.node
            self._pid = RawTerm(b"\x58" + self._node + struct.pack(">III", 1, 0, self.creation))
            # What every request shares, encoded once: the control message (REG_SEND to rex)
            # and the head of {'$gen_call', {Pid, Ref}, {call, M, F, A, Pid}}.
            self._control = b"p\x83" + encode((6, self._pid, Atom(""), Atom("rex"))) + b"\x83"
            self._call_head = b"\x68\x03" + _atom("$gen_call") + b"\x68\x02"
            self._ref_head = (b"\x5a" + struct.pack(">H", 3) + self._node
                              + struct.pack(">I", self.creation))
            self._ref_base, self._ref_top = _random_bits(32), _random_bits(32)
            self._out = bytearray()
            port = access.dist_port or port_please(name, host, access, deadline)
            if port is None:
                raise DistError("no_such_node", [n.encode() for n in names(host, access,
                                                                            deadline)])
            while True:
                try:
                    self._handshake(host, port, deadline)
                    break
                except _Busy:
                    # "nok": the target's own connection to us is still being set up (an
                    # auto-connect for a late reply, refused at once by Local): again shortly.
                    if self._sock is not None:
                        self._sock.close()
                        self._sock = None
                    if _left(deadline, "connecting") < 0.1:
                        raise DistError("connect_failed", b"handshake status nok") from None
                    time.sleep(0.05)
        except BaseException:
            self.close()
            raise

    # -- handshake --

    def _handshake(self, host: str, port: int, deadline: float) -> None:
        try:
            s = _connect(host, port, self.access, deadline, "connecting")
        except DistError:
            raise
        except OSError as e:
            if self.access.dist_port:
                raise DistError("connect_failed", b"no node answered on that port") from None
            raise DistError("connect_failed", str(e).encode()) from None
        self._sock = s
        stage = "connecting"
        try:
            me = self.name.encode()
            s.sendall(_packet2(b"N" + struct.pack(">QIH", FLAGS, self.creation, len(me)) + me))
            status = self._recv2(deadline, stage)
            if not status.startswith(b"s"):
                raise DistError("connect_failed", b"unexpected handshake message")
            if status[1:] == b"alive":
                # The target still holds a connection under our name: ours, since epmd gives
                # the name to one holder (Local), and closed by us before we reconnect (a
                # timed-out request while the target was stopped). "true" tells the target to
                # drop the stale one and go on with this handshake.
                s.sendall(_packet2(b"strue"))
            elif status[1:] == b"nok":
                raise _Busy
            elif status[1:] not in (b"ok", b"ok_simultaneous"):
                raise DistError("connect_failed", b"handshake status " + status[1:])
            msg = self._recv2(deadline, stage)
            if msg[:1] != b"N" or len(msg) < 19:
                raise DistError("connect_failed", b"the target does not speak distribution "
                                b"version 6 (OTP 23 or later)")
            their_flags, challenge, creation, nlen = struct.unpack_from(">QIIH", msg, 1)
            # The target's own name and creation: what its local pids carry, and so what a pid
            # we send back must carry for the target to take it as its own (pids()).
            self._peer_pid_head = b"\x58" + _atom(msg[19:19 + nlen].decode("utf-8", "replace"))
            self._peer_creation = struct.pack(">I", creation)
            if their_flags & F_HANDSHAKE_23 == 0:
                raise DistError("connect_failed", b"the target's handshake lacks OTP 23 flags")
            ours = _random_bits(32)
            s.sendall(_packet2(b"r" + struct.pack(">I", ours) + self._digest(challenge)))
            try:
                ack = self._recv2(deadline, stage)
            except ConnectionResetError:
                # A node that got a wrong digest closes the connection (dist_util): the node
                # exists and is up, and rejected our cookie.
                raise DistError("bad_cookie", b"") from None
            if ack[:1] != b"a" or ack[1:17] != self._digest(ours):
                raise DistError("bad_cookie", b"")  # it does not know the cookie: not ours
        except ConnectionResetError as e:
            raise DistError("connect_failed", f"connection closed during the handshake "
                                              f"({e})".encode()) from None
        except OSError as e:
            if isinstance(e, DistError):
                raise
            raise DistError("connect_failed", str(e).encode()) from None

    def pid(self, text: str) -> RawTerm:
        """One of the target's local pids "<0.X.Y>", as pids() encodes each."""
        return RawTerm(self.pids([text]).data[5:-1])

    def pids(self, texts: list[str]) -> RawTerm:
        """The target's local pids "<0.X.Y>" (as our decoder writes them) as one encoded list,
        each as the target itself encodes it (NEW_PID_EXT: its name, X, Y, its creation)."""
        return encode_pids(self._peer_pid_head, self._peer_creation, texts)

    def _digest(self, challenge: int) -> bytes:
        return md5(self._cookie + str(challenge).encode()).digest()

    def _recv2(self, deadline: float, stage: str) -> bytes:
        assert self._sock is not None
        n = struct.unpack(">H", _recv_exact(self._sock, 2, deadline, stage))[0]
        return _recv_exact(self._sock, n, deadline, stage)

    # -- messages --

    def send(self, m: str, f: str, args: list[Any]) -> str:
        """Ask rex on the target to apply M:F(Args); return the key receive() answers under.
        Requests wait in a buffer until receive() (or flush()) writes them all at once: one
        system call for a batch, not one per request (a +S 64 snapshot sends 20 at a time)."""
        if self._sock is None:
            raise DistError("nodedown", b"")
        n = next(self._refs)
        words = (n & 0x3FFFF, (self._ref_base + (n >> 18)) & 0xFFFFFFFF, self._ref_top)
        ref = self._ref_head + struct.pack(">III", *words)
        key = "#Ref<0." + ".".join(str(w) for w in reversed(words)) + ">"
        msg = (self._call_head + self._pid.data + ref + b"\x68\x05" + _CALL + _atom(m)
               + _atom(f) + encode(args) + self._pid.data)
        body = self._control + msg
        self._out += struct.pack(">I", len(body)) + body
        self._pending[key] = None
        return key

    def flush(self) -> None:
        if self._out and self._sock is not None:
            try:
                self._sock.sendall(self._out)
            except OSError:
                self.close()
                raise DistError("nodedown", b"") from None
            finally:
                self._out = bytearray()

    def receive(self, key: str, deadline: float) -> Any:
        """The result of the call `key` (rex's `{badrpc, Reason}` as it comes)."""
        self.flush()
        while self._pending.get(key) is None:
            self._read_one(deadline)
        return self._pending.pop(key)[0]

    def _fill(self, need: int, deadline: float) -> None:
        """At least `need` unread bytes in the buffer: one recv takes whatever has arrived
        (many replies at once, when they come fast), not one message at a time."""
        assert self._sock is not None
        buf = self._buf
        if self._off > 1 << 20:
            del buf[:self._off]
            self._off = 0
        while len(buf) - self._off < need:
            self._sock.settimeout(_left(deadline, "collecting"))
            try:
                chunk = self._sock.recv(max(1 << 18, need - (len(buf) - self._off)))
            except TimeoutError:
                raise DistError("timeout", Atom("collecting")) from None
            if not chunk:
                raise ConnectionResetError("closed")
            buf += chunk

    def _read_one(self, deadline: float) -> None:
        if self._sock is None:
            raise DistError("nodedown", b"")
        try:
            self._fill(4, deadline)
            n = struct.unpack_from(">I", self._buf, self._off)[0]
            self._off += 4
            if n == 0:  # a tick: answer it, so that the target keeps us
                self._sock.sendall(b"\0\0\0\0")
                return
            if n > MAX_MESSAGE:
                self.close()
                raise DistError("call_failed", f"a message of {n} bytes".encode())
            self._fill(n, deadline)
            data = bytes(self._buf[self._off:self._off + n])
            self._off += n
        except (ConnectionResetError, BrokenPipeError):
            self.close()
            raise DistError("nodedown", b"") from None
        except OSError as e:
            self.close()
            raise DistError("nodedown", str(e).encode()) from None
        if data[:1] != b"p":
            return  # not a message we could read without the atom cache: none is sent to us
        t0 = time.perf_counter()
        if len(self._atoms) > MAX_ATOM_CACHE:  # a flood of distinct atoms: start afresh
            self._atoms.clear()
        try:
            control, end = etf.decode_at(data, 1, self._atoms)
            if not (isinstance(control, tuple) and control and control[0] in (2, 22)):
                return  # links, monitors, exits, spawn requests: we serve nothing
            if self._raw and data.startswith(b"\x83\x68\x02", end):
                # {Ref, Result}: the Ref alone decoded; a reply asked for raw is kept as its
                # bytes, for the caller to read without building a Python object per element
                ref, at = etf.term_at(data, end + 3, 1)
                if ref in self._raw and self._pending.get(ref, 1) is None:
                    self._pending[ref] = (RawReply(data, at),)
                    self._raw.discard(ref)
                    self._count(n, t0)
                    return
            msg, _ = etf.decode_at(data, end, self._atoms)
        except (IndexError, struct.error):
            raise DistError("call_failed", b"unreadable message: truncated term") from None
        except etf.ETFError as e:
            raise DistError("call_failed", f"unreadable message: {e}".encode()) from None
        self._count(n, t0)
        if (isinstance(msg, tuple) and len(msg) == 2 and isinstance(msg[0], Opaque)
                and msg[0] in self._pending and self._pending[msg[0]] is None):
            self._pending[msg[0]] = (msg[1],)

    def _count(self, n: int, t0: float) -> None:
        """A reply of `n` bytes read, decoding since `t0` (a raw one's reader adds its own)."""
        st = self.stats
        st["decode_s"] += time.perf_counter() - t0
        st["bytes"] += n
        st["messages"] += 1

    def send_raw(self, m: str, f: str, args: list[Any]) -> str:
        """send(), whose reply receive() gives as a RawReply: its result's bytes, undecoded."""
        key = self.send(m, f, args)
        self._raw.add(key)
        return key

    def call(self, m: str, f: str, args: list[Any], deadline: float) -> Any:
        return self.receive(self.send(m, f, args), deadline)

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        if self._own is not None:
            self._own.close()
            self._own = None


def _packet2(b: bytes) -> bytes:
    return struct.pack(">H", len(b)) + b


def _our_host(long_names: bool, access: Access) -> str:
    """Our node's host, as hidden_node_argv gives it to the hidden node: the short host name,
    or with long names the FQDN when it has a dot, else the loopback address."""
    if long_names:
        fqdn = socket.getfqdn()
        return fqdn if "." in fqdn else "::1" if access.ipv6 else "127.0.0.1"
    return socket.gethostname().split(".")[0]
