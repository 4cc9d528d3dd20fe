"""Snapshot a running node over Erlang distribution, read-only (docs/design.md, "What it does" 1).

One way, whatever reaches the node: collect.collect() over a Transport (collector/transport.py)
that session.with_transport() opens, our own client over plain TCP (no BEAM boots on our side,
tests/live/test_access_procs.py watches for one) or the hidden node's relay over TLS and any
other -proto_dist (collector/relay.py); build.build_peer_snapshot() makes the Snapshot. The same
Snapshot both ways (tests/live/test_direct.py compares them).

The modules, by job: transport.py (the interface, the one-line errors), dist.py (our client),
relay.py (the hidden node's life and relay), session.py (transports held open), collect.py (the
snapshot's calls and the carrier scan), replies.py (reply checks), build.py (Snapshot building),
osinfo.py (/proc and cgroup reads of a node on this host).
"""

from __future__ import annotations

import time
from typing import Any

from beamalloc.collector.access import Access
from beamalloc.collector.build import build_peer_snapshot, start_peer_snapshot
from beamalloc.collector.collect import collect
from beamalloc.collector.session import with_transport
from beamalloc.collector.transport import (  # noqa: F401 - the public names of a snapshot
    ENV_HIDDEN_NODE,
    NAME_POOL,
    NodeError,
    NodeNameError,
    Transport,
    split_node,
    us,
)
from beamalloc.gcpause import paused_gc
from beamalloc.limits import MAX_CARRIERS
from beamalloc.snapshot import AllocatorInstance, Snapshot


def snapshot_node(node: str, cookie: str, timeout: float = 10.0,
                  max_carriers: int = MAX_CARRIERS, access: Access | None = None,
                  timings: dict[str, float] | None = None) -> Snapshot:
    """Snapshot `node`'s allocators; NodeError (one line, naming the cause) within `timeout`.

    With `max_carriers` > 0 (the default) the snapshot also reads up to that many carriers
    with OTP's instrument:carriers/1 (collector/instrument.py); 0 skips them. `access`: how to
    reach it (TLS, IPv6, epmd port, epmd-less); default access.current(). `timings`, when
    given, is filled with where the time went, in seconds (connect, decode_s, build,
    carriers_s, the bytes received; build_overlapped: the Snapshot's start, built while the
    target scans its carriers): tests/bench/bench_snapshot_s64.py reads it.
    """
    timings = {} if timings is None else timings
    main_us = us()

    started: list[tuple[Snapshot, list[AllocatorInstance]]] = []
    spent = [0.0, 0.0]  # building while the target scans its carriers: wall, CPU

    def meanwhile(body: list[Any]) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        started.append(start_peer_snapshot(node, body))
        spent[:] = [time.perf_counter() - t0, time.process_time() - c0]

    def work(conn: Transport, deadline: float) -> Any:
        connected = us()
        reply = collect(conn, node, max(0, max_carriers), deadline, main_us, connected,
                        meanwhile)
        timings.update(connect=(connected - main_us) / 1e6, **conn.stats)
        return reply

    # The reply and the Snapshot are ~150,000 acyclic objects, built at once: the cyclic
    # collector would walk them over and over meanwhile (~7 % of a `beamalloc snapshot`).
    with paused_gc():
        reply = with_transport(node, cookie, timeout, access, work)
        done = time.time()
        t0, c0 = time.perf_counter(), time.process_time()
        snap = build_peer_snapshot(node, reply[1], taken_at=done,
                                   started=started[0] if started else None)
        # "build" is what is left once the reply is in; its start overlapped the carrier scan
        timings["build"] = time.perf_counter() - t0
        timings["build_cpu"] = time.process_time() - c0
        timings["build_overlapped"], timings["build_overlapped_cpu"] = spent
    timings["carriers_s"] = next(
        (x[1] / 1e6 for x in reply[1] if isinstance(x, tuple) and len(x) == 2
         and x[0] == "carriers_us" and isinstance(x[1], int)), 0.0)
    return snap
