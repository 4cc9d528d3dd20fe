"""A Snapshot from the terms a node sent (collect.collect()'s `[{Key, Value}]`), with what
this host's OS says of the node when it runs here (collector/osinfo.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from beamalloc._refalloc import AllocReply
from beamalloc.collector import osinfo
from beamalloc.collector.instrument import add_carriers
from beamalloc.collector.replies import LIMIT_KEYS
from beamalloc.collector.replies import as_int as _int
from beamalloc.collector.system_info import add_system_info, memory_from_term
from beamalloc.collector.terms import Atom, format_term, proplist
from beamalloc.collector.transport import NodeError
from beamalloc.errors import InputError
from beamalloc.snapshot import AllocatorInstance, Snapshot, SnapshotError


def _str(v: Any) -> str | None:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v) if isinstance(v, str) else None


def raw_text(term: Any) -> str:
    """Exactly `format_term(term)`: the one term-text writer (collector/native/src/term_text.rs)."""
    return format_term(term)


def build_snapshot(node: str, term: Any, taken_at: float | None = None) -> Snapshot:
    """A Snapshot from the `[{Key, Value}]` list collect.collect() builds (a snippet file's
    body has the same keys: collector/snippet.py)."""
    return finish_snapshot(*start_snapshot(node, term, taken_at), term)


def start_snapshot(node: str, term: Any,
                   taken_at: float | None = None) -> tuple[Snapshot, list[AllocatorInstance]]:
    """The part of build_snapshot that needs no carriers (the node's facts, its allocators,
    what this host's OS says of it), and the instances proven plain: what snapshot_node does
    while the target scans its carriers (collect.collect's `meanwhile`)."""
    p = proplist(term)
    pid = p.get("os_pid")
    sampled = _int(p.get("sampled_at_us"))
    snap = Snapshot(
        node=node,
        source="live",
        # collect() stamps the middle of its calls with the same wall clock as time.time().
        taken_at=sampled / 1e6 if sampled is not None else taken_at,
        otp_release=_str(p.get("otp_release")),
        erts_version=_str(p.get("version")),
        wordsize=_int(p.get("wordsize")),
        schedulers=_int(p.get("schedulers")),
        os_pid=int(pid) if isinstance(pid, str) and pid.isdigit() and len(pid) <= 10 else None,
        memory=memory_from_term(p.get("memory", [])),
    )
    allocs = p.get("allocators", [])
    proven: list[AllocatorInstance] = []
    for entry in allocs if isinstance(allocs, list) else []:
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Atom):
            if type(entry[1]) is AllocReply:  # read by alloc_reply.rs, proven plain there
                proven += entry[1].instances
            add_system_info(snap, str(entry[0]), entry[1])
    limits = {k: v for k in LIMIT_KEYS if (v := _int(p.get(k))) is not None}
    snap.rss = osinfo.rss(snap.os_pid, node)
    if snap.rss is not None:  # the same host: what the OS could take back, and has
        snap.rss_lazyfree, snap.mem_available = osinfo.os_memory(snap.os_pid)
        osinfo.container(snap, limits)
    if limits:
        snap.extra["limits"] = limits
    return snap, proven


def finish_snapshot(snap: Snapshot, proven: list[AllocatorInstance], term: Any) -> Snapshot:
    """start_snapshot's Snapshot completed from the whole `term`: carriers, raw term, check."""
    add_carriers(snap, proplist(term))
    # Carriers are in snap.carriers, whole; as text they would double the raw term.
    snap.raw = raw_text([x for x in term if not (isinstance(x, tuple) and x
                                                 and x[0] in _CARRIER_KEYS)]
                        if isinstance(term, list) else term)
    # The ranges every reader checks (docs/robustness.md, "Ranges"): a reply outside them is
    # one line naming the node, as a file would be.
    try:
        snap.check(proven)
    except SnapshotError as e:
        raise SnapshotError(f"{snap.node}: {e}") from None
    return snap


_CARRIER_KEYS = ("carriers", "carriers_skipped", "carrier_hist", "allocation_tags",
                 "port_names")


def build_peer_snapshot(node: str, term: Any, taken_at: float | None = None,
                        started: tuple[Snapshot, list[AllocatorInstance]] | None = None
                        ) -> Snapshot:
    """build_snapshot of what a node sent (from start_peer_snapshot's part when `started`):
    out of range there is the peer's fault (exit 3)."""
    with _peer(node):
        return finish_snapshot(*(started or start_snapshot(node, term, taken_at)), term)


def start_peer_snapshot(node: str, term: Any) -> tuple[Snapshot, list[AllocatorInstance]]:
    """start_snapshot of what a node sent, its faults the peer's (exit 3)."""
    with _peer(node):
        return start_snapshot(node, term)


@contextlib.contextmanager
def _peer(node: str) -> Iterator[None]:
    try:
        yield
    except InputError as e:
        raise NodeError(f"{node} sent a reply no Erlang node sends: "
                        f"{str(e).removeprefix(node + ': ')}") from None
