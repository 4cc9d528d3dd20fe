"""The process scans a watch stores beside its samples (issue 26 item 3: the snapshot page of a
watched node names who holds the memory, the same holders `analyze` and `recommend` name).

A sample is the allocators' counters; who holds the memory is a process scan
(collector/processes.py: read-only, bounded by its budget of BUDGET_MS of process_info
requests), the same records `recommend NODE` reads. A watch scans a node on its first sample and
then every `--processes-every` seconds (PROCESSES_EVERY by default; a fleet's later scans are
spread over the period), over the watch's own transport to that node (collector/session.py
Session: our own client, or the hidden node's relay over TLS).

Stored in a table of its own, `process_scans`, created by `setup()`, which the store's schema
setup calls (timeseries/store.py): one row per scan, the ProcessTable as zlib-compressed JSON
behind its tag and format (SCAN_MAGIC, timeseries/blobs.py; a row written before tags reads as
format 1) without its per-process activity (one record per process of the node, which a page judging
one scan does not use). Like the store's snapshots, a scan is kept for good every KEEP_EVERY
seconds; between those only the node's latest stays: a node scanned every 5 minutes costs 24
kept scans a day (docs/store.md).

The pages read the latest scan at or before a sample's time (`at_or_before`) and say its age.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from beamalloc.collector.live import NodeError
from beamalloc.collector.processes import BUDGET_MS, MFA, TOP, Group, Proc, ProcessTable
from beamalloc.errors import InputError
from beamalloc.limits import MAX_PROCESSES, PROCESSES_EVERY
from beamalloc.timeseries import blobs
from beamalloc.timeseries.frames import NewerFormat

if TYPE_CHECKING:
    from beamalloc.collector.access import Access

#: Seconds between the scans kept for good; between them a node's latest scan replaces the one
#: before it (Store's snapshots are kept every 30 min the same way).
KEEP_EVERY = 3600.0
#: The largest scan row decoded (a scan is some tens of kB of JSON; a larger row is damage).
MAX_SCAN_JSON = 8 << 20
#: A scan row's first bytes: "BAP" (a process scan) and its format (docs/store.md "Schema").
SCAN_MAGIC = blobs.magic(b"BAP", 1)

SCHEMA = (
    # t: the scan's time in ms, as the store's samples; kept: 0 for a node's transient latest
    "CREATE TABLE IF NOT EXISTS process_scans (node TEXT NOT NULL, t INTEGER NOT NULL,"
    " kept INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (node, t))",
)


class ScanError(InputError):
    """A stored scan that cannot be read, in one line: the pages log it and show the sample
    without a scan (webui/data.py `stored_processes`)."""


def setup(db: sqlite3.Connection, readonly: bool = False) -> None:
    """Create the table where it is missing (an older store gains it on its next read-write
    open; a read-only open of such a store finds no scans: `at_or_before` returns None)."""
    if not readonly:
        for stmt in SCHEMA:
            db.execute(stmt)


# ---- encoding ----------------------------------------------------------------------------

def encode(table: ProcessTable) -> bytes:
    """The table without its activity (one record per process of the node), zlib JSON behind
    its tag (SCAN_MAGIC)."""
    doc = dataclasses.asdict(dataclasses.replace(table, activity=None))
    return blobs.pack(SCAN_MAGIC, json.dumps(doc, separators=(",", ":")).encode(), 6)


def _fields(cls: type, d: Any) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise TypeError(f"a {cls.__name__} that is not an object")
    known = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in known}


#: The fields that hold a call, kept as text in the JSON.
_CALLS = frozenset({"initial_call", "spawned_as"})


def _calls(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with its calls read back typed (collector/processes.py MFA), once, here; a value that
    is no call as it was."""
    return {k: (MFA.read(v) or v) if k in _CALLS and isinstance(v, str) else v
            for k, v in d.items()}


def table_from_doc(doc: Any) -> ProcessTable:
    """A ProcessTable from its JSON document (encode's, uncompressed); TypeError if it is not
    one."""
    d = _fields(ProcessTable, doc)
    d["procs"] = [Proc(**_calls(_fields(Proc, p))) for p in d.get("procs") or []]
    d["groups"] = [Group(**_calls(_fields(Group, g))) for g in d.get("groups") or []]
    return ProcessTable(**d)


def decode(blob: Any) -> ProcessTable:
    """encode()'s inverse (or a row written before tags, format 1); ScanError for a row this
    code did not write, or of a newer format."""
    try:
        stream = blobs.unpack(blob, SCAN_MAGIC, "a stored process scan")
        d = zlib.decompressobj()
        raw = d.decompress(stream, MAX_SCAN_JSON)
        if d.unconsumed_tail:
            raise ValueError("a scan row larger than any beamalloc writes")
        return table_from_doc(json.loads(raw))
    except (zlib.error, ValueError, TypeError, RecursionError) as e:
        if isinstance(e, NewerFormat):
            raise ScanError(f"{e}: upgrade beamalloc") from None
        raise ScanError(f"a stored process scan cannot be read ({type(e).__name__}): "
                        "damaged, or not beamalloc's") from None


# ---- writing (the watch's writer thread) -------------------------------------------------

def add(db: sqlite3.Connection, node: str, t: float, table: ProcessTable,
        keep_every: float = KEEP_EVERY) -> None:
    """Store `node`'s scan taken at `t` (Unix s): kept when the node's last kept scan is
    `keep_every` old, else as its latest, replacing the latest before it."""
    ms = round(t * 1000)
    blob = encode(table)
    db.execute("SAVEPOINT scan")  # all or nothing, inside the writer's batch or alone
    try:
        row = db.execute("SELECT max(t) FROM process_scans WHERE node = ? AND kept = 1",
                         (node,)).fetchone()
        keep = row[0] is None or ms - row[0] >= keep_every * 1000
        db.execute("DELETE FROM process_scans WHERE node = ? AND kept = 0", (node,))
        db.execute("INSERT OR REPLACE INTO process_scans VALUES (?, ?, ?, ?)",
                   (node, ms, int(keep), blob))
    except BaseException:
        db.execute("ROLLBACK TO scan")
        db.execute("RELEASE scan")
        raise
    db.execute("RELEASE scan")


def prune(db: sqlite3.Connection, before: float) -> int:
    """Delete the scans older than `before` (Unix s), as Store.prune does the samples."""
    return db.execute("DELETE FROM process_scans WHERE t < ?", (round(before * 1000),)).rowcount


# ---- reading (the pages) -----------------------------------------------------------------

@dataclass(frozen=True)
class StoredScan:
    t: float  # Unix s
    table: ProcessTable


#: A scan follows its sample in the same poll (Scanner.sampled), seconds after it: one taken up
#: to this long after a sample is that sample's, said "N s after this sample".
FOLLOWS = 60.0


def at_or_before(db: sqlite3.Connection, node: str, t: float) -> StoredScan | None:
    """The latest scan of `node` taken at or before `t` (Unix s; or up to FOLLOWS after it,
    the scan of that very poll), or None: none stored, or a store from before scans were
    stored (no table yet)."""
    # a store of before scans has no table: asked of the schema, not read from an error's words
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                  "'process_scans'").fetchone() is None:
        return None
    row = db.execute("SELECT t, data FROM process_scans WHERE node = ? AND t <= ? "
                     "ORDER BY t DESC LIMIT 1", (node, round((t + FOLLOWS) * 1000))).fetchone()
    if row is None:
        return None
    if not isinstance(row[0], int):
        raise ScanError("a stored process scan without a time: damaged, or not beamalloc's")
    return StoredScan(row[0] / 1000, decode(row[1]))


def age_text(seconds: float, sample: str = "this sample") -> str:
    """How long before a sample its scan was taken: '4 min before this sample'; a scan of the
    same poll (taken after it, `seconds` < 0): '3 s after this sample'. `sample` names the
    sample as the page says it (a node page: "the latest snapshot")."""
    if abs(seconds) < 1:
        return f"taken with {sample}"
    v, unit = abs(seconds), "s"
    for u, n in (("h", 3600), ("min", 60)):
        if abs(seconds) >= n:
            v, unit = abs(seconds) / n, u
            break
    num = f"{v:.1f}" if unit != "s" and v < 10 else f"{v:.0f}"
    return f"{num} {unit} {'before' if seconds > 0 else 'after'} {sample}"


# ---- the watch's scans ---------------------------------------------------------------------

@dataclass
class Scanner:
    """When a watch scans each node, and the scan itself, called by each node's poller after a
    good sample. Over our own client the scan runs in the poller's thread, on the node's kept
    connection (a sample waits for it: 0.1-0.9 s, tests/bench/bench_scans.py); through a hidden
    node (TLS) it boots one of its own, in a thread of its own, so that the samples go on
    meanwhile (`join` waits for those at the watch's end)."""

    cookie: str
    #: Seconds between a node's scans (0: never); the first good sample of a node is scanned.
    every: float = PROCESSES_EVERY
    max_processes: int = MAX_PROCESSES
    access: Access | None = None
    #: node -> time.monotonic() of its last scan attempt
    last: dict[str, float] = field(default_factory=dict)
    #: the scans running in threads of their own (hidden node), one per node at most
    threads: dict[str, threading.Thread] = field(default_factory=dict)
    #: node -> its latest good scan, for the Prometheus endpoint's holder gauges (a dict's item
    #: is replaced whole, so a scrape reads one scan or the one before it)
    latest: dict[str, ProcessTable] = field(default_factory=dict)
    #: node -> its ETS tables read with that scan (collector/ets.py's Snapshot.extra["ets"]
    #: shape); kept for the gauges only, not stored: a stored sample's page reads no tables
    latest_ets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def due(self, node: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        prev = self.last.get(node)
        return self.every > 0 and (prev is None or now - prev >= self.every)

    def scan(self, session: Any, node: str, timeout: float) -> ProcessTable:
        """Over the session's connection to `node` where it keeps one (our own client), else
        a scan of its own (processes.scan_node: the hidden node for TLS); NodeError if not."""
        from beamalloc.collector import processes
        from beamalloc.collector.session import Session

        if isinstance(session, Session):
            p = session.run(node, timeout, lambda conn, deadline: processes.scan_direct(
                conn, self.max_processes, BUDGET_MS, TOP, deadline))
            return processes.table_from_term(node, p, taken_at=time.time())
        return processes.scan_node(node, self.cookie, timeout, self.max_processes,
                                   access=self.access)

    def scan_ets(self, session: Any, node: str, timeout: float) -> dict[str, Any]:
        """The node's ETS tables, read-only, as scan() reads its processes."""
        from beamalloc.collector import ets
        from beamalloc.collector.session import Session

        if isinstance(session, Session):
            return ets.tables_from_props(session.run(node, timeout, lambda conn, deadline:
                                                     ets.scan_direct(conn, ets.MAX_TABLES,
                                                                     ets.TOP, deadline)))
        return ets.scan_ets(node, self.cookie, timeout, access=self.access)

    def sampled(self, node: str, session: Any, timeout: float,
                put: Callable[[Callable[[Any], None]], None],
                say: Callable[[str], None]) -> None:
        """After a good sample of `node`: scan it if due and hand the write to the writer
        (`put`, the watch's queue of jobs taking the Store); a failed scan is said (`say`)
        and tried again at the next due time, the samples go on."""
        if not self.due(node) or (node in self.threads and self.threads[node].is_alive()):
            return
        # A fleet's first scans come together, on its first samples; the next ones are spread
        # over the period, each node a phase of its own (up to half of it earlier), so that a
        # fleet is not scanned all in one tick every period.
        first = node not in self.last
        phase = (zlib.crc32(node.encode()) % 1000) / 2000 * self.every if first else 0.0
        self.last[node] = time.monotonic() - phase
        from beamalloc.collector.session import Session

        if isinstance(session, Session):
            self._scan(session, node, timeout, put, say)
            return
        th = threading.Thread(target=self._scan, args=(session, node, timeout, put, say),
                              name=f"scan {node}", daemon=True)
        self.threads[node] = th
        th.start()

    def _scan(self, session: Any, node: str, timeout: float,
              put: Callable[[Callable[[Any], None]], None], say: Callable[[str], None]) -> None:
        try:
            table = self.scan(session, node, timeout)
        except (NodeError, InputError) as e:
            say(f"{node}: no process scan this time: {e}")
            return
        t = table.taken_at or time.time()
        self.latest[node] = table
        try:
            self.latest_ets[node] = self.scan_ets(session, node, timeout)
        except (NodeError, InputError) as e:  # the process scan stands without it
            say(f"{node}: no ETS scan this time: {e}")
        put(lambda store, n=node, t=t, table=table: add(store.db, n, t, table))

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for each scan still running in a thread of its own."""
        for th in list(self.threads.values()):
            th.join(timeout)
