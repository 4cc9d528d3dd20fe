"""Transports held open: one run's way to its targets, either kind (collector/transport.py).

A Session holds our side once: over plain TCP a pooled name registered with this host's epmd
(dist.Local: no BEAM boots), else one hidden node relaying calls (collector/relay.py, booted
once: 0.3-0.5 s, too much for each of a watch's 1 s samples). Each target then gets one
Transport, kept for the next request: `watch` samples and scans many nodes over it, `snapshot
--cluster` reads a whole cluster, and a one-shot command (with_transport()) is a Session used
once.

Each target's transport serves one request at a time (a lock each: watch polls every node from
its own thread); a failed or timed-out request closes that transport, and the next request opens
a new one. A connection idle for longer than the target's net_ticktime (60 s by default) is
dropped by the target; the next request then reconnects once before it reports the node down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from beamalloc.collector import access as access_mod
from beamalloc.collector import build, collect, dist, replies
from beamalloc.collector.access import Access
from beamalloc.collector.cookie import check_cookie
from beamalloc.collector.transport import (
    NAME_POOL,
    NodeError,
    NodeNameError,
    Transport,
    direct,
    node_error,
    result,
    split_node,
    start_error,
    us,
)
from beamalloc.limits import MAX_CARRIERS
from beamalloc.snapshot import Snapshot

if TYPE_CHECKING:  # imported where used: plain TCP (most runs) needs neither the relay (and its
    # hidden node's tools: tempfile, subprocess) nor a thread pool (--cluster)
    from beamalloc.collector import relay

#: Seconds a kept session may take to hold its name or boot its hidden node.
START_TIMEOUT = 10.0


def long_names(nodes: list[str]) -> bool:
    """Do `nodes` use long names? NodeNameError if they mix both (net_kernel refuses)."""
    kinds = {access_mod.is_long_host(split_node(n)[1]) for n in nodes}
    if len(kinds) > 1:
        raise NodeNameError("cannot mix short and long node names (net_kernel refuses)")
    return kinds == {True}


class Session:
    """Transports to many nodes over one name of ours; thread-safe; a context manager."""

    def __init__(self, cookie: str, long_names: bool = False,
                 access: Access | None = None) -> None:
        check_cookie(cookie, "the cookie")
        self._cookie = cookie
        self._access = access or access_mod.current()
        self._long = long_names
        self._lock = threading.Lock()
        self._local: dist.Local | None = None
        self._relay: relay.Relay | None = None
        self._conns: dict[str, tuple[threading.Lock, list[Transport | None]]] = {}
        self.ended: str | None = None
        self.start_failure: str | None = None

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def relayed(self) -> bool:
        """Through the hidden node's relay (TLS and other -proto_dist), not our own client."""
        return not direct(self._access)

    def start(self, deadline: float | None = None) -> None:
        """Hold our name (or boot the relay holding one) by `deadline`; a pool all taken, or a
        hidden node that cannot start, is one line (NodeError)."""
        deadline = time.monotonic() + START_TIMEOUT if deadline is None else deadline
        if self.relayed:
            from beamalloc.collector import relay

            self._relay = relay.Relay(self._cookie, self._long, self._access)
            try:
                self._relay.start(deadline)
            except NodeError as e:
                self.start_failure = self.ended = str(e)
                self.close()
                raise
            return
        try:
            self._local = dist.Local(self._access, deadline, NAME_POOL, self._long)
        except dist.DistError as e:
            self.start_failure = self.ended = str(start_error(e.kind, e.detail, self._cookie))
            raise NodeError(self.start_failure) from None

    def alive(self) -> bool:
        if self.ended:
            return False
        if self._relay is not None:
            return self._relay.alive()
        return self._local is not None

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, {}
        for _, box in conns.values():
            if box[0] is not None:
                box[0].close()
        if self._local is not None:
            self._local.close()
            self._local = None
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    def _slot(self, node: str) -> tuple[threading.Lock, list[Transport | None]]:
        with self._lock:
            return self._conns.setdefault(node, (threading.Lock(), [None]))

    def _open(self, node: str, deadline: float) -> Transport:
        if self._relay is not None:
            from beamalloc.collector import relay

            return relay.RelayTransport(self._relay, node, deadline)
        return dist.Connection(node, self._cookie, self._access, deadline, NAME_POOL,
                               self._long, self._local)

    def run(self, node: str, timeout: float, work: Callable[[Transport, float], Any],
            reading: str = "", deadline: float | None = None) -> Any:
        """`work(transport, deadline)` on `node`'s transport, (re)connected as needed, by
        `deadline` (default `timeout` from now); a failure is the one-line NodeError of
        transport.node_error. `reading` names what a scan reads ("its processes") for the
        messages of a timeout or a node gone meanwhile."""
        split_node(node)
        if not self.alive():
            raise NodeError(self.ended or "the beamalloc session is not running")
        deadline = time.monotonic() + timeout if deadline is None else deadline
        lock, box = self._slot(node)
        with lock:
            for attempt in (0, 1):
                fresh = box[0] is None or box[0].closed
                try:
                    if fresh:
                        box[0] = self._open(node, deadline)
                    conn = box[0]
                    assert conn is not None
                    if self._relay is not None:
                        from beamalloc.collector import relay

                        if isinstance(conn, relay.RelayTransport):
                            conn.deadline = deadline
                    return work(conn, deadline)
                except dist.DistError as e:
                    if box[0] is not None:
                        box[0].close()
                    box[0] = None
                    # a kept connection the target dropped meanwhile: one more, fresh
                    if attempt == 0 and not fresh and e.kind == "nodedown":
                        continue
                    if reading and e.kind == "timeout" and e.detail != "connecting":
                        raise NodeError(f"timed out after {timeout:g} s reading the {reading} "
                                        f"of {node}") from None
                    if reading and e.kind == "nodedown":
                        raise NodeError(f"node {node} went down while its {reading} were "
                                        "read") from None
                    raise node_error(node, e.kind, e.detail, timeout, self._cookie,
                                     self._access) from None
        raise AssertionError("unreachable")

    def snapshot(self, node: str, timeout: float = 10.0, max_carriers: int = 0) -> Snapshot:
        def work(conn: Transport, deadline: float) -> Any:
            now = us()
            return collect.collect(conn, node, max(0, max_carriers), deadline, now, now)
        reply = self.run(node, timeout, work)
        return build.build_peer_snapshot(node, reply[1])

    def cluster_nodes(self, node: str, timeout: float = 10.0) -> list[str]:
        """`node` and the nodes it is connected to (its nodes(): visible nodes only)."""
        names = self.run(node, timeout,
                         lambda conn, deadline: result(conn.call("erlang", "nodes", [],
                                                                 deadline)))
        return replies.cluster_members(node, names)


def with_transport(node: str, cookie: str, timeout: float, access: Access | None,
                   work: Callable[[Transport, float], Any], reading: str = "") -> Any:
    """`work(transport, deadline)` on a fresh transport to `node` (our client, or a hidden node
    booted for it), all of it within `timeout`, closed on every way out: the one-shot commands'
    way (the snapshot, the process and ETS scans, the GC probe)."""
    split_node(node)
    check_cookie(cookie, "the cookie")
    access = access or access_mod.current()
    end = time.monotonic() + timeout
    s = Session(cookie, access_mod.is_long_host(split_node(node)[1]), access)
    try:
        s.start(end)
        return s.run(node, timeout, work, reading, end)
    finally:
        s.close()


def snapshot_cluster(node: str, cookie: str, timeout: float = 10.0,
                     max_carriers: int = MAX_CARRIERS,
                     access: Access | None = None) -> dict[str, Snapshot | NodeError]:
    """`snapshot --cluster`: `node` and the nodes it is connected to, each snapshot in parallel
    over one session (a failure is that node's value)."""
    access = access or access_mod.current()
    with Session(cookie, long_names([node]), access) as s:
        members = s.cluster_nodes(node, timeout)

        def one(n: str) -> Snapshot | NodeError:
            try:
                return s.snapshot(n, timeout, max_carriers)
            except NodeError as e:
                return e

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, len(members))) as ex:
            return dict(zip(members, ex.map(one, members), strict=True))
