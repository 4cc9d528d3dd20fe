"""Snapshot: the allocator state of one BEAM node at one instant (docs/design.md, "One data model").

Every collector (live node, recon file, crash dump, beamalloc JSON) and the replay produce a
Snapshot; the analyzer, recommender, web UI and report only read Snapshots.

Statistics keep the VM's three values where the VM has three (docs/erts/alloc_util.md §6.1):
`(current, max since the last system_info call, max ever)`. recon calls element 2 `current` and
element 4 `max` (docs/erts/recon-formulas.md §0); the middle one is reset by every
`system_info({allocator, _})`
call, so it says little about a node that someone else also polls.

JSON: `to_json()` / `from_json()` round-trip losslessly through the versioned schema
`beamalloc.snapshot/1` (docs/snapshot-schema.md).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any

from beamalloc.errors import InputError
from beamalloc.limits import MAX_SCHEDULERS

SCHEMA = "beamalloc.snapshot/1"

#: Every count and size the VM reports is a machine word; 2^64-1 (`~0`) is "infinite".
UINT64_MAX = (1 << 64) - 1
# MAX_SCHEDULERS, the scheduler counts beamalloc accepts anywhere: beamalloc/limits.py.
#: Snapshot times: from 1970 to the year 9999.
MAX_TIME = 253402300799.0

#: How a snapshot was obtained.
SOURCES = ("live", "recon", "crashdump", "json", "replay")


class SnapshotError(InputError):
    """A snapshot document that does not follow the schema."""


@dataclass(frozen=True)
class Triple:
    """A statistic as the VM reports it: current, max since the last call, max ever."""

    current: int = 0
    last_max: int = 0
    max: int = 0

    def __add__(self, other: Triple) -> Triple:
        return Triple(
            self.current + other.current, self.last_max + other.last_max, self.max + other.max
        )

    def to_json(self) -> list[int]:
        return [self.current, self.last_max, self.max]

    @classmethod
    def from_json(cls, v: Any) -> Triple:
        if not (isinstance(v, list) and len(v) == 3 and all(_is_int(x) for x in v)):
            raise SnapshotError(f"expected [current, last_max, max], got {_short(v)}")
        return cls(*v)


@dataclass
class BlockStats:
    """Blocks of one allocation type inside one carrier kind of one instance."""

    count: Triple = field(default_factory=Triple)
    size: Triple = field(default_factory=Triple)


@dataclass
class CarrierStats:
    """The `mbcs` or `sbcs` section of an allocator instance (docs/erts/alloc_util.md §6.1).

    `blocks` is keyed by the allocator type that allocated the blocks: on OTP ≥ 23 the VM reports
    blocks per type, and a carrier fetched from the pool can hold another type's blocks
    ("foreign blocks", docs/erts/recon-formulas.md §0.1). Older releases report one total; it is
    keyed by the
    instance's own allocator name.
    """

    blocks: dict[str, BlockStats] = field(default_factory=dict)
    carriers: Triple = field(default_factory=Triple)
    carriers_size: Triple = field(default_factory=Triple)
    mseg_carriers: int = 0
    sys_carriers: int = 0
    mseg_carriers_size: int = 0
    sys_carriers_size: int = 0

    @property
    def block_count(self) -> Triple:
        return sum((b.count for b in self.blocks.values()), Triple())

    @property
    def block_size(self) -> Triple:
        return sum((b.size for b in self.blocks.values()), Triple())


@dataclass
class PoolStats:
    """The carrier pool section `mbcs_pool`: carriers abandoned by this instance (§5)."""

    blocks: dict[str, tuple[int, int]] = field(default_factory=dict)  # type -> (count, size)
    carriers: int = 0
    carriers_size: int = 0
    counters: dict[str, int] = field(default_factory=dict)  # fetch, fail*, skip_*, ...

    @property
    def block_count(self) -> int:
        return sum(c for c, _ in self.blocks.values())

    @property
    def block_size(self) -> int:
        return sum(s for _, s in self.blocks.values())


@dataclass
class FixType:
    """A fix_alloc free-list type (instance 0 on OTP 25): bytes allocated and used."""

    type: str
    allocated: int
    used: int


@dataclass
class AllocatorInstance:
    """One instance of one alloc_util allocator (instance 0 serves non-scheduler threads)."""

    allocator: str
    instance: int
    options: dict[str, int | bool | str] = field(default_factory=dict)
    mbcs: CarrierStats = field(default_factory=CarrierStats)
    sbcs: CarrierStats = field(default_factory=CarrierStats)
    mbcs_pool: PoolStats | None = None
    calls: dict[str, int] = field(default_factory=dict)
    fix_types: list[FixType] | None = None
    versions: list[str] | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.allocator, self.instance)


@dataclass
class MsegInstance:
    """One mseg_alloc instance: the segment cache in front of mmap (docs/erts/alloc_util.md
    §3.7)."""

    instance: int
    options: dict[str, int | bool | str] = field(default_factory=dict)
    cached_segments: int = 0
    cache_hits: int = 0
    segments: Triple = field(default_factory=Triple)
    segments_watermark: int = 0
    segments_size: Triple = field(default_factory=Triple)
    calls: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FreeHistogram:
    """A histogram of block sizes from `instrument` (OTP 21+): `counts[i]` blocks in bucket i.

    `start` is the scan's bucket unit in bytes. The VM puts a block of `size` bytes in bucket
    `min(floor(log2(size // start + 1)), len(counts) - 1)` (erl_alloc_util.c, gather_cinfo_scan),
    so bucket i holds sizes in [(2^i - 1) * start, (2^(i+1) - 1) * start) and the last bucket is
    open above: roughly [start * 2^i, start * 2^(i+1)) as instrument's docs describe it. For
    `instrument:carriers/1` the unit is twice the `histogram_start` it was given (verified on OTP
    25.2.3: an empty 64 KiB carrier lands in the same bucket for start 256 and 128);
    the collector stores the unit, not the option.
    """

    start: int
    counts: tuple[int, ...]

    def bounds(self, i: int) -> tuple[int, int | None]:
        """Byte range [lo, hi) of bucket i; hi is None for the last, open bucket."""
        lo = ((1 << i) - 1) * self.start
        return lo, None if i == len(self.counts) - 1 else ((1 << (i + 1)) - 1) * self.start

    @property
    def total(self) -> int:
        return sum(self.counts)

    def largest(self) -> tuple[int, int | None] | None:
        """The byte range of the largest non-empty bucket (where the largest block is)."""
        for i in range(len(self.counts) - 1, -1, -1):
            if self.counts[i]:
                return self.bounds(i)
        return None

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "counts": list(self.counts)}

    @classmethod
    def from_json(cls, v: Any, where: str) -> FreeHistogram:
        if not isinstance(v, dict) or set(v) != {"start", "counts"}:
            raise SnapshotError(f"{where}: expected {{start, counts}}, got {_short(v)}")
        start, counts = v["start"], v["counts"]
        if not _is_int(start) or start < 1:
            raise SnapshotError(f"{where}.start: expected a positive int, got {_short(start)}")
        if not (isinstance(counts, list) and 0 < len(counts) <= 64
                and all(_is_int(c) and c >= 0 for c in counts)):
            raise SnapshotError(f"{where}.counts: expected 1-64 counts (ints >= 0), "
                                f"got {_short(counts)}")
        return cls(start, tuple(counts))


@dataclass(frozen=True)
class Carrier:
    """One carrier as `instrument:carriers/1` lists it (docs/snapshot-schema.md, "carriers").

    `instance` is the allocator instance that created it (the scan lists a pooled carrier under
    its creator), None where the source does not say. `in_pool`: it sits in the carrier pool,
    abandoned by its creator and free for any instance to fetch (docs/erts/alloc_util.md §5).
    `blocks` and
    `blocks_size` count every allocated block in it, headers included, of any allocator type;
    `foreign_size` is the part allocated by other types (blocks fetched with the carrier from
    the pool). `unscanned` is bytes the VM skipped (it gives up on a carrier after 16,000 blocks
    to stay responsive). A single-block carrier holds one block and an empty histogram.
    """

    allocator: str
    instance: int | None
    in_pool: bool
    size: int
    blocks: int
    blocks_size: int
    free_histogram: FreeHistogram
    foreign_size: int = 0
    unscanned: int = 0

    @property
    def fill(self) -> float:
        """Share of the carrier's bytes that hold blocks."""
        return self.blocks_size / self.size if self.size else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "allocator": self.allocator,
            "instance": self.instance,
            "in_pool": self.in_pool,
            "size": self.size,
            "blocks": self.blocks,
            "blocks_size": self.blocks_size,
            "free_histogram": self.free_histogram.to_json(),
            "foreign_size": self.foreign_size,
            "unscanned": self.unscanned,
        }

    @classmethod
    def from_json(cls, v: Any, where: str) -> Carrier:
        if not isinstance(v, dict):
            raise SnapshotError(f"{where}: expected a carrier object, got {_short(v)}")
        unknown = set(v) - _CARRIER_FIELDS
        if unknown:
            raise SnapshotError(f"{where}: {len(unknown)} unknown field(s) (not in {SCHEMA})")
        missing = _CARRIER_REQUIRED - set(v)
        if missing:
            raise SnapshotError(f"{where}: missing field {sorted(missing)[0]!r}")
        if not isinstance(v["allocator"], str) or not v["allocator"]:
            raise SnapshotError(f"{where}.allocator: expected a name, got {_short(v['allocator'])}")
        inst = v.get("instance")
        if inst is not None and not (_is_int(inst) and inst >= 0):
            raise SnapshotError(f"{where}.instance: expected an int >= 0 or null, "
                                f"got {_short(inst)}")
        if not isinstance(v["in_pool"], bool):
            raise SnapshotError(f"{where}.in_pool: expected true or false, "
                                f"got {_short(v['in_pool'])}")
        ints = {}
        for k in ("size", "blocks", "blocks_size", "foreign_size", "unscanned"):
            x = v.get(k, 0)
            if not _is_int(x) or x < 0:
                raise SnapshotError(f"{where}.{k}: expected an int >= 0, got {_short(x)}")
            ints[k] = x
        if ints["blocks_size"] > ints["size"] or ints["foreign_size"] > ints["blocks_size"]:
            raise SnapshotError(f"{where}: blocks_size {ints['blocks_size']} does not fit in "
                                f"size {ints['size']} (or foreign_size in blocks_size)")
        hist = FreeHistogram.from_json(v["free_histogram"], f"{where}.free_histogram")
        return cls(v["allocator"], inst, v["in_pool"], ints["size"], ints["blocks"],
                   ints["blocks_size"], hist, ints["foreign_size"], ints["unscanned"])


_CARRIER_FIELDS = {"allocator", "instance", "in_pool", "size", "blocks", "blocks_size",
                   "free_histogram", "foreign_size", "unscanned"}
_CARRIER_REQUIRED = _CARRIER_FIELDS - {"instance", "foreign_size", "unscanned"}


@dataclass(frozen=True)
class TaggedBlocks:
    """Allocated blocks of one origin and type, from `instrument:allocations/1` (allocators
    with allocation tags on: `+M<S>atags`, default for binary_alloc and driver_alloc).
    `origin` is the NIF or driver that allocated them, or `system`; `type` an erl_alloc.types
    category (`binary`, `drv_binary`, ...). Sizes include block headers."""

    origin: str
    type: str
    histogram: FreeHistogram

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "type": self.type, "histogram": self.histogram.to_json()}

    @classmethod
    def from_json(cls, v: Any, where: str) -> TaggedBlocks:
        if not (isinstance(v, dict) and set(v) == {"origin", "type", "histogram"}
                and isinstance(v["origin"], str) and isinstance(v["type"], str)):
            raise SnapshotError(f"{where}: expected {{origin, type, histogram}}, got {_short(v)}")
        return cls(v["origin"], v["type"],
                   FreeHistogram.from_json(v["histogram"], f"{where}.histogram"))


@dataclass
class Snapshot:
    """The allocator state of one node at one instant."""

    node: str
    source: str
    taken_at: float | None = None  # Unix time, seconds
    otp_release: str | None = None
    erts_version: str | None = None
    wordsize: int | None = None
    schedulers: int | None = None
    os_pid: int | None = None
    memory: dict[str, int] = field(default_factory=dict)  # erlang:memory()
    rss: int | None = None  # bytes resident, from /proc/PID/status (VmRSS) when on this host
    #: Of the resident bytes, those the process gave back with MADV_FREE (`LazyFree` of
    #: /proc/PID/smaps_rollup): the OS takes them when it needs memory, VmRSS keeps
    #: counting them until then (acful, docs/erts/alloc_util.md §2.1). Same host only.
    rss_lazyfree: int | None = None
    #: The host's MemAvailable (/proc/meminfo) when `rss` was read: lazily freed pages
    #: count as available, so this is where acful shows.
    mem_available: int | None = None
    allocators: list[AllocatorInstance] = field(default_factory=list)
    mseg: list[MsegInstance] = field(default_factory=list)
    #: Sections kept as-is: sys_alloc and alloc_util options, erts_mmap (as Erlang term text).
    extra: dict[str, Any] = field(default_factory=dict)
    #: What the collector wants the reader to know (e.g. a crash dump cut off mid-section).
    notes: list[str] = field(default_factory=list)
    truncated: bool = False
    #: The term the snapshot was built from, as Erlang text (or the crash dump's lines); a live
    #: snapshot's per-carrier data is left out of it (it is in `carriers`, whole).
    raw: str | None = None
    #: Every carrier (instrument:carriers/1), or None where the source has none; then
    #: `carriers_unavailable` says why when a live node was asked and could not answer.
    carriers: list[Carrier] | None = None
    carriers_unavailable: str | None = None
    #: Carriers the VM reported but the collector did not read (its cap, see collector/live.py).
    carriers_skipped: int = 0
    #: Tagged blocks by origin and type (instrument:allocations/1), where tagging is on.
    tagged_blocks: list[TaggedBlocks] | None = None
    #: Allocators the node has switched off (`option e: false`, `+M<X>e false`), as the reader
    #: found them (its note says so in words): left out of the JSON when there are none.
    disabled: list[str] = field(default_factory=list)

    def instances(self, allocator: str) -> list[AllocatorInstance]:
        return [a for a in self.allocators if a.allocator == allocator]

    def allocator_names(self) -> list[str]:
        return list(dict.fromkeys(a.allocator for a in self.allocators))

    def carriers_of(self, allocator: str) -> list[Carrier]:
        return [c for c in self.carriers or () if c.allocator == allocator]

    # ---- JSON -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        doc = {"schema": SCHEMA, **_encode(self)}
        if not self.disabled:  # the JSON of a node with every allocator on is as it was
            del doc["disabled"]
        return doc

    def to_json(self, indent: int | None = None) -> str:
        if indent is not None:
            return json.dumps(self.to_dict(), indent=indent)
        # Compact: the document is encoded with placeholders of a random name where the
        # allocator instances and the carriers go (a +S 64 node: ~600 instances, up to 20,000
        # carriers by default), then their text, written directly (_instances_json,
        # _carriers_json: exactly what json.dumps writes for them), takes their places.
        mark = f"-{os.urandom(8).hex()}"
        doc = {"schema": SCHEMA}
        for n in _fields_of(Snapshot):
            v = getattr(self, n)
            if n == "disabled" and not v:  # as to_dict leaves it out
                continue
            doc[n] = (n + mark if n == "allocators" or (n == "carriers" and v)
                      else v if type(v) in _PLAIN else _encode(v))
        text = json.dumps(doc)
        # allocators come early, carriers late (after the raw term): each found from its end
        i = text.index(f'"allocators": "allocators{mark}"') + len('"allocators": ')
        out = [text[:i], _instances_json(self.allocators)]
        at = i + len("allocators" + mark) + 2
        if self.carriers:
            i = text.rindex(f'"carriers": "carriers{mark}"') + len('"carriers": ')
            out += [text[at:i], _carriers_json(self.carriers)]
            at = i + len("carriers" + mark) + 2
        out.append(text[at:])
        return "".join(out)

    @classmethod
    def from_dict(cls, doc: Any) -> Snapshot:
        if not isinstance(doc, dict):
            raise SnapshotError("a snapshot document is a JSON object")
        schema = doc.get("schema")
        if schema != SCHEMA:
            raise SnapshotError(
                f"unknown snapshot schema {_short(schema)} (this beamalloc reads {SCHEMA})"
            )
        body = {k: v for k, v in doc.items() if k != "schema"}
        snap = _decode(cls, body, "snapshot")
        if snap.source not in SOURCES:  # described, never quoted (docs/robustness.md)
            raise SnapshotError(f"source: {describe(snap.source)}, not one of "
                                + ", ".join(SOURCES))
        return snap

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        check_text_cost(text)
        try:
            doc = json.loads(text, parse_constant=_no_constant, parse_int=_json_int,
                             parse_float=_json_float)
        except RecursionError:
            raise SnapshotError("JSON nested too deeply") from None
        except json.JSONDecodeError as e:
            raise SnapshotError(
                f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}"
            ) from None
        snap = cls.from_dict(doc)
        snap.check()
        return snap

    def check(self, proven: list[AllocatorInstance] | tuple[()] = ()) -> None:
        """Refuse what no node can report (docs/robustness.md, "Ranges"): every reader calls
        this, so every command gets numbers it can compute with, or one line and exit 2.
        First the counters the VM itself reports wrapped are read as it means them
        (`unwrap_counters`), with a note. `proven`: instances their reader built only from
        what `_plainly_valid` passes (collector/native/src/alloc_reply.rs declines the rest),
        not walked again."""
        unwrap_counters(self)
        check_snapshot(self, proven)


#: The most containers (lists, objects, tuples) and elements a text input may build: a +S 1024
#: node's snapshot JSON has 0.86 M containers and 2.8 M elements, its term text 0.71 M and
#: 1.5 M. A 256 MB file of `[],` would otherwise build 85 M lists (4.8 GB), as the ETF bomb
#: did (issue 25): counted before parsing, at C speed.
MAX_TEXT_CONTAINERS = 2 << 20
MAX_TEXT_ELEMENTS = 8 << 20


def check_text_cost(text: str) -> None:
    """SnapshotError when JSON or Erlang term text would build more than the limits above
    (each container is a `[` or `{`, each element a `,` or `:`)."""
    containers = text.count("[") + text.count("{")
    if containers > MAX_TEXT_CONTAINERS:
        raise SnapshotError(f"{containers:,} lists, tuples or objects (at most "
                            f"{MAX_TEXT_CONTAINERS:,}: not allocator data)")
    elements = text.count(",") + text.count(":")
    if elements > MAX_TEXT_ELEMENTS:
        raise SnapshotError(f"{elements:,} elements (at most {MAX_TEXT_ELEMENTS:,}: not "
                            "allocator data)")


def _no_constant(name: str) -> Any:
    raise SnapshotError(f"not valid JSON: {name} is not a number JSON allows")


def _json_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise SnapshotError("not valid JSON here: a number beyond what a float holds")
    return x


def _json_int(text: str) -> int:
    # Python refuses ints above 4300 digits with ValueError; anything above 2^64 is not ours.
    if len(text.lstrip("-")) > 24:
        raise SnapshotError(f"an integer of {len(text.lstrip('-'))} digits (at most 2^64-1)")
    return int(text)


# ---- validation: what no node reports -----------------------------------------------------


#: Control characters no snapshot string holds (tab and line ends aside): ESC and CSI start
#: terminal escape sequences, which a report would print (issue 25).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _check_str(s: str, where: str, limit: int = 4096) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise SnapshotError(
            f"{where}: a string that is not valid Unicode (a lone surrogate)"
        ) from None
    if _CONTROL.search(s):
        raise SnapshotError(f"{where}: a string with a control character (an escape sequence "
                            "a terminal would run)")
    if limit and len(s) > limit:
        raise SnapshotError(f"{where}: a string of {len(s)} characters")


#: A count this large is a signed counter of the VM that went negative, printed unsigned:
#: binary_alloc's mbcs_pool carriers read 18446744073709551513 (-103) on a fragmented 2 GiB
#: OTP 25 node with default flags (issue 25). No real count comes near 2^63.
WRAP = 1 << 63


def wrapped(v: int) -> bool:
    return v >= WRAP


def unwrap_counters(snap: Snapshot) -> None:
    """The pool's carrier counts as the VM means them: a wrapped (negative) value is taken as
    0, so no sum adds it raw ("36893488147419103127 carriers not read"), and a note says
    which and what it was. Idempotent: a count read once is no longer wrapped."""
    for inst in snap.allocators:
        p = inst.mbcs_pool
        if p is None:
            continue
        for field_name in ("carriers", "carriers_size"):
            v = getattr(p, field_name)
            if _is_int(v) and WRAP <= v <= UINT64_MAX:
                setattr(p, field_name, 0)
                snap.notes.append(
                    f"{inst.allocator}[{inst.instance}] mbcs_pool {field_name.replace('_', ' ')} "
                    f"reads {v}, which is {v - (1 << 64)}: a counter of the VM gone negative "
                    "and shown unsigned; taken as 0")


def _check_count(v: Any, where: str) -> None:
    if not (_is_int(v) and 0 <= v <= UINT64_MAX):
        raise SnapshotError(f"{where}: expected an integer 0..2^64-1, got {describe(v)}")


def _check_triple(t: Triple, where: str) -> None:
    for k, v in zip(("current", "last_max", "max"), (t.current, t.last_max, t.max), strict=True):
        _check_count(v, f"{where}.{k}")


def check_snapshot(snap: Snapshot, proven: list[AllocatorInstance] | tuple[()] = ()) -> None:
    """Every number within what a machine word holds, every string valid Unicode, every
    header field within what a node can be. (Blocks need not fit their own instance's carriers:
    OTP 22 counts pooled blocks by owner, carriers by holder; metrics.usage copes.)"""
    _check_str(snap.node, "node")
    if not snap.node.strip() or _has_control(snap.node):
        raise SnapshotError("node: not a node name (empty, or a control character in it)")
    for where, text in (("otp_release", snap.otp_release), ("erts_version", snap.erts_version)):
        if text is not None and (_has_control(text) or len(text) > 64):
            raise SnapshotError(f"{where}: not a release ({describe(text)}, or a control "
                                "character in it)")
    if snap.source not in SOURCES:
        raise SnapshotError("source: not one of " + ", ".join(SOURCES))
    if snap.taken_at is not None and not (
        isinstance(snap.taken_at, int | float) and math.isfinite(snap.taken_at)
        and 0 <= snap.taken_at <= MAX_TIME
    ):
        raise SnapshotError("taken_at: expected a Unix time between 1970 and 9999")
    if snap.wordsize not in (None, 4, 8):
        raise SnapshotError("wordsize: expected 4 or 8 (bytes)")
    if snap.schedulers is not None and not (
        _is_int(snap.schedulers) and 1 <= snap.schedulers <= MAX_SCHEDULERS
    ):
        raise SnapshotError(f"schedulers: expected 1..{MAX_SCHEDULERS}")
    if snap.os_pid is not None and not (_is_int(snap.os_pid) and 0 < snap.os_pid < 1 << 31):
        raise SnapshotError("os_pid: expected a process id")
    for name in ("otp_release", "erts_version"):
        v = getattr(snap, name)
        if v is not None:
            _check_str(v, name, limit=64)
    for name in ("rss", "rss_lazyfree", "mem_available"):
        if getattr(snap, name) is not None:
            _check_count(getattr(snap, name), name)
    for k, v in snap.memory.items():
        _check_count(v, f"memory.{k if k in MEMORY_KEYS else '(a key)'}")
    plain = {id(i) for i in proven}
    for inst in snap.allocators:
        if id(inst) not in plain and not _plainly_valid(inst):
            _check_instance(inst)  # says what is wrong
    for m in snap.mseg:
        where = f"mseg_alloc[{m.instance}]"
        _check_count(m.instance, where)
        for v in (m.cached_segments, m.cache_hits, m.segments_watermark, *m.calls.values()):
            _check_count(v, where)
        _check_triple(m.segments, f"{where}.segments")
        _check_triple(m.segments_size, f"{where}.segments_size")
    _check_count(snap.carriers_skipped, "carriers_skipped")
    top = 2 * MAX_SCHEDULERS + 1
    for i, c in enumerate(snap.carriers or ()):
        inst, size, blocks, used, foreign, unscanned = (
            c.instance, c.size, c.blocks, c.blocks_size, c.foreign_size, c.unscanned)
        if ((inst is None or (type(inst) is int and 0 <= inst <= top)) and type(size) is int
                and type(blocks) is int and type(used) is int and type(foreign) is int
                and type(unscanned) is int and 0 <= size <= UINT64_MAX
                and 0 <= blocks <= UINT64_MAX and 0 <= used <= UINT64_MAX
                and 0 <= foreign <= UINT64_MAX and 0 <= unscanned <= UINT64_MAX):  # fmt: skip
            continue  # plainly valid (up to 20,000 carriers): the checks below word a fault
        w = f"carriers[{i}]"
        if c.instance is not None and not 0 <= c.instance <= 2 * MAX_SCHEDULERS + 1:
            raise SnapshotError(f"{w}.instance: out of range ({describe(c.instance)})")
        for v in (c.size, c.blocks, c.blocks_size, c.foreign_size, c.unscanned):
            _check_count(v, w)
    if len(snap.notes) > MAX_NOTES:  # each is a line of every report: 1 M took 60 s and more
        raise SnapshotError(f"notes: {len(snap.notes):,} of them (at most {MAX_NOTES:,})")
    for note in snap.notes:
        _check_str(note, "notes", limit=MAX_NOTE)
    _check_strings(snap.notes, "notes")
    if len(snap.disabled) > MAX_NOTES:
        raise SnapshotError(f"disabled: {len(snap.disabled):,} allocators (at most {MAX_NOTES:,})")
    for name in snap.disabled:
        _check_str(name, "disabled", limit=64)
    _check_strings(snap.disabled, "disabled")
    _check_strings(snap.extra, "extra")


#: The most notes a snapshot carries, and the longest: readers write a few short ones.
MAX_NOTES = 1000
MAX_NOTE = 4096
#: Deepest nesting of a snapshot's free-form fields (notes, extra): term text nests a few
#: levels; deeper was a RecursionError when the snapshot was written out (issue 25).
MAX_NESTING = 64


def _has_control(s: str) -> bool:
    """A C0 or C1 control character, DEL: what starts a terminal escape sequence or a line."""
    return any(c < " " or "\x7f" <= c <= "\x9f" for c in s)


def _check_strings(v: Any, where: str) -> None:
    stack = [(v, 0)]
    while stack:
        x, depth = stack.pop()
        if isinstance(x, str):
            _check_str(x, where, limit=0)
        elif isinstance(x, dict | list | tuple):
            if depth >= MAX_NESTING:
                raise SnapshotError(f"{where}: nested more than {MAX_NESTING} deep")
            items = [*x.keys(), *x.values()] if isinstance(x, dict) else x
            stack.extend((y, depth + 1) for y in items)
        elif isinstance(x, float) and not math.isfinite(x):
            raise SnapshotError(f"{where}: a non-finite number")


#: Options that are sizes or counts (docs/erts/alloc_util.md §2.3): an integer, never text.
NUMERIC_OPTIONS = frozenset({
    "sbct", "lmbcs", "smbcs", "mbcgs", "mmbcs", "mmsbc", "mmmbc", "rsbcst", "asbcst", "rsbcmt",
    "rmbcmt", "acul", "acful", "acnl", "acfml", "mbsd", "ycs", "mmc", "scs", "mcs", "amcbf",
    "rmcbf",
})


def _plain_str(s: Any, limit: int = 4096) -> bool:
    return type(s) is str and s.isascii() and len(s) <= limit


def _plain_count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= UINT64_MAX


def _plain_triple(t: Triple) -> bool:
    return _plain_count(t.current) and _plain_count(t.last_max) and _plain_count(t.max)


def _plainly_valid(inst: AllocatorInstance) -> bool:
    """True when `_check_instance` would pass, proven the cheap way (plain ints and ASCII
    strings, no message built): a +S 64 snapshot has ~600 instances of ~60 numbers each. False
    means "not proven": `_check_instance` then finds the fault and words it, or passes."""
    name, ix = inst.allocator, inst.instance
    if not (_plain_str(name, 64) and name and type(ix) is int
            and 0 <= ix <= 2 * MAX_SCHEDULERS + 1):  # fmt: skip
        return False
    for k, v in inst.options.items():  # ~20 each: _plain_str and _plain_count inlined
        if not (type(k) is str and k.isascii() and len(k) <= 4096):
            return False
        t = type(v)
        if t is int:
            if not 0 <= v <= UINT64_MAX:
                return False
        elif t is str:
            if k in NUMERIC_OPTIONS or not (v.isascii() and len(v) <= 4096):
                return False
        elif t is not bool or k in NUMERIC_OPTIONS:
            return False
    for cs in (inst.mbcs, inst.sbcs):
        for t, b in cs.blocks.items():
            if not (_plain_str(t) and _plain_triple(b.count) and _plain_triple(b.size)):
                return False
        if not (_plain_triple(cs.carriers) and _plain_triple(cs.carriers_size)
                and _plain_count(cs.mseg_carriers) and _plain_count(cs.sys_carriers)
                and _plain_count(cs.mseg_carriers_size) and _plain_count(cs.sys_carriers_size)):
            return False
    p = inst.mbcs_pool
    if p is not None:
        for t, (c, sz) in p.blocks.items():
            if not (_plain_str(t) and _plain_count(c) and _plain_count(sz)):
                return False
        if not (_plain_count(p.carriers) and _plain_count(p.carriers_size)
                and all(_plain_count(v) for v in p.counters.values())):
            return False
    for k, v in inst.calls.items():
        if not (type(k) is str and k.isascii() and len(k) <= 4096 and type(v) is int
                and 0 <= v <= UINT64_MAX):
            return False
    return all(_plain_str(ft.type) and _plain_count(ft.allocated) and _plain_count(ft.used)
               for ft in inst.fix_types or ())


def _check_instance(inst: AllocatorInstance) -> None:
    name = inst.allocator
    _check_str(name, "allocator", limit=64)
    if not name:
        raise SnapshotError("allocator: an empty name")
    # Named in messages only when it is a name: what is not may be anything, a secret included.
    name = name if ALLOCATOR_NAME.match(name) else "an allocator"
    if not (_is_int(inst.instance) and 0 <= inst.instance <= 2 * MAX_SCHEDULERS + 1):
        raise SnapshotError(f"{name}: instance number out of range")
    where = f"{name}[{inst.instance}]"
    for k, v in inst.options.items():
        _check_str(k, f"{where}.options")
        if k in NUMERIC_OPTIONS and not (_is_int(v) and 0 <= v <= UINT64_MAX):
            raise SnapshotError(f"{where}.options.{k}: expected an integer 0..2^64-1, got "
                                f"{describe(v)}")
        if isinstance(v, str):
            _check_str(v, f"{where}.options.{k}")
        elif _is_int(v) and not -UINT64_MAX <= v <= UINT64_MAX:
            raise SnapshotError(f"{where}.options.{k}: {describe(v)}")
    for kind in ("mbcs", "sbcs"):
        cs: CarrierStats = getattr(inst, kind)
        w = f"{where} {kind}"
        for t, b in cs.blocks.items():
            _check_str(t, w)
            _check_triple(b.count, f"{w} blocks")
            _check_triple(b.size, f"{w} blocks size")
        _check_triple(cs.carriers, f"{w} carriers")
        _check_triple(cs.carriers_size, f"{w} carriers size")
        for v in (cs.mseg_carriers, cs.sys_carriers, cs.mseg_carriers_size, cs.sys_carriers_size):
            _check_count(v, f"{w} carriers")
    if inst.mbcs_pool is not None:
        p = inst.mbcs_pool
        w = f"{where} mbcs_pool"
        for t, (c, sz) in p.blocks.items():
            _check_str(t, w)
            _check_count(c, w)
            _check_count(sz, w)
        for v in (p.carriers, p.carriers_size, *p.counters.values()):
            _check_count(v, w)
    for k, v in inst.calls.items():
        _check_str(k, f"{where} calls")
        _check_count(v, f"{where} calls")
    for ft in inst.fix_types or ():
        _check_str(ft.type, f"{where} fix_types")
        _check_count(ft.allocated, f"{where} fix_types")
        _check_count(ft.used, f"{where} fix_types")


ALLOCATOR_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}\Z")


# ---- a small typed (de)serializer for the dataclasses above -------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def describe(v: Any) -> str:
    """What a value is, never what it holds: error lines show no byte of the input
    (docs/robustness.md, "Messages"), since a file passed by mistake may be a secret."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        if v < 0:
            return "a negative integer"
        return "an integer above 2^64-1" if v > UINT64_MAX else "an integer"
    if isinstance(v, float):
        return "a non-finite number" if not math.isfinite(v) else "a fractional number"
    if isinstance(v, str):
        return f"a string of {len(v)} characters" if v else "an empty string"
    if isinstance(v, bytes):
        return f"a binary of {len(v)} bytes"
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    if isinstance(v, list):
        return f"a list of {len(v)}"
    if isinstance(v, dict):
        return f"an object of {len(v)} fields"
    return f"a {type(v).__name__}"


#: erlang:memory() keys, the only ones an error line names (others may be anything).
MEMORY_KEYS = frozenset({"total", "processes", "processes_used", "system", "atom", "atom_used",
                         "binary", "code", "ets", "maximum", "low"})


_short = describe


#: Leaves returned as they are, checked first: most of a snapshot's values are these (the
#: watch store encodes a snapshot per node every minute; docs/store.md).
_PLAIN = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields_of(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _carriers_json(carriers: list[Carrier]) -> str:
    """`json.dumps([c.to_json() for c in carriers])`, written with f-strings where every value
    is a plain int (what the collector and the JSON reader make), else by json.dumps: a carrier
    costs half as much (tests/test_snapshot_encoding.py compares the two)."""
    names: dict[str, str] = {}
    hists: dict[tuple[int, ...], str] = {}
    out = []
    for c in carriers:
        h = c.free_histogram
        counts = h.counts
        try:  # equal counts share their text (no reader makes a count a bool)
            hist = hists.get(counts) if type(counts) is tuple else None
        except TypeError:  # an unhashable count: json.dumps says what it makes of it
            hist = None
        else:
            if hist is None and type(counts) is tuple and all(type(x) is int for x in counts):
                hist = hists[counts] = ", ".join(map(str, counts))
        name = names.get(c.allocator)
        if name is None and type(c.allocator) is str:
            name = names[c.allocator] = json.dumps(c.allocator)
        inst = c.instance
        if (hist is None or name is None or type(h.start) is not int
                or not (inst is None or type(inst) is int) or type(c.in_pool) is not bool
                or type(c.size) is not int or type(c.blocks) is not int
                or type(c.blocks_size) is not int or type(c.foreign_size) is not int
                or type(c.unscanned) is not int):  # fmt: skip
            out.append(json.dumps(c.to_json()))
            continue
        out.append(f'{{"allocator": {name}, "instance": {"null" if inst is None else inst}, '
                   f'"in_pool": {"true" if c.in_pool else "false"}, "size": {c.size}, '
                   f'"blocks": {c.blocks}, "blocks_size": {c.blocks_size}, '
                   f'"free_histogram": {{"start": {h.start}, "counts": [{hist}]}}, '
                   f'"foreign_size": {c.foreign_size}, "unscanned": {c.unscanned}}}')
    return "[" + ", ".join(out) + "]"


def _plain_dict(d: dict) -> dict:
    return {k: v if type(v) in _PLAIN else _encode(v) for k, v in d.items()}


def _carrier_stats(cs: CarrierStats) -> dict[str, Any]:
    return {
        "blocks": {t: {"count": [b.count.current, b.count.last_max, b.count.max],
                       "size": [b.size.current, b.size.last_max, b.size.max]}
                   for t, b in cs.blocks.items()},
        "carriers": cs.carriers.to_json(),
        "carriers_size": cs.carriers_size.to_json(),
        "mseg_carriers": cs.mseg_carriers,
        "sys_carriers": cs.sys_carriers,
        "mseg_carriers_size": cs.mseg_carriers_size,
        "sys_carriers_size": cs.sys_carriers_size,
    }  # fmt: skip


def _instance(inst: AllocatorInstance) -> dict[str, Any]:
    """What `_encode`'s dataclass walk makes of an instance, written out: a +S 64 snapshot
    has ~600 of them, and the walk's per-value dispatch was most of `to_json`
    (tests/test_snapshot_encoding.py compares the two)."""
    p = inst.mbcs_pool
    return {
        "allocator": inst.allocator,
        "instance": inst.instance,
        "options": _plain_dict(inst.options),
        "mbcs": _carrier_stats(inst.mbcs),
        "sbcs": _carrier_stats(inst.sbcs),
        "mbcs_pool": None if p is None else {
            "blocks": {t: list(v) for t, v in p.blocks.items()},
            "carriers": p.carriers,
            "carriers_size": p.carriers_size,
            "counters": dict(p.counters),
        },
        "calls": dict(inst.calls),
        "fix_types": None if inst.fix_types is None else [
            {"type": f.type, "allocated": f.allocated, "used": f.used} for f in inst.fix_types],
        "versions": None if inst.versions is None else list(inst.versions),
    }  # fmt: skip


#: What json.dumps writes for a str (ensure_ascii, its default): the same C function.
_esc = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


class _NotPlain(Exception):
    """A value `_instance_json` does not write itself (a bool or a str where counts are
    ints, a key that is not a str): that instance is written by json.dumps."""


#: Values whose equal ones json.dumps writes alike: a text written once serves them all.
_SAME_TEXT = frozenset({int, str, bool, type(None)})
_INT, _STR = frozenset({int}), frozenset({str})


def _dict_text(d: Any, enc: Any, memo: dict[Any, str]) -> str:
    """json.dumps(d) of an options or calls dict, written once per distinct dict (a +S 64
    node's 586 instances have 16 distinct options and 47 distinct calls: idle instances)."""
    if type(d) is not dict:
        raise _NotPlain
    vals = tuple(d.values())
    types = tuple(map(type, vals))
    if not _SAME_TEXT.issuperset(types) or not _STR.issuperset(map(type, d)):
        raise _NotPlain
    key = (tuple(d), vals, types)  # the types too: True == 1, and json.dumps tells them apart
    text = memo.get(key)
    if text is None:
        text = memo[key] = "".join(enc(d, 0))
    return text


def _stats_text(cs: CarrierStats, memo: dict[Any, str]) -> str:
    """_carrier_stats(cs) as json.dumps writes it, once per distinct one (most instances of a
    large node are idle: three distinct sbcs sections of 586 on a +S 64 node)."""
    c, z = cs.carriers, cs.carriers_size
    nums = (c.current, c.last_max, c.max, z.current, z.last_max, z.max, cs.mseg_carriers,
            cs.sys_carriers, cs.mseg_carriers_size, cs.sys_carriers_size)
    names = tuple(cs.blocks)
    for b in cs.blocks.values():
        n, sz = b.count, b.size
        nums += (n.current, n.last_max, n.max, sz.current, sz.last_max, sz.max)
    if not _INT.issuperset(map(type, nums)) or not _STR.issuperset(map(type, names)):
        raise _NotPlain
    key = (names, nums)
    text = memo.get(key)
    if text is None:
        blocks = ", ".join(f'{_esc(t)}: {{"count": [{nums[i]}, {nums[i + 1]}, {nums[i + 2]}], '
                           f'"size": [{nums[i + 3]}, {nums[i + 4]}, {nums[i + 5]}]}}'
                           for t, i in zip(names, range(10, len(nums), 6), strict=True))
        text = memo[key] = (
            f'{{"blocks": {{{blocks}}}, "carriers": [{nums[0]}, {nums[1]}, {nums[2]}], '
            f'"carriers_size": [{nums[3]}, {nums[4]}, {nums[5]}], "mseg_carriers": {nums[6]}, '
            f'"sys_carriers": {nums[7]}, "mseg_carriers_size": {nums[8]}, '
            f'"sys_carriers_size": {nums[9]}}}')
    return text


def _instance_json(inst: AllocatorInstance, enc: Any, memo: dict[Any, str]) -> str:
    """`json.dumps(_instance(inst))`, written directly: the dicts `_instance` builds and
    json.dumps' walk of them were most of a +S 64 snapshot's `to_json`, and most of an idle
    instance's text is another's (tests/test_snapshot_encoding.py compares the two)."""
    if type(inst.allocator) is not str or type(inst.instance) is not int:
        raise _NotPlain
    p = inst.mbcs_pool
    pool = "null" if p is None else "".join(enc({
        "blocks": {t: list(v) for t, v in p.blocks.items()}, "carriers": p.carriers,
        "carriers_size": p.carriers_size, "counters": dict(p.counters)}, 0))
    fix = "null" if inst.fix_types is None else "".join(enc(
        [{"type": f.type, "allocated": f.allocated, "used": f.used} for f in inst.fix_types], 0))
    v = inst.versions
    if v is None:
        versions = "null"
    else:  # every instance has them (the allocator's and alloc_util's version): once
        key = tuple(v) if type(v) is list and _STR.issuperset(map(type, v)) else None
        versions = memo.get(key) if key is not None else None
        if versions is None:
            versions = "".join(enc(list(v), 0))
            if key is not None:
                memo[key] = versions
    return (f'{{"allocator": {_esc(inst.allocator)}, "instance": {inst.instance}, '
            f'"options": {_dict_text(inst.options, enc, memo)}, '
            f'"mbcs": {_stats_text(inst.mbcs, memo)}, "sbcs": {_stats_text(inst.sbcs, memo)}, '
            f'"mbcs_pool": {pool}, "calls": {_dict_text(inst.calls, enc, memo)}, '
            f'"fix_types": {fix}, "versions": {versions}}}')


def _no_default(o: Any) -> Any:
    raise _NotPlain  # what json.dumps cannot write: it says so, for the whole instance


def _instances_json(allocators: Any) -> str:
    """`json.dumps(_encode(allocators))`: each instance by `_instance_json` with json.dumps'
    own encoder (its C part, built once here: json.dumps builds one per call), or by
    json.dumps where one holds a value it does not write itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or type(allocators) is not list:
        return json.dumps(_encode(allocators))
    def encoder() -> Any:
        # json.dumps' own settings: a dict of markers (circular references), separators ", "
        # and ": ", ASCII only, keys as given, NaN allowed
        return make({}, _no_default, _esc, None, ": ", ", ", False, False, True)

    enc = encoder()
    memo: dict[Any, str] = {}
    out = []
    for inst in allocators:
        try:
            if type(inst) is not AllocatorInstance:
                raise _NotPlain
            out.append(_instance_json(inst, enc, memo))
        except (_NotPlain, AttributeError, TypeError, ValueError):
            enc = encoder()  # a fresh one: the failed walk may have left its markers behind
            out.append(json.dumps(_encode(inst)))
    return "[" + ", ".join(out) + "]"


def _encode(obj: Any) -> Any:
    if type(obj) in _PLAIN:
        return obj
    if type(obj) is AllocatorInstance:
        return _instance(obj)
    if isinstance(obj, Triple | Carrier | TaggedBlocks):
        return obj.to_json()
    if hasattr(obj, "__dataclass_fields__"):
        names = _fields_of(type(obj))
        out = {}
        for n in names:
            v = getattr(obj, n)
            out[n] = v if type(v) in _PLAIN else _encode(v)
        return out
    if isinstance(obj, dict):
        return {k: v if type(v) in _PLAIN else _encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [v if type(v) in _PLAIN else _encode(v) for v in obj]
    return obj


_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
}


def _check_scalar(tname: str, v: Any, where: str) -> Any:
    ok = isinstance(v, _SCALARS[tname])
    if tname in ("int", "float") and isinstance(v, bool):
        ok = False
    if not ok:
        raise SnapshotError(f"{where}: expected {tname}, got {_short(v)}")
    return float(v) if tname == "float" else v


def _decode(cls: type, doc: Any, where: str) -> Any:
    if not isinstance(doc, dict):
        raise SnapshotError(f"{where}: expected an object, got {_short(doc)}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(doc) - set(known)
    if unknown:
        raise SnapshotError(f"{where}: {len(unknown)} unknown field(s) (not in {SCHEMA})")
    kwargs = {}
    for name, f in known.items():
        if name not in doc:
            continue
        kwargs[name] = _decode_value(str(f.type), doc[name], f"{where}.{name}")
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise SnapshotError(f"{where}: {e}") from e


_CLASSES: dict[str, type] = {}


def _decode_value(t: str, v: Any, where: str) -> Any:
    t = t.strip()
    if t.endswith("| None"):
        return None if v is None else _decode_value(t[: -len("| None")], v, where)
    if t == "Any":
        return v
    if t == "Triple":
        try:
            return Triple.from_json(v)
        except SnapshotError as e:
            raise SnapshotError(f"{where}: {e}") from None
    if t in _SCALARS:
        return _check_scalar(t, v, where)
    if t == "int | bool | str":
        if not isinstance(v, int | str):
            raise SnapshotError(f"{where}: expected an option value, got {_short(v)}")
        return v
    if t.startswith("list["):
        if not isinstance(v, list):
            raise SnapshotError(f"{where}: expected a list, got {_short(v)}")
        inner = t[5:-1]
        return [_decode_value(inner, x, f"{where}[{i}]") for i, x in enumerate(v)]
    if t.startswith("tuple["):
        inner = [s.strip() for s in t[6:-1].split(",")]
        if not isinstance(v, list) or len(v) != len(inner):
            raise SnapshotError(f"{where}: expected {len(inner)} values, got {_short(v)}")
        return tuple(_decode_value(it, x, where) for it, x in zip(inner, v, strict=True))
    if t.startswith("dict["):
        _key_t, _, val_t = t[5:-1].partition(",")  # keys are always str
        if not isinstance(v, dict):
            raise SnapshotError(f"{where}: expected an object, got {_short(v)}")
        return {k: _decode_value(val_t, x, f"{where}.{k}") for k, x in v.items()}
    if t in _LEAVES:  # frozen leaves with their own validation (and a fast path: 20,000 carriers)
        return _LEAVES[t](v, where)
    if t in _CLASSES:
        return _decode(_CLASSES[t], v, where)
    raise AssertionError(f"no decoder for {t}")


_CLASSES.update(
    {
        c.__name__: c
        for c in (BlockStats, CarrierStats, PoolStats, FixType, AllocatorInstance, MsegInstance)
    }
)
_LEAVES = {"Carrier": Carrier.from_json, "TaggedBlocks": TaggedBlocks.from_json}
