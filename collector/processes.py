"""Who holds the memory: a read-only scan of a live node's processes, and the opt-in GC probe.

What is read and what is never done to the target: docs/processes.md. On the target only BIFs
run, inside the processes rex (or erpc) spawns there for each call, one process_info/2 request
per chunk of 10,000 pids, two chunks in flight; nothing of ours is loaded there. One scan
(scan_direct), over either transport (collector/transport.py: our own client over plain TCP, the
hidden node's relay over TLS and any other -proto_dist): the calls are made and each process is
reduced to one record here as its chunk arrives.

The answer holds the processes worth reporting (the largest by each measure
advice/holders.py ranks), the per-initial-call groups, the totals and each scanned process's
activity (tests/bench/bench_processes.py measures both at 300,000 processes).

A ProcessTable is what both this scan and a crash dump's =proc sections (collector/procdump.py)
give the analysis; fields a source cannot know are None.
"""

from __future__ import annotations

import heapq
import random
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from beamalloc.collector import dist
from beamalloc.collector.access import Access
from beamalloc.collector.session import with_transport
from beamalloc.collector.terms import Atom, Opaque, proplist
from beamalloc.collector.transport import Transport, result
from beamalloc.gcpause import paused_gc
from beamalloc.limits import MAX_PROCESSES

#: Wall time of the scan's process_info requests at most, in ms, from the first request: with
#: the listing and the report (and a hidden node's boot, ~0.4 s) it keeps a scan of 300,000
#: processes within 3 s of wall time; they are read whole in 1-2 s on this (shared) 2-core
#: machine (tests/bench/bench_processes.py), and what the budget cuts off leaves a fair sample
#: (docs/processes.md).
BUDGET_MS = 1_500
#: Processes reported per measure (binaries, exclusive binaries, heap, memory, mailbox).
TOP = 30


@dataclass
class Proc:
    """One process. Sizes in bytes; None where the source does not say (a crash dump has no
    binary list)."""

    pid: str
    name: str | None
    initial_call: MFA | None  # proc_lib's '$initial_call' where known, else the spawn call
    spawned_as: MFA | None  # the initial_call process_info gives (proc_lib:init_p/5 for OTP's)
    current_function: str | None
    status: str | None
    reductions: int | None
    memory: int
    heap_bytes: int | None  # the young heap's size
    total_heap_bytes: int  # young + old heap + heap fragments (process_info total_heap_size)
    message_queue_len: int
    binary_bytes: int | None  # distinct refc binaries it references
    binary_count: int | None
    binary_exclusive_bytes: int | None  # of those, referenced by nothing else
    minor_gcs: int | None = None  # since its last fullsweep
    fullsweep_after: int | None = None
    min_heap_bytes: int | None = None  # its own minimum (spawn_opt or +hms)
    min_bin_vheap_bytes: int | None = None  # its own binary virtual heap minimum (+hmbs)
    survived_bytes: int | None = None  # young data that survived its last collection + old heap
    heap_used_bytes: int | None = None  # used words of young and old heap and stack
    heap_unused_bytes: int | None = None  # crash dump: heap unused + old heap unused

    @property
    def idle(self) -> bool:
        """Waiting with nothing to handle: it allocates nothing, so nothing makes it collect
        (the scan's totals count idle processes the same way)."""
        return self.status == "waiting" and self.message_queue_len == 0

    def label(self) -> str:
        return self.name or (f"{self.pid} ({self.initial_call})" if self.initial_call
                             else self.pid)


@dataclass
class Group:
    initial_call: MFA | str  # "?" for the processes with none
    count: int
    memory: int
    total_heap_bytes: int
    message_queue_len: int
    binary_bytes: int | None
    names: list[str] = field(default_factory=list)
    idle_count: int | None = None  # members waiting with an empty mailbox
    idle_total_heap_bytes: int | None = None


@dataclass
class ProcessTable:
    """The processes of one node at one moment, as far as they were read."""

    node: str
    source: str  # "live" | "crashdump"
    count: int  # processes on the node
    scanned: int  # processes read (alive when read)
    complete: bool
    procs: list[Proc]  # the reported ones (the largest by each measure), not all scanned
    groups: list[Group]
    wordsize: int | None = None
    taken_at: float | None = None
    memory_binary: int | None = None  # erlang:memory(binary) right after the scan
    binary_bytes: int | None = None  # distinct refc binaries referenced by scanned processes
    binary_count: int | None = None
    memory: int | None = None  # summed over scanned processes
    total_heap_bytes: int | None = None
    message_queue_len: int | None = None
    idle_count: int | None = None  # scanned processes waiting with an empty mailbox
    idle_total_heap_bytes: int | None = None
    died: int = 0  # died between processes/0 and their process_info
    budget: dict[str, int] = field(default_factory=dict)
    scan_ms: float | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)  # where the scan's time went
    notes: list[str] = field(default_factory=list)
    #: pid ("<0.X.Y>") -> (reductions, message_queue_len) of every scanned process, read in the
    #: first pass; two reads tell what a process did in between (advice/holders.py). None
    #: where the source cannot know (a crash dump).
    activity: dict[str, tuple[int, int]] | None = None


@dataclass
class ProbeResult:
    """One process collected by the GC probe, measured before and after."""

    pid: str
    name: str | None
    dead: bool = False
    binary_before: int = 0  # distinct refc binary bytes it referenced
    binary_after: int = 0
    released_binary_bytes: int = 0  # binaries it alone referenced and no longer does: freed
    heap_before: int = 0  # total heap bytes
    heap_after: int = 0
    memory_binary_before: int = 0  # erlang:memory(binary), the whole node
    memory_binary_after: int = 0
    gc_ms: float = 0.0

    @property
    def released_heap_bytes(self) -> int:
        return self.heap_before - self.heap_after

    @property
    def node_binary_drop(self) -> int:
        return self.memory_binary_before - self.memory_binary_after


# ---- the scan ----------------------------------------------------------------------------

class MFA(str):
    """A call `{Module, Function, Arity}` with its parts typed, rendered "m:f/arity": a str, so
    the JSON, the tables and the pages show the text as before, while whoever needs a part
    (advice/holders.py `is_system`: the module) reads it without splitting the text."""

    module: str
    function: str
    arity: int

    def __new__(cls, module: str, function: str, arity: int) -> MFA:
        self = super().__new__(cls, f"{module}:{function}/{arity}")
        self.module, self.function, self.arity = module, function, arity
        return self

    def __getnewargs__(self) -> tuple[str, str, int]:  # type: ignore[override]
        # copy, deepcopy (dataclasses.asdict) and pickle rebuild it from its parts
        return self.module, self.function, self.arity

    @classmethod
    def read(cls, text: str | None) -> MFA | None:
        """The call a source gives as text (a crash dump's `Spawned as`, a stored scan's JSON),
        read once where it is read; None where it is not "m:f/arity" (procdump.py `_MFA`)."""
        if not text:
            return None
        module, colon, rest = text.partition(":")
        function, slash, arity = rest.rpartition("/")
        if not (module and colon and function and slash and arity.isdigit()):
            return None
        return cls(module, function, int(arity))


def mfa(v: Any) -> MFA | None:
    """`{M, F, Arity}` typed (None for undefined or any other shape)."""
    if isinstance(v, tuple) and len(v) == 3 and all(isinstance(x, str) for x in v[:2]):
        arity = len(v[2]) if isinstance(v[2], list) else v[2]
        if isinstance(arity, int) and not isinstance(arity, bool):  # a term no node sends else
            return MFA(f"{v[0]}", f"{v[1]}", arity)
    return None


def _n(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _atom(v: Any) -> str | None:
    return str(v) if isinstance(v, Atom) and v != "undefined" else None


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _proc(p: dict[str, Any], ws: int) -> Proc:
    spawned = mfa(p.get("initial_call"))
    gi = proplist(p.get("gc_info"))
    return Proc(
        pid=_text(p.get("pid")),
        name=_atom(p.get("name")),
        initial_call=mfa(p.get("dict_initial_call")) or spawned,
        spawned_as=spawned,
        current_function=mfa(p.get("current_function")),
        status=_atom(p.get("status")),
        reductions=_n(p.get("reductions")),
        memory=_n(p.get("memory")),
        heap_bytes=_n(p.get("heap_size")) * ws,
        total_heap_bytes=_n(p.get("total_heap_size")) * ws,
        message_queue_len=_n(p.get("message_queue_len")),
        binary_bytes=_n(p.get("binary_bytes")),
        binary_count=_n(p.get("binary_count")),
        binary_exclusive_bytes=_n(p.get("binary_exclusive_bytes")),
        minor_gcs=_n(p.get("minor_gcs")),
        fullsweep_after=_n(p.get("fullsweep_after")),
        min_heap_bytes=_n(p.get("min_heap_size")) * ws,
        min_bin_vheap_bytes=_n(p.get("min_bin_vheap_size")) * ws,
        survived_bytes=(_n(gi.get("recent_size")) + _n(gi.get("old_heap_size"))) * ws,
        heap_used_bytes=(_n(gi.get("heap_size")) + _n(gi.get("old_heap_size"))
                         + _n(gi.get("stack_size"))) * ws,
    )


#: One process of a scan's packed activity (the form a stored scan keeps): pid number, serial,
#: reductions, queue.
_ACTIVITY = struct.Struct(">IIQI")


def activity_from_bytes(data: Any) -> dict[str, tuple[int, int]] | None:
    """Packed activity records (20 bytes a process, <<Number:32, Serial:32, Reductions:64,
    Queue:32>>) as pid -> (reductions, queue); None for anything else."""
    if not isinstance(data, bytes) or len(data) % _ACTIVITY.size:
        return None
    return {f"<0.{n}.{s}>": (r, q) for n, s, r, q in _ACTIVITY.iter_unpack(data)}


def table_from_term(node: str, p: dict[str, Any], taken_at: float | None = None) -> ProcessTable:
    """A ProcessTable from a scan's answer (scan_direct's props)."""
    ws = _n(p.get("wordsize")) or 8
    bins = proplist(p.get("binaries"))
    totals = proplist(p.get("totals"))
    budget = {k: _n(v) for k, v in proplist(p.get("budget")).items()}
    groups = []
    for g in p.get("groups") or []:
        gp = proplist(g)
        groups.append(Group(initial_call=mfa(gp.get("initial_call")) or "?",
                            count=_n(gp.get("count")), memory=_n(gp.get("memory")),
                            total_heap_bytes=_n(gp.get("total_heap_size")) * ws,
                            message_queue_len=_n(gp.get("message_queue_len")),
                            binary_bytes=_n(gp.get("binary_bytes")),
                            names=[str(n) for n in gp.get("names") or []],
                            idle_count=_n(gp.get("idle_count")),
                            idle_total_heap_bytes=_n(gp.get("idle_total_heap_size")) * ws))
    sampled = p.get("sampled_at_us")
    t = ProcessTable(
        node=node, source="live", count=_n(p.get("count")), scanned=_n(p.get("scanned")),
        complete=p.get("complete") == "true",
        procs=[_proc(proplist(r), ws) for r in p.get("records") or []],
        groups=groups, wordsize=ws,
        taken_at=sampled / 1e6 if isinstance(sampled, int) else taken_at,
        memory_binary=_n(p.get("memory_binary")),
        binary_bytes=_n(bins.get("bytes")), binary_count=_n(bins.get("count")),
        memory=_n(totals.get("memory")), total_heap_bytes=_n(totals.get("total_heap_size")) * ws,
        message_queue_len=_n(totals.get("message_queue_len")), died=_n(p.get("died")),
        idle_count=_n(totals.get("idle_count")),
        idle_total_heap_bytes=_n(totals.get("idle_total_heap_size")) * ws,
        budget=budget, scan_ms=_n(p.get("scan_us")) / 1000,
        timings_ms={k: _n(v) / 1000 for k, v in proplist(p.get("timings")).items()},
        activity=(p["activity"] if isinstance(p.get("activity"), dict)  # scan_direct's
                  else activity_from_bytes(p.get("activity"))),
    )
    if not t.complete:
        t.notes.append(
            f"{t.scanned:,} of {t.count:,} processes read (budget: {budget.get('max_processes'):,} "
            f"processes, {budget.get('budget_ms'):,} ms): the registered ones and a fair sample "
            "of the rest; totals and groups cover those read")
    if _n(p.get("otp_release")) < 26:
        t.notes.append("OTP < 26: proc_lib's '$initial_call' is read for the reported processes "
                       "only; groups of other proc_lib processes show proc_lib:init_p/5")
    return t


def scan_node(node: str, cookie: str, timeout: float = 10.0,
              max_processes: int = MAX_PROCESSES, budget_ms: int = BUDGET_MS,
              top: int = TOP, access: Access | None = None) -> ProcessTable:
    """Read `node`'s processes, read-only (docs/processes.md); NodeError within `timeout`.
    `access`: how to reach it, as for live.snapshot_node (default access.current()): our own
    client over plain TCP, else the hidden node's relay (collector/transport.py direct())."""
    if max_processes < 1 or budget_ms < 1 or top < 1:
        raise ValueError("max_processes, budget_ms and top must be positive")
    p = with_transport(node, cookie, timeout, access, lambda conn, deadline:
                       scan_direct(conn, max_processes, budget_ms, top, deadline), "processes")
    return table_from_term(node, p, taken_at=time.time())


# ---- the scan, over either transport ----------------------------------------------------
#
# On the target only BIFs run, inside the processes rex (or erpc, through the relay) spawns there:
# erlang:processes/0, erlang:system_info/1, erlang:memory/1, erlang:whereis/1 (through lists:map)
# and erlang:process_info/2 with a fixed item list (through lists:zipwith, an external fun: no
# code of ours is loaded there, `lists` is loaded at boot). No message is sent to any process of
# the target, none is suspended or collected (docs/processes.md "What is never done to the
# target"). Every reply is checked for its shape before use: a target can send anything
# (tests/test_hostile_peer.py).
#
# Two passes. The first reads every process (or the sample, _order()) with the few items the
# totals, the groups and the ranking need (PASS1); the second reads the fixed item list (ITEMS)
# of the processes worth reporting only: the `top` largest by each measure. At 300,000
# processes the full list for all would cost the target several seconds of process_info and us
# the decoding of 200 MB (tests/bench/bench_processes.py).

#: Pids per request, and requests in flight at once: a chunk is one process_info call per pid on
#: one target scheduler. Of 2,000-20,000 pids with 1-4 in flight, 10,000 with 2 read 300,000
#: processes fastest on this 2-core machine (tests/bench/bench_processes.py).
CHUNK, IN_FLIGHT = 10_000, 2
#: The first pass's items, in order (reductions: with message_queue_len, each process's
#: activity, which two reads compare to tell idle processes, advice/holders.py); the second's.
PASS1 = ("memory", "total_heap_size", "message_queue_len", "initial_call", "status", "binary",
         "reductions")
ITEMS = ("memory", "heap_size", "total_heap_size", "binary", "message_queue_len",
         "registered_name", "initial_call", "current_function", "status", "reductions",
         "garbage_collection", "garbage_collection_info")
_DICT_IC = (Atom("dictionary"), Atom("$initial_call"))
_GC_INFO = ("heap_size", "recent_size", "old_heap_size", "stack_size", "heap_block_size",
            "old_heap_block_size", "mbuf_size", "bin_vheap_size", "bin_old_vheap_size")
#: Distinct refc binaries remembered across processes at most (each costs a dict entry here);
#: past it, a binary first seen is counted without its address, and the note says the total may
#: count a shared one twice. A node with 300,000 processes holding a few binaries each has ~1M.
MAX_BINARY_ADDRESSES = 4_000_000


def _bad(what: str) -> dist.DistError:
    return dist.DistError("bad_reply", what.encode())


def _call(conn: Transport, m: str, f: str, args: list[Any], deadline: float) -> Any:
    return result(conn.call(m, f, args, deadline))


def _is_pid(v: Any) -> bool:
    return type(v) is Opaque and v.startswith("<0.")


def _pid_list(v: Any, what: str) -> list[str]:
    if not (isinstance(v, list) and len(v) <= MAX_PROCESSES * 4 and all(map(_is_pid, v))):
        raise _bad(f"{what} is not a list of pids")
    return v


# A pid of the target is an int here, serial << 32 | number: ordered as the target orders its
# own pids (erl_term.h: the serial in the high bits), cheap to hash, and as text only when shown.

def _pid_text(k: int) -> str:
    return f"<0.{k & 0xFFFFFFFF}.{k >> 32}>"


def _pid_int(text: str) -> int:
    n, s = text[3:-1].split(".")
    return int(s) << 32 | int(n)


#: The most processes a node lists (erts' limit is 2^27): beyond, not a node's reply.
MAX_LISTED = 1 << 27


def _raw_pids(r: Any) -> tuple[list[int], dict[int, bytes]]:
    """erlang:processes/0's reply as it came (dist.RawReply): each pid as an int and its
    encoding (NEW_PID_EXT: the target's name, number, serial, creation), sliced out of the
    reply rather than decoded and encoded again: 300,000 of them travel twice."""
    if not isinstance(r, dist.RawReply):
        raise _bad("processes() is not a list of pids")
    data, pos = r.data, r.pos
    if data[pos:pos + 1] == b"\x6a":
        return [], {}
    if data[pos:pos + 2] != b"\x6c\x00" and data[pos:pos + 1] != b"\x6c":
        raise _bad("processes() is not a list of pids")
    n = struct.unpack_from(">I", data, pos + 1)[0]
    first = pos + 5
    # the first pid's head ('X', the node's atom) gives the stride; every pid must share it
    if data[first:first + 1] != b"\x58" or data[first + 1] not in (118, 119):
        raise _bad("processes() is not a list of the target's pids")
    alen = (struct.unpack_from(">H", data, first + 2)[0] + 3 if data[first + 1] == 118
            else data[first + 2] + 2)
    head_len = 1 + alen
    stride = head_len + 12
    end = first + n * stride
    if n > MAX_LISTED or end >= len(data) or data[end] != 0x6a:
        raise _bad("processes() is not a list of the target's pids")
    # every pid has the first one's head: a tag at each stride, and the head n times in all
    # (more only if some pid's number, serial and creation bytes spelled 'X' and the node's
    # atom: then the reply is refused, never misread)
    head = data[first:first + head_len]
    if data[first:end:stride] != b"\x58" * n or data.count(head, first, end) != n:
        raise _bad("processes() is not a list of the target's pids")
    keys = [serial << 32 | num for num, serial in
            struct.Struct(f">{head_len}xII4x").iter_unpack(data[first:end])]
    return keys, dict(zip(keys, [data[o:o + stride] for o in range(first, end, stride)],
                          strict=True))


def _encode_pids(raw: dict[int, bytes], keys: list[int]) -> dist.RawTerm:
    if not keys:
        return dist.RawTerm(b"\x6a")
    got = itemgetter(*keys)(raw)
    return dist.RawTerm(b"\x6c" + struct.pack(">I", len(keys))
                        + (b"".join(got) if len(keys) > 1 else got) + b"\x6a")


def _order(pids: list[int], named: list[int], max_processes: int) -> list[list[int]]:
    """The chunks to read: the named first (the usual suspects, few), then all the others or
    `max_processes` of them at an even stride from a random offset (systematic sampling), as
    chunks that each spread over the whole list: pids are in creation order, so a scan the
    budget stops after K chunks has read processes old and young alike, a fair sample."""
    named_set = set(named)
    rest = [p for p in pids if p not in named_set]
    head = named[:max_processes]
    left, n = max_processes - len(head), len(rest)
    if left >= n:
        tail = rest
    elif left <= 0:
        tail = []
    else:
        off = random.random()
        tail = [rest[int((i + off) * n / left)] for i in range(left)]
    chunks = [head[i:i + CHUNK] for i in range(0, len(head), CHUNK)]
    stride = max(1, (len(tail) + CHUNK - 1) // CHUNK)
    return chunks + [tail[s::stride] for s in range(stride) if tail]


class _Reader:
    """The first pass's reduction: one record per live process, refc binaries
    deduplicated by address within each process and across all of them."""

    __slots__ = ("bins", "bins_full", "dead", "recs")

    def __init__(self) -> None:
        # pid, memory, total heap, queue, initial call, idle, binary bytes, distinct binaries,
        # binary references, exclusive binary bytes, reductions
        self.recs: list[tuple[Any, ...]] = []
        self.dead = 0
        self.bins: dict[int, int] = {}
        self.bins_full = False

    def add(self, chunk: list[int], infos: Any) -> None:
        if not (isinstance(infos, list) and len(infos) == len(chunk)):
            raise _bad("process_info answers do not match the pids asked")
        recs, bins = self.recs, self.bins
        keys_seen = False
        try:
            for pid, info in zip(chunk, infos, strict=True):
                if info == "undefined":
                    self.dead += 1
                    continue
                ((k1, m), (k2, th), (k3, q), (k4, ic), (k5, st), (k6, bl), (k7, reds),
                 *extra) = info
                if not keys_seen:  # once a chunk: the values' types are checked for each
                    if (k1, k2, k3, k4, k5, k6, k7) != PASS1:
                        raise _bad("a process_info answer is not the items asked")
                    keys_seen = True
                if extra and type(extra[0][1]) is tuple and len(extra[0][1]) == 3:
                    ic = extra[0][1]  # proc_lib's '$initial_call' (OTP 26+)
                if bl:
                    b, c, e = _own_bins(bl)
                    if len(bins) < MAX_BINARY_ADDRESSES:
                        for a, sz, _ in bl:
                            bins[a] = sz
                    else:
                        self.bins_full = True
                        for a, sz, _ in bl:
                            if a in bins:
                                bins[a] = sz
                    nrefs = len(bl)
                else:
                    b = c = e = nrefs = 0
                recs.append((pid, m + 0, th + 0, q + 0, ic, st == "waiting" and q == 0, b, c,
                             nrefs, e, reds + 0))
        except (TypeError, ValueError):
            raise _bad("a process_info answer is not the items asked") from None


def _own_bins(bl: list[Any]) -> tuple[int, int, int]:
    """For one process: {Bytes, Count, ExclusiveBytes} of its distinct
    refc binaries (exclusive: referenced by nothing else, its refcount is its references)."""
    own: dict[int, list[int]] = {}
    for a, size, refc in bl:
        o = own.get(a)
        if o is None:
            own[a] = [size + 0, refc + 0, 1]
        else:
            o[2] += 1
    b = e = 0
    for size, refc, k in own.values():
        b += size
        if refc <= k:
            e += size
    return b, len(own), e


def _top(recs: list[tuple[Any, ...]], top: int) -> list[int]:
    """The union of the `top` largest non-zero by each ranked measure
    (binary bytes, exclusive binary bytes, total heap, memory, mailbox); of equal values the
    larger pid, as the target orders pids, so the result does not depend on the order of the
    records."""
    out: set[int] = set()
    for i in (6, 9, 2, 1, 3):
        out.update(p for v, p in heapq.nlargest(top, [(r[i], r[0]) for r in recs if r[i]]))
    return sorted(out)


def _prop(key: str, items: Any) -> int:
    for it in items if isinstance(items, list) else ():
        if isinstance(it, tuple) and len(it) == 2 and it[0] == key:
            return it[1] if type(it[1]) is int else 0
    return 0


def _details(conn: Transport, otp: int, pids: list[int], raw: dict[int, bytes],
             deadline: float) -> list[Any]:
    """The second pass: the fixed item list of the reported ones, read again (the first pass
    is a moment older); one that died in between is left out."""
    if not pids:
        return []
    items = [Atom(k) for k in ITEMS] + ([_DICT_IC] if otp >= 26 else [])
    infos = _call(conn, "lists", "zipwith",
                  [dist.Export("erlang", "process_info", 2), _encode_pids(raw, pids),
                   [items] * len(pids)], deadline)
    if not (isinstance(infos, list) and len(infos) == len(pids)):
        raise _bad("process_info answers do not match the pids asked")
    out = []
    try:
        for pid, info in zip(pids, infos, strict=True):
            if info == "undefined":
                continue
            (m, h, th, bl, q, name, ic, cf, st, reds, gc, gi, *extra) = (v for _, v in info)
            if [k for k, _ in info[:len(ITEMS)]] != list(ITEMS):
                raise _bad("a process_info answer is not the items asked")
            b, c, e = _own_bins(bl) if bl else (0, 0, 0)
            dict_ic = extra[0] if extra and type(extra[0]) is tuple and len(extra[0]) == 3 \
                else Atom("undefined")
            out.append([
                ("pid", _pid_text(pid)), ("name", Atom("undefined") if name == [] else name),
                ("initial_call", ic), ("dict_initial_call", dict_ic), ("current_function", cf),
                ("status", st), ("reductions", reds), ("memory", m), ("heap_size", h),
                ("total_heap_size", th), ("message_queue_len", q), ("binary_bytes", b),
                ("binary_count", c), ("binary_refs", len(bl)), ("binary_exclusive_bytes", e),
                *((k, _prop(k, gc)) for k in ("minor_gcs", "fullsweep_after", "min_heap_size",
                                              "min_bin_vheap_size")),
                ("gc_info", [(k, _prop(k, gi)) for k in _GC_INFO])])
    except (TypeError, ValueError):
        raise _bad("a process_info answer is not the items asked") from None
    return out


def _resolve(conn: Transport, otp: int, recs: list[Any], raw: dict[int, bytes],
             deadline: float) -> list[Any]:
    """On OTP 25 (process_info has no {dictionary, Key} item), proc_lib's '$initial_call' of
    the reported proc_lib processes, by proc_lib:translate_initial_call/1 on the target: it
    copies that process's dictionary into the process rex spawns there (freed when the call
    returns) and sends back just {M, F, Arity}; the dictionary (it can hold secrets) never
    leaves the target."""
    if otp >= 26:
        return recs
    lib = [dict(r)["pid"] for r in recs if dict(r)["initial_call"] == ("proc_lib", "init_p", 5)]
    if not lib:
        return recs
    calls = _call(conn, "lists", "map",
                  [dist.Export("proc_lib", "translate_initial_call", 1),
                   _encode_pids(raw, [_pid_int(p) for p in lib])], deadline)
    if not (isinstance(calls, list) and len(calls) == len(lib)):
        raise _bad("translate_initial_call's answers do not match the pids asked")
    found = {p: c for p, c in zip(lib, calls, strict=True) if isinstance(c, tuple) and len(c) == 3
             and c != ("proc_lib", "init_p", 5)}
    return [[(k, found[p]) if k == "dict_initial_call" else (k, v) for k, v in r]
            if (p := dict(r)["pid"]) in found else r for r in recs]


def _groups(recs: list[tuple[Any, ...]], named: dict[int, Any]) -> tuple[list[Any], list[Any]]:
    """In one pass: per initial call, the 200 largest by
    memory; and the sums over all."""
    g: dict[Any, list[Any]] = {}
    for r in reversed(recs):  # newest first, the order of the Erlang scan this replaced
        x = g.get(r[4])
        if x is None:
            x = g[r[4]] = [0, 0, 0, 0, 0, [], 0, 0, 0]
        x[0] += 1
        x[1] += r[1]
        x[2] += r[2]
        x[3] += r[3]
        x[4] += r[6]
        x[8] += r[8]
        if r[5]:
            x[6] += 1
            x[7] += r[2]
        if r[0] in named and len(x[5]) < 3:
            x[5].append(named[r[0]])
    t = [sum(x[i] for x in g.values()) for i in range(9) if i != 5]
    totals = [("memory", t[1]), ("total_heap_size", t[2]), ("message_queue_len", t[3]),
              ("binary_refs", t[7]), ("idle_count", t[5]), ("idle_total_heap_size", t[6])]
    largest = heapq.nlargest(200, g.items(), key=lambda kv: kv[1][1])
    return [[("initial_call", k), ("count", c), ("memory", m), ("total_heap_size", h),
             ("message_queue_len", q), ("binary_bytes", b), ("names", ns), ("idle_count", ic),
             ("idle_total_heap_size", ih)]
            for k, (c, m, h, q, b, ns, ic, ih, _) in largest], totals


def scan_direct(conn: Transport, max_processes: int, budget_ms: int, top: int,
                deadline: float) -> dict[str, Any]:
    """The scan over `conn`: its props, as table_from_term reads them."""
    # The pids and records are hundreds of thousands of fresh objects, none of them garbage:
    # the cyclic collector would walk them all, again and again, as they pile up.
    with paused_gc():
        return _scan_direct(conn, max_processes, budget_ms, top, deadline)


def _scan_direct(conn: Transport, max_processes: int, budget_ms: int, top: int,
                 deadline: float) -> dict[str, Any]:
    start = _us()
    otp_k = conn.send("erlang", "system_info", [Atom("otp_release")])
    ws_k = conn.send("erlang", "system_info", [Atom("wordsize")])
    names_k = conn.send("erlang", "registered", [])
    pids, raw = _raw_pids(result(conn.receive(conn.send_raw("erlang", "processes", []),
                                                    deadline)))
    otp_text = result(conn.receive(otp_k, deadline))
    ws = result(conn.receive(ws_k, deadline))
    names = result(conn.receive(names_k, deadline))
    if not (isinstance(otp_text, str) and otp_text.isdigit() and len(otp_text) < 4):
        raise _bad("otp_release is not a release number")
    if ws not in (4, 8):
        raise _bad("wordsize is not 4 or 8")
    if not (isinstance(names, list) and len(names) <= len(pids) + 65536
            and all(type(n) is Atom for n in names)):
        raise _bad("registered() is not a list of atoms")
    otp = int(otp_text)
    owners = _call(conn, "lists", "map", [dist.Export("erlang", "whereis", 1), names], deadline)
    if not (isinstance(owners, list) and len(owners) == len(names)):
        raise _bad("whereis answers do not match the names asked")
    named = {k: n for n, p in zip(names, owners, strict=True) if _is_pid(p)
             and (k := _pid_int(p)) in raw}
    listed = _us()
    order = _order(pids, list(named), max_processes)
    chunks_at = _us()
    # the item list, encoded once; a chunk's request repeats its bytes once per pid
    items = dist.encode([Atom(k) for k in PASS1] + ([_DICT_IC] if otp >= 26 else []))
    item_lists: dict[int, dist.RawTerm] = {}
    reader = _Reader()
    fun = dist.Export("erlang", "process_info", 2)
    budget_end = time.monotonic() + budget_ms / 1000
    in_flight: deque[tuple[str, list[int]]] = deque()
    asked = 0
    pending = deque(order)
    while pending or in_flight:
        while pending and len(in_flight) < IN_FLIGHT:
            if asked and time.monotonic() >= budget_end:
                pending.clear()  # the budget: no new chunk once it has passed
                break
            chunk = pending.popleft()
            if len(chunk) not in item_lists:
                item_lists[len(chunk)] = dist.RawTerm(
                    b"\x6c" + struct.pack(">I", len(chunk)) + items * len(chunk) + b"\x6a")
            args = [fun, _encode_pids(raw, chunk), item_lists[len(chunk)]]
            in_flight.append((conn.send("lists", "zipwith", args), chunk))
            asked += len(chunk)
        if in_flight:
            key, chunk = in_flight.popleft()
            reader.add(chunk, result(conn.receive(key, deadline)))
            dist.check_deadline(deadline, "collecting")
    read = _us()
    recs = reader.recs
    shown = _resolve(conn, otp, _details(conn, otp, _top(recs, top), raw, deadline), raw,
                     deadline)
    mem_binary = _call(conn, "erlang", "memory", [Atom("binary")], deadline)
    shown_at = _us()
    groups, totals = _groups(recs, named)
    done = _us()
    out: dict[str, Any] = {
        "node": Atom(conn.target), "otp_release": otp, "wordsize": ws, "count": len(pids),
        "asked": asked, "scanned": asked - reader.dead, "died": reader.dead,
        "complete": Atom("true" if asked == len(pids) else "false"),
        "budget": [("max_processes", max_processes), ("budget_ms", budget_ms), ("top", top)],
        "memory_binary": mem_binary,
        "binaries": [("count", len(reader.bins)), ("bytes", sum(reader.bins.values()))],
        "totals": totals, "records": shown, "groups": groups,
        "activity": {f"<0.{r[0] & 0xFFFFFFFF}.{r[0] >> 32}>": (r[10], r[3]) for r in recs},
        "sampled_at_us": (start + done) // 2, "scan_us": done - start,
        "timings": [("listed", listed - start), ("ordered", chunks_at - listed),
                    ("read", read - chunks_at), ("reported", shown_at - read),
                    ("summed", done - shown_at),
                    # of all these, decoding the replies (collector/dist.py)
                    ("decoded", int(conn.stats["decode_s"] * 1e6))]}
    if reader.bins_full:
        out["binaries_capped"] = MAX_BINARY_ADDRESSES
    return out


def _us() -> int:
    return time.time_ns() // 1000


# ---- the probe ---------------------------------------------------------------------------

def gc_probe(node: str, cookie: str, pids: list[str], timeout: float = 30.0,
             access: Access | None = None) -> list[ProbeResult]:
    """Garbage-collect each of `pids` ("<0.X.Y>") on `node`, one at a time, measured before and
    after. This CHANGES the target (docs/processes.md, "The GC probe"): callers announce it."""
    for pid in pids:
        if not (pid.startswith("<0.") and pid.endswith(">")
                and all(x.isdigit() for x in pid[1:-1].split("."))):
            raise ValueError(f"not a local pid of the target: {pid!r}")
    if not pids:
        return []
    p = with_transport(node, cookie, timeout, access,
                       lambda conn, deadline: probe_direct(conn, pids, deadline), "processes")
    ws = _n(p.get("wordsize")) or 8
    out = []
    for r in p.get("probe") or []:
        q = proplist(r)
        if q.get("dead") == "true":
            out.append(ProbeResult(pid=_text(q.get("pid")), name=None, dead=True))
            continue
        b0, b1 = q.get("binary_before"), q.get("binary_after")
        out.append(ProbeResult(
            pid=_text(q.get("pid")), name=_atom(q.get("name")),
            binary_before=_n(b0[1]) if isinstance(b0, tuple) else 0,
            binary_after=_n(b1[1]) if isinstance(b1, tuple) else 0,
            released_binary_bytes=_n(q.get("freed_exclusive")),
            heap_before=_n(q.get("heap_before")) * ws, heap_after=_n(q.get("heap_after")) * ws,
            memory_binary_before=_n(q.get("memory_binary_before")),
            memory_binary_after=_n(q.get("memory_binary_after")),
            gc_ms=_n(q.get("gc_us")) / 1000))
    return out


#: erlang:memory(binary) read every SETTLE_S until it stops falling, at most SETTLE_TRIES times:
#: a binary freed by a collection on one scheduler but allocated in another's instance is queued
#: to its owner and counted until the owner frees it, in its next allocation or aux work
#: (docs/erts/alloc_util.md §4.9).
SETTLE_S, SETTLE_TRIES = 0.02, 50


def probe_direct(conn: Transport, pids: list[str], deadline: float) -> dict[str, Any]:
    """For each pid ("<0.X.Y>", the target's own spelling), in the order given, one at a
    time: its binary list and heap, erlang:memory(binary); erlang:garbage_collect/1; the same
    again. A pid that is dead (or dies in between) is reported as such, nothing done to it."""
    ws = _call(conn, "erlang", "system_info", [Atom("wordsize")], deadline)
    return {"wordsize": ws, "probe": [_probe_one(conn, t, deadline) for t in pids]}


def _probe_one(conn: Transport, text: str, deadline: float) -> list[tuple[str, Any]]:
    dead = [("pid", text.encode()), ("dead", Atom("true"))]
    # list_to_pid/1 refuses a pid the target's table could never hold: no such process either
    got = conn.call("erlang", "list_to_pid", [[ord(c) for c in text]], deadline)
    if not _is_pid(got):
        return dead
    pid = conn.pid(got)
    before = result(conn.call("erlang", "process_info",
                                    [pid, [Atom("binary"), Atom("total_heap_size"),
                                           Atom("registered_name")]], deadline))
    # memory(binary) right around the collection: the lists travel outside that window
    b0 = _call(conn, "erlang", "memory", [Atom("binary")], deadline)
    t0 = time.perf_counter()
    collected = before != "undefined" and _call(conn, "erlang", "garbage_collect", [pid],
                                                deadline)
    gc_us = int((time.perf_counter() - t0) * 1e6)
    b1 = _call(conn, "erlang", "memory", [Atom("binary")], deadline)
    for _ in range(SETTLE_TRIES):  # why: SETTLE_S
        time.sleep(SETTLE_S)
        now = _call(conn, "erlang", "memory", [Atom("binary")], deadline)
        if not (isinstance(now, int) and isinstance(b1, int) and now < b1):
            break
        b1 = now
    after = result(conn.call("erlang", "process_info",
                                   [pid, [Atom("binary"), Atom("total_heap_size")]], deadline))
    try:
        (_, l0), (_, h0), (_, name) = before
        (_, l1), (_, h1) = after
        if collected != "true":
            return dead
        return [("pid", text.encode()), ("name", Atom("undefined") if name == [] else name),
                ("binary_before", _bin_list(l0)), ("binary_after", _bin_list(l1)),
                ("freed_exclusive", _freed(l0, l1)), ("heap_before", h0), ("heap_after", h1),
                ("memory_binary_before", b0), ("memory_binary_after", b1), ("gc_us", gc_us)]
    except (TypeError, ValueError):  # dead before, or died in between
        return dead


def _bin_list(bl: list[Any]) -> tuple[int, int]:
    """{Count, Bytes} of the distinct binaries in a process_info binary list."""
    m = {a: size for a, size, _ in bl}
    return len(m), sum(m.values())


def _freed(l0: list[Any], l1: list[Any]) -> int:
    """The bytes of binaries the process referenced alone before and
    no longer does."""
    after = {a for a, _, _ in l1}
    refs: dict[int, int] = {}
    for a, _, _ in l0:
        refs[a] = refs.get(a, 0) + 1
    gone = {a: (size, rc) for a, size, rc in l0 if a not in after}
    return sum(size for a, (size, rc) in gone.items() if rc <= refs[a])
