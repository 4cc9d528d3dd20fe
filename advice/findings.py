"""What the rules see and what they say: Facts in, Findings (with Advice) out.

Facts are read from a Snapshot using only the *current* and the *max-ever* value of each
statistic. The middle value ("max since the last call") is reset by every live
`system_info({allocator, _})` call but not in a crash dump, so advice built on it would differ
by source (issue 3, must-hold 7; docs/erts/alloc_util.md §6.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from beamalloc.analyzer import metrics as m
from beamalloc.analyzer.analysis import instance_sums
from beamalloc.analyzer.options import first_scheduler_instance
from beamalloc.collector.terms import TermError, parse_term, proplist
from beamalloc.flags import ALLOCATOR_LETTERS, UINT_MAX, Flag
from beamalloc.snapshot import AllocatorInstance, Snapshot

Level = Literal["action", "info"]

#: Strategies that turn the carrier pool off (docs/erts/tuning.md §0.2 item 1; af is
#: temp_alloc's, which never migrates).
NON_MIGRATING = ("bf", "aobf", "gf")
MCS_MAX = 30  # +MMmcs is clamped to 0..30 (docs/erts/alloc_util.md §2.2)

#: First erts release that knows a parameter or strategy (docs/erts/alloc_util.md §2.5).
SINCE: dict[str, tuple[int, ...]] = {
    "acful": (13, 1, 2),  # OTP 25.1.2
    "acnl": (9, 2, 1),  # OTP 20.2.1
    "acfml": (9, 2, 1),
    "ageffcaoff": (9, 2, 1),
    "ageffcbf": (9, 2, 1),
    "ageffcaobf": (9, 2, 1),
    "atags": (10, 0),  # OTP 21.0
    "cp": (11, 1, 1),  # OTP 23.1.1 (also 22.3.4.x, erts 10.7.2)
    "dai": (12, 2),  # OTP 24.2
    "lp": (15, 0),  # OTP 27.0
    "madtn": (16, 1),  # OTP 28.1, OTP-19739
    "hmaxib": (14, 0),  # OTP 26.0, OTP-18410: +hmaxib, include_shared_binaries
}


class Bytes(int):
    """A number of a finding's evidence that is a size in bytes: its kind travels with it, so
    a reader formats it as a size (reporters/recommend.py `evidence_line`), never by the words
    of its key (issue 27 item 1). To everything else an int: sums, comparisons and the JSON
    (`json.dumps` writes `int.__repr__`) see the number alone."""

    __slots__ = ()

    @classmethod
    def of(cls, v: Any) -> Any:
        """`v` as a size where it is an int; anything else (None, a string) as it is."""
        return cls(v) if type(v) is int else v


class Share(float):
    """A number of a finding's evidence that is a share of 1 (a usage, a hit rate), said as a
    percentage; a float to everything else, as `Bytes` is an int. A ratio that can pass 1
    (sbcs_to_mbcs) is a plain float."""

    __slots__ = ()

    @classmethod
    def of(cls, v: Any) -> Any:
        """`v` as a share where it is a float (an int 0 stays the int the JSON prints)."""
        return cls(v) if type(v) is float else v


@dataclass(frozen=True)
class Advice:
    """One flag to set, with everything an expert needs to check it."""

    rule: str
    allocator: str  # allocator name, or "mseg_alloc"
    flag: Flag
    reason: str
    cost: str
    evidence: dict[str, Any]
    sources: tuple[str, ...]
    trade_off: bool = False  # True where the flag buys speed with memory (issue 3, must-hold 6)


@dataclass
class Finding:
    """What a rule saw. `action` findings carry advice; `info` findings never do."""

    rule: str
    level: Level
    title: str
    message: str
    evidence: dict[str, Any]
    sources: tuple[str, ...]
    allocator: str | None = None
    advice: list[Advice] = field(default_factory=list)
    #: the title's words after the name of what it is about (`about`: an allocator, a
    #: mapper), for a row that names it already; None where the title names nothing first
    topic: str | None = None
    about: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "level": self.level,
            "allocator": self.allocator,
            "title": self.title,
            "message": self.message,
            "evidence": self.evidence,
            "sources": list(self.sources),
            "flags": [a.flag.render() for a in self.advice],
        }


@dataclass
class AllocFacts:
    """One allocator type, all its instances summed (pool carriers count as mbcs, like recon)."""

    name: str
    letter: str | None
    options: dict[str, Any]  # of the first scheduler instance (instance 0 never pools, §2.3)
    allocated: int
    used: int
    max_allocated: int
    max_used: int
    mbcs_allocated: int
    mbcs_used: int
    mbcs_blocks: int
    max_mbcs_blocks: int
    sbcs_allocated: int
    sbcs_used: int
    sbcs_blocks: int
    max_sbcs_allocated: int
    max_sbcs_blocks: int
    pool_carriers: int
    pool_allocated: int
    pool_used: int
    calls: dict[str, int]
    sched_allocated: list[int]  # per scheduler instance (1..S), for imbalance
    #: An upper bound on the largest block the allocator ever held: per instance, the most bytes
    #: its single-block carriers held at once (one block, if it never had two); 0 if it never
    #: had a single-block carrier (then every block stayed below sbct).
    largest_block: int = 0
    #: The carrier pool's fetch counters (`fetch`, `fail*`, `skip_*`), summed over the instances
    #: that tried to fetch; empty where the source has none: a crash dump never prints them
    #: (docs/erts/alloc_util.md §5.1).
    pool_counters: dict[str, int] = field(default_factory=dict)

    def fetch_failures(self) -> int:
        """Fetch attempts that took no carrier (docs/erts/alloc_util.md §5.1): each attempt ends
        in exactly one of `fetch` or these."""
        return sum(self.pool_counters.get(k, 0) for k in FETCH_FAILURES)

    @property
    def unused(self) -> int:
        return self.allocated - self.used

    @property
    def usage(self) -> float:
        return m.usage(self.used, self.allocated)

    @property
    def mbcs_usage(self) -> float:
        return m.usage(self.mbcs_used, self.mbcs_allocated)

    @property
    def max_usage(self) -> float:
        return m.usage(self.max_used, self.max_allocated)

    @property
    def sbct(self) -> int | None:
        v = self.options.get("sbct")
        # ~0 (beamalloc.flags.UINT_MAX) is "infinite": ll_alloc, literal_alloc (§2.3).
        return v if isinstance(v, int) and not isinstance(v, bool) and v < UINT_MAX else None

    def call(self, kind: str) -> int:
        """Calls of `<short>_<kind>` (binary_alloc, binary_realloc, …) as the VM counts them."""
        short = self.name.removesuffix("_alloc")
        return self.calls.get(f"{short}_{kind}", 0)


#: The counters of a fetch attempt that ended without a carrier (docs/erts/alloc_util.md §5.1).
FETCH_FAILURES = ("fail", "fail_shared", "fail_pooled", "fail_pend_dealloc")
#: Counters of which exactly one counts each carrier a fetch passed over (`skip_size` counts
#: some of them a second time): docs/erts/alloc_util.md §5.1.
PASSED_OVER = ("skip_busy", "skip_race", "skip_not_pooled")


@dataclass(frozen=True)
class SuperCarrier:
    """One erts_mmap mapper's super carrier: `literal_mmap` (literal_alloc's, always there on
    64-bit) or `default_mmap` (with `+MMscs`). docs/erts/alloc_util.md §10."""

    mapper: str
    size: int  # `total`: the reserved range
    used: int  # `used`: carriers and the mapper's own bookkeeping
    only: bool  # `sco`: no fallback to the OS when it is full

    @property
    def free(self) -> int:
        return max(self.size - self.used, 0)

    @property
    def used_share(self) -> float:
        return self.used / self.size if self.size else 0.0


def super_carriers(text: object) -> dict[str, SuperCarrier]:
    """The super carriers in a snapshot's `erts_mmap` section, as the live term
    (`[{literal_mmap, [{options, [...]}, {supercarrier, [{sizes, [...]}, ...]}]}, ...]`) or
    as a crash dump's lines (`literal_mmap: supercarrier total size: N`); docs/erts/alloc_util.md
    §10. A mapper without a super carrier (default_mmap without +MMscs) is left out, and text
    that is neither shape gives nothing."""
    if not isinstance(text, str) or not text:
        return {}
    raw: dict[str, dict[str, object]] = {}
    if text.lstrip().startswith("["):
        try:
            term = parse_term(text, final_dot=False)
        except TermError:
            return {}
        for name, props in proplist(term if isinstance(term, list) else []).items():
            p = proplist(props if isinstance(props, list) else [])
            sizes = proplist(proplist(p.get("supercarrier", [])).get("sizes", []))
            opts = proplist(p.get("options", []))
            raw[str(name)] = {"size": sizes.get("total"), "used": sizes.get("used"),
                              "only": opts.get("sco")}  # fmt: skip
    else:
        keys = {"supercarrier total size": "size", "supercarrier used size": "used",
                "option sco": "only"}  # fmt: skip
        for line in text.splitlines():
            mapper, _, rest = line.partition(": ")
            key, _, value = rest.rpartition(": ")
            if key in keys:
                v: object = value == "true" if key == "option sco" else (
                    int(value) if value.isdigit() else None)
                raw.setdefault(mapper, {})[keys[key]] = v
    out = {}
    for mapper, r in raw.items():
        size, used = r.get("size"), r.get("used")
        if isinstance(size, int) and isinstance(used, int) and size > 0:
            out[mapper] = SuperCarrier(mapper, size, used, r.get("only") in (True, "true"))
    return out


@dataclass
class Facts:
    node: str
    source: str
    otp_release: str | None
    erts_version: str | None
    schedulers: int | None
    usage: float
    allocated: int
    used: int
    max_allocated: int
    max_used: int
    rss: int | None
    memory: dict[str, int]
    allocators: dict[str, AllocFacts]
    mseg_calls: int
    mseg_hits: int
    mseg_mcs: int | None
    slogan: str | None = None  # a crash dump's: why the node died
    wordsize: int | None = None
    super_carriers: dict[str, SuperCarrier] = field(default_factory=dict)
    rss_lazyfree: int | None = None  # of RSS, the pages given back with MADV_FREE (LazyFree)

    @property
    def unused(self) -> int:
        return self.allocated - self.used


def _cv(i: AllocatorInstance, kw: m.Keyword, kind: Literal["sbcs", "mbcs"], c: m.Container) -> int:
    return m.container_value(i, kw, kind, c)


def _alloc_facts(name: str, insts: list[AllocatorInstance], schedulers: int | None) -> AllocFacts:
    sched = [
        i for i in insts if i.instance >= 1 and (schedulers is None or i.instance <= schedulers)
    ]
    first = first_scheduler_instance(insts)
    assert first is not None  # a group has an instance
    calls: dict[str, int] = {}
    for i in insts:
        for k, v in i.calls.items():
            calls[k] = calls.get(k, 0) + v

    def total(kw: m.Keyword, kind: Literal["sbcs", "mbcs"], c: m.Container) -> int:
        return sum(_cv(i, kw, kind, c) for i in insts)

    pools = [i.mbcs_pool for i in insts if i.mbcs_pool is not None]
    counters: dict[str, int] = {}
    for pool in pools:
        for k, v in pool.counters.items():
            counters[k] = counters.get(k, 0) + v
    now = instance_sums(insts)
    return AllocFacts(
        name=name,
        letter=ALLOCATOR_LETTERS.get(name),
        options=dict(first.options),
        allocated=now["allocated"],
        used=now["used"],
        max_allocated=sum(m.container_size(i, "max", "carriers_size") for i in insts),
        max_used=sum(m.container_size(i, "max", "blocks_size") for i in insts),
        mbcs_allocated=now["mbcs_carriers_size"],
        mbcs_used=now["mbcs_block_size"],
        mbcs_blocks=now["mbcs_blocks"],
        max_mbcs_blocks=total("max", "mbcs", "blocks"),
        sbcs_allocated=now["sbcs_carriers_size"],
        sbcs_used=now["sbcs_block_size"],
        sbcs_blocks=now["sbcs_blocks"],
        max_sbcs_allocated=total("max", "sbcs", "carriers_size"),
        max_sbcs_blocks=total("max", "sbcs", "blocks"),
        pool_carriers=sum(p.carriers for p in pools),
        pool_allocated=sum(p.carriers_size for p in pools),
        pool_used=sum(p.block_size for p in pools),
        calls=calls,
        sched_allocated=[m.container_size(i, "current", "carriers_size") for i in sched],
        largest_block=max((i.sbcs.block_size.max for i in insts), default=0),
        pool_counters=counters,
    )


def facts(snap: Snapshot) -> Facts:
    groups: dict[str, list[AllocatorInstance]] = {}
    for inst in m.util_instances(snap):
        groups.setdefault(inst.allocator, []).append(inst)
    allocs = {n: _alloc_facts(n, g, snap.schedulers) for n, g in groups.items()}
    mcs = [x.options.get("mcs") for x in snap.mseg if isinstance(x.options.get("mcs"), int)]
    return Facts(
        node=snap.node,
        source=snap.source,
        otp_release=snap.otp_release,
        erts_version=snap.erts_version,
        schedulers=snap.schedulers,
        usage=float(m.memory(snap, "usage")),
        allocated=int(m.memory(snap, "allocated")),
        used=int(m.memory(snap, "used")),
        max_allocated=int(m.memory(snap, "allocated", "max")),
        max_used=int(m.memory(snap, "used", "max")),
        rss=snap.rss,
        memory=dict(snap.memory),
        allocators=allocs,
        mseg_calls=sum(x.calls.get("mseg_alloc", 0) for x in snap.mseg),
        mseg_hits=sum(x.cache_hits for x in snap.mseg),
        mseg_mcs=int(mcs[0]) if mcs else None,  # type: ignore[arg-type]
        slogan=snap.extra.get("slogan") if isinstance(snap.extra.get("slogan"), str) else None,
        wordsize=snap.wordsize,
        super_carriers=super_carriers(snap.extra.get("erts_mmap")),
        rss_lazyfree=snap.rss_lazyfree,
    )
