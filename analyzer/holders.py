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

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from beamalloc.analyzer.records import NoFlagEntry, Remedy
from beamalloc.collector.processes import ProbeResult, Proc, ProcessTable
from beamalloc.units import human

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

#: The findings' home in the shipped docs, cited first (beamalloc/citations.py links it).
SRC_FACTS = 'docs/processes.md "Facts"'
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
                "why": f"at most {survived:,} of its {n:,} references survived its last "
                       f"collection ({human(p.survived_bytes)} did): the rest arrived since and "
                       "have not been through one; --gc-probe measures what a collection frees"}
    return {"kind": "probably live", "measured": False, "released": None,
            "why": f"{human(p.survived_bytes)} survived its last collection, room for its "
                   f"{n:,} references: they were live then (a cache or a queue?); --gc-probe "
                   "measures it"}


def findings(t: ProcessTable, probe: list[ProbeResult] | None = None) -> list[dict[str, Any]]:
    """H1 pinned binaries, H2 idle heaps (hibernation candidates), H3 long mailboxes."""
    ws = t.wordsize or 8
    measured = _probed(probe)
    out: list[dict[str, Any]] = []
    for p in _top([p for p in t.procs if p.idle], _pinned, 50):
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
                f"{p.label()} is idle and alone references {p.binary_count:,} refc binaries "
                f"({human(p.binary_exclusive_bytes)}); {h['why']}. {verb} {human(frees)}: "
                "garbage-collect or hibernate it after a burst, or fix the code that keeps it "
                "idle with references (recon:bin_leak/1 does the same collection)",
                {"holder": h, "bytes": p.binary_exclusive_bytes, "releases": frees},
                (SRC_GC, SRC_HIB, SRC_EIA)))
        else:
            out.append(_finding(
                "H1", "info", p, f"{p.label()} keeps {human(p.binary_exclusive_bytes)} of live "
                "refc binaries",
                f"{p.label()} references {p.binary_count:,} refc binaries "
                f"({human(p.binary_exclusive_bytes)}) that are live: {h['why']}. A collection "
                "does not release them; it is a cache or a queue: bound it (size, length, "
                "expiry) or keep the data elsewhere (ETS, disk)",
                {"holder": h, "bytes": p.binary_exclusive_bytes, "releases": h["released"] or 0},
                (SRC_EIA,)))
    big = [p for p in t.procs if p.idle and p.total_heap_bytes >= MIN_IDLE_HEAP]
    n_idle = t.idle_count if t.idle_count is not None else len(big)
    idle_heap = (t.idle_total_heap_bytes if t.idle_total_heap_bytes is not None
                 else sum(p.total_heap_bytes for p in big))
    grown = max(idle_heap - n_idle * MIN_HEAP_WORDS * ws, 0)  # beyond their minimum heaps
    if big or grown >= MIN_IDLE_HEAP_TOTAL:
        probed = [measured[p.pid] for p in big if p.pid in measured]
        if probed:
            freed = sum(r.released_heap_bytes for r in probed)
            before = sum(r.heap_before for r in probed)
            how = (f"the GC probe collected {len(probed)} of them: {human(freed)} of "
                   f"{human(before)} of heap released")
        elif big:
            used = sum(p.heap_used_bytes or p.total_heap_bytes for p in big)
            held = sum(p.total_heap_bytes for p in big)
            how = (f"the {len(big)} largest reported hold {human(held)}, at most {human(used)} "
                   "of it in use (used heap words): a hibernation leaves no more than that")
        else:
            how = "their heaps are no more than a collection's worth each"
        gs = sorted((g for g in t.groups if g.idle_total_heap_bytes),
                    key=lambda g: -(g.idle_total_heap_bytes or 0))[:3]
        where = "; ".join(f"{g.initial_call}: {g.idle_count:,} idle, "
                          f"{human(g.idle_total_heap_bytes)}"
                          + (f" ({', '.join(g.names[:2])}, ...)" if g.names else "")
                          for g in gs)
        names = ", ".join(p.label() for p in _top(big, lambda p: p.total_heap_bytes, 3))
        partial = "" if t.complete else " of those read"
        out.append({
            "rule": "H2", "level": "action" if grown >= MIN_IDLE_HEAP_TOTAL else "info",
            "process": None, "processes": [p.pid for p in big],
            "title": f"{n_idle:,} idle processes hold {human(idle_heap)} of heap",
            "message": f"{n_idle:,} idle processes{partial} hold {human(idle_heap)} of heap, "
                       f"{human(grown)} beyond their minimum heaps (by initial call: {where}); "
                       f"largest: {names or 'none over ' + human(MIN_IDLE_HEAP)}; {how}. "
                       "Hibernation candidates: erlang:hibernate/3 (gen_server: the "
                       "`hibernate` return or {hibernate_after, Ms}) shrinks each to its live "
                       "data; it costs a full collection per hibernation and a heap rebuilt "
                       "on the next message",
            "evidence": {"count": n_idle, "total_heap_bytes": idle_heap, "grown_bytes": grown,
                         "largest": [p.pid for p in big], "probed": [r.pid for r in probed]},
            "sources": [SRC_FACTS, SRC_HIB, SRC_GC, SRC_EIA],
        })
    for p in _top(t.procs, lambda p: p.message_queue_len, 20):
        if p.message_queue_len < MIN_MAILBOX:
            break
        out.append(_finding(
            "H3", "action", p, f"{p.label()} has {p.message_queue_len:,} messages queued",
            f"{p.label()} has {p.message_queue_len:,} messages in its mailbox ({human(p.memory)} "
            f"in all, current function {p.current_function or '?'}): it receives faster than it "
            "handles, or waits in a receive that skips them. The queue is data it has not "
            "handled; a collection releases none of it",
            {"message_queue_len": p.message_queue_len, "memory": p.memory}, (SRC_PI, SRC_EIA)))
    return out


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


def processes_json(t: ProcessTable, probe: list[ProbeResult] | None = None) -> dict[str, Any]:
    """The `processes` section (docs/analysis-schema.md; issue 12 item 4)."""
    found = findings(t, probe)
    procs = t.procs
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
                    "idle_total_heap_bytes": g.idle_total_heap_bytes}
                   for g in t.groups[:TOP_ROWS * 2]],
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


def probe_candidates(t: ProcessTable, n: int) -> list[str]:
    """The N strongest candidates for the GC probe: idle processes by what a collection could
    free, the binaries they alone reference first, then heap beyond what is in use."""
    def gain(p: Proc) -> tuple[int, int]:
        heap = p.total_heap_bytes - (p.heap_used_bytes or 0) if p.heap_used_bytes else 0
        return (p.binary_exclusive_bytes or 0, heap + (p.total_heap_bytes >> 4))
    idle = [p for p in t.procs if p.idle]
    return [p.pid for p in sorted(idle, key=lambda p: (gain(p)[0] + gain(p)[1], p.pid),
                                  reverse=True)[:max(0, n)]]


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
        elif f["rule"] == "H2":
            out.append(f"{f['title']} ({human(f['evidence']['grown_bytes'])} beyond their "
                       "minimum heaps: hibernation candidates)")
        elif f["rule"] == "H3":
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
    """The holders' part of a verdict (analyzer/recommend.py): the sentences naming the
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
    out = []
    for e in entries:
        extra: list[Remedy] = []
        rest = list(e.remedies)
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
                if f["rule"] == "H2" and f["level"] == "action":
                    extra.append(Remedy("hibernate_idle", f["evidence"]["grown_bytes"],
                                        "at most: their heaps beyond the minimum",
                                        tuple(f["sources"]), True, f["title"]))
        out.append(replace(e, remedies=tuple(extra + rest), held_by=held_by))
    return said, out
