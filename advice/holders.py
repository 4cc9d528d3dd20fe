"""Who holds the memory: the holders of refc binaries, heap and mailboxes (issue 12).

Input: a ProcessTable (a live scan, collector/processes.py, or a crash dump's =proc sections,
collector/procdump.py) and, where `--gc-probe N` ran, its measured results. Output: the
`processes` section of the analysis JSON (docs/analysis-schema.md, `processes`), with findings
that name the process, the bytes and where the figure comes from.

The discipline is the verdict's (docs/design.md "The verdict"): a claim rests on what was
measured. Without the probe, whether a holder's references are dead or live is an inference
from its garbage-collection counters and says so; with it, the bytes a collection released are
the answer. The `+h` emulator flags are weighed the same way as the `+M` ones: one is advised
only when its effect is shown, and none can be shown from a scan (see h_flags()).

Facts this relies on (docs/processes.md, "Facts"): a refc binary is freed when its last
reference goes, and a reference on a process heap goes only when that process collects; an
idle process (waiting, empty mailbox) allocates nothing, so nothing triggers its next
collection; hibernation (erlang:hibernate/3) collects and shrinks the heap to its live data.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from beamalloc.advice.records import NoFlagEntry, Reason, Remedy
from beamalloc.collector.processes import MFA, Group, ProbeResult, Proc, ProcessTable
from beamalloc.units import count, human

#: Rows per top list in the JSON and the reports.
TOP_ROWS = 10
#: Refc binary bytes a single idle process must reference alone for a finding (the issue's
#: router: 40 MB; a default binary virtual heap is 46,422 words, 363 KiB on 64-bit).
MIN_PINNED = 4 << 20
#: Heap of an idle process worth a hibernation finding, and the sum over such processes
#: for the finding to be an action rather than information.
MIN_IDLE_HEAP = 256 << 10
MIN_IDLE_HEAP_TOTAL = 16 << 20
#: The default minimum heap of a process, in words (+hms; erlang:spawn_opt/2 doc).
MIN_HEAP_WORDS = 233
#: A mailbox this long is reported.
MIN_MAILBOX = 1_000
#: Words of one reference to a refc binary on a process heap (a ProcBin: header, size, next,
#: the binary, bytes, flags; ProcBin in erts/emulator/beam/erl_binary.h of OTP 25).
PROCBIN_WORDS = 6
#: Of a holder's exclusive binary bytes, the share a probe must release to call them dead,
#: and under which they are live.
DEAD_SHARE, LIVE_SHARE = 0.5, 0.1

#: Reductions a process may spend between two reads and still be idle: answering the scan's
#: own process_info signals costs it a few (under 50 for two scans, docs/processes.md "What is
#: never done to the target"); handling one message costs more.
IDLE_REDUCTIONS = 50
#: Dead data in idle heaps that is at least this share of the node's memory rules HEALTHY out
#: (issue 24 item 7): most of the node is then heap that a collection gives back.
MOSTLY_IDLE = 0.5
#: Groups probed in turn by the GC probe: those whose idle heaps could release this much.
MIN_GROUP_RELEASE = MIN_IDLE_HEAP_TOTAL

#: OTP's own processes (issue 24 item 6), kept apart from the application's: never counted
#: idle, never a hibernation candidate, never probed. By registered name, and by the module of
#: the initial call (proc_lib's '$initial_call' where read); every erts_* module is OTP's too.
SYSTEM_NAMES = frozenset({
    "init", "erl_prim_loader", "code_server", "application_controller", "kernel_sup",
    "kernel_safe_sup", "kernel_refc", "kernel_config", "rex", "global_name_server",
    "global_group", "global_group_check", "inet_db", "file_server_2", "standard_error",
    "standard_error_sup", "user", "user_drv", "user_drv_reader", "user_drv_writer", "logger",
    "logger_sup", "logger_handler_watcher", "logger_proxy", "logger_std_h_default",
    "erl_signal_server", "socket_registry", "net_kernel", "net_sup", "auth", "erl_epmd",
    "timer_server", "error_logger", "erts_code_purger", "erts_literal_area_collector",
    "erts_dirty_process_signal_handler", "erts_trace_cleaner", "ddll_server", "os_server",
})
SYSTEM_MODULES = frozenset({
    "init", "erl_prim_loader", "code_server", "application_controller", "application_master",
    "kernel", "kernel_refc", "kernel_config", "rpc", "erpc", "global", "global_group",
    "inet_db", "file_server", "file_io_server", "standard_error", "user_drv", "group",
    "prim_tty", "logger_olp", "logger_sup", "logger_handler_watcher", "logger_proxy",
    "logger_std_h", "logger_h_common", "erl_signal_handler", "socket_registry", "net_kernel",
    "auth", "erl_epmd", "timer", "error_logger", "erl_distribution", "dist_util",
    "inet_tcp_dist", "prim_file", "prim_inet", "erl_ddll",
})

#: The findings' home in the shipped docs, cited first (beamalloc/citations.py links it).
SRC_FACTS = 'docs/processes.md "Facts"'
SRC_IDLE = 'docs/processes.md "Idle heaps"'
SRC_GC = "erlang:garbage_collect/1 doc"
SRC_HIB = "erlang:hibernate/3 doc"
SRC_EIA = "Erlang in Anger §7.2"
SRC_PI = "erlang:process_info/2 doc"


def _row(p: Proc) -> dict[str, Any]:
    """One process as item 4 of the issue shapes it, plus what a crash dump cannot know (None)."""
    return {
        "pid": p.pid, "name": p.name, "initial_call": p.initial_call,
        "current_function": p.current_function, "status": p.status,
        "binary_bytes": p.binary_bytes, "binary_count": p.binary_count,
        "binary_exclusive_bytes": p.binary_exclusive_bytes,
        "total_heap_bytes": p.total_heap_bytes, "heap_used_bytes": p.heap_used_bytes,
        "memory": p.memory, "message_queue_len": p.message_queue_len,
    }


def _top(procs: Iterable[Proc], key: Any, n: int = TOP_ROWS) -> list[Proc]:
    return [p for p in sorted(procs, key=lambda p: (-(key(p) or 0), p.pid)) if key(p)][:n]


def _probed(probe: list[ProbeResult] | None) -> dict[str, ProbeResult]:
    return {r.pid: r for r in probe or [] if not r.dead}


def _references_survived(p: Proc, ws: int) -> int | None:
    """How many of its binary references could have survived its last collection, from the
    bytes that did (None where the source does not say)."""
    if p.survived_bytes is None or p.binary_count is None:
        return None
    return min(p.binary_count, p.survived_bytes // (PROCBIN_WORDS * ws))


def is_system(name: str | None, initial_call: MFA | str | None) -> bool:
    """One of OTP's own processes (SYSTEM_NAMES, SYSTEM_MODULES), not the application's. Its
    module is the call's own part (every source reads calls typed: collector/processes.py MFA);
    text that is no call (a group's "?") names no module."""
    if name in SYSTEM_NAMES:
        return True
    mod = initial_call.module if isinstance(initial_call, MFA) else None
    return mod is not None and (mod in SYSTEM_MODULES or mod.startswith("erts_"))


@dataclass(frozen=True)
class Idleness:
    """Which processes are idle, and by what measure: by what they did between two reads
    (`two reads`: reductions within IDLE_REDUCTIONS, no message waiting at either), or, with one
    read, by their status at that instant (`one instant`: waiting, empty mailbox), which a
    process busy a moment before or after also shows. OTP's own processes never are."""

    by: str  # "two reads" | "one instant"
    quiet: frozenset[str] | None = None  # two reads: the pids that did nothing in between
    seconds: float | None = None  # between the two reads
    both: frozenset[str] | None = None  # two reads: the pids read both times

    def idle(self, p: Proc) -> bool:
        if is_system(p.name, p.initial_call):
            return False
        return p.pid in self.quiet if self.quiet is not None else p.idle


def idleness(t: ProcessTable, earlier: ProcessTable | None = None) -> Idleness:
    """Idle by two reads where both tables carry every process's activity, else at one
    instant."""
    if earlier is None or earlier.activity is None or t.activity is None:
        return Idleness("one instant")
    before = earlier.activity
    both = [pid for pid in t.activity if pid in before]
    quiet = frozenset(pid for pid in both
                      if t.activity[pid][0] - before[pid][0] <= IDLE_REDUCTIONS
                      and t.activity[pid][1] == 0 and before[pid][1] == 0)  # fmt: skip
    dt = (t.taken_at - earlier.taken_at if t.taken_at is not None
          and earlier.taken_at is not None else None)  # fmt: skip
    return Idleness("two reads", quiet, dt, frozenset(both))


def _system_group(g: Group) -> bool:
    return is_system(None, g.initial_call) or bool(
        g.names and len(g.names) == g.count and all(n in SYSTEM_NAMES for n in g.names))


def _members(t: ProcessTable) -> dict[str, list[Proc]]:
    """The reported processes by the group they count in: proc_lib's '$initial_call' where the
    groups use it (OTP 26+), else the call they were spawned with (OTP 25)."""
    keys = {g.initial_call for g in t.groups}
    out: dict[str, list[Proc]] = {}
    for p in t.procs:
        k = p.initial_call if p.initial_call in keys else p.spawned_as
        if k is not None:
            out.setdefault(k, []).append(p)
    return out


def idle_heaps(t: ProcessTable, idle: Idleness, probe: list[ProbeResult] | None = None,
               sums: DumpMembers | None = None) -> dict[str, Any]:
    """What collecting or hibernating the idle processes would release, per group (initial
    call), and how each figure was had (docs/processes.md "Idle heaps"):

    * `probe`: the GC probe collected members of the group; the share of their heaps it
      released, applied to the group's idle heaps (an estimate from a measurement that changed
      those members);
    * `bound`: read-only, at most the heaps beyond their minimum (233 words each): a collection
      keeps the live data, which one read cannot tell from the dead (the words in use since
      the last collection hold both).

    With two reads, a group's idle members and heap are the scan's (waiting, empty mailbox)
    scaled by the share of its reported members that stayed quiet between the reads; where none
    of its members is reported, by the share over the processes not reported (less OTP's own
    groups, quiet as a rule). OTP's own processes are apart."""
    ws = t.wordsize or 8
    minimum = MIN_HEAP_WORDS * ws
    measured = _probed(probe)
    members = _members(t) if sums is None else {}
    rows: list[dict[str, Any]] = []
    system = {"count": 0, "total_heap_bytes": 0}
    listed_count = listed_heap = 0
    rest_share = None
    if idle.quiet is not None and idle.both is not None:
        reported = {p.pid for p in t.procs}
        otp = max(sum(g.idle_count or 0 for g in t.groups if _system_group(g)) - sum(
            1 for p in t.procs if p.idle and is_system(p.name, p.initial_call)), 0)
        quiet = len(idle.quiet - reported) - otp
        rest_share = max(quiet, 0) / max(len(idle.both - reported) - otp, 1)
    for g in t.groups:
        listed_count += g.idle_count or 0
        listed_heap += g.idle_total_heap_bytes or 0
        if _system_group(g):
            system["count"] += g.idle_count or 0
            system["total_heap_bytes"] += g.idle_total_heap_bytes or 0
            continue
        if sums is not None:  # a dump's processes summed as they were read
            gs = sums.groups.get(g.initial_call) or _GroupSums()
            system["count"] += gs.otp_idle
            system["total_heap_bytes"] += gs.otp_idle_heap
            count = (g.idle_count or 0) - gs.otp_idle
            if count > 0:
                heap = (g.idle_total_heap_bytes or 0) - gs.otp_idle_heap
                rows.append(_idle_group(g.initial_call, count, max(heap, 0), [], idle,
                                        rest_share, measured, minimum, gs))
            continue
        # OTP's own processes spawned the application's way (erlang:apply/2 on OTP 25): those
        # reported are taken out of their group
        mine = members.get(g.initial_call, [])
        otp_pids = {p.pid for p in mine if is_system(p.name, p.initial_call)}
        otp_idle = [p for p in mine if p.pid in otp_pids and p.idle]
        system["count"] += len(otp_idle)
        system["total_heap_bytes"] += sum(p.total_heap_bytes for p in otp_idle)
        count = (g.idle_count or 0) - len(otp_idle)
        if count > 0:
            heap = (g.idle_total_heap_bytes or 0) - sum(p.total_heap_bytes for p in otp_idle)
            rows.append(_idle_group(g.initial_call, count, max(heap, 0),
                                    [p for p in mine if p.pid not in otp_pids], idle,
                                    rest_share, measured, minimum))
    # processes beyond the groups listed (a node with more initial calls than are sent)
    rest_count = max((t.idle_count or 0) - listed_count, 0)
    rest_heap = max((t.idle_total_heap_bytes or 0) - listed_heap, 0)
    if rest_count and rest_heap:
        rows.append(_idle_group("(other groups)", rest_count, rest_heap, [], idle, rest_share,
                                {}, minimum))
    # a sampled scan (its budget cut it) read a fair sample: its figures stand for the node
    scale = t.count / t.scanned if not t.complete and t.scanned and t.source == "live" else None
    if scale is not None:
        for r in rows:
            for k in ("count", "total_heap_bytes", "releases", "bound"):
                r[k] = round(r[k] * scale)
    rows = sorted((r for r in rows if r["count"] > 0),
                  key=lambda r: (-r["releases"], r["initial_call"]))
    return {
        "idle_by": idle.by, "seconds": None if idle.seconds is None else round(idle.seconds, 3),
        "scaled": None if scale is None else round(scale, 4),
        "count": sum(r["count"] for r in rows),
        "total_heap_bytes": sum(r["total_heap_bytes"] for r in rows),
        "releases": sum(r["releases"] for r in rows),
        "measured_releases": sum(r["releases"] for r in rows if r["how"] == "probe"),
        "bound": sum(r["bound"] for r in rows),
        "groups": rows[:TOP_ROWS], "system": system,
    }


def _idle_group(key: str, count: int, heap: int, members: list[Proc], idle: Idleness,
                rest_share: float | None, measured: dict[str, ProbeResult], minimum: int,
                sums: _GroupSums | None = None) -> dict[str, Any]:
    """`sums`: a dump's group summed as read (DumpMembers), in place of its `members`."""
    if idle.quiet is not None:
        seen = [p for p in members if p.idle]  # idle at the instant the scan read it
        if seen:
            held = sum(p.total_heap_bytes for p in seen) or 1
            count = round(count * sum(p.pid in idle.quiet for p in seen) / len(seen))
            heap = round(heap * sum(p.total_heap_bytes for p in seen
                                    if p.pid in idle.quiet) / held)  # fmt: skip
        else:
            count, heap = round(count * (rest_share or 0)), round(heap * (rest_share or 0))
    probed = [measured[p.pid] for p in members if p.pid in measured and idle.idle(p)]
    before = sum(r.heap_before for r in probed)
    bound = max(heap - count * minimum, 0)
    if probed and before:
        share = max(sum(r.released_heap_bytes for r in probed), 0) / before
        releases, how = min(round(heap * share), bound), "probe"
    else:
        releases, how = bound, "bound"
    names = sorted({p.name for p in members if p.name})[:3]
    # where its members wait: a group spawned from a fun is only erlang:apply/2 otherwise
    waits = Counter(p.current_function for p in members
                    if p.current_function and idle.idle(p))
    if sums is not None:
        names, waits = list(sums.names), sums.waits
    current = max(sorted(waits), key=waits.__getitem__) if waits else None
    return {"initial_call": key, "count": count, "total_heap_bytes": heap, "releases": releases,
            "how": how, "probed": len(probed), "bound": bound, "names": names,
            "current_function": current}


def _pinned(p: Proc) -> int | None:
    """The binary bytes a process holds alone, or where the source cannot tell (a crash dump)
    all it references."""
    return p.binary_exclusive_bytes if p.binary_exclusive_bytes is not None else p.binary_bytes


def binary_holder(p: Proc, ws: int, probe: ProbeResult | None) -> dict[str, Any]:
    """Whether an idle holder's binaries are dead or live, and on what evidence."""
    excl = p.binary_exclusive_bytes or 0
    if probe is not None:
        share = probe.released_binary_bytes / excl if excl else 0.0
        kind = "dead" if share >= DEAD_SHARE else "live" if share < LIVE_SHARE else "mixed"
        return {"kind": kind, "measured": True, "released": probe.released_binary_bytes,
                "why": f"the GC probe collected it: {human(probe.released_binary_bytes)} of "
                       f"{human(excl)} it alone referenced were freed (erlang:memory(binary) "
                       f"{human(probe.memory_binary_before)} -> "
                       f"{human(probe.memory_binary_after)})"}
    survived = _references_survived(p, ws)
    if survived is None:
        return {"kind": "unknown", "measured": False, "released": None,
                "why": "the source gives no garbage-collection counters"}
    n = p.binary_count or 0
    if survived < n // 2:
        return {"kind": "probably dead", "measured": False, "released": None,
                "why": f"at most {count(survived)} of its {count(n)} references survived its last "
                       f"collection ({human(p.survived_bytes)} did): the rest arrived since and "
                       "have not been through one; --gc-probe measures what a collection frees"}
    return {"kind": "probably live", "measured": False, "released": None,
            "why": f"{human(p.survived_bytes)} survived its last collection, room for its "
                   f"{count(n)} references: they were live then (a cache or a queue?); --gc-probe "
                   "measures it"}


def findings(t: ProcessTable, probe: list[ProbeResult] | None = None,
             idle: Idleness | None = None, sums: DumpMembers | None = None
             ) -> list[dict[str, Any]]:  # fmt: skip
    """H1 pinned binaries, H2 idle heaps, H3 long mailboxes. `idle`: how idleness was read
    (default: at the one instant of `t`); `sums`: a dump's groups summed as read."""
    ws = t.wordsize or 8
    idle = idle or idleness(t)
    measured = _probed(probe)
    out: list[dict[str, Any]] = []
    for p in _top([p for p in t.procs if idle.idle(p)], _pinned, 50):
        if (_pinned(p) or 0) < MIN_PINNED:
            break
        h = binary_holder(p, ws, measured.get(p.pid))
        if h["kind"] == "unknown":  # a crash dump: no addresses, no collection counters
            out.append(_finding(
                "H1", "info", p, f"{p.label()} references {human(_pinned(p))} of refc binaries",
                f"{p.label()} was idle and its binary virtual heaps counted "
                f"{human(_pinned(p))} of refc binaries; {h['why']}, so whether they were dead "
                "(a collection frees them) or live (a cache or a queue) is not known: read the "
                "live node, with --gc-probe to measure it",
                {"holder": h, "bytes": _pinned(p), "releases": None}, (SRC_GC, SRC_EIA)))
        elif h["kind"] in ("dead", "probably dead", "mixed"):
            frees = h["released"] if h["measured"] else p.binary_exclusive_bytes
            verb = "A collection freed" if h["measured"] else "A collection would free up to"
            out.append(_finding(
                "H1", "action", p, f"{p.label()} pins {human(p.binary_exclusive_bytes)} of refc "
                f"binaries and does not collect",
                f"{p.label()} is idle and alone references {count(p.binary_count)} refc binaries "
                f"({human(p.binary_exclusive_bytes)}); {h['why']}. {verb} {human(frees)}: "
                "garbage-collect or hibernate it after a burst, or fix the code that keeps it "
                "idle with references (recon:bin_leak/1 does the same collection)",
                {"holder": h, "bytes": p.binary_exclusive_bytes, "releases": frees},
                (SRC_GC, SRC_HIB, SRC_EIA)))
        else:
            out.append(_finding(
                "H1", "info", p, f"{p.label()} keeps {human(p.binary_exclusive_bytes)} of live "
                "refc binaries",
                f"{p.label()} references {count(p.binary_count)} refc binaries "
                f"({human(p.binary_exclusive_bytes)}) that are live: {h['why']}. A collection "
                "does not release them; it is a cache or a queue: bound it (size, length, "
                "expiry) or keep the data elsewhere (ETS, disk)",
                {"holder": h, "bytes": p.binary_exclusive_bytes, "releases": h["released"] or 0},
                (SRC_EIA,)))
    h2 = _idle_finding(t, idle, idle_heaps(t, idle, probe, sums))
    if h2 is not None:
        out.append(h2)
    for p in _top(t.procs, lambda p: p.message_queue_len, 20):
        if p.message_queue_len < MIN_MAILBOX:
            break
        out.append(_finding(
            "H3", "action", p, f"{p.label()} has {count(p.message_queue_len)} messages queued",
            f"{p.label()} has {count(p.message_queue_len)} messages in its mailbox "
            f"({human(p.memory)} in all, current function {p.current_function or '?'}): it "
            "receives faster than it handles, or waits in a receive that skips them. The queue "
            "is data it has not handled; a collection releases none of it",
            {"message_queue_len": p.message_queue_len, "memory": p.memory}, (SRC_PI, SRC_EIA)))
    return out


def _idle_finding(t: ProcessTable, idle: Idleness, ih: dict[str, Any]) -> dict[str, Any] | None:
    """H2: the heaps of idle processes, what collecting them would release per group and how
    that is known. With one read they are idle at one instant and not called hibernation
    candidates: a process between two messages shows the same status."""
    big = [p for p in t.procs if idle.idle(p) and p.total_heap_bytes >= MIN_IDLE_HEAP]
    n, heap, rel = ih["count"], ih["total_heap_bytes"], ih["releases"]
    if not big and rel < MIN_IDLE_HEAP_TOTAL:
        return None
    partial = ("" if t.complete
               else f" (scaled from the {count(t.scanned)} of {count(t.count)} read)"
               if ih.get("scaled") else " of those read")
    where = "; ".join(f"{g['initial_call']}: {count(g['count'])} idle, "
                      f"{human(g['total_heap_bytes'])}, releases {_release(g)}"
                      + (f" ({', '.join(g['names'][:2])}, ...)" if g["names"] else "")
                      for g in ih["groups"][:3])
    names = ", ".join(p.label() for p in _top(big, lambda p: p.total_heap_bytes, 3))
    apart = ih["system"]
    system = (f"; OTP's own processes are apart ({count(apart['count'])} idle, "
              f"{human(apart['total_heap_bytes'])})" if apart["count"] else "")
    if idle.by == "two reads":
        secs = f" {idle.seconds:.1f} s apart" if idle.seconds is not None else ""
        title = (f"{count(n)} idle processes hold {human(heap)} of heap; a collection releases "
                 f"{_release(ih)}")
        head = (f"{count(n)} processes{partial} did nothing between two reads{secs} (no reductions "
                f"beyond the scan's own, no message waiting) and hold {human(heap)} of heap")
        tail = ("Hibernation candidates: erlang:hibernate/3 (gen_server: the `hibernate` "
                "return or {hibernate_after, Ms}) shrinks each to its live data; it costs a "
                "full collection per hibernation and a heap rebuilt on the next message")
    else:
        title = f"{count(n)} processes idle at one instant hold {human(heap)} of heap"
        head = (f"{count(n)} processes{partial} were waiting with an empty mailbox when read, "
                f"once, and hold {human(heap)} of heap")
        tail = ("Idle at one instant only: a process between two messages looks the same; "
                "two reads (`recommend NODE` reads the node twice) tell which stay idle")
    return {
        "rule": "H2", "level": "action" if rel >= MIN_IDLE_HEAP_TOTAL else "info",
        "process": None, "processes": [p.pid for p in big], "title": title,
        "message": f"{head} (by initial call: {where or 'none listed'}){system}; largest: "
                   f"{names or 'none over ' + human(MIN_IDLE_HEAP)}. Words in use since a "
                   "process's last collection are not live data: a collection keeps only what "
                   f"the process still references. {tail}",
        "evidence": {"count": n, "total_heap_bytes": heap, "releases": rel,
                     "measured_releases": ih["measured_releases"], "idle_by": idle.by,
                     "grown_bytes": ih["bound"], "largest": [p.pid for p in big],
                     "probed": sum(g["probed"] for g in ih["groups"])},
        "sources": [SRC_IDLE, SRC_FACTS, SRC_HIB, SRC_GC, SRC_EIA],
    }


def _release(x: dict[str, Any]) -> str:
    """A group's (or the total's) release, said with how it is known."""
    if "how" in x:
        return (f"~{human(x['releases'])} (GC probe on {x['probed']})" if x["how"] == "probe"
                else f"at most {human(x['releases'])}")
    if x["measured_releases"] >= x["releases"] / 2:
        return f"~{human(x['releases'])} (GC probe estimate)"
    return f"at most {human(x['releases'])}"


def _finding(rule: str, level: str, p: Proc, title: str, message: str,
             evidence: dict[str, Any], sources: tuple[str, ...]) -> dict[str, Any]:
    return {"rule": rule, "level": level, "process": p.pid, "name": p.name, "title": title,
            "message": message, "evidence": {"pid": p.pid, **evidence},
            "sources": [SRC_FACTS, *sources]}


def h_flags(t: ProcessTable, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `+h` emulator flags weighed against the findings, each with its cost and why it is
    or is not advised. None is: each changes a default for every process on the next start,
    and what it would do to this node's memory cannot be shown from a scan (nor from a probe,
    which collects once). What would show it is said."""
    out = []
    pinned = [f for f in found if f["rule"] == "H1" and f["level"] == "action"]
    if pinned:
        own = [p for p in t.procs if p.pid in {f["process"] for f in pinned}
               and p.min_bin_vheap_bytes and p.min_bin_vheap_bytes > 46_422 * (t.wordsize or 8)]
        why = ("An idle process receives nothing, and a smaller binary virtual heap only "
               "triggers a collection when binaries arrive: no flag makes an idle process "
               "collect")
        if own:
            why += ("; " + ", ".join(p.label() for p in own) + " sets its own minimum "
                    f"({human(own[0].min_bin_vheap_bytes)}), which the flag does not change")
        out.append({"flag": "+hmbs", "advised": False, "for": "H1",
                    "cost": "more frequent collections of every process that handles binaries",
                    "why": why, "would_show": "a node restarted with it and the same traffic, "
                    "scanned again: binary bytes of the holders"})
    if any(f["rule"] == "H3" for f in found):
        out.append({"flag": "+hmqd off_heap", "advised": False, "for": "H3",
                    "cost": "every message to every process is allocated outside its heap "
                            "(a heap fragment per send: slower sends)",
                    "why": "The long mailbox is one process's: process_flag(message_queue_data, "
                           "off_heap) in that process keeps its queue out of its collections "
                           "without changing every other process; the queue itself stays",
                    "would_show": "the owner's collection times before and after"})
    if any(f["rule"] == "H2" for f in found):
        out.append({"flag": "+hms", "advised": False, "for": "H2",
                    "cost": "a larger minimum heap for every process",
                    "why": "Idle heaps are too large, not too small: raising the minimum heap "
                           "would grow them; it cannot be lowered below its default (233 words)",
                    "would_show": None})
    return out


def processes_json(t: ProcessTable, probe: list[ProbeResult] | None = None,
                   earlier: ProcessTable | None = None, sums: DumpMembers | None = None
                   ) -> dict[str, Any]:  # fmt: skip
    """The `processes` section (docs/analysis-schema.md; issue 12 item 4). `earlier`: a read of
    the same node before `t`, by whose difference idleness is judged (issue 24 item 6). `sums`:
    the DumpMembers that kept `t.procs` of a dump (the groups' members summed as read)."""
    idle = idleness(t, earlier)
    found = findings(t, probe, idle, sums)
    procs = t.procs
    members = _members(t) if sums is None else {}
    return {
        "source": t.source, "count": t.count, "scanned": t.scanned, "complete": t.complete,
        "died": t.died, "budget": t.budget or None, "wordsize": t.wordsize,
        "memory": t.memory, "total_heap_bytes": t.total_heap_bytes,
        "message_queue_len": t.message_queue_len, "idle_count": t.idle_count,
        "idle_total_heap_bytes": t.idle_total_heap_bytes,
        "binary_bytes": t.binary_bytes, "binary_count": t.binary_count,
        "memory_binary": t.memory_binary,
        "top_binary": [_row(p) for p in _top(procs, lambda p: p.binary_bytes)],
        "top_heap": [_row(p) for p in _top(procs, lambda p: p.total_heap_bytes)],
        "mailboxes": [_row(p) for p in _top(procs, lambda p: p.message_queue_len)],
        "groups": [{"initial_call": g.initial_call, "count": g.count, "memory": g.memory,
                    "total_heap_bytes": g.total_heap_bytes,
                    "message_queue_len": g.message_queue_len, "binary_bytes": g.binary_bytes,
                    "names": g.names, "idle_count": g.idle_count,
                    "idle_total_heap_bytes": g.idle_total_heap_bytes,
                    "system": _system_group(g),
                    **(_group_members(members.get(g.initial_call)) if sums is None
                       else sums.group_members(g.initial_call))}
                   for g in t.groups[:TOP_ROWS * 2]],
        "idle_heaps": idle_heaps(t, idle, probe, sums),
        "gc_probe": None if probe is None else [
            {"pid": r.pid, "name": r.name, "dead": r.dead,
             "released_binary_bytes": r.released_binary_bytes,
             "released_heap_bytes": r.released_heap_bytes,
             "binary_before": r.binary_before, "binary_after": r.binary_after,
             "heap_before": r.heap_before, "heap_after": r.heap_after,
             "memory_binary_before": r.memory_binary_before,
             "memory_binary_after": r.memory_binary_after, "gc_ms": r.gc_ms}
            for r in probe],
        "findings": found,
        "h_flags": h_flags(t, found),
        "notes": list(t.notes),
    }


def _group_members(mine: list[Proc] | None) -> dict[str, Any]:
    """Of a group's reported members (the largest by each measure): OTP's own, which a group
    by a spawn call that says nothing (proc_lib:init_p/5 on OTP 25 and in dumps) mixes with the
    application's, and the largest of the others: what analyzer/categories.py weighs a group
    against before it names the group a holder."""
    mine = mine or []
    otp = [p for p in mine if is_system(p.name, p.initial_call)]
    app = [p.memory for p in mine if not is_system(p.name, p.initial_call)]
    return {"otp_count": len(otp), "otp_memory": sum(p.memory for p in otp),
            "largest_member": max(app, default=None)}


@dataclass
class _GroupSums:
    """Of one group of a dump (by initial call), what its members add up to: what
    _group_members and _idle_group take of them."""

    otp_count: int = 0
    otp_memory: int = 0
    largest: int | None = None  # of the application's members
    otp_idle: int = 0
    otp_idle_heap: int = 0
    names: list[str] = field(default_factory=list)  # the application's, first 3 sorted
    waits: Counter[str] = field(default_factory=Counter)  # current functions of idle ones


def _keep(best: list[tuple[int, str, int, Proc]], n: int, p: Proc, v: int | None,
          seq: int) -> None:
    """Keep `p` among the `n` largest by `v` (then smallest pid: _top's order) of `best`."""
    if v:
        best.append((-v, p.pid, seq, p))
        if len(best) >= 4 * n:
            best[:] = sorted(best)[:n]


class DumpMembers:
    """A crash dump's processes as they are read (collector/procdump.ProcSections(keep=)):
    kept only where some part of the `processes` section can name them (the largest by each
    measure _top lists, the idle ones H1 and H2 name), and of each group what processes_json
    takes of its members, summed. A dump of any number of processes costs what is kept, not a
    record each (issue 28 item 1); processes_json(sums=) gives what it gives on them all."""

    def __init__(self) -> None:
        self.groups: dict[str, _GroupSums] = {}
        self._seq = 0
        self._tops: list[tuple[Callable[[Proc], int | None], int, bool,
                               list[tuple[int, str, int, Proc]]]] = [
            (lambda p: p.binary_bytes, TOP_ROWS, False, []),
            (lambda p: p.total_heap_bytes, TOP_ROWS, False, []),
            (lambda p: p.message_queue_len, max(TOP_ROWS, 20), False, []),  # H3: 20
            (_pinned, 50, True, []),  # H1: of the idle ones
        ]
        self._big: list[tuple[int, Proc]] = []  # H2: every idle one of MIN_IDLE_HEAP

    def add(self, p: Proc) -> None:
        self._seq += 1
        system = is_system(p.name, p.initial_call)
        idle = p.idle and not system  # Idleness("one instant").idle
        for key, n, idle_only, best in self._tops:
            if idle or not idle_only:
                _keep(best, n, p, key(p), self._seq)
        if idle and p.total_heap_bytes >= MIN_IDLE_HEAP:
            self._big.append((self._seq, p))
        if p.initial_call is None:  # in no group's members (_members)
            return
        g = self.groups.get(p.initial_call)
        if g is None:
            g = self.groups[p.initial_call] = _GroupSums()
        if system:
            g.otp_count += 1
            g.otp_memory += p.memory
            if p.idle:
                g.otp_idle += 1
                g.otp_idle_heap += p.total_heap_bytes
            return
        g.largest = p.memory if g.largest is None else max(g.largest, p.memory)
        if p.name and p.name not in g.names and (len(g.names) < 3 or p.name < g.names[-1]):
            bisect.insort(g.names, p.name)
            del g.names[3:]
        if p.idle and p.current_function:
            g.waits[p.current_function] += 1

    def native(self) -> tuple[Any, ...]:
        """What the native reader of a dump's processes keeps in place of `add`
        (collector/native/src/procrecs.rs): system names and modules, the ranks of _tops by
        measure (_pinned: a dump's binaries, none known exclusive), MIN_IDLE_HEAP."""
        tops = [("binary_bytes", TOP_ROWS, False), ("total_heap_bytes", TOP_ROWS, False),
                ("message_queue_len", max(TOP_ROWS, 20), False), ("binary_bytes", 50, True)]
        return sorted(SYSTEM_NAMES), sorted(SYSTEM_MODULES), tops, MIN_IDLE_HEAP

    def absorb(self, members: list[Any], kept: list[Proc]) -> None:
        """What the native reader kept: each group's sums, and the processes `kept` gives."""
        for key, otp_count, otp_memory, largest, otp_idle, otp_idle_heap, names, waits in members:
            self.groups[key] = _GroupSums(otp_count, otp_memory, largest, otp_idle,
                                          otp_idle_heap, names, Counter(dict(waits)))
        self._big, self._tops = [(i, p) for i, p in enumerate(kept)], []

    def kept(self) -> list[Proc]:
        """The processes kept, in the dump's order."""
        seen: dict[int, Proc] = dict(self._big)
        for _, n, _, best in self._tops:
            seen.update((seq, p) for _, _, seq, p in sorted(best)[:n])
        return [seen[k] for k in sorted(seen)]

    def group_members(self, key: str) -> dict[str, Any]:
        """_group_members of a group's members."""
        g = self.groups.get(key) or _GroupSums()
        return {"otp_count": g.otp_count, "otp_memory": g.otp_memory,
                "largest_member": g.largest}


def probe_candidates(t: ProcessTable, n: int, earlier: ProcessTable | None = None) -> list[str]:
    """The N strongest candidates for the GC probe, idle ones only (by two reads where
    `earlier` is given) and never OTP's own: those that alone reference MIN_PINNED of binaries,
    largest first; then members of the groups whose idle heaps could release the most, taken in
    turn (the largest heap of each first), so that each such group's estimate rests on a
    measurement; then the rest by what a collection could free."""
    idle = idleness(t, earlier)
    cands = [p for p in t.procs if idle.idle(p)]
    order = [p for p in _top(cands, lambda p: p.binary_exclusive_bytes, len(cands))
             if (p.binary_exclusive_bytes or 0) >= MIN_PINNED]
    members = _members(t)
    rows = idle_heaps(t, idle)["groups"]
    # of each group, members that wait where most of it waits first (the one main process
    # beside ten thousand workers would speak for none of them), the largest heap first
    queues = [sorted((p for p in members.get(g["initial_call"], []) if idle.idle(p)),
                     key=lambda p, w=g["current_function"]: (p.current_function != w,
                                                             -p.total_heap_bytes, p.pid))[:n]
              for g in rows if g["releases"] >= MIN_GROUP_RELEASE]  # fmt: skip
    for i in range(max((len(q) for q in queues), default=0)):
        order += [q[i] for q in queues if i < len(q)]

    def gain(p: Proc) -> int:
        unused = p.total_heap_bytes - (p.heap_used_bytes or 0) if p.heap_used_bytes else 0
        return (p.binary_exclusive_bytes or 0) + unused + (p.total_heap_bytes >> 4)
    order += sorted(cands, key=lambda p: (gain(p), p.pid), reverse=True)
    return list(dict.fromkeys(p.pid for p in order))[:max(0, n)]


def headline(processes: dict[str, Any]) -> str | None:
    """One sentence for the verdict when processes, not placement, hold the memory: the
    strongest action finding, or a live holder named as such (None when neither)."""
    found = processes.get("findings") or []
    act = [f for f in found if f["level"] == "action"]
    live = [f for f in found if f["rule"] == "H1" and f["level"] == "info"]
    parts = []
    for f in act[:2]:
        parts.append(f["title"])
    for f in live[:1]:
        parts.append(f["title"] + " (live data: a collection would not release it)")
    return "; ".join(parts) if parts else None


def _holder_sentences(processes: dict[str, Any]) -> list[str]:
    """The holders worth a verdict's words, strongest first: dead references and idle heaps
    (what a collection or hibernation releases), long mailboxes, then live data (named as
    live, with no collection suggested)."""
    out = []
    for f in processes.get("findings") or []:
        if f["level"] != "action":
            continue
        if f["rule"] == "H1":
            h = f["evidence"]["holder"]
            since = ("a collection freed them when probed" if h["measured"]
                     else "it has not collected since they arrived")
            out.append(f"{human(f['evidence']['releases'])} of refc binaries are held by "
                       f"{f['name'] or f['process']}, which is idle: {since}")
        elif f["rule"] in ("H2", "H3"):
            out.append(f["title"])
    for f in processes.get("findings") or []:
        if f["rule"] == "H1" and f["level"] == "info" and _live(f):
            out.append(f"{f['name'] or f['process']} keeps {human(f['evidence']['bytes'])} "
                       "of refc binaries that are live (a cache or a queue: bound it; a "
                       "collection would not release them)")
    return out


def _live(f: dict[str, Any]) -> bool:
    """An H1 finding about live binaries (not one whose source cannot tell)."""
    return f["evidence"]["holder"]["kind"] in ("live", "probably live")


def _label(row: dict[str, Any]) -> str:
    """A process as an operator finds it again: its name, else its pid and where it waits."""
    if row["name"]:
        return str(row["name"])
    where = row.get("current_function") or row.get("initial_call")
    return f"{row['pid']} in {where}" if where else str(row["pid"])


def verdict_holders(processes: dict[str, Any], entries: list[NoFlagEntry]
                    ) -> tuple[list[str], list[NoFlagEntry]]:
    """The holders' part of a verdict (advice/recommend.py): the sentences naming the
    processes that hold the memory, and the NO FLAG HELPS entries with their remedies made to
    agree with the holder scan (issue 22 item 5). The state stays the allocators' (no +M flag
    is involved). A binary_alloc or eheap_alloc entry gets the holders' own remedies first, each
    with the bytes it releases (measured by the probe, else an upper bound) from the holder
    table; a live cache or queue is named as such, and no collection, hibernation or restart is
    promised for binaries the scan calls live."""
    said = _holder_sentences(processes)
    found = processes.get("findings") or []
    top = [r for r in processes.get("top_binary") or [] if r["binary_bytes"]]
    pinned = any(f["rule"] == "H1" and f["level"] == "action" for f in found)
    if any(e.allocator == "binary_alloc" for e in entries) and top[:3] and not pinned:
        # the surviving binaries that keep binary_alloc's carriers: whose they are
        said.append("the binaries that survive in binary_alloc are referenced by " + ", ".join(
            f"{_label(r)} ({human(r['binary_bytes'])})" for r in top[:3]))
    live = {f["process"] for f in found if f["rule"] == "H1" and _live(f)}
    # a queue or cache is bounded by name or not at all (issue 24 item 6): the long mailboxes
    queues = [Remedy("bound_queue", f["evidence"]["memory"],
                     "at most: the memory of the process that holds the queue",
                     tuple(f["sources"]), True, f["name"] or f["process"])
              for f in found if f["rule"] == "H3"][:2]  # fmt: skip
    out = []
    for e in entries:
        extra: list[Remedy] = []
        rest = [r for r in e.remedies if r.code != "bound_queue"] + queues
        held_by = e.held_by
        if e.allocator == "binary_alloc":
            # whose references keep the surviving binaries (and so the carriers they sit in)
            held_by = tuple({k: r[k] for k in ("pid", "name", "initial_call", "current_function",
                                               "binary_bytes", "binary_count")}
                            for r in (processes.get("top_binary") or [])[:5])  # fmt: skip
            for f in found:
                if f["rule"] != "H1" or (f["level"] == "info" and not _live(f)):
                    continue
                who = f["name"] or f["process"]
                measured = f["evidence"]["holder"]["measured"]
                if f["level"] == "action":
                    extra.append(Remedy("gc_holder", f["evidence"]["releases"],
                                        "measured by the GC probe" if measured
                                        else "at most: the binaries it alone references",
                                        tuple(f["sources"]), not measured, who))
                else:
                    extra.append(Remedy("bound_live_holder", 0, "measured by the GC probe"
                                        if measured else "live data", tuple(f["sources"]),
                                        False, who))  # fmt: skip
            # a restart or hibernation releases what the holders that are not live reference,
            # as the holder table counts it; nothing where every holder's binaries are live
            dead = sum(r["binary_bytes"] for r in top if r["pid"] not in live)
            rest = [r if r.code != "restart_holders" else replace(
                r, releases=min(dead, e.unused), bound=True,
                releases_how="at most: the binaries of the holders not called live (the "
                             "holder table)") for r in rest
                    if r.code != "restart_holders" or dead]  # fmt: skip
        elif e.allocator == "eheap_alloc":
            for f in found:
                ev = f["evidence"]
                if (f["rule"] == "H2" and f["level"] == "action"
                        and (ev["idle_by"] == "two reads" or ev["measured_releases"])):
                    probed = ev["measured_releases"] >= ev["releases"] / 2
                    extra.append(Remedy("hibernate_idle", ev["releases"],
                                        "estimated from the GC probe's collections" if probed
                                        else "at most: their heaps beyond the minimum",
                                        tuple(f["sources"]), not probed, count(ev['count'])))
        out.append(replace(e, remedies=tuple(extra + rest), held_by=held_by))
    return said, out


def idle_verdict(processes: dict[str, Any] | None, node_bytes: int) -> Reason | None:
    """The verdict's reason when dead data in idle heaps is most of the node (issue 24 item 7):
    what collecting them releases is at least MOSTLY_IDLE of `node_bytes` (erlang:memory(total)),
    and it is known well enough to act on: the processes were idle between two reads, or the
    GC probe measured the group that releases most. None otherwise (and on one read unprobed:
    idle at one instant is no ground for a verdict)."""
    ih = (processes or {}).get("idle_heaps")
    if not ih or not ih["groups"] or node_bytes <= 0:
        return None
    top = ih["groups"][0]
    if ih["idle_by"] != "two reads" and top["how"] != "probe":
        return None
    if ih["releases"] < max(MIN_IDLE_HEAP_TOTAL, MOSTLY_IDLE * node_bytes):
        return None
    return Reason("idle_heaps", {
        "releases": ih["releases"], "bound": ih["measured_releases"] < ih["releases"] / 2,
        "node_bytes": node_bytes, "count": ih["count"], "idle_by": ih["idle_by"],
        "group": top["initial_call"], "waiting_in": top["current_function"],
        "group_count": top["count"],
        "group_releases": top["releases"], "probed": top["probed"]})
