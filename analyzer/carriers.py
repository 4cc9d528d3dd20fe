"""Inside the carriers: how full each one is, what pins the sparse ones, and what that means.

Counters (system_info) say how many bytes an allocator's carriers hold and how few of them hold
data; they cannot say whether the unused bytes are a few nearly empty carriers or a little free
space in every carrier, and the remedy differs. `instrument:carriers/1` lists every carrier with
its size and allocated bytes (`Snapshot.carriers`, docs/snapshot-schema.md), which tells them
apart.

API (what the verdict and the pages import):

    carrier_map(snap) -> dict[str, AllocatorCarrierMap]  # {} when the snapshot has no carriers
    classify(counts) -> Classification                   # carrier_map() already calls it
    analysis_section(snap) -> CarrierSection             # the analysis' `carriers` record
    CarrierSection.to_json()                             # docs/analysis-schema.md, "carriers"

Definitions (multiblock carriers only: a single-block carrier is one block, full by definition):

- fill = allocated bytes (blocks with headers) / carrier size.
- FILL_BANDS: the distribution's bands, counted and summed apart for pooled and owned carriers
  (a pooled carrier was abandoned by its instance below its acul and waits for another instance
  to fetch it, docs/erts/alloc_util.md §5).
- sparse: fill below SPARSE (10 %). Its blocks are what pins it: the bytes that would have to
  move (be freed, copied elsewhere) for the carrier to empty and go back to the OS.
- The unused bytes of multiblock carriers (size − allocated) are split three ways by the fill of
  the carrier they sit in: sparse (< SPARSE), middling (SPARSE to FULL), and full (>= FULL,
  75 %). The class is the group holding most of them:
    "stragglers": in sparse carriers, pinned by few blocks (fewer than one per PIECE, 512 KiB,
      of the carrier). Placement (a strategy that packs the oldest carriers, a smaller lmbcs so
      fewer survivors share a carrier) and time (the stragglers die) can empty them.
    "scattered": in carriers a tenth to three quarters full, or in sparse carriers crowded
      with blocks (one or more per PIECE: even 512 KiB carriers would each keep one): the
      survivors are spread over every carrier. No placement flag moves live data; only
      freeing or copying it does.
    "free inside carriers": in mostly full carriers: holes between live blocks. Carriers stay
      because they are in use; the holes are reused by the next allocations of fitting size.
  "compact" when the unused bytes are below COMPACT_SHARE of the carrier bytes or below
  COMPACT_BYTES: nothing worth a class.
- largest free block: the top bucket of the free-block histograms (a byte range, the histogram
  is coarse), set against sbct (a block that large never goes in a multiblock carrier) and lmbcs
  (the largest multiblock carrier size).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from beamalloc.analyzer.options import first_scheduler_instance
from beamalloc.snapshot import Carrier, Snapshot
from beamalloc.units import human, pct

#: Fill bands [lo, hi) of the distribution; the last band includes 1.0.
FILL_BANDS: tuple[tuple[float, float], ...] = (
    (0.0, 0.1), (0.1, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 0.9), (0.9, 1.0))
#: A multiblock carrier below this fill is sparse: a few blocks pin it.
SPARSE = 0.10
#: A sparse carrier with at least one block per PIECE of it on average is crowded, not pinned
#: by stragglers: cut into carriers of this size (the smallest lmbcs a placement flag sets,
#: docs/erts/tuning.md §1 R3), every piece would still hold a block.
PIECE = 512 << 10
#: A multiblock carrier at or above this fill is mostly full.
FULL = 0.75
#: Below this share of multiblock carrier bytes unused, or below COMPACT_BYTES (8 MiB: a few
#: default-size carriers), there is nothing worth a class.
COMPACT_SHARE = 0.10
COMPACT_BYTES = 8 << 20

STRAGGLERS = "stragglers"
SCATTERED = "scattered"
FREE_INSIDE = "free inside carriers"
COMPACT = "compact"


@dataclass(frozen=True)
class FillBand:
    """Carriers whose fill is in [lo, hi): counts and carrier bytes, pooled and owned apart."""

    lo: float
    hi: float
    owned: int = 0
    owned_bytes: int = 0
    pooled: int = 0
    pooled_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Classification:
    kind: str  # STRAGGLERS, SCATTERED, FREE_INSIDE or COMPACT
    share: float  # share of the unused multiblock bytes in the deciding group
    reason: str  # one line, with the numbers

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CarrierPoints:
    """Every carrier of an allocator, for the map: one column per attribute, owned before
    pooled, then by size and fill. `fill` is kept to 5 places, as the map (figure, terminal
    strip and JSON) shows it."""

    size: tuple[int, ...] = ()
    fill: tuple[float, ...] = ()
    in_pool: tuple[bool, ...] = ()
    instance: tuple[int | None, ...] = ()
    blocks: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.size)

    def to_json(self) -> dict[str, Any]:
        return {"size": list(self.size), "fill": list(self.fill), "in_pool": list(self.in_pool),
                "instance": list(self.instance), "blocks": list(self.blocks)}


@dataclass(frozen=True)
class CarrierCounts:
    """One allocator's carriers, counted by the module docstring's definitions: what `classify`
    weighs."""

    allocator: str
    carriers: int
    size: int  # carrier bytes, every carrier
    blocks_size: int
    sbcs: int
    sbcs_size: int
    mbcs: int
    mbcs_size: int
    mbcs_blocks_size: int
    pooled: int
    pooled_size: int
    bands: tuple[FillBand, ...]
    sparse: int  # multiblock carriers below SPARSE fill
    sparse_size: int  # their carrier bytes
    sparse_pooled: int
    pinning_blocks: int  # the blocks in them ...
    pinning_bytes: int  # ... and their bytes: what would have to move to give them back
    unused_sparse: int  # unused multiblock bytes in sparse carriers
    #: ... of which in sparse carriers crowded with blocks: one or more in every PIECE of them
    unused_sparse_crowded: int
    sparse_crowded: int  # those carriers
    unused_middling: int  # ... in carriers SPARSE to FULL
    unused_full: int  # ... in carriers at or above FULL
    largest_free: tuple[int, int | None] | None  # byte range, from the histograms
    sbct: int | None
    lmbcs: int | None
    unscanned: int

    @property
    def unused(self) -> int:
        return self.mbcs_size - self.mbcs_blocks_size


@dataclass(frozen=True)
class AllocatorCarrierMap(CarrierCounts):
    """One allocator's carriers, as counted and classified above, and every carrier for the
    map."""

    classification: Classification
    points: CarrierPoints

    def to_json(self) -> dict[str, Any]:
        return {
            "allocator": self.allocator,
            "carriers": self.carriers,
            "size": self.size,
            "blocks_size": self.blocks_size,
            "sbcs": self.sbcs,
            "sbcs_size": self.sbcs_size,
            "mbcs": self.mbcs,
            "mbcs_size": self.mbcs_size,
            "mbcs_blocks_size": self.mbcs_blocks_size,
            "mbcs_unused": self.unused,
            "pooled": self.pooled,
            "pooled_size": self.pooled_size,
            "fill_bands": [b.to_json() for b in self.bands],
            "sparse": {"carriers": self.sparse, "size": self.sparse_size,
                       "pooled": self.sparse_pooled, "pinning_blocks": self.pinning_blocks,
                       "pinning_bytes": self.pinning_bytes},
            "unused_by_fill": {"sparse": self.unused_sparse,
                               "sparse_crowded": self.unused_sparse_crowded,
                               "middling": self.unused_middling, "full": self.unused_full},
            "largest_free": None if self.largest_free is None else list(self.largest_free),
            "sbct": self.sbct,
            "lmbcs": self.lmbcs,
            "unscanned": self.unscanned,
            "classification": self.classification.to_json(),
            "map": self.points.to_json(),
        }


@dataclass(frozen=True)
class CarrierSection:
    """The `carriers` section of the analysis (docs/analysis-schema.md): whether the snapshot
    has per-carrier data, and per allocator its map, most unused multiblock bytes first."""

    available: bool
    unavailable: str | None  # why not, where a live node was asked and could not answer
    skipped: int  # carriers the VM reported and the collector did not read (its cap)
    count: int
    allocators: tuple[AllocatorCarrierMap, ...]

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "unavailable": self.unavailable,
                "skipped": self.skipped, "count": self.count,
                "allocators": [m.to_json() for m in self.allocators]}


def _is_sbc(c: Carrier) -> bool:
    # instrument does not say which kind a carrier is; a single-block carrier has exactly one
    # block and no free block (erl_alloc_util.c gather_cinfo_scan gives it no histogram).
    return c.blocks == 1 and c.free_histogram.total == 0


def _band(fill: float) -> int:
    for i, (_, hi) in enumerate(FILL_BANDS):
        if fill < hi:
            return i
    return len(FILL_BANDS) - 1


def _option(snap: Snapshot, allocator: str, key: str) -> int | None:
    first = first_scheduler_instance(snap.instances(allocator))  # as the analysis shows them
    v = first.options.get(key) if first else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def classify(cm: CarrierCounts) -> Classification:
    """The class of an allocator's unused multiblock bytes (the module docstring's rules)."""
    unused = cm.unused
    if unused < COMPACT_BYTES or (cm.mbcs_size and unused < COMPACT_SHARE * cm.mbcs_size):
        return Classification(COMPACT, 0.0, f"{human(unused)} unused in multiblock carriers: "
                              "little to win")
    crowded = cm.unused_sparse_crowded
    groups = ((STRAGGLERS, cm.unused_sparse - crowded), (SCATTERED, cm.unused_middling + crowded),
              (FREE_INSIDE, cm.unused_full))
    kind, top = max(groups, key=lambda g: g[1])
    share = top / unused
    if kind == SCATTERED and crowded >= cm.unused_middling:
        why = (f"{cm.sparse_crowded:,} of {cm.mbcs:,} multiblock carriers are under "
               f"{pct(SPARSE, 0)} full but hold a block in every {human(PIECE)} of them on "
               f"average, with {pct(share, 0)} of the {human(unused)} unused: the survivors are "
               "spread over every carrier (whether they die or stay, the map cannot tell: the "
               "verdict weighs it)")
    elif kind == STRAGGLERS:
        why = (f"{cm.sparse:,} of {cm.mbcs:,} multiblock carriers are under {pct(SPARSE, 0)} "
               f"full ({cm.sparse_pooled:,} pooled) and hold {pct(share, 0)} of the "
               f"{human(unused)} unused; "
               f"{cm.pinning_blocks:,} blocks ({human(cm.pinning_bytes)}) pin them")
    elif kind == SCATTERED:
        why = (f"{pct(share, 0)} of the {human(unused)} unused is in carriers "
               f"{pct(SPARSE, 0)}-{pct(FULL, 0)} full: live data is spread over every carrier")
    else:
        why = (f"{pct(share, 0)} of the {human(unused)} unused is free space inside carriers at "
               f"least {pct(FULL, 0)} full")
    return Classification(kind, share, why)


def allocator_map(snap: Snapshot, allocator: str, carriers: list[Carrier]) -> AllocatorCarrierMap:
    # One pass, sums in locals: a node can list a hundred thousand carriers.
    size = blocks_size = unscanned = pooled = pooled_size = sbcs = sbcs_size = 0
    mbcs = mbcs_size = mbcs_blocks_size = 0
    sparse = sparse_size = sparse_pooled = pinning_blocks = pinning_bytes = unused_sparse = 0
    crowded = unused_crowded = unused_middling = unused_full = 0
    bands = [[0, 0, 0, 0] for _ in FILL_BANDS]  # owned, owned_bytes, pooled, pooled_bytes
    top_bucket, top_hist = -1, None
    pts = []
    for c in carriers:
        size += c.size
        blocks_size += c.blocks_size
        unscanned += c.unscanned
        fill = c.fill
        pts.append((c.size, fill, c.in_pool, c.instance, c.blocks))
        if c.in_pool:
            pooled += 1
            pooled_size += c.size
        if _is_sbc(c):
            sbcs += 1
            sbcs_size += c.size
            continue
        mbcs += 1
        mbcs_size += c.size
        mbcs_blocks_size += c.blocks_size
        b = bands[_band(fill)]
        off = 2 if c.in_pool else 0
        b[off] += 1
        b[off + 1] += c.size
        free = c.size - c.blocks_size
        if fill < SPARSE:
            sparse += 1
            sparse_size += c.size
            sparse_pooled += c.in_pool
            pinning_blocks += c.blocks
            pinning_bytes += c.blocks_size
            unused_sparse += free
            if c.blocks >= max(c.size // PIECE, 1):
                crowded += 1
                unused_crowded += free
        elif fill < FULL:
            unused_middling += free
        else:
            unused_full += free
        # the largest free block: the top bucket any histogram fills, the first to reach it
        hist = c.free_histogram.counts
        for i in range(len(hist) - 1, top_bucket, -1):
            if hist[i]:
                top_bucket, top_hist = i, c.free_histogram
                break
    counted = CarrierCounts(
        allocator=allocator, carriers=len(carriers), size=size, blocks_size=blocks_size,
        sbcs=sbcs, sbcs_size=sbcs_size, mbcs=mbcs, mbcs_size=mbcs_size,
        mbcs_blocks_size=mbcs_blocks_size, pooled=pooled, pooled_size=pooled_size,
        bands=tuple(FillBand(lo, hi, *b) for (lo, hi), b in zip(FILL_BANDS, bands, strict=True)),
        sparse=sparse, sparse_size=sparse_size, sparse_pooled=sparse_pooled,
        pinning_blocks=pinning_blocks, pinning_bytes=pinning_bytes, unused_sparse=unused_sparse,
        unused_sparse_crowded=unused_crowded, sparse_crowded=crowded,
        unused_middling=unused_middling, unused_full=unused_full,
        largest_free=None if top_hist is None else top_hist.bounds(top_bucket),
        sbct=_option(snap, allocator, "sbct"), lmbcs=_option(snap, allocator, "lmbcs"),
        unscanned=unscanned)
    pts.sort(key=lambda p: (p[2], p[0], p[1]))
    cols = tuple(zip(*pts, strict=True)) or ((),) * 5
    points = CarrierPoints(cols[0], tuple(round(f, 5) for f in cols[1]), *cols[2:])
    return AllocatorCarrierMap(**{f.name: getattr(counted, f.name) for f in fields(counted)},
                               classification=classify(counted), points=points)


def carrier_map(snap: Snapshot) -> dict[str, AllocatorCarrierMap]:
    """Per allocator with carriers, most unused multiblock bytes first; {} without carrier data."""
    by: dict[str, list[Carrier]] = {}
    for c in snap.carriers or ():
        by.setdefault(c.allocator, []).append(c)
    maps = [allocator_map(snap, a, cs) for a, cs in by.items()]
    maps.sort(key=lambda m: (-m.unused, m.allocator))
    return {m.allocator: m for m in maps}


def analysis_section(snap: Snapshot) -> CarrierSection:
    """The `carriers` section of the analysis (docs/analysis-schema.md)."""
    return CarrierSection(
        available=snap.carriers is not None,
        unavailable=snap.carriers_unavailable,
        skipped=snap.carriers_skipped,
        count=len(snap.carriers or ()),
        allocators=tuple(carrier_map(snap).values()),
    )
