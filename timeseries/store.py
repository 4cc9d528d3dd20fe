"""The watch store: samples of many nodes over time in one SQLite file (docs/store.md).

Per sample two things are kept, sized so that a year of 1-minute samples of 10 nodes stays under
1 GB (tests/bench/bench_store.py measures the bytes per sample):

- the derived numbers (timeseries/series.py, one int per key): first as a row of `recent`, then,
  once a node has CHUNK of them, moved into one zlib-compressed, delta-encoded, column-wise
  `chunks` row; a series read touches only the chunks overlapping its range.
- the full Snapshot as a frame (timeseries/frames.py, schema 3): its shape (names, options) once
  in `shapes`, its numbers as one vector XORed with the node's current key snapshot's, its text
  (the rest, and `raw`) zstd-compressed against the key's text (a raw-content dictionary:
  consecutive snapshots share almost every byte); stores of schema 2 hold the whole JSON
  document instead, and read as before. A snapshot is kept for good every
  `keep_every` seconds (30 min), on a restart or after a gap, and when `allocated` moved by
  `keep_change` (25 %) since the last kept one, at most once per `keep_min_interval` (15 min):
  so a volatile node costs at most 96 kept snapshots a day. Between them, the node's latest
  snapshot is refreshed as a transient one (replacing the previous) every `latest_every` (60 s):
  splitting a snapshot into its frame still costs ~10 times a sample's numbers.
- one row of `last` per node (its last sample's numbers and the watcher's findings): what the
  nodes page reads.

Writes come from one thread (watch.py's writer) in batches (`batch()`: one transaction, a
savepoint per write); readers open their own Store, and SQLite's WAL lets them read while it
writes. After a crash or SIGKILL every committed sample is intact; the open batch is lost. The
schema carries a version in `meta` and is migrated on open.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import os
import sqlite3
import zlib
from array import array
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import zstandard

from beamalloc.errors import InputError
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries import blobs, frames, scans
from beamalloc.timeseries.series import Point, instance_usage

SCHEMA_VERSION = 3

#: Samples per chunk: large enough for zlib to find the repetition, small enough that a range
#: query or a prune wastes little decoding.
CHUNK = 360
#: Samples per rollup group: a series of at least ROLLUP samples per point reads the groups of
#: its chunks (12 a chunk, mean and max per key) instead of every sample: a node page over 28
#: days of 1-minute samples decodes 1,344 groups, not 40,320 samples.
ROLLUP = 30
ZSTD_LEVEL = 9
#: A transient snapshot lives until the node's next one: a fast level (a third of level 9's
#: time, ~35 % bigger).
TRANSIENT_LEVEL = 3
#: A new store's page size: a kept snapshot's row is ~1.5-3 KB (its frame and usage), and a
#: page holds whole rows: 4 KB pages left ~20 % of the snapshots' pages unused, 16 KB ~10 %
#: (tests/bench/bench_store.py prints the pages by table). Set when the file is created.
PAGE_SIZE = 16384
#: The first id of transient snapshots (a node's latest, replaced by its next): kept ones
#: are numbered below it (ids stay exact as JSON numbers in a browser: under 2**53).
TRANSIENT_IDS = 1 << 52
#: A new key snapshot when the current one is this old, or a delta exceeds half its size.
KEY_MAX_AGE_MS = 24 * 3600 * 1000

#: The zlib blobs' first bytes: three letters naming the kind and its format version as one
#: byte, then the zlib stream (timeseries/blobs.py: a blob written before tags is read as
#: format 1, its layout). A snapshot's frame has its own (frames.MAGIC), a process scan its
#: own (scans.SCAN_MAGIC).
ROLLUP_PREFIX = b"BAR"  # a chunk's rollup
CHUNK_PREFIX = b"BAC"  # a chunk's columns
USAGE_PREFIX = b"BAU"  # a kept snapshot's per-instance usage
SHAPE_PREFIX = b"BAS"  # a frame's shape (names, options), stored once for many snapshots
ROLLUP_VERSION = CHUNK_VERSION = USAGE_VERSION = SHAPE_VERSION = 1
ROLLUP_MAGIC = blobs.magic(ROLLUP_PREFIX, ROLLUP_VERSION)
CHUNK_MAGIC = blobs.magic(CHUNK_PREFIX, CHUNK_VERSION)
USAGE_MAGIC = blobs.magic(USAGE_PREFIX, USAGE_VERSION)
SHAPE_MAGIC = blobs.magic(SHAPE_PREFIX, SHAPE_VERSION)

# Migration N brings a store from version N-1 to N. auto_vacuum only takes effect before the
# first table exists, hence its place here.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "PRAGMA auto_vacuum = INCREMENTAL",
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE nodes (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
        # Derived numbers not yet chunked: JSON {key: int}; t is Unix time in ms everywhere.
        # (Rowid tables: their rows are ~1 KB, too large for WITHOUT ROWID to pay.)
        "CREATE TABLE recent (node_id INTEGER NOT NULL, t INTEGER NOT NULL, data BLOB NOT NULL,"
        " PRIMARY KEY (node_id, t))",
        "CREATE TABLE chunks (node_id INTEGER NOT NULL, t0 INTEGER NOT NULL,"
        " t1 INTEGER NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL,"
        " PRIMARY KEY (node_id, t0))",
        # base: NULL for a key snapshot, else the key this one is a zstd delta against.
        "CREATE TABLE snapshots (id INTEGER PRIMARY KEY, node_id INTEGER NOT NULL,"
        " t INTEGER NOT NULL, base INTEGER, kept INTEGER NOT NULL, data BLOB NOT NULL)",
        "CREATE INDEX snapshots_node_t ON snapshots (node_id, t)",
        "CREATE INDEX snapshots_base ON snapshots (base) WHERE base IS NOT NULL",
        # A period without samples: the node was down, unreachable or restarted (end NULL: open).
        "CREATE TABLE gaps (id INTEGER PRIMARY KEY, node_id INTEGER NOT NULL,"
        " start INTEGER NOT NULL, end INTEGER, reason TEXT NOT NULL)",
        "CREATE INDEX gaps_node_start ON gaps (node_id, start)",
    ],
    # The nodes page reads every node's last sample: one row per node, updated with each sample
    # (findings: what the watcher's rule evaluation said last, JSON {"findings", "lint"}).
    2: [
        "CREATE TABLE last (node_id INTEGER PRIMARY KEY, t INTEGER NOT NULL,"
        " point TEXT NOT NULL, findings TEXT)",
        "INSERT INTO last (node_id, t, point) SELECT node_id, max(t), data FROM recent"
        " GROUP BY node_id",
        # series.instance_usage of a kept snapshot (zlib JSON): a node page's per-instance
        # charts read it instead of decoding snapshots (NULL: transient, or schema 1).
        "ALTER TABLE snapshots ADD COLUMN usage TEXT",
    ],
    # Snapshots as frames (timeseries/frames.py): a row whose data starts with frames.PREFIX
    # names its shape here; rows written before (a zstd JSON document each) read as they did.
    3: [
        "CREATE TABLE shapes (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
        "ALTER TABLE snapshots ADD COLUMN shape INTEGER",
        # A chunk's samples reduced to groups of ROLLUP (encode_rollup): what a range of many
        # more samples than points reads instead of its chunks (a chunk of schema 2 has none:
        # it is reduced when read).
        "CREATE TABLE rollups (node_id INTEGER NOT NULL, t0 INTEGER NOT NULL,"
        " t1 INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (node_id, t0))",
        # What list_nodes counts and a series' range selects, without reading a chunk's row
        # (each a page or more: 4,000 nodes x 28 days are 448,000 of them).
        "CREATE INDEX chunks_span ON chunks (node_id, t0, t1, n)",
    ],
}
#: Seconds a writer holds a batch open before committing it (watch.py): a SIGKILL loses at most
#: the samples of the open batch; one commit per batch is what lets one writer follow a fleet.
BATCH_SECONDS = 1.0


class StoreError(InputError):
    """A store that cannot be opened or read (exit 2)."""


#: What a damaged or foreign store's rows raise when decoded: a row of another program's, a
#: blob cut short or of the wrong kind (text for a zstd frame), a missing base snapshot, a
#: schema version of "abc" or -1 (issue 25 item 10).
_DAMAGE = (sqlite3.DatabaseError, zstandard.ZstdError, zlib.error, ValueError, TypeError,
           KeyError, IndexError, AttributeError, OverflowError, RecursionError, MemoryError)
#: The largest decoded blob read: a snapshot's JSON (a +S 1024 node with 20,000 carriers is
#: some tens of MB), a chunk's or a row's JSON (a few kB). A 1 GB blob cost `diff` 2.1 GB.
MAX_SNAPSHOT_JSON = 128 << 20
MAX_ROW_JSON = 16 << 20
#: Sample times a store may hold, in ms: Unix 1970..9999 (units.unix_time's range).
MAX_T_MS = 253402300799 * 1000


def _reading(method: Any) -> Any:
    """A read of a damaged or foreign file is a StoreError (one line, exit code 2; a 400 page
    in the web UI), never a traceback: every row is decoded here, so anything its bytes raise
    is the file's fault, said with the store's path and the kind of damage, never its bytes."""

    @functools.wraps(method)
    def read(self: Store, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except frames.NewerFormat as e:
            raise StoreError(f"the store {self.path} holds {e}: upgrade beamalloc") from None
        except InputError as e:  # a stored snapshot out of range
            raise StoreError(f"the store {self.path} holds a bad snapshot: {e}") from None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot read the store {self.path}: {e}") from None
        except _DAMAGE as e:
            raise StoreError(f"the store {self.path} is damaged or not beamalloc's: a row it "
                             f"cannot decode ({type(e).__name__})") from None

    return read


def _inflate(blob: Any, limit: int = MAX_ROW_JSON) -> bytes:
    """zlib-decompress a row's blob, at most `limit` bytes (a bomb stops there)."""
    if not isinstance(blob, bytes):
        raise TypeError("a blob that is not bytes")
    z = zlib.decompressobj()
    out = z.decompress(blob, limit + 1)
    if len(out) > limit or not z.eof:
        raise ValueError("a blob larger than its limit, or cut short")
    return out


def _unzstd(blob: Any, dict_data: zstandard.ZstdCompressionDict | None = None) -> bytes:
    """A snapshot's zstd frame, refused before decoding when it says it is larger than
    MAX_SNAPSHOT_JSON (and stopped there when it does not say)."""
    if not isinstance(blob, bytes):
        raise TypeError("a blob that is not bytes")
    size = zstandard.frame_content_size(blob)
    if size > MAX_SNAPSHOT_JSON:
        raise ValueError("a snapshot larger than its limit")
    d = (zstandard.ZstdDecompressor(dict_data=dict_data) if dict_data is not None
         else zstandard.ZstdDecompressor())
    if size >= 0:
        return d.decompress(blob)
    return d.decompress(blob, max_output_size=MAX_SNAPSHOT_JSON)


def _point(v: Any) -> dict[str, Any]:
    """A stored sample's numbers: a JSON object of numbers (or null), else ValueError."""
    text = isinstance(v, str | bytes)
    doc = json.loads(v) if text else v
    if text and isinstance(doc, dict):  # a JSON object's keys are text: its values packed
        try:  # at C speed (the nodes page reads 4,000 of these)
            array("d", doc.values())
            return doc
        except (TypeError, OverflowError):
            pass
    if not isinstance(doc, dict) or not all(
            isinstance(k, str) and (x is None or type(x) in (int, float)) for k, x in doc.items()):
        raise ValueError("a sample that is not an object of numbers")
    return doc


def _text(v: Any) -> str:
    if not isinstance(v, str) or len(v) > 4096:
        raise ValueError("a text field that is not short text")
    return v


def _findings(v: Any) -> Any:
    doc = json.loads(v)
    if not isinstance(doc, list | dict):
        raise ValueError("findings that are not a list")
    return doc


def _t(t: Any) -> int:
    if type(t) is not int or not 0 <= t <= MAX_T_MS:
        raise ValueError("a time outside 1970..9999")
    return t


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "beamalloc" / "watch.db"


def _ms(t: float) -> int:
    return round(t * 1000)


# ---- chunk encoding: columns of deltas, JSON, zlib -----------------------------------------

def _deltas(values: list[int | None]) -> list[int | None]:
    out: list[int | None] = []
    prev = 0
    for v in values:
        if v is None:
            out.append(None)
        else:
            out.append(v - prev)
            prev = v
    return out


def _undelta(deltas: list[int | None]) -> list[int | None]:
    if None not in deltas:
        return list(itertools.accumulate(deltas))  # type: ignore[arg-type]
    out: list[int | None] = []
    prev = 0
    for d in deltas:
        if d is None:
            out.append(None)
        else:
            prev += d
            out.append(prev)
    return out


def _tagged(magic: bytes, doc: Any) -> bytes:
    """`doc` as compact JSON, zlib, behind its kind's tag (ROLLUP_MAGIC, CHUNK_MAGIC, ...)."""
    return blobs.pack(magic, json.dumps(doc, separators=(",", ":")).encode())


def _untagged(blob: Any, magic: bytes, what: str, limit: int = MAX_ROW_JSON) -> Any:
    """The JSON document of a blob `_tagged` wrote with `magic`, or of one written before
    tags (format 1); frames.NewerFormat for a newer format of the kind, ValueError for a tag
    with no format, so that a future layout is never read as this one (blobs.unpack)."""
    return json.loads(_inflate(blobs.unpack(blob, magic, what), limit))


def encode_chunk(ts: list[int], points: list[Point]) -> bytes:
    keys = sorted(set().union(*points))
    doc = {"k": keys, "t": _deltas(ts), "v": [_deltas([p.get(k) for p in points]) for k in keys]}
    return _tagged(CHUNK_MAGIC, doc)


def decode_chunk(blob: bytes, fields: Collection[str] | None = None
                 ) -> tuple[list[int], dict[str, list[int | None]]]:
    """A chunk's columns; ValueError or TypeError for one that is not what encode_chunk
    writes (Store's readers turn them into one StoreError); frames.NewerFormat for a newer
    format. A chunk without its tag (schemas 1-3 wrote none at first) is of format 1."""
    doc = _untagged(blob, CHUNK_MAGIC, "a chunk")
    ts = [_t(t) for t in _undelta(doc["t"])]
    cols = {k: _undelta(v) for k, v in zip(doc["k"], doc["v"], strict=True)  # type: ignore
            if fields is None or _wanted(k, fields)}
    if any(len(c) != len(ts) or not _ints(c, none=True)
           for c in cols.values()) or not all(isinstance(k, str) for k in cols):
        raise ValueError("a chunk whose columns are not numbers of its length")
    return ts, cols


def encode_rollup(ts: list[int], cols: dict[str, list[int | None]]) -> bytes:
    """A chunk's samples in groups of ROLLUP: per group its mean time and size, per key its
    mean (over the samples that have the key) and its maximum."""
    gt, gn, mean, peak = _groups(ts, cols)
    # delta-encoded as a chunk's columns: consecutive groups' means are close
    doc = {"k": list(mean), "t": _deltas(gt), "n": gn,  # type: ignore[arg-type]
           "mean": [_deltas(v) for v in mean.values()],
           "max": [_deltas(v) for v in peak.values()]}
    return _tagged(ROLLUP_MAGIC, doc)


def _groups(ts: list[int], cols: dict[str, list[int | None]]
            ) -> tuple[list[int], list[int], dict[str, list[int | None]],
                       dict[str, list[int | None]]]:
    """What encode_rollup stores, as decode_rollup returns it."""
    ranges = list(itertools.pairwise([*range(0, len(ts), ROLLUP), len(ts)]))
    mean: dict[str, list[int | None]] = {}
    peak: dict[str, list[int | None]] = {}
    for k, v in cols.items():
        if None not in v:  # the usual column
            mean[k] = [round(sum(v[a:z]) / (z - a)) for a, z in ranges]  # type: ignore
            peak[k] = [max(v[a:z]) for a, z in ranges]  # type: ignore[type-var]
            continue
        mk: list[int | None] = []
        pk: list[int | None] = []
        for a, z in ranges:
            vals = [x for x in v[a:z] if x is not None]
            mk.append(round(sum(vals) / len(vals)) if vals else None)
            pk.append(max(vals) if vals else None)
        mean[k], peak[k] = mk, pk
    return ([round(sum(ts[a:z]) / (z - a)) for a, z in ranges], [z - a for a, z in ranges],
            mean, peak)


def decode_rollup(blob: bytes, fields: Collection[str] | None = None
                  ) -> tuple[list[int], list[int], dict[str, list[int | None]],
                             dict[str, list[int | None]]]:
    """(group times, group sizes, means, maxima) of a rollup row; ValueError or TypeError for
    one that is not what encode_rollup writes; frames.NewerFormat for a newer format. A
    rollup without the version (schema 3 wrote none at first) is of format 1."""
    doc = _untagged(blob, ROLLUP_MAGIC, "a rollup")
    ts, ns = [_t(t) for t in _undelta(doc["t"])], doc["n"]
    mean, peak = {}, {}
    for k, m, p in zip(doc["k"], doc["mean"], doc["max"], strict=True):
        if fields is None or _wanted(k, fields):
            mean[k], peak[k] = _undelta(m), _undelta(p)
    if not (len(ns) == len(ts) and _ints(ns) and all(isinstance(k, str) for k in mean)
            and all(len(c) == len(ts) and _ints(c, none=True)
                    for c in (*mean.values(), *peak.values()))):
        raise ValueError("a rollup whose columns are not numbers of its length")
    return ts, ns, mean, peak


def _ints(col: list[Any], none: bool = False) -> bool:
    """Every element an int (or None, with `none`): packed at C speed for the usual column
    (a JSON true in a damaged row passes as 1, harmless to every sum)."""
    try:
        array("q", col)
        return True
    except (TypeError, OverflowError):
        return all((none and x is None) or type(x) is int for x in col)


def _wanted(key: str, fields: Collection[str]) -> bool:
    return key in fields or key.partition(".")[2] in fields


# ---- snapshot compression ------------------------------------------------------------------

@lru_cache(maxsize=256)
def _dict(key_json: bytes, level: int = ZSTD_LEVEL) -> zstandard.ZstdCompressionDict:
    d = zstandard.ZstdCompressionDict(key_json, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    d.precompute_compress(level=level)
    return d


@dataclass
class _NodeState:
    """What the writer needs per node; rebuilt from the tables when a store is reopened."""

    id: int
    recent: int = 0
    key_id: int | None = None
    key_t: int = 0
    #: The key's text, the dictionary its deltas are compressed against: a frame's text, or
    #: (a key written by schema 2) the whole JSON document.
    key_text: bytes = b""
    key_size: int = 0
    #: A frame key's numbers and shape (None: the key is a JSON document, no frame deltas it).
    key_values: bytes | None = None
    key_shape: frames.Shape | None = None
    key_shape_id: int | None = None
    transient: int | None = None  # the previous sample's snapshot, replaced by the next one
    snap_t: int = 0  # time of its latest stored snapshot (kept or transient)
    kept_t: int | None = None
    kept_alloc: int = 0
    kept_pid: int | None = None


class Store:
    """One SQLite file. Write from a single thread; open one Store per reading thread."""

    def __init__(self, path: str | os.PathLike[str] | None = None, readonly: bool = False,
                 keep_every: float = 1800.0, keep_change: float = 0.25,
                 keep_min_interval: float = 900.0, latest_every: float = 60.0) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.keep_every_ms = _ms(keep_every)
        self.latest_every_ms = _ms(latest_every)
        self._batch = False
        self.keep_change = keep_change
        self.keep_min_ms = _ms(keep_min_interval)
        self._state: dict[str, _NodeState] = {}
        self._shapes: dict[int, frames.Shape] = {}
        self._shape_ids: dict[frames.Shape, int] = {}  # the writer's: shape -> its row
        #: The highest id below TRANSIENT_IDS before the writer's first snapshot: a transient
        #: of a store of before (numbered among the kept) may have been it (_insert_snapshot)
        self._kept_top: int | None = None
        try:
            if readonly:
                if not self.path.exists():
                    raise StoreError(f"no store at {self.path}")
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                          isolation_level=None, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, isolation_level=None,
                                          check_same_thread=False)
                if self.db.execute("PRAGMA page_count").fetchone()[0] == 0:
                    # A new file's page size and auto_vacuum: both fixed by its first page,
                    # which WAL mode writes already (on an existing file, a write: never).
                    self.db.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                    self.db.execute(MIGRATIONS[1][0])
                self.db.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL: a killed process loses nothing committed (only power loss can
                # drop the last transactions), at a fraction of FULL's fsyncs.
                self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("PRAGMA busy_timeout = 10000")
            self._migrate(readonly)
            scans.setup(self.db, readonly)  # its own table (timeseries/scans.py)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open the store {self.path}: {e}") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- schema --------------------------------------------------------------------------

    def version(self) -> int:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError:  # no meta table: a new, empty file
            return 0
        if not row:
            return 0
        v = row[0]
        if not (isinstance(v, str | int) and str(v).isdigit() and 0 <= int(v) < 1 << 31):
            raise StoreError(f"{self.path} has a schema version that is not a number beamalloc "
                             "writes: not a beamalloc store, or a damaged one")
        return int(v)

    def _migrate(self, readonly: bool) -> None:
        have = self.version()
        if have > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has store schema {have}; this beamalloc reads up to "
                             f"{SCHEMA_VERSION} (upgrade beamalloc)")
        if have == SCHEMA_VERSION:
            return
        if readonly:
            raise StoreError(f"{self.path} has store schema {have}, needs migrating to "
                             f"{SCHEMA_VERSION}: open it once read-write (beamalloc watch)")
        if have == 0:  # before any table: PRAGMA auto_vacuum cannot run inside a transaction
            self.db.execute(MIGRATIONS[1][0])
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for v in range(have + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS[v]:
                    if not stmt.startswith("PRAGMA"):
                        self.db.execute(stmt)
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                                (str(v),))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # ---- writing -------------------------------------------------------------------------

    def _node(self, name: str) -> _NodeState:
        st = self._state.get(name)
        if st is not None:
            return st
        self.db.execute("INSERT OR IGNORE INTO nodes (name) VALUES (?)", (name,))
        (nid,) = self.db.execute("SELECT id FROM nodes WHERE name = ?", (name,)).fetchone()
        st = _NodeState(nid)
        self._node_state(st)
        self._state[name] = st
        return st

    @_reading
    def _node_state(self, st: _NodeState) -> None:
        """The writer's state of a node, read from its rows: through `_reading` so a row the
        writer cannot decode (a newer format's shape or frame, a damaged key) is one
        StoreError line, as on every read, not a traceback from `watch`'s writer."""
        nid = st.id
        st.recent = self.db.execute("SELECT count(*) FROM recent WHERE node_id = ?",
                                    (nid,)).fetchone()[0]
        key = self.db.execute("SELECT id, t, data, shape FROM snapshots WHERE node_id = ? AND "
                              "base IS NULL ORDER BY t DESC LIMIT 1", (nid,)).fetchone()
        if key:
            st.key_id, st.key_t, st.key_size = key[0], key[1], len(key[2])
            if _is_frame(key[2]):
                st.key_text, st.key_values = self._key_parts(key[2])
                st.key_shape, st.key_shape_id = self._shape(key[3]), key[3]
            else:
                st.key_text = _unzstd(key[2])
        kept = self.db.execute("SELECT id, t FROM snapshots WHERE node_id = ? AND kept = 1 "
                               "ORDER BY t DESC LIMIT 1", (nid,)).fetchone()
        if kept:
            st.kept_t = kept[1]
            snap = self.snapshot(kept[0])
            st.kept_alloc, st.kept_pid = _alloc_pid(snap)
        tr = self.db.execute("SELECT id FROM snapshots WHERE node_id = ? AND kept = 0 "
                             "ORDER BY t DESC LIMIT 1", (nid,)).fetchone()
        st.transient = tr[0] if tr else None
        st.snap_t = self.db.execute("SELECT coalesce(max(t), 0) FROM snapshots WHERE node_id = ?",
                                    (nid,)).fetchone()[0]

    def _keep(self, st: _NodeState, t: int, point: Point, force: bool) -> bool:
        if force or st.kept_t is None or t - st.kept_t >= self.keep_every_ms:
            return True
        if point.get("pid") is not None and point.get("pid") != st.kept_pid:
            return True
        moved = abs(point.get("allocated", 0) - st.kept_alloc)
        return (t - st.kept_t >= self.keep_min_ms
                and moved >= self.keep_change * max(st.kept_alloc, 1))

    def add_sample(self, snap: Snapshot, point: Point, force_keep: bool = False,
                   findings: dict[str, Any] | None = None) -> int | None:
        """Store one sample (one transaction, or a savepoint of the open batch); returns the id
        of its snapshot, or None when the snapshot was not stored.

        The derived numbers are kept for every sample. The snapshot is stored when kept (the
        keep policy), or as the node's transient latest when the previous one is `latest_every`
        old: splitting a snapshot into its frame costs ~10 times a point (docs/store.md,
        "Writing"); a snapshot that starts a new key (its shape changed) is kept.
        `findings` ({"findings": [...], "lint": [...]}, series.active_findings) is the rule
        evaluation of this sample, shown by the nodes page; None keeps the previous one.
        """
        if snap.taken_at is None:
            raise StoreError("a sample needs the snapshot's time")
        t = _ms(snap.taken_at)
        with self._tx():
            st = self._node(snap.node)
            keep = self._keep(st, t, point, force_keep)
            self._put_point(st, t, point, findings)
            sid = None
            if keep or st.key_id is None or t - st.snap_t >= self.latest_every_ms:
                sid, keep = self._put_snapshot(st, t, snap, keep)
            if keep:
                st.kept_t, st.kept_alloc = t, point.get("allocated", 0)
                st.kept_pid = point.get("pid")
        return sid

    def add_points(self, node: str, points: list[tuple[float, Point]]) -> None:
        """Derived numbers without their snapshots, in one transaction (imports, benches)."""
        with self._tx():
            st = self._node(node)
            for t, p in points:
                self._put_point(st, _ms(t), p)

    def _put_point(self, st: _NodeState, t: int, point: Point,
                   findings: dict[str, Any] | None = None) -> None:
        data = json.dumps(point, separators=(",", ":"))
        self.db.execute("INSERT OR REPLACE INTO recent VALUES (?, ?, ?)", (st.id, t, data))
        self.db.execute(
            "INSERT INTO last VALUES (?, ?, ?, ?) ON CONFLICT (node_id) DO UPDATE SET "
            "t = excluded.t, point = excluded.point, findings = coalesce(excluded.findings, "
            "last.findings) WHERE excluded.t >= last.t",
            (st.id, t, data, None if findings is None else json.dumps(findings)))
        st.recent += 1
        if st.recent >= CHUNK:
            self._compact(st)

    def _put_snapshot(self, st: _NodeState, t: int, snap: Snapshot, keep: bool
                      ) -> tuple[int, bool]:
        """Store a snapshot as a frame: a delta against the node's key when it has the key's
        shape, else a new key (kept: deltas will need it). Returns its id and whether kept."""
        frame = frames.split(snap)
        if frame is None:  # numbers past a machine word: the JSON document, as schema 2
            return self._put_document(st, t, snap)
        n = len(frame.values) // 8
        base: int | None = None
        blob = b""
        same = st.key_values is not None and st.key_shape == frame.shape
        shape_id = st.key_shape_id
        if st.key_values is not None:
            level = ZSTD_LEVEL if keep else TRANSIENT_LEVEL
            text_z = zstandard.ZstdCompressor(level=level, dict_data=_dict(st.key_text, level)
                                              ).compress(frame.text)
            if same and len(frame.values) == len(st.key_values):
                values_z = zstandard.ZstdCompressor(level=level).compress(
                    frames.planes(frames.xor(frame.values, st.key_values)))
            else:  # another shape (an instance's block types came or went): its own shape,
                # its numbers compressed against the key's (most of them are still there)
                try:
                    shape_id = self._put_shape(frame.shape)
                except (TypeError, ValueError):  # an option JSON cannot write
                    return self._put_document(st, t, snap)
                values_z = zstandard.ZstdCompressor(
                    level=level, dict_data=_dict(frames.planes(st.key_values), level)
                ).compress(frames.planes(frame.values))
            blob = frames.pack(text_z, values_z, n, frame.raw_none, xored=same)
            base = st.key_id
            if keep and (t - st.key_t >= KEY_MAX_AGE_MS or len(blob) > st.key_size // 2):
                base = None
        if base is None:
            keep = True  # a key: the deltas after it are decoded against it
            if not same:
                try:
                    shape_id = self._put_shape(frame.shape)
                except (TypeError, ValueError):  # an option JSON cannot write
                    return self._put_document(st, t, snap)
            blob = frames.pack(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(frame.text),
                               zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(
                                   frames.planes(frame.values)), n, frame.raw_none)
        sid = self._insert_snapshot(st, t, base, keep, blob, shape_id,
                                    _usage_blob(snap) if keep else None)
        if base is None:
            st.key_id, st.key_t, st.key_text, st.key_size = sid, t, frame.text, len(blob)
            st.key_values, st.key_shape, st.key_shape_id = frame.values, frame.shape, shape_id
        return sid, keep

    def _put_document(self, st: _NodeState, t: int, snap: Snapshot) -> tuple[int, bool]:
        """A snapshot no frame holds, as schema 2 stored every one: its JSON document, zstd,
        a key of its own (kept)."""
        raw = snap.to_json().encode()
        blob = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)
        sid = self._insert_snapshot(st, t, None, True, blob, None, _usage_blob(snap))
        st.key_id, st.key_t, st.key_text, st.key_size = sid, t, raw, len(blob)
        st.key_values = st.key_shape = st.key_shape_id = None
        return sid, True

    def _put_shape(self, shape: frames.Shape) -> int:
        """The id of this shape, stored once: a fleet's nodes of one release and flags share
        theirs (looked up by its bytes: a store holds a few shapes, not one per node)."""
        sid = self._shape_ids.get(shape)
        if sid is not None:
            return sid
        # tagged (written before tags: the zlib stream alone, which `_shape` reads as format 1,
        # and which this lookup does not find: such a shape is stored once more, tagged)
        data = blobs.pack(SHAPE_MAGIC, frames.shape_json(shape))
        row = self.db.execute("SELECT id FROM shapes WHERE data = ?", (data,)).fetchone()
        sid = int(row[0]) if row else int(
            self.db.execute("INSERT INTO shapes (data) VALUES (?)", (data,)).lastrowid or 0)
        if len(self._shape_ids) >= 64:
            self._shape_ids.clear()
        self._shape_ids[shape] = sid
        return sid

    def _insert_snapshot(self, st: _NodeState, t: int, base: int | None, keep: bool,
                         blob: bytes, shape: int | None, usage: bytes | None) -> int:
        # Kept rows are numbered below TRANSIENT_IDS, transient ones above it. SQLite appends
        # rows in rowid order to a table's last page, and a new page leaves the last one as
        # it is: a transient deleted after that stayed a hole among the kept rows (43 % of
        # the snapshots' pages unused in bench_store's year, 19 % apart, 14 % at 16 KB pages).
        lo, hi = (0, TRANSIENT_IDS) if keep else (TRANSIENT_IDS, 1 << 62)
        q = "SELECT coalesce(max(id), ?) FROM snapshots WHERE id >= ? AND id < ?"
        if self._kept_top is None:
            (self._kept_top,) = self.db.execute(q, (0, 0, TRANSIENT_IDS)).fetchone()
        (top,) = self.db.execute(q, (lo, lo, hi)).fetchone()
        # a store of before numbered its transients among the kept: never one of their ids
        sid = (max(top, self._kept_top) if keep else top) + 1
        self.db.execute("INSERT INTO snapshots (id, node_id, t, base, kept, data, usage, shape)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (sid, st.id, t, base, int(keep), blob, usage, shape))
        if st.transient is not None:
            self.db.execute("DELETE FROM snapshots WHERE id = ? AND kept = 0", (st.transient,))
        st.transient = None if keep else sid
        st.snap_t = t
        return sid

    def _compact(self, st: _NodeState) -> None:
        rows = self.db.execute("SELECT t, data FROM recent WHERE node_id = ? ORDER BY t",
                               (st.id,)).fetchall()
        ts = [r[0] for r in rows]
        points = [json.loads(r[1]) for r in rows]
        blob = encode_chunk(ts, points)
        self.db.execute("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)",
                        (st.id, ts[0], ts[-1], len(ts), blob))
        keys = sorted(set().union(*points))
        self.db.execute("INSERT OR REPLACE INTO rollups VALUES (?, ?, ?, ?)",
                        (st.id, ts[0], ts[-1],
                         encode_rollup(ts, {k: [p.get(k) for p in points] for k in keys})))
        self.db.execute("DELETE FROM recent WHERE node_id = ?", (st.id,))
        st.recent = 0

    def open_gap(self, node: str, start: float, reason: str) -> None:
        """`node` stopped answering after `start` (its last good sample); no-op if already open."""
        with self._tx():
            st = self._node(node)
            if not self.db.execute("SELECT 1 FROM gaps WHERE node_id = ? AND end IS NULL",
                                   (st.id,)).fetchone():
                self.db.execute("INSERT INTO gaps (node_id, start, end, reason) "
                                "VALUES (?, ?, NULL, ?)", (st.id, _ms(start), reason))

    def close_gap(self, node: str, end: float, reason: str | None = None) -> None:
        with self._tx():
            st = self._node(node)
            self.db.execute("UPDATE gaps SET end = ?, reason = coalesce(?, reason) "
                            "WHERE node_id = ? AND end IS NULL", (_ms(end), reason, st.id))

    def add_gap(self, node: str, start: float, end: float, reason: str) -> None:
        """A closed gap, e.g. a restart seen only as a new OS pid between two samples."""
        with self._tx():
            st = self._node(node)
            self.db.execute("INSERT INTO gaps (node_id, start, end, reason) VALUES (?, ?, ?, ?)",
                            (st.id, _ms(start), _ms(end), reason))

    def prune(self, before: float) -> dict[str, int]:
        """Delete what is older than `before` (Unix s); chunks go whole, once entirely older."""
        cut = _ms(before)
        with self._tx():
            n = {
                "chunks": self.db.execute("DELETE FROM chunks WHERE t1 < ?", (cut,)).rowcount,
                "rollups": self.db.execute("DELETE FROM rollups WHERE t1 < ?", (cut,)).rowcount,
                "recent": self.db.execute("DELETE FROM recent WHERE t < ?", (cut,)).rowcount,
                "gaps": self.db.execute("DELETE FROM gaps WHERE end < ?", (cut,)).rowcount,
                "snapshots": self.db.execute("DELETE FROM snapshots WHERE t < ? AND base IS NOT "
                                             "NULL", (cut,)).rowcount,
            }
            # Then the old keys, but a key stays while a newer snapshot is a delta against it.
            n["snapshots"] += self.db.execute(
                "DELETE FROM snapshots WHERE t < ? AND base IS NULL AND NOT EXISTS "
                "(SELECT 1 FROM snapshots d WHERE d.base = snapshots.id)", (cut,)).rowcount
            self.db.execute("DELETE FROM shapes WHERE id NOT IN (SELECT shape FROM snapshots "
                            "WHERE shape IS NOT NULL)")
        self._state.clear()
        self._shape_ids.clear()
        self.db.execute("PRAGMA incremental_vacuum")
        return n

    def _tx(self) -> _Tx:
        return _Tx(self)

    def batch(self) -> _Batch:
        """One transaction around many writes (`with st.batch(): ...`): each write inside is a
        savepoint, so a failing one is undone alone; nothing is committed before the end."""
        return _Batch(self)

    # ---- reading (the API the web UI uses, docs/store.md) --------------------------------

    def _node_id(self, node: str) -> int | None:
        row = self.db.execute("SELECT id FROM nodes WHERE name = ?", (node,)).fetchone()
        return row[0] if row else None

    @_reading
    def list_nodes(self, only: str | None = None, findings: bool = True,
                   point_keys: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Every node: number of samples, first and last sample time, open gap, its last
        sample's derived numbers (`point`), the watcher's last rule evaluation (`findings`,
        or None) and its latest stored snapshot's id. A few grouped queries, whatever the
        number of nodes (the nodes page reads it on every view). `only`: that node alone;
        `findings=False`: every node's `findings` None, not decoded (the nodes page shows none);
        `point_keys`: `point` holds only these node-wide keys, read by SQLite from the stored
        JSON (a point is ~2 kB: decoding 4,000 of them in Python was most of a cold nodes
        page, issue 28 item 5); `last_points` gives the whole ones of the rows shown."""
        db = self.db
        nid_only = self._node_id(only) if only is not None else None
        if only is not None and nid_only is None:
            return []
        w, args = ("WHERE node_id = ?", (nid_only,)) if only is not None else ("", ())
        counts: dict[int, list[Any]] = {}
        for nid, n, lo, hi in db.execute("SELECT node_id, sum(n), min(t0), max(t1) FROM chunks "
                                         f"{w} GROUP BY node_id", args):
            counts[nid] = [n, lo, hi]
        for nid, n, lo, hi in db.execute("SELECT node_id, count(*), min(t), max(t) FROM recent "
                                         f"{w} GROUP BY node_id", args):
            c = counts.setdefault(nid, [0, lo, hi])
            c[0] += n
            c[1], c[2] = min(c[1], lo), max(c[2], hi)
        gaps = {nid: (start, reason) for nid, start, reason in db.execute(
            "SELECT node_id, start, reason FROM gaps WHERE end IS NULL"
            + (" AND node_id = ?" if w else ""), args)}
        keys = list(point_keys) if point_keys is not None else None
        cols = "point"
        if keys is not None:  # a node-wide key is a word: never SQL
            if not all(k.isidentifier() for k in keys):
                raise TypeError(f"point keys that are not node-wide keys: {keys}")
            cols = "json_array(" + ", ".join(f"json_extract(point, '$.{k}')" for k in keys) + ")"
        last = {nid: (t, point, findings) for nid, t, point, findings in db.execute(
            f"SELECT node_id, t, {cols}, findings FROM last {w}", args)}
        snaps = {nid: sid for nid, sid, _ in db.execute(
            f"SELECT node_id, id, max(t) FROM snapshots {w} GROUP BY node_id", args)}
        out = []
        names = db.execute("SELECT id, name FROM nodes " + ("WHERE id = ? " if w else "")
                           + "ORDER BY name", args).fetchall()
        for nid, name in names:
            n, lo, hi = counts.get(nid, (0, None, None))
            gap = gaps.get(nid)
            row = last.get(nid)
            point = None
            if row and row[0] == hi:
                point = (_point(row[1]) if keys is None else _point(
                    {k: v for k, v in zip(keys, json.loads(row[1]), strict=True)
                     if v is not None}))
            if point is None and hi is not None:  # a store of schema 1: from the series
                s = self.series(name, hi / 1000, hi / 1000, max_points=None)
                point = {k: v[-1] for k, v in s["columns"].items() if v and v[-1] is not None}
            out.append({
                "node": name,
                "samples": n,
                "first": _t(lo) / 1000 if lo is not None else None,
                "last": _t(hi) / 1000 if hi is not None else None,
                "down_since": _t(gap[0]) / 1000 if gap else None,
                "down_reason": gap[1] if gap else None,
                "point": point,
                "findings": _findings(row[2]) if findings and row and row[2] else None,
                "latest_snapshot": snaps.get(nid),
            })
        return out

    @_reading
    def last_points(self, nodes: Collection[str]) -> dict[str, dict[str, Any]]:
        """The whole last point of each node named that has one (`list_nodes(point_keys=...)`
        read only a few of its keys)."""
        names = list(dict.fromkeys(nodes))
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(names), 500):  # SQLite's bound on a statement's parameters
            part = names[i:i + 500]
            for name, point in self.db.execute(
                    "SELECT n.name, l.point FROM last l JOIN nodes n ON n.id = l.node_id "
                    f"WHERE n.name IN ({', '.join('?' * len(part))})", part):
                out[name] = _point(point)
        return out

    @_reading
    def series(self, node: str, start: float | None = None, end: float | None = None,
               max_points: int | None = 1000, fields: Collection[str] | None = None
               ) -> dict[str, Any]:
        """The derived numbers of `node` in [start, end], as columns (`fields`: only the keys
        named, node-wide or per type: "used" keeps `used` and every `<type>.used`).

        Returns {"node", "t": [Unix s], "columns": {key: [int | None]}, "downsampled": bool,
        "max": {key: [int | None]} | None, "gaps": [...]}. Over max_points samples, the range is
        cut into max_points equal time buckets: `columns` then holds each bucket's mean (so
        ratios computed from them are time-weighted), `max` its maximum (peaks stay visible),
        and `t` the mean time of the bucket's samples.
        """
        nid = self._node_id(node)
        if nid is None:
            raise StoreError(f"no node {node!r} in {self.path}")
        lo = _ms(start) if start is not None else -(2**62)
        hi = _ms(end) if end is not None else 2**62
        if max_points is not None and max_points > 0:
            (n,) = self.db.execute(
                "SELECT coalesce(sum(n), 0) + (SELECT count(*) FROM recent WHERE node_id = ?1 "
                "AND t BETWEEN ?2 AND ?3) FROM chunks WHERE node_id = ?1 AND t1 >= ?2 AND "
                "t0 <= ?3", (nid, lo, hi)).fetchone()
            if n >= ROLLUP * max_points:
                out = {"node": node, "downsampled": True, "gaps": self.gaps(node, start, end)}
                out.update(self._coarse(nid, lo, hi, max_points, fields))
                return out
        ts: list[int] = []
        cols: dict[str, list[int | None]] = {}

        def append(t_part: list[int], c_part: dict[str, list[int | None]]) -> None:
            keep = [i for i, t in enumerate(t_part) if lo <= t <= hi]
            if not keep:
                return
            if fields is not None:
                c_part = {k: v for k, v in c_part.items() if _wanted(k, fields)}
            whole = len(keep) == len(t_part)
            for k in set(cols) - set(c_part):
                cols[k].extend([None] * len(keep))
            for k, v in c_part.items():
                if k not in cols:
                    cols[k] = [None] * len(ts)
                cols[k].extend(v if whole else [v[i] for i in keep])
            ts.extend(t_part if whole else [t_part[i] for i in keep])

        for (blob,) in self.db.execute("SELECT data FROM chunks WHERE node_id = ? AND t1 >= ? "
                                       "AND t0 <= ? ORDER BY t0", (nid, lo, hi)):
            append(*decode_chunk(blob, fields))
        rows = self.db.execute("SELECT t, data FROM recent WHERE node_id = ? AND t BETWEEN ? "
                               "AND ? ORDER BY t", (nid, lo, hi)).fetchall()
        if rows:
            pts = [_point(r[1]) for r in rows]
            for r in rows:
                _t(r[0])
            keys = set().union(*pts)
            append([r[0] for r in rows], {k: [p.get(k) for p in pts] for k in keys})
        out: dict[str, Any] = {"node": node, "downsampled": False, "max": None,
                               "gaps": self.gaps(node, start, end)}
        if max_points is not None and len(ts) > max_points > 0:
            out.update(_downsample(ts, cols, max_points), downsampled=True)
        else:
            out.update(t=[t / 1000 for t in ts], columns=cols)
        return out

    def _coarse(self, nid: int, lo: int, hi: int, max_points: int,
                fields: Collection[str] | None) -> dict[str, Any]:
        """series() of a range with ROLLUP samples or more per point: from the rollups of its
        chunks (a chunk without one, written by schema 2, is reduced here), the unchunked rows
        as groups of one; then the groups in max_points time buckets, weighted by their sizes.
        The groups at the range's ends count whole when their mean time is inside it."""
        ts: list[int] = []
        ns: list[int] = []
        mean: dict[str, list[int | None]] = {}
        peak: dict[str, list[int | None]] = {}

        def add(g_t: list[int], g_n: list[int], g_mean: dict[str, list[int | None]],
                g_max: dict[str, list[int | None]]) -> None:
            keep = [i for i, t in enumerate(g_t) if lo <= t <= hi]
            if not keep:
                return
            for k in set(mean) - set(g_mean):
                mean[k].extend([None] * len(keep))
                peak[k].extend([None] * len(keep))
            for k, v in g_mean.items():
                if k not in mean:
                    mean[k], peak[k] = [None] * len(ts), [None] * len(ts)
                mean[k].extend(v[i] for i in keep)
                peak[k].extend(g_max[k][i] for i in keep)
            ts.extend(g_t[i] for i in keep)
            ns.extend(g_n[i] for i in keep)

        for rollup, chunk in self.db.execute(
                "SELECT r.data, CASE WHEN r.data IS NULL THEN c.data END FROM chunks c "
                "LEFT JOIN rollups r ON r.node_id = c.node_id AND r.t0 = c.t0 "
                "WHERE c.node_id = ? AND c.t1 >= ? AND c.t0 <= ? ORDER BY c.t0", (nid, lo, hi)):
            if rollup is None:  # a chunk of schema 2
                add(*_groups(*decode_chunk(chunk, fields)))
            else:
                add(*decode_rollup(rollup, fields))
        rows = self.db.execute("SELECT t, data FROM recent WHERE node_id = ? AND t BETWEEN ? "
                               "AND ? ORDER BY t", (nid, lo, hi)).fetchall()
        if rows:
            pts = [_point(r[1]) for r in rows]
            keys = [k for k in set().union(*pts) if fields is None or _wanted(k, fields)]
            cols = {k: [p.get(k) for p in pts] for k in keys}
            add([_t(r[0]) for r in rows], [1] * len(rows), cols, cols)
        if not ts:
            return {"t": [], "columns": {}, "max": {}}
        return _downsample_groups(ts, ns, mean, peak, max_points)

    @_reading
    def gaps(self, node: str, start: float | None = None,
             end: float | None = None) -> list[dict[str, Any]]:
        nid = self._node_id(node)
        lo = _ms(start) if start is not None else -(2**62)
        hi = _ms(end) if end is not None else 2**62
        rows = self.db.execute("SELECT start, end, reason FROM gaps WHERE node_id = ? AND "
                               "start <= ? AND coalesce(end, ?) >= ? ORDER BY start",
                               (nid, hi, 2**62, lo)).fetchall()
        return [{"start": _t(s) / 1000, "end": None if e is None else _t(e) / 1000,
                 "reason": _text(r)} for s, e, r in rows]

    @_reading
    def snapshots(self, node: str, start: float | None = None,
                  end: float | None = None) -> list[dict[str, Any]]:
        """The stored snapshots of `node` (kept ones and the latest): id, time, kept."""
        nid = self._node_id(node)
        lo = _ms(start) if start is not None else -(2**62)
        hi = _ms(end) if end is not None else 2**62
        rows = self.db.execute("SELECT id, t, kept FROM snapshots WHERE node_id = ? AND t "
                               "BETWEEN ? AND ? ORDER BY t", (nid, lo, hi)).fetchall()
        return [{"id": i, "t": _t(t) / 1000, "kept": bool(k)} for i, t, k in rows]

    @_reading
    def before(self, node: str, t: float) -> int | None:
        """The id of `node`'s last stored snapshot strictly before `t` (one indexed row, not
        the node's whole list: a watched node has one per 30 minutes for as long as kept)."""
        nid = self._node_id(node)
        row = self.db.execute("SELECT id FROM snapshots WHERE node_id = ? AND t < ? "
                              "ORDER BY t DESC LIMIT 1", (nid, _ms(t))).fetchone()
        return int(row[0]) if row else None

    @_reading
    def instance_usage(self, ids: list[int]) -> dict[int, dict[str, Any]]:
        """series.instance_usage of these snapshots, as stored with them (absent: not stored,
        or stored by schema 1)."""
        out: dict[int, dict[str, Any]] = {}
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            q = ",".join("?" * len(part))
            for sid, usage in self.db.execute(f"SELECT id, usage FROM snapshots WHERE id IN ({q})"
                                              " AND usage IS NOT NULL", part):
                doc = _untagged(usage, USAGE_MAGIC, "a usage row")
                if not isinstance(doc, dict):
                    raise ValueError("a usage row that is not an object")
                out[sid] = doc
        return out

    @_reading
    def snapshot(self, sid: int) -> Snapshot:
        """The snapshot with this id, exactly as it was collected."""
        row = self.db.execute("SELECT base, data, shape FROM snapshots WHERE id = ?",
                              (sid,)).fetchone()
        if row is None:
            raise StoreError(f"no snapshot {sid} in {self.path}")
        base, blob, shape = row
        key = None
        if base is not None:
            key = self.db.execute("SELECT data FROM snapshots WHERE id = ?", (base,)).fetchone()
            if key is None:
                raise StoreError(f"the store {self.path} is damaged: snapshot {sid}'s base "
                                 "snapshot is missing")
        if _is_frame(blob):
            text_z, values_z, n, raw_none, xored = frames.unpack(blob)
            if key is None:
                text, values = _unzstd(text_z), frames.unplanes(_unzstd(values_z))
            else:
                key_text, key_values = self._key_parts(key[0])
                text = _unzstd(text_z, _dict(key_text))
                if xored:
                    values = frames.unplanes(_unzstd(values_z))
                    if len(values) != len(key_values):
                        raise ValueError("a delta whose numbers are not its key's")
                    values = frames.xor(values, key_values)
                else:
                    values = frames.unplanes(_unzstd(values_z,
                                                     _dict(frames.planes(key_values))))
            if len(values) != 8 * n:
                raise ValueError("a frame whose numbers are not as many as it says")
            return frames.join(self._shape(shape), values, text, raw_none)
        raw = _unzstd(blob) if key is None else _unzstd(blob, _dict(_unzstd(key[0])))
        return Snapshot.from_json(raw.decode())

    def _key_parts(self, blob: Any) -> tuple[bytes, bytes]:
        """A key frame's text and numbers: what its deltas are decoded against."""
        text_z, values_z, n, _, _ = frames.unpack(blob)
        values = frames.unplanes(_unzstd(values_z))
        if len(values) != 8 * n:
            raise ValueError("a frame whose numbers are not as many as it says")
        return _unzstd(text_z), values

    def _shape(self, shape_id: Any) -> frames.Shape:
        """A stored shape (immutable: cached per Store)."""
        shape = self._shapes.get(shape_id)
        if shape is None:
            row = self.db.execute("SELECT data FROM shapes WHERE id = ?", (shape_id,)).fetchone()
            if row is None:
                raise StoreError(f"the store {self.path} is damaged: a snapshot's shape is "
                                 "missing")
            shape = frames.shape_from_json(_inflate(blobs.unpack(row[0], SHAPE_MAGIC,
                                                                 "a snapshot's shape")))
            if len(self._shapes) >= 64:
                self._shapes.clear()
            self._shapes[shape_id] = shape
        return shape

    @_reading
    def latest(self, node: str) -> Snapshot | None:
        nid = self._node_id(node)
        row = self.db.execute("SELECT id FROM snapshots WHERE node_id = ? ORDER BY t DESC "
                              "LIMIT 1", (nid,)).fetchone()
        return self.snapshot(row[0]) if row else None

    def size(self) -> int:
        """Bytes the store takes in its file (pages in use, WAL not counted)."""
        pages = self.db.execute("PRAGMA page_count").fetchone()[0]
        free = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * self.db.execute("PRAGMA page_size").fetchone()[0]


class _Tx:
    """A write: its own transaction, or a savepoint inside an open batch."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store.db.execute("SAVEPOINT w" if self.store._batch else "BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        db = self.store.db
        if exc_type is None:
            db.execute("RELEASE w" if self.store._batch else "COMMIT")
        else:
            db.execute("ROLLBACK TO w" if self.store._batch else "ROLLBACK")
            if self.store._batch:
                db.execute("RELEASE w")
            self.store._state.clear()  # the cached per-node state may be ahead of the tables
            self.store._shape_ids.clear()


class _Batch:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store.db.execute("BEGIN IMMEDIATE")
        self.store._batch = True

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.store._batch = False
        if exc_type is not None:
            self._undo()
            return
        try:
            self.store.db.execute("COMMIT")
        except BaseException:
            self._undo()
            raise

    def _undo(self) -> None:
        if self.store.db.in_transaction:
            self.store.db.execute("ROLLBACK")
        self.store._state.clear()
        self.store._shape_ids.clear()


def _is_frame(blob: Any) -> bool:
    """A frame of any format version (frames.unpack refuses one it does not read)."""
    return isinstance(blob, bytes) and blob.startswith(frames.PREFIX)


def _usage_blob(snap: Snapshot) -> bytes:
    """series.instance_usage, usage to 0.1 %, zlib: ~300 B for 28 instances (a kept snapshot's
    delta is ~1.2 KB); kept snapshots only, a transient one is decoded when asked."""
    u = instance_usage(snap)
    u["usage"] = {k: round(v, 3) for k, v in u["usage"].items()}
    return _tagged(USAGE_MAGIC, u)


def _alloc_pid(snap: Snapshot) -> tuple[int, int | None]:
    from beamalloc.timeseries.series import derive

    p = derive(snap)
    return p.get("allocated", 0), p.get("pid")


def _downsample_groups(ts: list[int], ns: list[int], mean: dict[str, list[int | None]],
                       peak: dict[str, list[int | None]], n: int) -> dict[str, Any]:
    """_downsample of groups of samples (rollups): a bucket's mean weighs each group by its
    size, its maximum is its groups' largest, its time their size-weighted mean time."""
    ranges = _buckets(ts, n)
    out_mean: dict[str, list[int | None]] = {}
    out_peak: dict[str, list[int | None]] = {}
    cum_n = [0, *itertools.accumulate(ns)]
    for k, v in mean.items():
        p = peak[k]
        if None not in v and None not in p:  # the usual column: prefix sums, slice maxima
            cum = [0, *itertools.accumulate(map(operator.mul, v, ns))]  # type: ignore[arg-type]
            out_mean[k] = [round((cum[z] - cum[a]) / (cum_n[z] - cum_n[a])) for a, z in ranges]
            out_peak[k] = [max(p[a:z]) for a, z in ranges]  # type: ignore[type-var]
            continue
        mk, pk = [], []
        for a, z in ranges:
            w = [(x, ns[i]) for i, x in enumerate(v[a:z], a) if x is not None]
            total = sum(c for _, c in w)
            mk.append(round(sum(x * c for x, c in w) / total) if total else None)
            vals = [x for x in p[a:z] if x is not None]
            pk.append(max(vals) if vals else None)
        out_mean[k], out_peak[k] = mk, pk
    return {"t": [sum(t * c for t, c in zip(ts[a:z], ns[a:z], strict=True))
                  / sum(ns[a:z]) / 1000 for a, z in ranges],
            "columns": out_mean, "max": out_peak}


def _buckets(ts: list[int], n: int) -> list[tuple[int, int]]:
    """`n` equal spans of time over the sorted times `ts`, as index ranges (empty ones left
    out): the buckets both downsamplings fill."""
    t0, t1 = ts[0], ts[-1]
    width = (t1 - t0) / n or 1
    bounds = [0]
    b = 1
    for i, t in enumerate(ts):
        while b < n and t >= t0 + b * width:
            bounds.append(i)
            b += 1
    bounds.append(len(ts))
    return [(a, z) for a, z in itertools.pairwise(bounds) if z > a]


def _downsample(ts: list[int], cols: dict[str, list[int | None]], n: int) -> dict[str, Any]:
    ranges = _buckets(ts, n)
    mean: dict[str, list[int | None]] = {}
    peak: dict[str, list[int | None]] = {}
    for k, v in cols.items():
        if None not in v:  # the usual column: sums and maxima of slices, no filtering
            mean[k] = [round(sum(v[a:z]) / (z - a)) for a, z in ranges]  # type: ignore
            peak[k] = [max(v[a:z]) for a, z in ranges]  # type: ignore
            continue
        mk, pk = [], []
        for a, z in ranges:
            vals = [x for x in v[a:z] if x is not None]
            mk.append(round(sum(vals) / len(vals)) if vals else None)
            pk.append(max(vals) if vals else None)
        mean[k], peak[k] = mk, pk
    return {"t": [sum(ts[a:z]) / (z - a) / 1000 for a, z in ranges], "columns": mean,
            "max": peak}
