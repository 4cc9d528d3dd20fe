"""The analysis of one Snapshot: recon's numbers plus what recon lacks.

The JSON schema is documented in docs/analysis-schema.md.

`analyze(snap)` returns an `Analysis` record, which the terminal report, the web UI and the HTML
report read; its `to_json()` is what `beamalloc analyze --json` prints. Keys that recon_alloc
also computes carry recon's exact values (`totals` = memory/2 current, the six fragmentation keys
of each instance = fragmentation(current), `cache_hit_rates`, `average_block_sizes`,
`sbcs_to_mbcs`); every other key is beamalloc's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from beamalloc.analyzer import metrics as m
from beamalloc.analyzer.carriers import CarrierSection, analysis_section
from beamalloc.analyzer.categories import MemoryPicture, picture
from beamalloc.analyzer.death import Death, death_of
from beamalloc.analyzer.defects import DefectFinding, defect_findings
from beamalloc.analyzer.limits import Container, LimitFinding, container, limit_findings
from beamalloc.analyzer.options import first_scheduler_options
from beamalloc.snapshot import AllocatorInstance, Snapshot

SCHEMA = "beamalloc.analysis/1"


class _Record:
    """A section of the analysis: its JSON is its fields, nested records as objects."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Totals(_Record):
    """Carrier and block bytes summed over a set of instances (recon's memory/2 and usage)."""

    used: int
    allocated: int
    unused: int
    usage: float


def _totals(snap: Snapshot, keyword: m.Keyword, instances: list[AllocatorInstance]) -> Totals:
    used = m.memory(snap, "used", keyword, instances)
    allocated = m.memory(snap, "allocated", keyword, instances)
    return Totals(used, allocated, allocated - used, m.usage(used, allocated))


@dataclass(frozen=True)
class InstanceMax(_Record):
    """An instance's recon_alloc:fragmentation(max) keys, in recon's order, and its max counts
    of blocks and carriers (the all-time peaks, each on its own: docs/erts/recon-formulas.md)."""

    sbcs_usage: float
    mbcs_usage: float
    sbcs_block_size: int
    sbcs_carriers_size: int
    mbcs_block_size: int
    mbcs_carriers_size: int
    mbcs_blocks: int
    sbcs_blocks: int
    mbcs_carriers: int
    sbcs_carriers: int


@dataclass(frozen=True)
class PoolBlocks:
    """Blocks of one type in the carrier pool: their count and bytes."""

    count: int
    size: int


@dataclass(frozen=True)
class PoolRow(_Record):
    """An instance's carriers in the carrier pool and the blocks they hold; `foreign_blocks`,
    the blocks of other types among them (docs/erts/alloc_util.md §2.3)."""

    carriers: int
    carriers_size: int
    blocks: int
    blocks_size: int
    foreign_blocks: dict[str, PoolBlocks]


@dataclass(frozen=True)
class CacheHitRate(_Record):
    """recon_alloc:cache_hit_rates/0 of one mseg_alloc instance, and its cached segments."""

    instance: int
    hit_rate: float
    hits: int
    calls: int
    cached_segments: int


@dataclass(frozen=True)
class AverageBlockSize(_Record):
    """recon_alloc:average_block_sizes/1 of one allocator type (0 where it has no blocks)."""

    allocator: str
    mbcs: int | float
    sbcs: int | float


@dataclass(frozen=True)
class SbcsToMbcs(_Record):
    """recon_alloc:sbcs_to_mbcs/1 of one instance: block counts, "infinity" without mbcs."""

    allocator: str
    instance: int
    ratio: int | float | str


@dataclass(frozen=True)
class InstanceRow(_Record):
    """One allocator instance: recon's fragmentation keys (current) and beamalloc's own."""

    allocator: str
    instance: int
    in_recon: bool
    # recon_alloc:fragmentation(current), in its order
    sbcs_usage: float
    mbcs_usage: float
    sbcs_block_size: int
    sbcs_carriers_size: int
    mbcs_block_size: int
    mbcs_carriers_size: int
    unused: int
    mbcs_blocks: int
    sbcs_blocks: int
    mbcs_carriers: int
    sbcs_carriers: int
    mbcs_average_block_size: float
    sbcs_average_block_size: float
    sbcs_to_mbcs: float | str
    #: the same keys at their all-time max (fragmentation(max)) and the max counts
    max: InstanceMax
    #: the carrier pool's carriers and blocks (foreign_blocks: other types' blocks in it)
    pool: PoolRow | None
    foreign_blocks: dict[str, int]
    mseg_carriers: int
    sys_carriers: int
    options: dict[str, Any]
    calls: dict[str, int]


def _instance_row(inst: AllocatorInstance) -> InstanceRow:
    cur = m.instance_fragmentation(inst, "current")
    peak = m.instance_fragmentation(inst, "max")
    mb = m.container_value(inst, "current", "mbcs", "blocks")
    sb = m.container_value(inst, "current", "sbcs", "blocks")
    pool = inst.mbcs_pool
    o = inst.options
    return InstanceRow(
        allocator=inst.allocator,
        instance=inst.instance,
        in_recon=inst.allocator in m.RECON_ALLOCATORS,
        sbcs_usage=cur["sbcs_usage"],
        mbcs_usage=cur["mbcs_usage"],
        sbcs_block_size=int(cur["sbcs_block_size"]),
        sbcs_carriers_size=int(cur["sbcs_carriers_size"]),
        mbcs_block_size=int(cur["mbcs_block_size"]),
        mbcs_carriers_size=int(cur["mbcs_carriers_size"]),
        unused=int(
            cur["mbcs_carriers_size"]
            + cur["sbcs_carriers_size"]
            - cur["mbcs_block_size"]
            - cur["sbcs_block_size"]
        ),
        mbcs_blocks=mb,
        sbcs_blocks=sb,
        mbcs_carriers=m.container_value(inst, "current", "mbcs", "carriers"),
        sbcs_carriers=m.container_value(inst, "current", "sbcs", "carriers"),
        mbcs_average_block_size=m.average(cur["mbcs_block_size"], mb),
        sbcs_average_block_size=m.average(cur["sbcs_block_size"], sb),
        sbcs_to_mbcs=m.instance_sbcs_to_mbcs(inst, "current"),
        max=InstanceMax(
            **peak,  # type: ignore[arg-type]
            mbcs_blocks=m.container_value(inst, "max", "mbcs", "blocks"),
            sbcs_blocks=m.container_value(inst, "max", "sbcs", "blocks"),
            mbcs_carriers=m.container_value(inst, "max", "mbcs", "carriers"),
            sbcs_carriers=m.container_value(inst, "max", "sbcs", "carriers"),
        ),
        pool=None
        if pool is None
        else PoolRow(
            carriers=pool.carriers,
            carriers_size=pool.carriers_size,
            blocks=pool.block_count,
            blocks_size=pool.block_size,
            foreign_blocks={
                t: PoolBlocks(c, s) for t, (c, s) in pool.blocks.items() if t != inst.allocator
            },
        ),
        foreign_blocks={
            t: b.size.current
            for t, b in inst.mbcs.blocks.items()
            if t != inst.allocator and b.size.current
        },
        mseg_carriers=inst.mbcs.mseg_carriers + inst.sbcs.mseg_carriers,
        sys_carriers=inst.mbcs.sys_carriers + inst.sbcs.sys_carriers,
        options={
            k: o[k]
            for k in (
                "as",
                "sbct",
                "lmbcs",
                "smbcs",
                "mbcgs",
                "mmbcs",
                "acul",
                "acful",
                "acnl",
                "cp",
                "atags",
                "ramv",
            )
            if k in o
        },
        calls=dict(inst.calls),
    )


#: The per-type sums (type_sums): carrier and block bytes and block counts of each carrier kind,
#: the pool's carriers counted in mbcs as recon counts them (metrics.container_value).
TYPE_SUMS = ("mbcs_carriers_size", "sbcs_carriers_size", "mbcs_block_size", "sbcs_block_size",
             "mbcs_blocks", "sbcs_blocks", "pool_carriers_size")  # fmt: skip


def instance_sums(insts: Iterable[AllocatorInstance]) -> dict[str, int]:
    """The current sums of TYPE_SUMS over `insts` plus `allocated` (carrier bytes) and `used`
    (block bytes), pooled carriers counted as their owner's (recon's container_value): the one
    place instances are summed (by type here, by allocator in findings and the predictions)."""
    t = dict.fromkeys(TYPE_SUMS, 0)
    for inst in insts:
        for kind in ("mbcs", "sbcs"):
            t[f"{kind}_carriers_size"] += m.container_value(inst, "current", kind, "carriers_size")
            t[f"{kind}_block_size"] += m.container_value(inst, "current", kind, "blocks_size")
            t[f"{kind}_blocks"] += m.container_value(inst, "current", kind, "blocks")
        if inst.mbcs_pool is not None:
            t["pool_carriers_size"] += inst.mbcs_pool.carriers_size
    t["used"] = t["mbcs_block_size"] + t["sbcs_block_size"]
    t["allocated"] = t["mbcs_carriers_size"] + t["sbcs_carriers_size"]
    return t


def type_sums(snap: Snapshot) -> dict[str, dict[str, int]]:
    """Per allocator type, in snapshot order, instance_sums of its instances."""
    groups: dict[str, list[AllocatorInstance]] = {}
    for inst in snap.allocators:
        groups.setdefault(inst.allocator, []).append(inst)
    return {name: instance_sums(g) for name, g in groups.items()}


@dataclass(frozen=True)
class TypeRow(_Record):
    """One allocator type, its instances summed (instance_sums), worst (most unused) first."""

    allocator: str
    in_recon: bool
    instances: int
    used: int
    allocated: int
    mbcs_carriers_size: int
    sbcs_carriers_size: int
    mbcs_block_size: int
    sbcs_block_size: int
    mbcs_blocks: int
    sbcs_blocks: int
    pool_carriers_size: int
    max_allocated: int
    #: of the first scheduler instance (analyzer/options.py): as, sbct, lmbcs, smbcs, acul
    options: dict[str, Any]
    unused: int
    usage: float
    sbcs_share: float
    mbcs_average_block_size: int | float
    sbcs_average_block_size: int | float
    mbcs_average_vs_sbct: float | None


def type_rows(snap: Snapshot) -> list[TypeRow]:
    count: dict[str, int] = {}
    peak: dict[str, int] = {}
    for inst in snap.allocators:
        count[inst.allocator] = count.get(inst.allocator, 0) + 1
        peak[inst.allocator] = peak.get(inst.allocator, 0) + m.container_size(
            inst, "max", "carriers_size")
    opts = first_scheduler_options(snap)
    out = []
    for name, t in type_sums(snap).items():
        o = opts.get(name)
        options = {k: o[k] for k in ("as", "sbct", "lmbcs", "smbcs", "acul") if k in o} \
            if o is not None else {}
        mavg = m.average(t["mbcs_block_size"], t["mbcs_blocks"])
        sbct = options.get("sbct")
        out.append(TypeRow(
            allocator=name, in_recon=name in m.RECON_ALLOCATORS, instances=count[name],
            used=t["used"], allocated=t["allocated"],
            **{k: t[k] for k in TYPE_SUMS}, max_allocated=peak[name], options=options,
            unused=t["allocated"] - t["used"], usage=m.usage(t["used"], t["allocated"]),
            sbcs_share=t["sbcs_carriers_size"] / t["allocated"] if t["allocated"] else 0.0,
            mbcs_average_block_size=mavg,
            sbcs_average_block_size=m.average(t["sbcs_block_size"], t["sbcs_blocks"]),
            mbcs_average_vs_sbct=mavg / sbct if isinstance(sbct, int) and sbct > 0 else None))
    return sorted(out, key=lambda t: t.unused, reverse=True)


def carrier_bytes(types: list[TypeRow]) -> dict[str, int]:
    """Each allocator type's carrier bytes (categories.picture's `allocated`)."""
    return {r.allocator: r.allocated for r in types}


@dataclass(frozen=True)
class OsView(_Record):
    """The operating system's view beside the allocators'."""

    erlang_memory_total: int | None
    allocated: int
    allocated_all: int
    rss: int | None
    rss_minus_allocated: int | None
    rss_lazyfree: int | None
    mem_available: int | None
    mseg_cached_segments: int


def _os_view(snap: Snapshot, allocated: int, allocated_all: int) -> OsView:
    return OsView(
        erlang_memory_total=snap.memory.get("total"),
        allocated=allocated,
        allocated_all=allocated_all,
        rss=snap.rss,
        rss_minus_allocated=None if snap.rss is None else snap.rss - allocated_all,
        rss_lazyfree=snap.rss_lazyfree,
        mem_available=snap.mem_available,
        mseg_cached_segments=sum(x.cached_segments for x in snap.mseg),
    )


#: The allocator types every dump of a release with them lists (literal_alloc from OTP 20):
#: a truncated dump without one of them did not get that far, so its flags are unknown.
EXPECTED_TYPES = ("temp_alloc", "sl_alloc", "std_alloc", "ll_alloc", "eheap_alloc", "ets_alloc",
                  "fix_alloc", "literal_alloc", "binary_alloc", "driver_alloc")


@dataclass(frozen=True)
class Coverage(_Record):
    """What a source let us read: a truncated dump's analysis is PARTIAL and says what it saw
    and what it did not, and that the flags of allocators not read are unknown (never the OTP
    defaults)."""

    partial: bool
    read: list[str]
    not_read: list[str]
    #: allocator types no instance of which was read: their options in force are unknown
    flags_unknown: list[str]


def coverage(snap: Snapshot) -> Coverage:
    types = snap.allocator_names()
    read = [f"{len(snap.allocators)} allocator instances of {len(types)} "
            + ("type" if len(types) == 1 else "types")]
    not_read: list[str] = []
    unknown: list[str] = []
    if snap.memory:
        read.append("erlang:memory()")
    if snap.truncated:
        seen = set(types) | set(snap.disabled)  # a type switched off is not missing
        unknown = [t for t in EXPECTED_TYPES if t not in seen
                   and not (t == "literal_alloc" and snap.otp_release is not None
                            and snap.otp_release[:1] == "R")]
        if unknown:
            not_read.append("allocators " + ", ".join(unknown))
        if not snap.memory:
            not_read.append("erlang:memory()")
    dr = snap.extra.get("dump_read")
    for key, what in (("dump_procs", "processes"), ("ets", "ETS tables")):
        sec = snap.extra.get(key)
        if isinstance(sec, dict):
            read.append(f"{sec.get('read')} {what}")
        elif snap.truncated and isinstance(dr, dict):
            not_read.append(what)
    if snap.truncated and isinstance(dr, dict):
        not_read.insert(0, f"everything after ={dr.get('last_section')}")
    return Coverage(snap.truncated, read, not_read, unknown)


@dataclass(frozen=True)
class Analysis:
    """The analysis of one snapshot (docs/analysis-schema.md): `to_json()` is the document
    `beamalloc analyze --json` prints; readers take its fields. The sections with a shape are
    records (totals, the OS's view, type and instance rows with their max and pool, recon_alloc's
    rows: cache_hit_rates, average_block_sizes, sbcs_to_mbcs, the picture's parts, and the
    carrier maps: analyzer/carriers.py's CarrierSection); the sums by name (allocated_*) are
    dicts."""

    node: str
    otp_release: str | None
    erts_version: str | None
    source: str
    taken_unix: float | None  # when the snapshot was taken, Unix seconds (Snapshot.taken_at)
    schedulers: int | None
    wordsize: int | None
    os_pid: int | None
    truncated: bool
    notes: list[str]
    memory: dict[str, int]
    totals: Totals
    totals_max: Totals
    totals_all: Totals
    os: OsView
    allocator_types: list[TypeRow]
    allocators: list[InstanceRow]
    cache_hit_rates: list[CacheHitRate]
    average_block_sizes: list[AverageBlockSize]
    sbcs_to_mbcs: list[SbcsToMbcs]
    allocated_types: dict[str, int]
    allocated_instances: dict[str, int]
    carriers: CarrierSection
    #: who holds the memory: a Snapshot has no processes; the caller reads them from a live
    #: scan or a crash dump's =proc sections (advice/holders.py, docs/processes.md)
    processes: dict[str, Any] | None
    #: the cause of death first (crash dumps), what was read, every category and its holders
    death: Death | None
    coverage: Coverage
    categories: MemoryPicture
    #: the node's container and the tables its limits take; known VM defects it matches
    container: Container | None
    limits: list[LimitFinding]
    defects: list[DefectFinding]

    @property
    def taken_at(self) -> str | None:
        """When it was taken, ISO 8601 in UTC to the microsecond (the JSON's `taken_at`)."""
        return iso_utc(self.taken_unix)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "node": self.node,
            "otp_release": self.otp_release,
            "erts_version": self.erts_version,
            "source": self.source,
            "taken_at": self.taken_at,
            "schedulers": self.schedulers,
            "wordsize": self.wordsize,
            "os_pid": self.os_pid,
            "truncated": self.truncated,
            "notes": list(self.notes),
            "memory": dict(self.memory),
            "totals": self.totals.to_json(),
            "totals_max": self.totals_max.to_json(),
            "totals_all": self.totals_all.to_json(),
            "os": self.os.to_json(),
            "allocator_types": [t.to_json() for t in self.allocator_types],
            "allocators": [r.to_json() for r in self.allocators],
            "cache_hit_rates": [r.to_json() for r in self.cache_hit_rates],
            "average_block_sizes": [r.to_json() for r in self.average_block_sizes],
            "sbcs_to_mbcs": [r.to_json() for r in self.sbcs_to_mbcs],
            "allocated_types": self.allocated_types,
            "allocated_instances": self.allocated_instances,
            "carriers": self.carriers.to_json(),
            "processes": self.processes,
            "death": None if self.death is None else self.death.to_json(),
            "coverage": self.coverage.to_json(),
            "categories": self.categories.to_json(),
            "container": None if self.container is None else self.container.to_json(),
            "limits": [x.to_json() for x in self.limits],
            "defects": [x.to_json() for x in self.defects],
        }


def iso_utc(t: float | None) -> str | None:
    """A Unix time as ISO 8601 in UTC, "2024-05-01T12:00:00.250000Z"; None for None."""
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace(
        "+00:00", "Z")


def analyze(snap: Snapshot, processes: dict[str, Any] | None = None) -> Analysis:
    """The analysis of `snap`; `processes` is the holders' section (advice/holders.py) when
    the caller read them (a live scan, a dump's =proc sections)."""
    recon_insts = m.util_instances(snap)
    every = m.util_instances(snap, recon_only=False)
    frag = m.fragmentation(snap, "current", every)  # recon's order; non-recon rows interleaved
    by_key = {i.key: i for i in every}
    totals = _totals(snap, "current", recon_insts)
    totals_all = _totals(snap, "current", every)
    types = type_rows(snap)
    return Analysis(
        node=snap.node,
        otp_release=snap.otp_release,
        erts_version=snap.erts_version,
        source=snap.source,
        taken_unix=snap.taken_at,
        schedulers=snap.schedulers,
        wordsize=snap.wordsize,
        os_pid=snap.os_pid,
        truncated=snap.truncated,
        notes=list(snap.notes),
        memory=dict(snap.memory),
        totals=totals,
        totals_max=_totals(snap, "max", recon_insts),
        totals_all=totals_all,
        os=_os_view(snap, totals.allocated, totals_all.allocated),
        allocator_types=types,
        allocators=[_instance_row(by_key[key]) for key, _ in frag],
        cache_hit_rates=[
            CacheHitRate(
                ix, vals["hit_rate"], int(vals["hits"]), int(vals["calls"]),
                next(x.cached_segments for x in snap.mseg if x.instance == ix))
            for ix, vals in m.cache_hit_rates(snap)
        ],
        average_block_sizes=[AverageBlockSize(a, v["mbcs"], v["sbcs"])
                             for a, v in m.average_block_sizes(snap)],
        sbcs_to_mbcs=[SbcsToMbcs(a, n, r) for (a, n), r in m.sbcs_to_mbcs(snap)],
        allocated_types=dict(m.allocated_types(snap)),
        allocated_instances={str(ix): v for ix, v in m.allocated_instances(snap)},
        carriers=analysis_section(snap),
        processes=processes,
        death=death_of(snap),
        coverage=coverage(snap),
        categories=picture(snap, carrier_bytes(types), processes),
        container=container(snap, totals_all.allocated),
        limits=limit_findings(snap),
        defects=defect_findings(snap),
    )
