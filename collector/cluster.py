"""One long-lived hidden node that snapshots many nodes: `watch` and `snapshot --cluster` where
our own client cannot go (TLS and other -proto_dist, or $BEAMALLOC_HIDDEN_NODE=1; over plain
TCP collector/session.py's kept connections serve both).

collector/live.py starts a hidden node per snapshot; its boot (0.3-0.5 s) is too much for 1 s
sampling of several nodes. A Session starts collector/erlang/beamalloc_session.erl once and sends
it one request per snapshot; each request runs in its own Erlang process with its own deadline, so
one stalled target never delays the others. The cookie rule is live.py's: it reaches the hidden
node over its stdin only, the node gets a throw-away HOME and no ERL_*FLAGS. The hidden node halts
when its stdin closes, so it dies with us even when we are killed with SIGKILL.

The replies have the shapes beamalloc_agent.erl prints, so live.build_snapshot() and live's error
messages apply unchanged.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import threading
from concurrent.futures import Future
from typing import Any

from beamalloc.collector import access as access_mod
from beamalloc.collector import etf, live
from beamalloc.collector.access import Access
from beamalloc.collector.cookie import check_cookie
from beamalloc.collector.live import NodeError
from beamalloc.snapshot import Snapshot

MARK = b"BEAMALLOC-RESULT "


def _long_names(nodes: list[str]) -> bool:
    kinds = {access_mod.is_long_host(live.split_node(n)[1]) for n in nodes}
    if len(kinds) > 1:
        raise live.NodeNameError("cannot mix short and long node names (net_kernel refuses)")
    return kinds == {True}


class Session:
    """A hidden node serving snapshot requests; thread-safe; use as a context manager."""

    def __init__(self, cookie: str, long_names: bool = False,
                 access: Access | None = None) -> None:
        check_cookie(cookie, "the cookie")
        self._cookie = cookie
        self._access = access or access_mod.current()
        self._long = long_names
        self._ids = itertools.count(1)
        self._pending: dict[bytes, Future[Any]] = {}
        self._lock = threading.Lock()
        self._home = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.ended: str | None = None  # why the hidden node is gone, once it is
        self.start_failure: str | None = None

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._proc, self._home = live.start_hidden_node(["beamalloc_session", "main"], self._long,
                                                        stderr=subprocess.DEVNULL,
                                                        access=self._access)
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a node dead at boot: the reader says so
            self._proc.stdin.write(self._cookie.encode("utf-8").hex().encode() + b"\n")
            self._proc.stdin.flush()
        self._reader = threading.Thread(target=self._read, name="beamalloc-session", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if not line.startswith(MARK):
                continue
            rid, _, payload = line[len(MARK):].strip().partition(b" ")
            if rid == b"0":  # the node could not start (beamalloc_session.erl): why it ends
                with contextlib.suppress(ValueError, etf.ETFError):
                    err = etf.decode(base64.b64decode(payload, validate=True))
                    if isinstance(err, tuple) and len(err) == 3:
                        self.start_failure = str(live.start_error(str(err[1]), err[2],
                                                                  self._cookie))
                continue
            with self._lock:
                fut = self._pending.pop(rid, None)
            if fut is None:
                continue
            try:
                fut.set_result(etf.decode(base64.b64decode(payload, validate=True)))
            except (ValueError, etf.ETFError) as e:
                fut.set_exception(NodeError(f"unreadable answer from the beamalloc session: {e}"))
        with self._lock:
            self.ended = self.start_failure or "the beamalloc hidden node exited"
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(NodeError(self.ended))

    def request(self, kind: str, node: str, timeout: float, max_carriers: int = 0
                ) -> Future[Any]:
        """Send one request; the future holds the raw reply term (or a NodeError).
        A snap request with `max_carriers` > 0 also reads that many carriers at most."""
        live.split_node(node)
        fut: Future[Any] = Future()
        rid = str(next(self._ids)).encode()
        line = b"%s %s %s %d %d\n" % (rid, kind.encode(), node.encode(),
                                     max(1, int(timeout * 1000)), max(0, max_carriers))
        with self._lock:
            if self.ended or self._proc is None or self._proc.stdin is None:
                fut.set_exception(NodeError(self.ended or "the beamalloc session is not running"))
                return fut
            self._pending[rid] = fut
            try:
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                self._pending.pop(rid, None)
                self.ended = "the beamalloc hidden node exited"
                fut.set_exception(NodeError(self.ended))
        return fut

    def _reply(self, node: str, fut: Future[Any], timeout: float) -> Any:
        # The session enforces the deadline; the extra second only covers a wedged hidden node.
        try:
            reply = fut.result(timeout=timeout + live.KILL_GRACE)
        except TimeoutError:
            raise NodeError(f"timed out after {timeout:g} s talking to {node} "
                            "(the beamalloc session did not answer)") from None
        if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "error":
            raise live._error(node, str(reply[1]), reply[2], timeout, self._cookie,
                              self._access)
        if not (isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "ok"):
            raise NodeError("unexpected answer from the beamalloc session")
        return reply[1]

    def snapshot(self, node: str, timeout: float = 10.0, max_carriers: int = 0) -> Snapshot:
        fut = self.request("snap", node, timeout, max_carriers)
        return live.build_peer_snapshot(node, self._reply(node, fut, timeout))

    def cluster_nodes(self, node: str, timeout: float = 10.0) -> list[str]:
        """`node` and the nodes it is connected to (its nodes(): visible nodes only)."""
        fut = self.request("nodes", node, timeout)
        return live.cluster_members(node, self._reply(node, fut, timeout))

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self.ended

    def close(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError, ValueError):
                if self._proc.stdin:
                    self._proc.stdin.close()  # the node halts at end of input
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # and erl_child_setup with it
            self._proc.wait()
            if self._reader is not None:
                self._reader.join(timeout=5)
            self._proc = None
        if self._home:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = ""


def snapshot_nodes(nodes: list[str], cookie: str, timeout: float = 10.0,
                   session: Session | None = None, max_carriers: int = live.MAX_CARRIERS
                   ) -> dict[str, Snapshot | NodeError]:
    """Snapshot every node in parallel through one hidden node; a failure is that node's value."""
    if session is None:
        with Session(cookie, _long_names(nodes)) as s:
            return snapshot_nodes(nodes, cookie, timeout, s, max_carriers)
    futs = {n: session.request("snap", n, timeout, max_carriers) for n in dict.fromkeys(nodes)}
    out: dict[str, Snapshot | NodeError] = {}
    for n, fut in futs.items():
        try:
            out[n] = live.build_snapshot(n, session._reply(n, fut, timeout))
        except NodeError as e:
            out[n] = e
    return out


def snapshot_cluster(node: str, cookie: str, timeout: float = 10.0,
                     max_carriers: int = live.MAX_CARRIERS,
                     access: Access | None = None) -> dict[str, Snapshot | NodeError]:
    """Find the nodes `node` is connected to and snapshot them all (one hidden node)."""
    with Session(cookie, _long_names([node]), access) as s:
        members = s.cluster_nodes(node, timeout)
        return snapshot_nodes(members, cookie, timeout, s, max_carriers)
