"""Read the allocator state out of an `erl_crash.dump` (docs/erts/alloc_util.md §6.3).

A crash dump is written while the node dies and is often cut short (disk full, a supervisor's
kill, `ERL_CRASH_DUMP_SECONDS`). The reader streams the file line by line, keeps only the header,
`=memory`, `=node` and the `=allocator:` sections, and keeps every instance whose section ended
before the cut; the Snapshot says what was lost.

Max values in a crash dump are not reset by the dump (§6.3), unlike a live system_info call.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from beamalloc.errors import InputError
from beamalloc.snapshot import (
    AllocatorInstance,
    BlockStats,
    FixType,
    MsegInstance,
    PoolStats,
    Snapshot,
    Triple,
)

MAGIC = "=erl_crash_dump:"
#: Dump format versions this reader knows (OTP 25 writes 0.5).
KNOWN_VERSIONS = ("0.1", "0.2", "0.3", "0.4", "0.5")
MAX_LINE = 1 << 20  # longer lines are not allocator data; they are skipped unread


class CrashDumpError(InputError):
    pass


_SECTION = re.compile(r"=allocator:([a-z_]+)(?:\[(\d+)\])?$")
_SYSVER = re.compile(
    r"Erlang/OTP (\S+) \[erts-([\d.]+)\](?:.*?\[(\d+)-bit\])?(?:.*?\[smp:(\d+):(\d+)\])?"
)
# Releases before OTP 17 wrote "Erlang R16B02 (erts-5.10.3) ... [64-bit] [smp:4:4]", or only
# "Erlang (BEAM) emulator version 5.6.1" (no release, no word size: 32-bit unless it says so).
_SYSVER_OLD = re.compile(
    r"Erlang (?:(R\w+) \(erts-([\d.]+)\)|\(BEAM\) emulator version ([\d.]+))"
    r"(?:.*?\[(\d+)-bit\])?(?:.*?\[smp:(\d+):(\d+)\])?"
)
# "mbcs blocks[binary_alloc] count: 0 20 20" (OTP ≥ 23); "mbcs blocks: 1 2 3" and
# "mbcs blocks size: 4 5 6" (OTP ≤ 22, counted as the instance's own type)
_BLOCKS = re.compile(r"(mbcs|sbcs|mbcs_pool) blocks(?:\[([a-z_]+)\])?( count| size)?: ([\d ]+)$")
_CARRIERS = re.compile(
    r"(mbcs|sbcs|mbcs_pool) (carriers|mseg carriers|sys_alloc carriers)( size)?: ([\d ]+)$"
)
_CALLS = re.compile(r"([a-z_]+) calls: (\d+)$")


def _nums(s: str) -> list[int]:
    return [int(x) for x in s.split()]


def _t(nums: list[int]) -> Triple:
    return Triple(*nums) if len(nums) == 3 else Triple(nums[0], nums[0], nums[0])


def _option(v: str) -> int | bool | str:
    if v in ("true", "false"):
        return v == "true"
    return int(v) if v.isdigit() else v


@dataclass
class _Section:
    name: str
    ix: int | None
    lines: list[str] = field(default_factory=list)


def _instance(sec: _Section) -> AllocatorInstance:
    inst = AllocatorInstance(allocator=sec.name, instance=sec.ix or 0)
    sections = {"mbcs": inst.mbcs, "sbcs": inst.sbcs}
    pool: PoolStats | None = None
    pool_counts: dict[str, list[int]] = {}
    for line in sec.lines:
        if line.startswith("option "):
            k, _, v = line[7:].partition(": ")
            inst.options[k] = _option(v)
        elif line.startswith("versions: "):
            inst.versions = line[10:].split()
        elif m := _BLOCKS.match(line):
            where, typ, what, nums = (
                m.group(1),
                m.group(2) or sec.name,
                m.group(3),
                _nums(m.group(4)),
            )
            if where == "mbcs_pool":
                pool = pool or PoolStats()
                pool_counts.setdefault(typ, [0, 0])[1 if what == " size" else 0] = nums[0]
            else:
                b = sections[where].blocks.setdefault(typ, BlockStats())
                if what == " size":
                    b.size = _t(nums)
                else:
                    b.count = _t(nums)
        elif m := _CARRIERS.match(line):
            where, kind, size, nums = m.group(1), m.group(2), m.group(3), _nums(m.group(4))
            if where == "mbcs_pool":
                pool = pool or PoolStats()
                if size:
                    pool.carriers_size = nums[0]
                else:
                    pool.carriers = nums[0]
                continue
            cs = sections[where]
            if kind == "carriers":
                if size:
                    cs.carriers_size = _t(nums)
                else:
                    cs.carriers = _t(nums)
            elif kind == "mseg carriers":
                if size:
                    cs.mseg_carriers_size = nums[0]
                else:
                    cs.mseg_carriers = nums[0]
            elif size:
                cs.sys_carriers_size = nums[0]
            else:
                cs.sys_carriers = nums[0]
        elif m := _CALLS.match(line):
            inst.calls[m.group(1)] = int(m.group(2))
        elif line.startswith("fix type: "):
            parts = line[10:].split()
            if len(parts) == 3:
                inst.fix_types = inst.fix_types or []
                inst.fix_types.append(FixType(parts[0], int(parts[1]), int(parts[2])))
    # The dump lists every type, zeros included; system_info lists only types ever used (§6.1).
    for cs in sections.values():
        cs.blocks = {t: b for t, b in cs.blocks.items() if b.count.max or b.size.max}
    if pool is not None:
        pool.blocks = {t: (c, s) for t, (c, s) in pool_counts.items() if c or s}
        inst.mbcs_pool = pool
    return inst


def _mseg(sec: _Section) -> MsegInstance:
    m = MsegInstance(instance=sec.ix or 0)
    for line in sec.lines:
        k, _, v = line.partition(": ")
        if k.startswith("option "):
            m.options[k[7:]] = _option(v)
        elif k in ("cached_segments", "cache_hits", "segments_watermark"):
            setattr(m, k, int(v))
        elif k in ("segments", "segments_size"):
            setattr(m, k, _t(_nums(v)))
        elif k.endswith(" calls"):
            m.calls[k[:-6]] = int(v)
    return m


def _finish(snap: Snapshot, sec: _Section) -> None:
    if sec.name == "mseg_alloc":
        snap.mseg.append(_mseg(sec))
    elif sec.name in ("sys_alloc", "alloc_util"):
        opts = {}
        for line in sec.lines:
            k, _, v = line.partition(": ")
            if k.startswith("option "):
                opts[k[7:]] = _option(v)
        snap.extra[sec.name] = {"0": opts}
    elif any(line == "option e: false" for line in sec.lines):
        snap.notes.append(f"{sec.name} is not enabled on this node")
    elif not any(" carriers: " in line for line in sec.lines):
        return  # =allocator:instr and other sections without carriers describe no allocator
    else:
        snap.allocators.append(_instance(sec))


def read_crashdump_lines(lines: Iterable[str], name: str = "crash dump") -> Snapshot:
    it = iter(lines)
    first = next(it, "")
    if not first.startswith(MAGIC):
        raise CrashDumpError(f"{name}: not an Erlang crash dump (no '{MAGIC}' header)")
    version = first[len(MAGIC) :].strip()
    snap = Snapshot(node="unknown", source="crashdump")
    if version not in KNOWN_VERSIONS:
        snap.notes.append(
            f"crash dump format {version} is newer than this reader knows "
            f"({KNOWN_VERSIONS[-1]}); read as {KNOWN_VERSIONS[-1]}"
        )
    head: list[str] = []
    section: str | None = None  # the =header being read (without '=')
    alloc: _Section | None = None
    ended = False
    raw: list[str] = []
    for line in it:
        line = line.rstrip("\r\n")
        if line.startswith("="):
            if alloc is not None:
                _finish(snap, alloc)
                alloc = None
            section = line[1:]
            if section == "end":
                ended = True
                break
            if m := _SECTION.match(line):
                alloc = _Section(m.group(1), int(m.group(2)) if m.group(2) else None)
                raw.append(line)
            elif section.startswith("allocator:erts_mmap"):
                raw.append(line)
            elif section.startswith("node:"):
                snap.node = section[5:].strip("'")
            continue
        if len(line) > MAX_LINE:
            continue
        if section is None:
            head.append(line)
        elif alloc is not None:
            alloc.lines.append(line)
            raw.append(line)
        elif section == "memory":
            k, _, v = line.partition(": ")
            if v.isdigit():
                snap.memory[k] = int(v)
        elif section.startswith("allocator:erts_mmap"):
            raw.append(line)
            snap.extra.setdefault("erts_mmap", "")
            snap.extra["erts_mmap"] += f"{section[len('allocator:erts_mmap.') :]}: {line}\n"
    if not ended:
        snap.truncated = True
        if alloc is not None:
            where = alloc.name + (f"[{alloc.ix}]" if alloc.ix is not None else "")
            snap.notes.append(
                f"the crash dump is truncated inside =allocator:{where}: that instance is dropped, "
                f"{len(snap.allocators)} complete instances are kept, "
                "and allocators after it are missing"
            )
        else:
            snap.notes.append(
                f"the crash dump is truncated (after ={section}): "
                f"{len(snap.allocators)} allocator instances were read"
            )
    _header(snap, head)
    snap.raw = "\n".join(raw)
    if not snap.allocators:
        raise CrashDumpError(
            f"{name}: no complete =allocator: section"
            + (" (the dump is truncated before them)" if snap.truncated else "")
        )
    return snap


def _header(snap: Snapshot, head: list[str]) -> None:
    if head:
        # The dump's second line is the dying node's local time.
        with contextlib.suppress(ValueError):
            snap.taken_at = time.mktime(time.strptime(head[0].strip(), "%a %b %d %H:%M:%S %Y"))
    for line in head:
        if line.startswith("Slogan: "):
            # Some dumps lack the newline after the slogan: "...by userSystem version: ...".
            slogan, glued, version = line[8:].partition("System version: ")
            snap.extra["slogan"] = slogan
            if not glued:
                continue
            line = glued + version
        if not line.startswith("System version: "):
            continue
        if m := _SYSVER.search(line):
            snap.otp_release, snap.erts_version = m.group(1), m.group(2)
            snap.wordsize = int(m.group(3)) // 8 if m.group(3) else 4  # "[64-bit]" or 32
            if m.group(4):
                snap.schedulers = int(m.group(4))
        elif m := _SYSVER_OLD.search(line):
            snap.otp_release, snap.erts_version = m.group(1), m.group(2) or m.group(3)
            snap.wordsize = int(m.group(4)) // 8 if m.group(4) else 4
            if m.group(5):
                snap.schedulers = int(m.group(5))


def read_crashdump(path: str) -> Snapshot:
    with open(path, encoding="latin-1", newline="") as f:
        return read_crashdump_lines(f, path)
