"""What the pages read: the watch store (read-only), uploaded snapshots, and cached analyses.

A snapshot is named by a ref: `s<id>` for one in the store, `u<hex>` for an upload. Uploads live
in memory only (at most MAX_UPLOADS, oldest dropped): the server never writes a request's bytes
anywhere a later request could name, and no request path is ever a file path.
"""

from __future__ import annotations

import io
import logging
import os
import re
import secrets
import sqlite3
import tempfile
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from beamalloc.advice.holders import processes_json
from beamalloc.analyzer.analysis import Analysis, analyze
from beamalloc.collector.procdump import ProcSections
from beamalloc.collector.sources import read_file
from beamalloc.errors import InputError
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries import scans
from beamalloc.timeseries.series import instance_of, instance_usage
from beamalloc.timeseries.store import Store, StoreError

log = logging.getLogger(__name__)

MAX_UPLOADS = 32
#: Per-instance usage over time comes from stored snapshots; this many at most per page view.
MAX_SAMPLED_SNAPSHOTS = 32
#: Points per series on a page: plenty for a 1-2k pixel wide chart, and fast to serve.
MAX_POINTS = 1000

_REF = re.compile(r"^(s[0-9]{1,18}|u[0-9a-f]{32})$")


def is_stored_ref(ref: str) -> bool:
    """A stored snapshot's ref ("s" and its id), as `Data.snapshot` takes it."""
    return ref[:1] == "s" and _REF.match(ref) is not None


class NotFound(LookupError):
    """A ref, node or snapshot that does not exist (HTTP 404)."""


#: What `_LRU.peek` returns for a key not cached (None is a value: "no verdict").
MISSING = object()


class _LRU(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.lock = threading.Lock()
        #: Keys being made, each with the lock its maker holds: a second request for the same
        #: key waits for the first's value (a verdict replays for a second: the page's own
        #: script and a reload asking at once must not replay twice).
        self._making: dict[Any, threading.Lock] = {}

    def peek(self, key: Any) -> Any:
        """The cached value, or MISSING (nothing is made)."""
        with self.lock:
            if key in self:
                self.move_to_end(key)
                return self[key]
        return MISSING

    def get_or(self, key: Any, make: Any) -> Any:
        while True:
            with self.lock:
                if key in self:
                    self.move_to_end(key)
                    return self[key]
                making = self._making.get(key)
                if making is None:
                    making = self._making[key] = threading.Lock()
                    making.acquire()
                    break
            with making:  # another thread makes it: wait, then read what it made
                pass
        try:
            value = make()
            with self.lock:
                self[key] = value
                while len(self) > self.size:
                    self.popitem(last=False)
            return value
        finally:  # a maker that raised lets the next one try
            with self.lock:
                del self._making[key]
            making.release()


class Data:
    """Shared by all request threads; each thread opens its own read-only Store."""

    def __init__(self, store_path: str | os.PathLike[str] | None) -> None:
        self.store_path = Path(store_path) if store_path is not None else None
        self._local = threading.local()
        self.uploads: _LRU = _LRU(MAX_UPLOADS)
        self.upload_processes: dict[str, dict[str, Any]] = {}
        self._analyses: _LRU = _LRU(256)
        self._samples: _LRU = _LRU(4096)
        # the recommender's answers (webui/recommend_view.py, ~100 KB each): fewer of them
        self.verdicts: _LRU = _LRU(128)
        #: Refs of the verdicts a background thread is to compute (webui/nodes.py).
        self.queued: set[str] = set()
        self.lock = threading.Lock()

    # ---- the store ---------------------------------------------------------------------------

    def store(self) -> Store | None:
        """This thread's Store, or None when there is no store file (yet)."""
        if self.store_path is None or not self.store_path.exists():
            return None
        st = getattr(self._local, "store", None)
        if st is None:
            st = Store(self.store_path, readonly=True)
            self._local.store = st
        return st

    def store_problem(self) -> str | None:
        if self.store_path is None:
            return "no store given: start with --store DB (written by beamalloc watch)"
        if not self.store_path.exists():
            return f"no store at {self.store_path} yet: beamalloc watch --store writes one"
        try:
            self.store()
        except StoreError as e:
            return str(e)
        return None

    # ---- snapshots by ref ----------------------------------------------------------------

    def snapshot(self, ref: str) -> Snapshot:
        if not _REF.match(ref):
            raise NotFound(f"no snapshot {ref!r}")
        if ref[0] == "u":
            with self.uploads.lock:
                snap = self.uploads.get(ref)
            if snap is None:
                raise NotFound("this upload is gone (the server keeps the last "
                               f"{MAX_UPLOADS} in memory): upload the file again")
            return snap
        st = self.store()
        if st is None:
            raise NotFound("no store")
        try:
            return st.snapshot(int(ref[1:]))
        except StoreError as e:
            raise NotFound(str(e)) from None

    def previous(self, ref: str, snap: Snapshot) -> Snapshot | None:
        """The stored snapshot of the same node just before `snap` (a watch's earlier sample),
        for the turnover between them (advice/predict.py); None for an upload or the first."""
        st = self.store() if ref[:1] == "s" else None
        if st is None or snap.taken_at is None:
            return None
        try:
            sid = st.before(snap.node, snap.taken_at)
            return st.snapshot(sid) if sid is not None else None
        except StoreError:
            return None

    def analysis(self, ref: str) -> tuple[Snapshot, Analysis]:
        snap = self.snapshot(ref)
        # Store snapshots never change; an upload's ref is new for every upload.
        return snap, self._analyses.get_or(ref, lambda: self._analyze(ref, snap))

    def _analyze(self, ref: str, snap: Snapshot) -> Analysis:
        with self.uploads.lock:  # an uploaded crash dump's holders (docs/processes.md)
            procs = self.upload_processes.get(ref)
        if procs is None and ref[:1] == "s":  # a watched node's: its stored process scan
            procs = self.stored_processes(snap)
        return analyze(snap, processes=procs)

    def stored_processes(self, snap: Snapshot) -> dict[str, Any] | None:
        """The holders of a watched node's sample: the `processes` section of the latest scan
        the watch stored at or before it (timeseries/scans.py), with `scan` saying when it was
        taken and how long before the sample; None where there is none (or it is damaged:
        logged, and the page says it has no scan)."""
        st = self.store()
        if st is None or snap.taken_at is None:
            return None
        try:
            found = scans.at_or_before(st.db, snap.node, snap.taken_at)
        except (scans.ScanError, sqlite3.DatabaseError) as e:
            log.warning("%s: %s", st.path, e)
            return None
        if found is None:
            return None
        return {**processes_json(found.table),
                "scan": {"t": found.t, "age": scans.age_text(snap.taken_at - found.t),
                         # a node page shows this scan as its latest snapshot's
                         "age_latest": scans.age_text(snap.taken_at - found.t,
                                                      "the latest snapshot"),
                         "when": datetime.fromtimestamp(found.t, UTC).strftime(
                             "%Y-%m-%d %H:%M:%S UTC")}}

    def add_upload(self, name: str, data: bytes) -> str:
        """Parse an uploaded file with the same readers as the CLI; return its ref."""
        procs = ProcSections()
        snap = parse_upload(name, data, procs)
        ref = "u" + secrets.token_hex(16)
        self.uploads.get_or(ref, lambda: snap)
        if snap.source == "crashdump":
            # its =proc sections, gathered in the pass that read its allocators (one read of
            # the dump, as the CLI's: cli/inputs.py); what the reader skipped is not said
            table = procs.table(io.StringIO())
            with self.uploads.lock:
                self.upload_processes[ref] = processes_json(table)
                for old in [r for r in self.upload_processes if r not in self.uploads]:
                    del self.upload_processes[old]  # its upload left the LRU
        return ref

    def cached(self, key: Any, make: Any) -> Any:
        """A value derived from a stored snapshot (stored snapshots never change)."""
        return self._samples.get_or(key, make)

    # ---- a node's history ----------------------------------------------------------------

    def node_samples(self, node: str, start: float | None, end: float | None
                     ) -> tuple[list[tuple[float, dict[tuple[str, int], float]]],
                                list[tuple[float, dict[str, int]]]]:
        """Per-instance usage, keyed (allocator, instance), and per-type call counts of up to
        MAX_SAMPLED_SNAPSHOTS snapshots (series.instance_usage, kept by the store beside each
        snapshot)."""
        st = self.store()
        if st is None:
            return [], []
        rows = st.snapshots(node, start, end)
        if len(rows) > MAX_SAMPLED_SNAPSHOTS:
            step = (len(rows) - 1) / (MAX_SAMPLED_SNAPSHOTS - 1)
            rows = [rows[round(i * step)] for i in range(MAX_SAMPLED_SNAPSHOTS)]
        found = st.instance_usage([r["id"] for r in rows])
        usage, calls = [], []
        for r in rows:
            u = found.get(r["id"]) or self._samples.get_or(
                r["id"], lambda r=r: instance_usage(st.snapshot(r["id"])))
            usage.append((r["t"], {instance_of(k): v for k, v in u["usage"].items()}))
            calls.append((r["t"], u["calls"]))
        return usage, calls


def parse_upload(name: str, data: bytes, procs: ProcSections | None = None) -> Snapshot:
    """Any format `beamalloc analyze FILE` reads; InputError with one line otherwise. A crash
    dump's =proc sections are fed to `procs` in the same pass (collector/sources.read_file).

    The readers take a path, so the bytes go to a private temporary file whose name the client
    never sees or chooses; the client's file name is only a label.
    """
    label = os.path.basename(name or "upload")[:100] or "upload"
    if not data.strip():
        raise InputError(f"{label}: empty file")
    fd, tmp = tempfile.mkstemp(prefix="beamalloc-upload-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            snap = read_file(tmp, procs=procs)
        except InputError as e:
            raise InputError(str(e).replace(tmp, label)) from None
        except (RecursionError, ValueError) as e:  # a reader's bug must not become a 500
            raise InputError(f"{label}: not a snapshot file ({type(e).__name__})") from None
    finally:
        os.unlink(tmp)
    if snap.source == "recon" and snap.node == os.path.basename(tmp):
        snap.node = label  # recon files do not name their node; the file name is the label
    return snap
