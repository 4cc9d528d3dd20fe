"""`beamalloc watch`: sample nodes every interval into the store (timeseries/store.py).

Threads, and why:
- one poller per node: it asks the shared session (collector/session.py Session: our own
  client's connections, or one hidden node over TLS) for a snapshot and waits for it alone, so
  a stalled node only delays its own samples. All pollers tick on one grid (multiples of the
  interval from the start), so an interval's samples are taken together and
  `intervals()` can say how far apart its first and last were;
- one writer: SQLite wants a single writer; pollers hand it their samples through a queue, and it
  commits them in batches of at most BATCH_SECONDS (store.py): a SIGKILL loses at most the open
  batch, and one commit per batch is what lets it follow a fleet (docs/store.md, "Writing");
- a status line (a terminal: one refreshed line; otherwise one line per node event, and every
  STATUS_EVERY seconds one line saying all is well: nodes sampled, spread, rows written;
  `quiet` keeps only the node events).

A node that goes away (restart, crash, network) leaves an open gap in the store from its last good
sample; the first good sample after it closes the gap. A restart faster than the interval shows as
a new OS pid and is recorded as a closed gap. With `cluster`, each given node is asked for its
nodes() now and then, and new members are watched too.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from beamalloc.collector.live import NodeError
from beamalloc.collector.session import Session, long_names
from beamalloc.console import width_for
from beamalloc.errors import InputError
from beamalloc.limits import CARRIERS_EVERY, MAX_CARRIERS, MAX_PROCESSES, PROCESSES_EVERY
from beamalloc.timeseries import scans
from beamalloc.timeseries.series import FINDINGS_EVERY, Point, active_findings, derive
from beamalloc.timeseries.store import BATCH_SECONDS, Store
from beamalloc.units import human

if TYPE_CHECKING:
    from beamalloc.collector.access import Access

#: Seconds between looks for new cluster members.
DISCOVER_EVERY = 30.0
#: Seconds between retention passes.
PRUNE_EVERY = 3600.0
#: Intervals whose sample times `intervals()` remembers.
KEEP_INTERVALS = 1000
#: Seconds between status lines when stderr is not a terminal (a log), at least one interval.
STATUS_EVERY = 60.0


@dataclass
class NodeStatus:
    """What the pollers know about a node; read by the status line and the Prometheus endpoint."""

    node: str
    up: bool = False
    samples: int = 0
    last_t: float | None = None  # time of the last good sample
    point: Point | None = None  # its derived numbers
    pid: int | None = None
    error: str | None = None
    down_since: float | None = None
    #: What the rules and the lint said of the last sample evaluated (series.active_findings),
    #: every FINDINGS_EVERY seconds: the labels of the finding and lint gauges.
    findings: list[tuple[str, str, str]] = field(default_factory=list)
    lint: list[tuple[str, str]] = field(default_factory=list)
    findings_t: float | None = None


@dataclass
class Watcher:
    nodes: list[str]
    cookie: str
    store_path: str | None = None
    interval: float = 10.0
    timeout: float = 10.0
    retain_days: float | None = None
    cluster: bool = False
    out: TextIO = field(default_factory=lambda: sys.stderr)
    #: Carriers on samples 0, N, 2N, ... of each node (0: never), at most max_carriers each.
    carriers_every: int = CARRIERS_EVERY
    max_carriers: int = MAX_CARRIERS
    #: No status lines (node events are still said: a node that goes down is news).
    quiet: bool = False
    #: Seconds between status lines in a log (None: STATUS_EVERY or the interval, the longer).
    status_every: float | None = None
    #: How the hidden node reaches the nodes (docs/access.md; None: access.current()).
    access: Access | None = None
    #: A process scan of each node every this many seconds (0: never; timeseries/scans.py).
    processes_every: float = PROCESSES_EVERY
    max_processes: int = MAX_PROCESSES

    def __post_init__(self) -> None:
        self.scanner = scans.Scanner(self.cookie, self.processes_every, self.max_processes,
                                     self.access)
        self.status: dict[str, NodeStatus] = {}
        self.stop = threading.Event()
        self._q: queue.Queue[Callable[[Store], None] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._threads: list[threading.Thread] = []
        self._long = long_names(self.nodes)
        self.written = 0
        self.store_bytes = 0
        self.writer_error: BaseException | None = None
        self.batches = 0
        #: The grid every poller ticks on (time.monotonic() of tick 0), and per tick the Unix
        #: times of the samples taken in it.
        self._t0 = time.monotonic()
        self._ticks: dict[int, dict[str, float]] = {}
        self._sent: dict[int, list[float]] = {}  # when the pollers asked, per tick

    # ---- the shared hidden node ------------------------------------------------------------

    def session(self) -> Session:
        """The hidden node, restarted if it died (pollers call this before each request)."""
        with self._lock:
            if self._session is None or not self._session.alive():
                if self._session is not None:
                    self._session.close()
                # Plain TCP distribution: our own client over kept connections, no hidden node
                # (collector/session.py); TLS: the hidden node's session.
                self._session = Session(self.cookie, self._long, self.access)
                self._session.start()
            return self._session

    # ---- pollers -----------------------------------------------------------------------

    def watch_node(self, node: str) -> None:
        """Watch one more node (from its next tick on); no-op if it is watched already."""
        self._watch(node)

    def _watch(self, node: str, grid: int | None = None) -> None:
        with self._lock:
            if node in self.status:
                return
            self.status[node] = NodeStatus(node)
        t = threading.Thread(target=self._poll, args=(node, grid), name=f"poll {node}",
                             daemon=True)
        self._threads.append(t)
        t.start()

    def _poll(self, node: str, grid: int | None = None) -> None:
        st = self.status[node]
        # Up to the interval (a stalled node is given up on in time for its next sample).
        timeout = max(0.5, min(self.timeout, self.interval))
        tick = 0
        if grid is None:  # a node found later waits for the next tick of the common grid
            elapsed = time.monotonic() - self._t0
            grid = int(elapsed / self.interval)
            if elapsed - grid * self.interval > 0.05 * self.interval:
                grid += 1
                self.stop.wait(self._t0 + grid * self.interval - time.monotonic())
        while not self.stop.is_set():
            try:
                session = self.session()
            except NodeError as e:  # our side could not start (every pooled name taken, TLS
                self._failed(st, str(e))  # refused): said, and tried again next tick
                self.stop.wait(self.interval)
                continue
            every = self.carriers_every
            cap = self.max_carriers if every > 0 and tick % every == 0 else 0
            tick += 1
            with self._lock:
                self._sent.setdefault(grid, []).append(time.time())
                if len(self._sent) > KEEP_INTERVALS:
                    del self._sent[min(self._sent)]
            try:
                snap = session.snapshot(node, timeout, max_carriers=cap)
                point = derive(snap)
            except (NodeError, InputError) as e:  # InputError: a reply we cannot read
                if session.alive():
                    self._failed(st, str(e))
                # else our hidden node died, not the target: the next tick starts another
            else:
                self._sampled(st, snap, point, grid)
                # who holds the memory, now and then (a scan may take the whole --timeout)
                self.scanner.sampled(node, session, self.timeout, self._q.put, self._event)
            # The next tick of the grid; ticks missed while stalled are skipped, not caught up.
            grid = int((time.monotonic() - self._t0) / self.interval) + 1
            self.stop.wait(self._t0 + grid * self.interval - time.monotonic())

    def _sampled(self, st: NodeStatus, snap: Any, point: Point, grid: int = 0) -> None:
        t = snap.taken_at
        with self._lock:
            self._ticks.setdefault(grid, {})[st.node] = t
            if len(self._ticks) > KEEP_INTERVALS:
                del self._ticks[min(self._ticks)]
        pid = point.get("pid")
        after_gap = st.down_since is not None
        restarted = st.pid is not None and pid is not None and pid != st.pid
        if after_gap:
            why = f"restarted (os pid {st.pid} -> {pid})" if restarted else None
            self._q.put(lambda s, n=st.node, why=why: s.close_gap(n, t, why))
            self._event(f"{st.node}: sampling again after "
                        f"{t - (st.last_t or st.down_since or t):.1f} s")
        elif restarted and st.last_t is not None:
            reason = f"restarted (os pid {st.pid} -> {pid})"
            self._q.put(lambda s, n=st.node, a=st.last_t: s.add_gap(n, a, t, reason))
            self._event(f"{st.node}: {reason}")
        # A sample with carriers is stored whole: the map is what the others do not have.
        force = after_gap or restarted or snap.carriers is not None
        found = None
        if st.findings_t is None or t - st.findings_t >= FINDINGS_EVERY or restarted:
            st.findings, st.lint = active_findings(snap)
            st.findings_t = t
            found = {"findings": st.findings, "lint": st.lint}

        def write(s: Store) -> None:
            s.add_sample(snap, point, force_keep=force, findings=found)
            self.written += 1

        self._q.put(write)
        st.up, st.error, st.down_since = True, None, None
        st.samples += 1
        st.last_t, st.point, st.pid = t, point, pid

    def _failed(self, st: NodeStatus, error: str) -> None:
        if st.down_since is None:
            now = time.time()
            st.down_since = now
            start = st.last_t if st.last_t is not None else now
            self._q.put(lambda s, n=st.node: s.open_gap(n, start, error))
            self._event(f"{st.node}: {error}")
        st.up, st.error = False, error

    def _discover(self) -> None:
        for seed in list(self.nodes):
            try:
                members = self.session().cluster_nodes(seed, self.timeout)
            except NodeError:
                continue  # its own poller reports it
            for m in members:
                if m not in self.status:
                    self._event(f"{m}: joined (found through {seed})")
                    self._watch(m)

    # ---- writer ------------------------------------------------------------------------

    def _write(self, store: Store) -> None:
        last_prune = float("-inf")
        stopping = False
        while not stopping:
            job = self._q.get()
            if job is None:
                return
            try:
                # One batch: the jobs that come within BATCH_SECONDS of its first, one commit.
                # A job that fails is undone alone (its savepoint); the batch before it commits.
                end = time.monotonic() + BATCH_SECONDS
                with store.batch():
                    while True:
                        try:
                            job(store)
                        except Exception as e:  # a full disk or a locked file: stop, say why
                            self.writer_error = e
                            stopping = True
                            break
                        try:
                            job = self._q.get(timeout=max(0.0, end - time.monotonic()))
                        except queue.Empty:
                            break
                        if job is None:
                            stopping = True
                            break
                self.batches += 1
                if self.retain_days is not None and time.monotonic() - last_prune > PRUNE_EVERY:
                    store.prune(time.time() - self.retain_days * 86400)
                    scans.prune(store.db, time.time() - self.retain_days * 86400)
                    last_prune = time.monotonic()
                self.store_bytes = store.size()
            except Exception as e:
                self.writer_error = self.writer_error or e
            if self.writer_error is not None:
                self.stop.set()
                return

    def intervals(self) -> list[dict[str, Any]]:
        """Per tick of the grid (oldest first): the nodes sampled in it and the spread between
        its first and its last sample (seconds, sample times as the nodes took them), and
        `asked`: the same spread of the times the pollers sent their requests."""
        with self._lock:
            ticks = sorted((k, dict(v)) for k, v in self._ticks.items())
            sent = {k: list(v) for k, v in self._sent.items()}
        return [{"tick": k, "samples": len(ts), "nodes": set(ts), "first": min(ts.values()),
                 "spread": max(ts.values()) - min(ts.values()),
                 "asked": max(sent.get(k, [0])) - min(sent.get(k, [0]))} for k, ts in ticks]

    # ---- status ------------------------------------------------------------------------

    def _event(self, text: str) -> None:
        if not self.out.isatty():
            print(f"{time.strftime('%H:%M:%S')} {text}", file=self.out, flush=True)

    def status_line(self) -> str:
        sts = list(self.status.values())
        up = sum(s.up for s in sts)
        down = [s.node for s in sts if not s.up and s.samples + (s.error is not None) > 0]
        line = (f"{len(sts)} nodes, {up} up, {sum(s.samples for s in sts)} samples, "
                f"store {human(self.store_bytes)}")
        return line + (f"; down: {', '.join(down)}" if down else "")

    def health_line(self) -> str:
        """The periodic line of a log: the last complete interval (nodes sampled of those
        watched, the spread between its first and last sample) and the rows written so far."""
        done = [i for i in self.intervals() if i["tick"] < self._tick_now()]
        last = done[-1] if done else None
        sampled = (f"last interval: {last['samples']} of {len(self.status)} nodes sampled, "
                   f"spread {last['spread']:.2f} s" if last else "no interval complete yet")
        return (f"{'all well' if self._all_up() else 'status'}: {sampled}; "
                f"{self.written} rows written, {self.batches} commits; {self.status_line()}")

    def _tick_now(self) -> int:
        return int((time.monotonic() - self._t0) / self.interval)

    def _all_up(self) -> bool:
        return bool(self.status) and all(s.up for s in self.status.values())

    def _show(self) -> None:
        every = self.status_every or max(STATUS_EVERY, self.interval)
        next_log = time.monotonic() + every
        while not self.stop.wait(1.0):
            if self.quiet:
                continue
            if self.out.isatty():  # one line, refreshed: never wider than the terminal
                line, room = self.status_line(), width_for(self.out) - 1
                while len(line) > room and " " in line:  # whole words: no number cut
                    line = line.rsplit(" ", 1)[0].rstrip(",;")
                self.out.write("\r\x1b[K" + line[:room])
                self.out.flush()
            elif time.monotonic() >= next_log:
                next_log += every
                self._event(self.health_line())

    # ---- run ---------------------------------------------------------------------------

    def run(self, duration: float | None = None, on_start: Callable[[], None] | None = None
            ) -> int:
        """Watch until stop is set (or `duration` seconds passed); returns samples written."""
        store = Store(self.store_path)  # opened here: a bad path fails before any thread runs
        writer = threading.Thread(target=self._write, args=(store,), name="store writer")
        writer.start()
        try:
            self._t0 = time.monotonic()  # tick 0 of the grid: now
            for n in self.nodes:
                # Tick 0 is theirs however late their thread starts: with our own client the
                # first samples decode while later threads are still being started.
                self._watch(n, grid=0)
            threading.Thread(target=self._show, name="status", daemon=True).start()
            if on_start:
                on_start()
            deadline = None if duration is None else time.monotonic() + duration
            next_discovery = time.monotonic()
            while not self.stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if self.cluster and now >= next_discovery:
                    self._discover()
                    next_discovery = now + DISCOVER_EVERY
                self.stop.wait(min(1.0, deadline - now) if deadline else 1.0)
        finally:
            self.stop.set()
            for t in self._threads:
                t.join(timeout=self.timeout + 2)
            self.scanner.join(timeout=self.timeout + 2)  # its writes before the writer's end
            self._q.put(None)
            writer.join()
            store.close()
            with self._lock:
                if self._session is not None:
                    self._session.close()
            if self.out.isatty() and not self.quiet:
                self.out.write("\r\x1b[K" + self.status_line() + "\n")
        if self.writer_error is not None:
            raise self.writer_error
        return self.written
