"""Snapshot: the allocator state of one BEAM node at one instant (DESIGN.md, "One data model").

Every collector (live node, recon file, crash dump, beamalloc JSON) and the replay produce a
Snapshot; the analyzer, recommender, web UI and report only read Snapshots.

Statistics keep the VM's three values where the VM has three (alloc_util.md §6.1):
`(current, max since the last system_info call, max ever)`. recon calls element 2 `current` and
element 4 `max` (recon_alloc.md §0); the middle one is reset by every `system_info({allocator, _})`
call, so it says little about a node that someone else also polls.

JSON: `to_json()` / `from_json()` round-trip losslessly through the versioned schema
`beamalloc.snapshot/1` (docs/snapshot-schema.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from beamalloc.errors import InputError

SCHEMA = "beamalloc.snapshot/1"

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
    """The `mbcs` or `sbcs` section of an allocator instance (alloc_util.md §6.1).

    `blocks` is keyed by the allocator type that allocated the blocks: on OTP ≥ 23 the VM reports
    blocks per type, and a carrier fetched from the pool can hold another type's blocks
    ("foreign blocks", recon_alloc.md §0.1). Older releases report one total; it is keyed by the
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
    """One mseg_alloc instance: the segment cache in front of mmap (alloc_util.md §3.7)."""

    instance: int
    options: dict[str, int | bool | str] = field(default_factory=dict)
    cached_segments: int = 0
    cache_hits: int = 0
    segments: Triple = field(default_factory=Triple)
    segments_watermark: int = 0
    segments_size: Triple = field(default_factory=Triple)
    calls: dict[str, int] = field(default_factory=dict)


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
    #: counting them until then (acful, alloc_util.md §2.1). Same host only.
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
    #: The term the snapshot was built from, as Erlang text (or the crash dump's lines).
    raw: str | None = None

    def instances(self, allocator: str) -> list[AllocatorInstance]:
        return [a for a in self.allocators if a.allocator == allocator]

    def allocator_names(self) -> list[str]:
        return list(dict.fromkeys(a.allocator for a in self.allocators))

    # ---- JSON -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **_encode(self)}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

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
        if snap.source not in SOURCES:
            raise SnapshotError(f"unknown source {snap.source!r}")
        return snap

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        try:
            doc = json.loads(text)
        except RecursionError as e:
            raise SnapshotError("JSON nested too deeply") from e
        except json.JSONDecodeError as e:
            raise SnapshotError(
                f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}"
            ) from e
        return cls.from_dict(doc)


# ---- a small typed (de)serializer for the dataclasses above -------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _encode(obj: Any) -> Any:
    if isinstance(obj, Triple):
        return obj.to_json()
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _encode(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_encode(v) for v in obj]
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
        raise SnapshotError(f"{where}: unknown field {sorted(unknown)[0]!r}")
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
    if t in _CLASSES:
        return _decode(_CLASSES[t], v, where)
    raise AssertionError(f"no decoder for {t}")


_CLASSES.update(
    {
        c.__name__: c
        for c in (BlockStats, CarrierStats, PoolStats, FixType, AllocatorInstance, MsegInstance)
    }
)
