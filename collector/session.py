"""A watch's kept connections without a hidden node: cluster.Session's interface over
collector/dist.py.

cluster.Session boots one hidden BEAM and sends it a request per sample; each reply then goes
through term_to_binary, base64, a pipe and our decoder. A DirectSession holds one distribution
connection per target instead, under one pooled name (a BEAM node is one name too, whatever it
connects to), and a sample is the agent's calls on that connection: the calls in the target
and our decoding of the replies, nothing else (tests/bench/bench_snapshot_s64.py measures both).

Each target's connection serves one request at a time (a lock each: watch polls every node from
its own thread); a failed or timed-out request closes that connection, and the next request
opens a new one. A connection idle for longer than the target's net_ticktime (60 s by default)
is dropped by the target; the next request then reconnects once before it reports the node
down. TLS distribution (and any other -proto_dist) keeps the hidden node: open_session()
chooses.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from beamalloc.collector import access as access_mod
from beamalloc.collector import dist, live
from beamalloc.collector.access import Access
from beamalloc.collector.cookie import check_cookie
from beamalloc.collector.live import NodeError
from beamalloc.snapshot import Snapshot


class DirectSession:
    """Snapshots of many nodes over kept connections; thread-safe; a context manager."""

    def __init__(self, cookie: str, long_names: bool = False,
                 access: Access | None = None) -> None:
        check_cookie(cookie, "the cookie")
        self._cookie = cookie
        self._access = access or access_mod.current()
        self._long = long_names
        self._lock = threading.Lock()
        self._local: dist.Local | None = None
        self._conns: dict[str, tuple[threading.Lock, list[dist.Connection | None]]] = {}
        self.ended: str | None = None
        self.start_failure: str | None = None

    def __enter__(self) -> DirectSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Hold our name; a pool all taken is the one-line error cluster.Session gives."""
        try:
            self._local = dist.Local(self._access, time.monotonic() + 10, live.NAME_POOL,
                                     self._long)
        except dist.DistError as e:
            self.start_failure = self.ended = str(live.start_error(e.kind, e.detail,
                                                                   self._cookie))
            raise NodeError(self.start_failure) from None

    def alive(self) -> bool:
        return self._local is not None and not self.ended

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, {}
        for _, box in conns.values():
            if box[0] is not None:
                box[0].close()
        if self._local is not None:
            self._local.close()
            self._local = None

    def _slot(self, node: str) -> tuple[threading.Lock, list[dist.Connection | None]]:
        with self._lock:
            return self._conns.setdefault(node, (threading.Lock(), [None]))

    def run(self, node: str, timeout: float, work) -> Any:
        """`work(conn, deadline)` on `node`'s connection, (re)connected as needed; the agent's
        `{error, Kind, Detail}` as a NodeError with live's one-line message."""
        live.split_node(node)
        if self._local is None:
            raise NodeError(self.ended or "the beamalloc session is not running")
        deadline = time.monotonic() + timeout
        lock, box = self._slot(node)
        with lock:
            for attempt in (0, 1):
                fresh = box[0] is None or box[0].closed
                try:
                    if fresh:
                        box[0] = dist.Connection(node, self._cookie, self._access, deadline,
                                                 live.NAME_POOL, self._long, self._local)
                    conn = box[0]
                    assert conn is not None
                    return work(conn, deadline)
                except dist.DistError as e:
                    if box[0] is not None:
                        box[0].close()
                    box[0] = None
                    # a kept connection the target dropped meanwhile: one more, fresh
                    if attempt == 0 and not fresh and e.kind == "nodedown":
                        continue
                    raise live._error(node, e.kind, e.detail, timeout, self._cookie,
                                      self._access) from None
        raise AssertionError("unreachable")

    def snapshot(self, node: str, timeout: float = 10.0, max_carriers: int = 0) -> Snapshot:
        def work(conn: dist.Connection, deadline: float) -> Any:
            now = live._us()
            return live.collect_direct(conn, node, max(0, max_carriers), deadline, now, now)
        reply = self.run(node, timeout, work)
        return live.build_peer_snapshot(node, reply[1])

    def cluster_nodes(self, node: str, timeout: float = 10.0) -> list[str]:
        """`node` and the nodes it is connected to (its nodes(): visible nodes only)."""
        names = self.run(node, timeout,
                         lambda conn, deadline: live._result(conn.call("erlang", "nodes", [],
                                                                        deadline)))
        return live.cluster_members(node, names)


def snapshot_cluster(node: str, cookie: str, timeout: float = 10.0,
                     max_carriers: int = live.MAX_CARRIERS,
                     access: Access | None = None) -> dict[str, Snapshot | NodeError]:
    """`snapshot --cluster`: `node` and the nodes it is connected to, each snapshot in parallel
    (a failure is that node's value). Over plain TCP our own client's kept connections, one
    thread per node; else cluster.snapshot_cluster's hidden node."""
    access = access or access_mod.current()
    if not live.direct(access):
        from beamalloc.collector import cluster

        return cluster.snapshot_cluster(node, cookie, timeout, max_carriers, access)
    live.split_node(node)
    with DirectSession(cookie, access_mod.is_long_host(live.split_node(node)[1]), access) as s:
        members = s.cluster_nodes(node, timeout)

        def one(n: str) -> Snapshot | NodeError:
            try:
                return s.snapshot(n, timeout, max_carriers)
            except NodeError as e:
                return e

        with ThreadPoolExecutor(max_workers=min(32, len(members))) as ex:
            return dict(zip(members, ex.map(one, members), strict=True))


def open_session(cookie: str, long_names: bool = False, access: Access | None = None):
    """A DirectSession where collector/dist.py reaches the targets (live.direct), else a
    cluster.Session (its hidden node). Not started."""
    access = access or access_mod.current()
    if live.direct(access):
        return DirectSession(cookie, long_names, access)
    from beamalloc.collector import cluster

    return cluster.Session(cookie, long_names, access)
