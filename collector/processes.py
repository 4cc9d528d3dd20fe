"""Who holds the memory: a read-only scan of a live node's processes, and the opt-in GC probe.

What is read and what is never done to the target: docs/processes.md. A hidden node of ours runs
collector/erlang/beamalloc_procs.erl (connected the same way as the snapshot agent, cookie on
stdin): on the target only BIFs run, inside erpc's own processes, one process_info/2 request per
chunk of a few thousand pids, a few chunks in flight. The hidden node reduces each process to one
record (its refc binaries deduplicated by address, within the process and across processes),
and sends back the processes worth reporting (the largest by each measure analyzer/holders.py
ranks), the per-initial-call groups and the totals: 300,000 records would cost more to decode
here than the whole scan (tests/bench/bench_processes.py).

A ProcessTable is what both this scan and a crash dump's =proc sections (collector/procdump.py)
give the analysis; fields a source cannot know are None.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any

from beamalloc.collector import access as access_mod
from beamalloc.collector import live
from beamalloc.collector.access import Access
from beamalloc.collector.cookie import check_cookie
from beamalloc.collector.terms import Atom, proplist
from beamalloc.limits import MAX_PROCESSES

#: Wall time of the scan's process_info requests at most, in ms, from the first request: with
#: the hidden node's boot (~0.4 s), the listing and the report it keeps a scan of 300,000
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
    initial_call: str | None  # proc_lib's '$initial_call' where known, else the spawn call
    spawned_as: str | None  # the initial_call process_info gives (proc_lib:init_p/5 for OTP's)
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
        (beamalloc_procs.erl counts idle processes the same way)."""
        return self.status == "waiting" and self.message_queue_len == 0

    def label(self) -> str:
        return self.name or (f"{self.pid} ({self.initial_call})" if self.initial_call
                             else self.pid)


@dataclass
class Group:
    initial_call: str
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
    #: first pass; two reads tell what a process did in between (analyzer/holders.py). None
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


# ---- running the hidden node -------------------------------------------------------------

def _run(node: str, cookie: str, timeout: float, args: list[str],
         access: Access | None = None, module: str = "beamalloc_procs") -> Any:
    """Run `module` (beamalloc_procs, or beamalloc_ets for collector/ets.py) on a hidden node
    (live.run_hidden: started, fed its cookie and killed as the snapshot agent, reaching the
    node as `access` says, default access.current()) and return its {ok, Props} props;
    NodeError (exit 3, one line) for every failure, nothing half-returned."""
    live.split_node(node)
    check_cookie(cookie, "the cookie")
    access = access or access_mod.current()
    reply, _ = live.run_hidden(module, node, cookie, timeout, args, access)
    if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "ok":
        return proplist(reply[1])
    if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "error":
        if reply[1] == "timeout" and reply[2] != "connecting":
            raise live.NodeError(f"timed out after {timeout:g} s reading the processes of {node}")
        if reply[1] == "nodedown":
            raise live.NodeError(f"node {node} went down while its processes were read")
        raise live._error(node, str(reply[1]), reply[2], timeout, cookie, access)
    raise live.NodeError("unexpected answer from the beamalloc agent")


# ---- the scan ----------------------------------------------------------------------------

def mfa(v: Any) -> str | None:
    """`{M, F, Arity}` as "m:f/arity" (None for undefined or any other shape)."""
    if isinstance(v, tuple) and len(v) == 3 and all(isinstance(x, str) for x in v[:2]):
        arity = len(v[2]) if isinstance(v[2], list) else v[2]
        return f"{v[0]}:{v[1]}/{arity}"
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


#: One process of beamalloc_procs' packed activity: pid number, serial, reductions, queue.
_ACTIVITY = struct.Struct(">IIQI")


def activity_from_bytes(data: Any) -> dict[str, tuple[int, int]] | None:
    """beamalloc_procs:activity/1's packed records as pid -> (reductions, queue); None for
    anything else (a node that sent no such field)."""
    if not isinstance(data, bytes) or len(data) % _ACTIVITY.size:
        return None
    return {f"<0.{n}.{s}>": (r, q) for n, s, r, q in _ACTIVITY.iter_unpack(data)}


def table_from_term(node: str, p: dict[str, Any], taken_at: float | None = None) -> ProcessTable:
    """A ProcessTable from beamalloc_procs' scan answer (its proplist)."""
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
        activity=activity_from_bytes(p.get("activity")),
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
    `access`: how to reach it, as for live.snapshot_node (default access.current())."""
    if max_processes < 1 or budget_ms < 1 or top < 1:
        raise ValueError("max_processes, budget_ms and top must be positive")
    p = _run(node, cookie, timeout, ["scan", str(max_processes), str(budget_ms), str(top)],
             access)
    return table_from_term(node, p, taken_at=time.time())


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
    p = _run(node, cookie, timeout, ["probe", *pids], access)
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
