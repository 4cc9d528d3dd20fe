"""Containers and limits: the node's memory cgroup beside its RSS and carriers, and the tables
erts sizes at boot for its limits (docs/erts/memory-categories.md §3, §6).

erts allocates its process and port tables for `process_limit` and `port_limit` at boot, in
ll_alloc, whatever the node later uses: 16 to 32 bytes per entry by release (measured, §6). A
port limit raised by a huge open-file limit (a container's nofile of 1,048,576 or more) or a
large `+Q`/`+P` can hold hundreds of MiB before the node runs anything. The finding names the
flag that gives them back and its bytes, an estimate from that per-entry cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from beamalloc.collector.cgroup import MAX_BYTES
from beamalloc.snapshot import Snapshot
from beamalloc.units import human

#: ll_alloc bytes per entry of the process and the port table, measured as ll_alloc's carriers
#: at +Q/+P 2^22 and 2^24 against the defaults (§6): about 16 on OTP 25 (erts 13.1.5, 64-bit),
#: about 32 on OTP 27 and 29. OTP 26 is not measured: it is counted as 25.
BYTES_PER_ENTRY = 16
BYTES_PER_ENTRY_27 = 32
#: The defaults: +Q 65536 (erts's DEFAULT_MAX_PORTS) and +P 262144 on OTP 25, 1048576 from
#: OTP 27: limits up to these are never reported, nor advised below.
DEFAULT_PORTS = 1 << 16
DEFAULT_PROCESSES = 1 << 18
DEFAULT_PROCESSES_27 = 1 << 20
#: A table worth a finding holds this much [heur]: smaller ones are lost in any node's ll_alloc.
MIN_TABLE_BYTES = 32 << 20
#: Headroom advised over the entries in use when a lower limit is suggested [heur].
USE_FACTOR = 4


@dataclass(frozen=True)
class LimitFinding:
    table: Literal["port", "process"]
    limit: int
    in_use: int | None
    nofile: int | None
    #: bytes the table takes at the current limit, and the flag advised with what it gives back
    table_bytes: int
    bytes_per_entry: int  # the estimate's cost of an entry on the node's release
    flag: str
    saving: int
    ll_alloc: int | None  # ll_alloc's carriers, where the estimate shows
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Container:
    """The node's memory cgroup against what the node and the OS see of it."""

    version: int
    limit: int | None
    current: int | None
    working_set: int | None
    headroom: int | None
    anon: int | None
    file: int | None
    inactive_file: int | None
    rss: int | None
    allocated: int
    notes: list[str]
    message: str
    #: what the node can still take: the headroom, or the host's MemAvailable where that is
    #: less (None without a limit: then the host's MemAvailable is the node's too)
    available: int | None = None
    mem_available_host: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _from_27(otp_release: str | None) -> bool:
    major = (otp_release or "").partition(".")[0]
    return major.isdigit() and int(major) >= 27


def default_processes(otp_release: str | None) -> int:
    """+P's default for the node's release (§6): never advise below what erts would take."""
    return DEFAULT_PROCESSES_27 if _from_27(otp_release) else DEFAULT_PROCESSES


def bytes_per_entry(otp_release: str | None) -> int:
    """ll_alloc bytes a table entry costs on the node's release (§6); OTP 25's where unknown."""
    return BYTES_PER_ENTRY_27 if _from_27(otp_release) else BYTES_PER_ENTRY


def limit_findings(snap: Snapshot) -> list[LimitFinding]:
    lim = snap.extra.get("limits")
    if not isinstance(lim, dict):
        return []
    ll = sum(i.mbcs.carriers_size.current + i.sbcs.carriers_size.current
             for i in snap.instances("ll_alloc")) or None
    nofile = lim.get("nofile") if isinstance(lim.get("nofile"), int) else None
    per = bytes_per_entry(snap.otp_release)
    out = []
    for table, key, count, default, flag in (
            ("port", "port_limit", "port_count", DEFAULT_PORTS, "+Q"),
            ("process", "process_limit", "process_count", default_processes(snap.otp_release),
             "+P")):
        limit = lim.get(key)
        if not isinstance(limit, int) or limit <= default:
            continue
        size = limit * per
        if size < MIN_TABLE_BYTES:
            continue
        used = lim.get(count) if isinstance(lim.get(count), int) else None
        new = max(default, _pow2_at_least(USE_FACTOR * used)) if used is not None else default
        if new >= limit:
            continue
        saving = (limit - new) * per
        why = ""
        if table == "port" and nofile is not None and nofile >= limit:
            why = (f" erts sized it from the open-file limit (nofile {nofile}), as it does when "
                   "that is above 65536: a container's default nofile does this.")
        msg = (f"The {table} table is sized for {limit} {table}s"
               + (f" ({used} in use)" if used is not None else "")
               + f": about {human(size)} of ll_alloc"
               + (f" (ll_alloc holds {human(ll)})" if ll else "")
               + f" taken at boot, whatever the node runs.{why} `{flag} {new}` gives back about "
               f"{human(saving)} (an estimate at {per} bytes an entry on OTP "
               f"{snap.otp_release or 'unknown, taken as 25'}).")
        out.append(LimitFinding(table, limit, used, nofile, size, per, f"{flag} {new}", saving, ll,
                                msg))  # type: ignore[arg-type]
    return out


def container(snap: Snapshot, allocated: int) -> Container | None:
    """The cgroup the collector recorded (extra.cgroup), checked again: a snapshot file is
    outside input, so each number is a byte count below MAX_BYTES or left out with a note, and
    the working set and headroom are computed here, not taken from the file."""
    cg = snap.extra.get("cgroup")
    if not isinstance(cg, dict):
        return None
    raw = cg.get("notes")
    notes = [x for x in raw if isinstance(x, str)] if isinstance(raw, list) else []
    vals: dict[str, int | None] = {}
    for k in ("current", "limit", "anon", "file", "inactive_file"):
        v = cg.get(k)
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_BYTES
        vals[k] = v if ok else None  # type: ignore[assignment]
        if v is not None and not ok:
            notes.append(f"the snapshot's cgroup {k} is not a byte count: left out")
    cur, limit, inactive = vals["current"], vals["limit"], vals["inactive_file"]
    if inactive is not None and cur is not None and inactive > cur:
        notes.append("the snapshot's cgroup inactive_file exceeds its charge: left out")
        inactive = vals["inactive_file"] = None
    ws = None if cur is None else cur - (inactive or 0)
    head = None if limit is None or ws is None else limit - ws
    ver = cg.get("version") if cg.get("version") in (1, 2) else None
    who = "The node's cgroup" + (f" (v{ver})" if ver else "")
    # what the charge is made of (memory.stat), where the cgroup tells it
    parts = ", ".join(f"{k.replace('_', ' ')} {human(vals[k])}"
                      for k in ("anon", "file", "inactive_file") if vals[k] is not None)
    if cur is None:  # the notes say why
        msg = (f"{who} " + ("has no memory limit" if limit is None else f"allows {human(limit)}")
               + "; its charge was not read.")
    elif limit is None:
        msg = (f"{who} has no memory limit; it is charged {human(cur)}"
               + (f" ({parts})" if parts else "") + ", page cache included.")
    else:
        left = (f"so {human(head)} is left before the OOM killer acts" if head is None
                or head >= 0 else f"{human(-head)} over it: the kernel reclaims or kills")
        msg = (f"{who} allows {human(limit)} and is charged {human(cur)}"
               + (f" ({parts})" if parts else "")
               + f"; its working set (charge minus inactive file pages) is {human(ws)}, {left}"
               + (f"; the node's RSS is {human(snap.rss)} and its carriers "
                  f"{human(allocated)}" if snap.rss is not None else "")
               # the host may run short first: then its MemAvailable is the node's bound
               + (f"; the host has only {human(snap.mem_available)} available, less than that"
                  if head is not None and snap.mem_available is not None
                  and 0 <= snap.mem_available < head else "") + ".")
    host = snap.mem_available
    avail = None if head is None else max(0, head if host is None else min(head, host))
    return Container(ver or 0, limit, cur, ws, head, vals["anon"], vals["file"], inactive,
                     snap.rss, allocated, notes, msg, avail, host)
