"""The container a node on this host runs in: its memory cgroup, v2 or v1, and its open-file
limit (docs/erts/memory-categories.md §3, §6).

Read for a node whose OS pid this host can see (collector/live.py reads RSS the same way): the
charge (memory.current / memory.usage_in_bytes), the limit (memory.max / memory.limit_in_bytes),
memory.stat's anon, file and inactive_file, and from them the headroom that matters inside the
container: limit - (charge - inactive file pages), what the OOM killer leaves before it acts.
Every file is optional: one that is missing, unreadable or absurd (not a byte count, beyond
MAX_BYTES, inactive file pages above the charge) leaves its field None and one note, never an
exception; a file is read up to MAX_READ bytes. The details: docs/containers.md.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_READ = 1 << 16
#: A v1 limit at or above this is "no limit" (the kernel writes PAGE_COUNTER_MAX pages, about
#: 2^63 bytes rounded down to a page).
V1_NO_LIMIT = 1 << 62
#: No machine's memory reaches this (64 PiB): a larger charge or stat is absurd, not a count. A
#: limit above it is "no limit" (v1 writes about 2^63 for none; so may a v2 tree copied by hand).
MAX_BYTES = 1 << 56
_UINT = re.compile(r"[0-9]{1,20}\Z")


@dataclass(frozen=True)
class Cgroup:
    version: int  # 1 or 2
    path: str  # inside the hierarchy, as /proc/PID/cgroup names it
    current: int | None  # bytes charged now, page cache included
    limit: int | None  # None: no limit
    anon: int | None
    file: int | None
    inactive_file: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def working_set(self) -> int | None:
        if self.current is None:
            return None
        return max(0, self.current - (self.inactive_file or 0))

    @property
    def headroom(self) -> int | None:
        ws = self.working_set
        return None if self.limit is None or ws is None else self.limit - ws

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "working_set": self.working_set, "headroom": self.headroom}


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(MAX_READ).decode("ascii", "replace")


def _uint(text: str) -> int | None:
    t = text.strip()
    return int(t) if _UINT.match(t) and int(t) < 1 << 64 else None


def _stat(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if (n := _uint(v)) is not None:
            out[k] = n
    return out


def cgroup_paths(pid: int, proc: str = "/proc") -> tuple[str | None, str | None]:
    """(the v2 path, the v1 memory controller's path) from /proc/PID/cgroup; None if absent."""
    try:
        text = _read(Path(proc) / str(pid) / "cgroup")
    except OSError:
        return None, None
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def read_cgroup(pid: int, root: str = "/sys/fs/cgroup", proc: str = "/proc") -> Cgroup | None:
    """The memory cgroup of process `pid`, or None where it has none this host can read (no
    /proc/PID/cgroup, no memory controller mounted)."""
    v2, v1 = cgroup_paths(pid, proc)
    base = Path(root)
    # v1 first where the memory controller is mounted as v1 (a hybrid host's v2 tree has no
    # memory files); else v2. v1's usage_in_bytes counts the cgroup's descendants: so do the
    # total_* lines of its memory.stat, not rss/cache/inactive_file (this cgroup's own pages).
    if v1 is not None and (base / "memory").is_dir():
        d = base / "memory" / v1.lstrip("/")
        return _read_files(1, v1, d, "memory.usage_in_bytes", "memory.limit_in_bytes",
                           ("total_rss", "total_cache", "total_inactive_file"))
    if v2 is not None and (base / "cgroup.controllers").exists():
        d = base / v2.lstrip("/")
        return _read_files(2, v2, d, "memory.current", "memory.max",
                           ("anon", "file", "inactive_file"))
    return None


def _read_files(version: int, path: str, d: Path, current: str, limit: str,
                stat_keys: tuple[str, str, str]) -> Cgroup:
    if ".." in path.split("/") or "\x00" in path:
        # A node in a cgroup outside our cgroup namespace shows as /../..: its files are not
        # under this mount, and joining the path would read another cgroup's.
        return Cgroup(version, path[:200].encode("ascii", "replace").decode(), None, None,
                      None, None, None, ["cgroup outside this cgroup namespace's tree (its path "
                                         "climbs with ..): not read"])
    notes: list[str] = []
    vals: dict[str, int | None] = {}
    for key, name in (("current", current), ("limit", limit)):
        try:
            text = _read(d / name)
        except OSError as e:
            notes.append(f"cgroup {name} not read ({e.strerror or 'unreadable'})")
            vals[key] = None
            continue
        if key == "limit" and text.strip() == "max":
            vals[key] = None
            continue
        n = _uint(text)
        if n is None:
            notes.append(f"cgroup {name} is not a byte count")
        vals[key] = n
    if vals["limit"] is not None and vals["limit"] >= min(V1_NO_LIMIT, MAX_BYTES):
        vals["limit"] = None
    elif vals["limit"] == 0:  # the kernel refuses 0 for a cgroup with tasks: not a real limit
        notes.append(f"cgroup {limit} is 0, which no running cgroup holds")
        vals["limit"] = None
    if vals["current"] is not None and vals["current"] >= MAX_BYTES:
        notes.append(f"cgroup {current} is beyond any memory ({vals['current']} bytes)")
        vals["current"] = None
    st: dict[str, int] | None = None
    try:
        st = _stat(_read(d / "memory.stat"))
    except OSError as e:
        notes.append(f"cgroup memory.stat not read ({e.strerror or 'unreadable'})")
    anon, file_, inactive = (None if st is None else st.get(k) for k in stat_keys)
    if st is not None and None in (anon, file_, inactive):
        notes.append("cgroup memory.stat lacks " + ", ".join(
            k for k, v in zip(stat_keys, (anon, file_, inactive), strict=True) if v is None))
    if any(v is not None and v >= MAX_BYTES for v in (anon, file_, inactive)) or (
            inactive is not None and vals["current"] is not None
            and inactive > vals["current"]):
        notes.append("cgroup memory.stat is absurd against the charge "
                     f"({', '.join(stat_keys)}: {anon}, {file_}, {inactive}); not used")
        anon = file_ = inactive = None
    return Cgroup(version, path[:200], vals["current"], vals["limit"], anon, file_, inactive,
                  notes)


def read_nofile(pid: int, proc: str = "/proc") -> int | None:
    """The soft open-file limit of `pid` (Max open files in /proc/PID/limits): erts sizes its
    port table from it (docs/erts/memory-categories.md §6). None where unreadable."""
    try:
        text = _read(Path(proc) / str(pid) / "limits")
    except OSError:
        return None
    m = re.search(r"^Max open files\s+(\d{1,20}|unlimited)\s", text, re.M)
    if m is None or m.group(1) == "unlimited":
        return None
    return int(m.group(1))
