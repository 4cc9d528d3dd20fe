"""Every byte accounted for: the erlang:memory() categories against the allocators that hold
them, and the holders inside each (docs/erts/memory-categories.md §1).

erlang:memory(total) is processes + system; system splits into atom, binary, code, ets and the
rest (tables, ports, drivers, messages in flight...). Each allocation type belongs to one of
these classes (the `class` column of docs/erts/erts_types_otp25.tsv), so each category has the
allocators whose carriers hold it. The holders are what the sources name: processes (the scan or
the dump's =proc sections), ETS tables (a dump's =ets sections or a live node's table list), the
atom and code categories as one holder each when they are large, and the groups of processes
that share an initial call where a group holds more than any one process does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from beamalloc.snapshot import Snapshot

#: The erlang:memory() categories, in the order they are shown, with the allocators whose types
#: are of that class (docs/erts/memory-categories.md §1, from erts_types_otp25.tsv).
HOMES: dict[str, tuple[str, ...]] = {
    "processes": ("eheap_alloc", "fix_alloc", "sl_alloc", "std_alloc"),
    "binary": ("binary_alloc",),
    "ets": ("ets_alloc", "sl_alloc", "std_alloc", "ll_alloc"),
    "atom": ("ll_alloc",),
    "code": ("ll_alloc", "literal_alloc", "std_alloc", "sl_alloc"),
    "other_system": ("temp_alloc", "sl_alloc", "std_alloc", "ll_alloc", "driver_alloc",
                     "fix_alloc", "sys_alloc"),
}
#: The one allocator that holds (nearly) only that category, where there is one.
OWN = {"processes": "eheap_alloc", "binary": "binary_alloc", "ets": "ets_alloc",
       "code": "literal_alloc"}
#: A category named as a holder of its own (atoms, code) once it holds this much [heur]:
#: a typical node has 0.5-2 MiB of atoms and 10-60 MiB of code.
LARGE = {"atom": 16 << 20, "code": 128 << 20}
#: The largest holder leads the outputs from this share of erlang:memory(total) [heur]: below
#: it no single holder explains the node's memory.
NOTABLE_SHARE = 0.10
#: A group of processes (one initial call) is named as a holder only when it holds at least
#: this many times its largest member [heur]: below it, the member is the better name (a
#: group of one large process and a few small ones is that process).
GROUP_OVER_ONE = 2
#: Spawn calls that say nothing of what a process does: a group of them is named by where its
#: members wait, where the scan tells it (OTP 25 groups every proc_lib process under
#: proc_lib:init_p/5; a process spawned from a fun is erlang:apply/2).
GENERIC_CALLS = frozenset({"erlang:apply/2", "proc_lib:init_p/5", "proc_lib:init_p/3"})
HolderKind = Literal["process", "process_group", "ets_table", "atom", "code", "binary",
                     "origin", "port"]
#: instrument:allocations/1 types counted in erlang:memory(binary); the others of a NIF or
#: driver are in the rest of system (docs/erts/memory-categories.md §1).
BINARY_TYPES = ("binary", "drv_binary")


@dataclass(frozen=True)
class CategoryHolder:
    kind: HolderKind
    name: str
    bytes: int
    #: owner pid, table type, current function: what identifies it beyond its name
    detail: str = ""
    #: of the same name (ETS tables of one name owned by several processes)
    siblings: int = 0
    siblings_bytes: int = 0
    #: a process group's members (its bytes are their process_info memory summed)
    members: int = 0
    # The typed facts `detail` says in words, for the readers that word them their own way
    # (advice/wording.py holder_label): not in the JSON, whose `detail` says them.
    #: a process or binary holder's pid
    pid: str | None = None
    #: a process group named by where its members wait: the spawn call that says nothing
    spawned_as: str | None = None
    #: a process group's members waiting with an empty mailbox (scaled as `members`)
    idle: int | None = None
    #: a process group scaled from a sample of the processes (a scan cut by its budget)
    scaled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "bytes": self.bytes, "detail": self.detail,
                "siblings": self.siblings, "siblings_bytes": self.siblings_bytes,
                "members": self.members}


def group_facts(h: CategoryHolder) -> list[str]:
    """A process group's facts beyond its name and size, in words: how many wait idle, and
    whether it was scaled from a sample (its `detail` after the spawn call)."""
    return [x for x in (
        f"{h.idle:,} waiting with an empty mailbox" if h.idle is not None else "",
        "scaled from a sample of the processes" if h.scaled else "") if x]


@dataclass(frozen=True)
class Category:
    name: str
    bytes: int | None
    share: float | None  # of erlang:memory(total)
    #: (allocator, its carrier bytes) for the allocators of HOMES present in the snapshot
    allocators: list[tuple[str, int]]
    holders: list[CategoryHolder] = field(default_factory=list)
    #: what the holders shown add up to, and whether the source lists them all
    holders_bytes: int = 0
    holders_complete: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "share": self.share,
                "allocators": [list(x) for x in self.allocators],
                "holders": [h.to_json() for h in self.holders],
                "holders_bytes": self.holders_bytes, "holders_complete": self.holders_complete}


@dataclass(frozen=True)
class MemoryPicture:
    total: int | None
    allocated_all: int
    categories: list[Category]
    #: the largest single holder of any kind, the verdict's "who holds the memory"
    largest: CategoryHolder | None
    notes: list[str] = field(default_factory=list)
    #: its share of erlang:memory(total), and whether that makes it a first-line fact
    largest_share: float | None = None
    largest_notable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "allocated_all": self.allocated_all,
                "categories": [c.to_json() for c in self.categories],
                "largest": None if self.largest is None else self.largest.to_json(),
                "notes": list(self.notes), "largest_share": self.largest_share,
                "largest_notable": self.largest_notable}


def _ets_holders(snap: Snapshot) -> tuple[list[CategoryHolder], bool]:
    ets = snap.extra.get("ets")
    if not isinstance(ets, dict) or not isinstance(ets.get("tables"), list):
        return [], False
    by_name: dict[str, list[int]] = {}
    for t in ets["tables"]:
        by_name.setdefault(str(t.get("name")), []).append(int(t.get("bytes", 0)))
    out = []
    for t in ets["tables"][:10]:
        sib = by_name.get(str(t.get("name")), [])
        out.append(CategoryHolder(
            "ets_table", str(t.get("name")), int(t.get("bytes", 0)),
            detail=f"owner {t.get('owner')}, {t.get('type') or '?'}, "
                   f"{t.get('objects') if t.get('objects') is not None else '?'} objects",
            siblings=len(sib), siblings_bytes=sum(sib)))
    complete = ets.get("read") == ets.get("count") and len(ets["tables"]) == ets.get("count")
    return out, complete


def _origin_holders(snap: Snapshot) -> dict[str, list[CategoryHolder]]:
    """Per category, the NIFs, drivers and ports instrument tags (OTP 21+, allocators with
    atags; per port from OTP 27, collector/instrument.py): bytes are a lower bound, each block
    counted at its histogram bucket's low edge. A port is named with its driver where the
    collector read it (extra.port_names)."""
    by: dict[tuple[str, str], int] = {}
    for tb in snap.tagged_blocks or ():
        if tb.origin == "system":
            continue
        cat = "binary" if tb.type in BINARY_TYPES else "other_system"
        low = sum(c * tb.histogram.bounds(i)[0] for i, c in enumerate(tb.histogram.counts))
        by[(cat, tb.origin)] = by.get((cat, tb.origin), 0) + low
    names = snap.extra.get("port_names")
    names = names if isinstance(names, dict) else {}
    out: dict[str, list[CategoryHolder]] = {}
    for (cat, origin), n in sorted(by.items(), key=lambda kv: -kv[1]):
        if n and len(out.setdefault(cat, [])) < 5:
            port = origin.startswith("#Port<")
            driver = names.get(origin) if port else None
            if isinstance(driver, str):  # a snapshot file is outside input: printable only
                driver = "".join(c if c.isprintable() else "?" for c in driver[:120])
            out[cat].append(CategoryHolder(
                "port" if port else "origin",
                f"{origin} ({driver})" if isinstance(driver, str) else origin, n,
                detail="at least (instrument:allocations/1" + (", per port)" if port else ")")))
    return out


def _proc_holders(snap: Snapshot, processes: dict[str, Any] | None,
                  measure: str) -> list[CategoryHolder]:
    """Processes by `measure` (memory or binary_bytes): the dump's, else a scan's top lists."""
    rows: list[dict[str, Any]] = []
    # a dump's own processes first, which its snapshot JSON keeps: the same holders either way
    if isinstance(snap.extra.get("dump_procs"), dict):
        rows = [{"pid": r["pid"], "name": r.get("name"), "initial_call": r.get("initial_call"),
                 "current_function": r.get("current_function"), "memory": r.get("memory"),
                 "binary_bytes": r.get("binary")}
                for r in snap.extra["dump_procs"].get("procs", ()) if isinstance(r, dict)]
    elif processes:
        key = "top_binary" if measure == "binary_bytes" else "top_heap"
        rows = [r for r in processes.get(key) or () if isinstance(r, dict)]
    out = []
    for r in sorted(rows, key=lambda r: -(r.get(measure) or 0))[:5]:
        v = r.get(measure) or 0
        if v <= 0:
            continue
        who = r.get("name") or r.get("initial_call") or "?"
        out.append(CategoryHolder("process" if measure == "memory" else "binary",
                                  f"{r['pid']} ({who})", int(v),
                                  detail=r.get("current_function") or "", pid=str(r["pid"])))
    return out


def _group_holders(processes: dict[str, Any] | None) -> list[CategoryHolder]:
    """The application's process groups (one initial call, OTP's own apart) that hold at least
    GROUP_OVER_ONE times their largest reported member (every reported process where the
    scan cannot tell members from others), largest first. A scan cut by its budget read a fair
    sample: its groups are scaled to the node, as advice/holders.py scales the idle heaps."""
    if not processes:
        return []
    rows = [r for k in ("top_heap", "top_binary") for r in processes.get(k) or ()
            if isinstance(r, dict) and isinstance(r.get("memory"), int)]
    # where each group's idle members wait (advice/holders.py idle_heaps)
    waits = {g["initial_call"]: g.get("current_function")
             for g in (processes.get("idle_heaps") or {}).get("groups") or ()}
    count, scanned = processes.get("count"), processes.get("scanned")
    scale = (count / scanned if not processes.get("complete") and processes.get("source") ==
             "live" and isinstance(count, int) and isinstance(scanned, int) and scanned > 0
             else 1.0)  # fmt: skip
    out = []
    for g in processes.get("groups") or ():
        key, n, mem = g.get("initial_call"), g.get("count"), g.get("memory")
        if (g.get("system") or not isinstance(key, str) or not isinstance(n, int)
                or not isinstance(mem, int)):
            continue
        # OTP's own members reported in it are not the application's (advice/holders.py)
        otp_n, otp_mem = g.get("otp_count"), g.get("otp_memory")
        if isinstance(otp_n, int) and isinstance(otp_mem, int) and 0 <= otp_n <= n:
            n, mem = n - otp_n, mem - otp_mem
        if n < 2 or mem <= 0:
            continue
        one = g.get("largest_member")
        if not isinstance(one, int):  # members not told: any reported process could be one
            mine = [r["memory"] for r in rows if r.get("initial_call") == key]
            one = max(mine or [r["memory"] for r in rows] or [0])
        if mem < GROUP_OVER_ONE * one:
            continue
        wait = waits.get(key)
        idle = g.get("idle_count")
        h = CategoryHolder(
            "process_group", wait if key in GENERIC_CALLS and wait else key,
            round(mem * scale), members=round(n * scale),
            spawned_as=key if key in GENERIC_CALLS and wait else None,
            # OTP's own members taken out: at most the members left can be waiting
            idle=round(min(idle, n) * scale) if isinstance(idle, int) and idle > 0 else None,
            scaled=scale != 1.0)
        spawned = [f"spawned as {h.spawned_as}"] if h.spawned_as is not None else []
        out.append(replace(h, detail=", ".join(spawned + group_facts(h))))
    return sorted(out, key=lambda h: -h.bytes)


def picture(snap: Snapshot, allocated: dict[str, int],
            processes: dict[str, Any] | None = None) -> MemoryPicture:
    """The categories of `snap.memory` with their allocators (`allocated`: each allocator
    type's carrier bytes, analysis.carrier_bytes) and holders."""
    mem = snap.memory
    allocated_all = sum(allocated.values())
    total = mem.get("total")
    named = sum(mem.get(k, 0) for k in ("atom", "binary", "code", "ets"))
    values: dict[str, int | None] = {k: mem.get(k) for k in ("processes", "binary", "ets",
                                                             "atom", "code")}
    system = mem.get("system")
    values["other_system"] = system - named if system is not None and system >= named else None
    notes = []
    if not mem:
        notes.append("no erlang:memory() in this source: the categories are unknown")
    elif system is not None and system < named:
        notes.append("erlang:memory(system) is below atom + binary + code + ets: the rest of "
                     "the system is not shown (the counters were read at different moments)")
    ets, ets_complete = _ets_holders(snap)
    groups = _group_holders(processes)
    holders: dict[str, list[CategoryHolder]] = {
        "processes": sorted(groups[:2] + _proc_holders(snap, processes, "memory"),
                            key=lambda h: -h.bytes),
        "binary": _proc_holders(snap, processes, "binary_bytes"),
        "ets": ets,
    }
    for k, hs in _origin_holders(snap).items():
        holders[k] = holders.get(k, []) + hs
    for k in ("atom", "code"):
        v = values[k]
        if v is not None and v >= LARGE[k]:
            holders[k] = [CategoryHolder(k, k, v)]  # type: ignore[arg-type]
    cats = []
    for name, homes in HOMES.items():
        v = values[name]
        hs = holders.get(name, [])
        cats.append(Category(
            name=name, bytes=v, share=v / total if v is not None and total else None,
            allocators=sorted(((a, allocated[a]) for a in homes if a in allocated),
                              key=lambda ab: (ab[0] != OWN.get(name), -ab[1])),
            # a group overlaps the processes listed beside it: its members are not added twice
            holders=hs, holders_bytes=sum(h.bytes for h in hs if h.kind != "process_group"),
            holders_complete=name == "ets" and ets_complete))
    # the binary holders are processes referencing binaries (shared, not additive): the
    # largest holder is chosen among things that own their bytes, whatever their kind: a
    # process, a group of processes, an ETS table, the atoms, the code, a NIF or driver (what
    # it allocated outside the binaries: binaries it allocated are processes' to hold), a port
    # (its binaries too: a driver's receive buffer or queue is the port's own)
    candidates = [h for k in ("processes", "ets", "atom", "code") for h in holders.get(k, [])]
    candidates += [h for h in holders.get("other_system", []) if h.kind in ("origin", "port")]
    candidates += [h for h in holders.get("binary", []) if h.kind == "port"]
    largest = max(candidates, key=lambda h: h.bytes, default=None)
    share = largest.bytes / total if largest is not None and total else None
    return MemoryPicture(total=total, allocated_all=allocated_all, categories=cats,
                         largest=largest, notes=notes, largest_share=share,
                         largest_notable=share is not None and share >= NOTABLE_SHARE)
