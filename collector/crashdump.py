"""Read the allocator state out of an `erl_crash.dump` (docs/erts/alloc_util.md §6.3).

A crash dump is written while the node dies and is often cut short (disk full, a supervisor's
kill, `ERL_CRASH_DUMP_SECONDS`). The reader reads the file once, in blocks, and decodes only the
header, `=memory`, `=node`, the `=allocator:` sections and the =ets and =proc tables; the others
(most of a large dump's bytes) are passed over at byte level (collector/dumpscan.py). It keeps
every instance whose section ended before the cut; the Snapshot says what was lost.

Max values in a crash dump are not reset by the dump (§6.3), unlike a live system_info call.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from beamalloc.collector.dumpscan import Headers, Section, Stats, line_sections, scan
from beamalloc.collector.dumptables import DumpTables
from beamalloc.collector.procdump import ProcSections, printable
from beamalloc.console import clean
from beamalloc.errors import InputError
from beamalloc.gcpause import paused_gc
from beamalloc.snapshot import (
    UINT64_MAX,
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


class CrashDumpError(InputError):
    pass


_SECTION = re.compile(r"=allocator:([a-z_]{1,64})(?:\[([0-9]{1,6})\])?$")
_SYSVER = re.compile(
    r"Erlang/OTP (\S{1,32}) \[erts-([\d.]{1,32})\](?:.*?\[(32|64)-bit\])?"
    r"(?:.*?\[smp:(\d{1,9}):(\d{1,9})\])?"
)
# Releases before OTP 17 wrote "Erlang R16B02 (erts-5.10.3) ... [64-bit] [smp:4:4]", or only
# "Erlang (BEAM) emulator version 5.6.1" (no release, no word size: 32-bit unless it says so).
_SYSVER_OLD = re.compile(
    r"Erlang (?:(R\w{1,16}) \(erts-([\d.]{1,32})\)|\(BEAM\) emulator version ([\d.]{1,32}))"
    r"(?:.*?\[(32|64)-bit\])?(?:.*?\[smp:(\d{1,9}):(\d{1,9})\])?"
)
# "mbcs blocks[binary_alloc] count: 0 20 20" (OTP ≥ 23); "mbcs blocks: 1 2 3" and
# "mbcs blocks size: 4 5 6" (OTP ≤ 22, counted as the instance's own type)
_BLOCKS = re.compile(r"(mbcs|sbcs|mbcs_pool) blocks(?:\[([a-z_]+)\])?( count| size)?: (.*)$")
_CARRIERS = re.compile(
    r"(mbcs|sbcs|mbcs_pool) (carriers|mseg carriers|sys_alloc carriers)( size)?: (.*)$"
)
_CALLS = re.compile(r"([a-z_]+) calls: (.*)$")
#: The same three on a line's key (what precedes its first ": ", which none of them holds)
_BLOCKS_KEY = re.compile(r"(mbcs|sbcs|mbcs_pool) blocks(?:\[([a-z_]+)\])?( count| size)?\Z")
_CARRIERS_KEY = re.compile(
    r"(mbcs|sbcs|mbcs_pool) (carriers|mseg carriers|sys_alloc carriers)( size)?\Z"
)
_CALLS_KEY = re.compile(r"([a-z_]+) calls\Z")
#: Keys a read remembers at most (a made-up dump may have a new one each line)
MAX_KINDS = 4096
#: What each key seen in one read is (_line_kind): a dump's instances repeat a few hundred keys
Kinds = dict[str, tuple[str, ...] | None]


def _line_kind(key: str, kinds: Kinds) -> tuple[str, ...] | None:
    """A statistics line's kind by its key, as _BLOCKS, _CARRIERS and _CALLS tell it, in that
    order: ("blocks", where, type or None, " size" or None, the name its errors give),
    ("carriers", where, kind, " size" or None, name), ("calls", name) or None; once a key of
    a read (`kinds`)."""
    try:
        return kinds[key]
    except KeyError:
        pass
    kind: tuple[str, ...] | None = None
    if m := _BLOCKS_KEY.match(key):
        where, typ, what = m.groups()
        kind = ("blocks", where, typ, " size" if what == " size" else None,
                f"{where} blocks{what or ''}")
    elif m := _CARRIERS_KEY.match(key):
        where, what, size = m.groups()
        kind = ("carriers", where, what, size, f"{where} {what}{size or ''}")
    elif m := _CALLS_KEY.match(key):
        kind = ("calls", m.group(1))
    if len(kinds) >= MAX_KINDS:
        kinds.clear()
    kinds[key] = kind
    return kind


class _BadValue(ValueError):
    """A statistic that is not what the VM writes; read_crashdump_lines names the section."""


#: A count or size as the VM prints it: an unsigned machine word, in decimal.
_UINT = re.compile(r"[0-9]{1,20}\Z")


def _num(s: str, what: str) -> int:
    # _UINT's test without a regex step (an ASCII string of digits: [0-9] only)
    if not (s.isascii() and s.isdigit() and len(s) <= 20) or (n := int(s)) > UINT64_MAX:
        raise _BadValue(f"{what} is not a count or size (0..2^64-1)")
    return n


def _nums(s: str, what: str) -> list[int]:
    nums = [_num(x, what) for x in s.split()]
    if not 1 <= len(nums) <= 3:
        raise _BadValue(f"{what}: expected one to three numbers, found {len(nums)}")
    return nums


def _t(nums: list[int]) -> Triple:
    return Triple(*nums) if len(nums) == 3 else Triple(nums[0], nums[0], nums[0])


def _option(v: str) -> int | bool | str:
    if v in ("true", "false"):
        return v == "true"
    return int(v) if v.isascii() and v.isdigit() and len(v) <= 20 else v


@dataclass
class _Section:
    name: str
    ix: int | None
    lines: list[str] = field(default_factory=list)


def _instance(sec: _Section, kinds: Kinds) -> AllocatorInstance:
    inst = AllocatorInstance(allocator=sec.name, instance=sec.ix or 0)
    sections = {"mbcs": inst.mbcs, "sbcs": inst.sbcs}
    pool: PoolStats | None = None
    pool_counts: dict[str, list[int]] = {}
    for line in sec.lines:
        if line.startswith("option "):
            k, _, v = line[7:].partition(": ")
            inst.options[k] = _option(v)
            continue
        if line.startswith("versions: "):
            inst.versions = line[10:].split()
            continue
        key, sep, value = line.partition(": ")  # no key below holds ": ": the first ends it
        what = _line_kind(key, kinds) if sep else None
        if what is None:
            if line.startswith("fix type: "):
                parts = line[10:].split()
                if len(parts) == 3:
                    inst.fix_types = inst.fix_types or []
                    inst.fix_types.append(
                        FixType(parts[0], _num(parts[1], "fix type"), _num(parts[2], "fix type"))
                    )
        elif what[0] == "blocks":
            _, where, typ, size, name = what
            nums = _nums(value, name)
            typ = typ or sec.name
            if where == "mbcs_pool":
                pool = pool or PoolStats()
                pool_counts.setdefault(typ, [0, 0])[1 if size else 0] = nums[0]
            else:
                blocks = sections[where].blocks
                if (b := blocks.get(typ)) is None:  # (setdefault built one a line)
                    b = blocks[typ] = BlockStats()
                if size:
                    b.size = _t(nums)
                else:
                    b.count = _t(nums)
        elif what[0] == "carriers":
            _, where, kind, size, name = what
            nums = _nums(value, name)
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
        else:
            inst.calls[what[1]] = _num(value, "calls")
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
            setattr(m, k, _num(v, k))
        elif k in ("segments", "segments_size"):
            setattr(m, k, _t(_nums(v, k)))
        elif k.endswith(" calls"):
            m.calls[k[:-6]] = _num(v, "calls")
    return m


def _finish(snap: Snapshot, sec: _Section, kinds: Kinds) -> None:
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
        snap.disabled.append(sec.name)
        snap.notes.append(f"{sec.name} is not enabled on this node")
    elif not any(" carriers: " in line for line in sec.lines):
        return  # =allocator:instr and other sections without carriers describe no allocator
    else:
        snap.allocators.append(_instance(sec, kinds))


#: The sections this reader uses: the allocators, =memory, =node, the =ets and =proc tables
#: (collector/dumptables.py), =end. The others are passed over.
WANT = Headers(("allocator:", "node:", "ets:", "proc:"), ("ets", "proc", "memory", "end"))


def read_crashdump_lines(lines: Iterable[str], name: str = "crash dump") -> Snapshot:
    """A dump already split into lines (text held in memory: tests, the fuzzers)."""
    stats = Stats()
    return read_sections(line_sections(lines, WANT, stats), stats, name)


def read_crashdump_file(f: BinaryIO, name: str, head: bytes = b"",
                        procs: ProcSections | None = None) -> Snapshot:
    """A dump read from `f` (after `head`, bytes already read from it) in blocks, its sections
    found at byte level (collector/dumpscan.py): one pass, memory bounded by what is kept.
    `procs` is fed its =proc sections in the same pass (the holders: cli/inputs.py)."""
    stats = Stats()
    tables = DumpTables()
    # the =proc sections read natively (collector/native/src/procrecs.rs), the scan handing
    # them over unseen here where that reader serves every reader of them
    sink = tables.native_procs(procs.native if procs is not None else None)
    if sink is not None:
        sink.whole = procs is None or procs.native is not None
    secs = scan(f, WANT, stats, head, sink)
    with paused_gc():  # a Snapshot and its sections: many objects, no cycle
        return read_sections(secs, stats, name, procs, tables)


def read_sections(secs: Iterable[Section], stats: Stats, name: str,
                  procs: ProcSections | None = None,
                  tables: DumpTables | None = None) -> Snapshot:
    """The Snapshot of a dump's sections (the first line and header block, then the sections
    WANT matches; `stats` counts all of them once they are read). `procs`, where given, is fed
    the first section, =node and every =proc section, those after =end included (as
    procdump.read_procdump reads them)."""
    it = iter(secs)
    sec0 = next(it, ("", None, 0, False))
    first, head_text, _, _ = sec0
    if procs is not None:
        procs.feed(sec0)
    if not first.startswith(MAGIC):
        raise CrashDumpError(f"{name}: not an Erlang crash dump (no '{MAGIC}' header)")
    version = first[len(MAGIC) :].strip()
    snap = Snapshot(node="unknown", source="crashdump")
    if version not in KNOWN_VERSIONS:
        snap.notes.append(
            f"crash dump format {printable(version, 32)} is newer than this reader knows "
            f"({KNOWN_VERSIONS[-1]}); read as {KNOWN_VERSIONS[-1]}"
        )
    head = head_text.split("\n") if head_text is not None else []
    alloc: _Section | None = None
    ended = False
    raw: list[str] = []
    tables = tables or DumpTables()
    kinds: Kinds = {}  # the allocator lines' keys (_line_kind)
    for sec in it:
        line, body, _, complete = sec
        if procs is not None and line.startswith(("=proc:", "=node:")):
            procs.feed(sec)
        section = line[1:]
        if section == "end":
            ended = True
            tables.end()
            break
        if line.startswith(("=proc:", "=ets:")):  # most of the sections kept: not split
            tables.section(section, body, complete)  # (always ours: both are its kinds)
            continue
        lines = body.split("\n") if body is not None else []
        if m := _SECTION.match(line):
            alloc = _Section(m.group(1), int(m.group(2)) if m.group(2) else None, lines)
            raw.append(line)
            raw.extend(lines)
            if complete:  # a section the dump ends in is cut: not read (the note says so)
                try:
                    _finish(snap, alloc, kinds)
                except _BadValue as e:
                    where = alloc.name + (f"[{alloc.ix}]" if alloc.ix is not None else "")
                    raise CrashDumpError(f"{name}: =allocator:{where}: {e}") from None
                alloc = None
        elif section.startswith("allocator:erts_mmap"):
            raw.append(line)
            raw.extend(lines)
            if lines:
                mmap = snap.extra.setdefault("erts_mmap", "")
                where = section[len("allocator:erts_mmap.") :]
                snap.extra["erts_mmap"] = mmap + "".join(f"{where}: {x}\n" for x in lines)
        elif section.startswith("node:"):
            snap.node = section[5:].strip("'")
        elif tables.start(section):
            if body is not None:
                tables.lines.append(body)  # joined with "\n" at close: the section's text
            if complete:
                tables.close()
        elif section == "memory":
            for x in lines:
                k, _, v = x.partition(": ")
                if _UINT.match(v):
                    try:
                        snap.memory[k] = _num(v, "a value")
                    except _BadValue as e:
                        raise CrashDumpError(f"{name}: =memory: {e}") from None
    section = stats.last[1:] if stats.last else None
    sections = stats.sections
    if procs is not None:
        for sec in it:  # what follows =end (nothing, in a dump the VM wrote)
            if sec[0].startswith(("=proc:", "=node:")):
                procs.feed(sec)
    tables.close(cut=not ended)
    # the allocator section the dump was cut inside (that instance is dropped), kept as data
    cut_inside = None
    if not ended:
        snap.truncated = True
        if alloc is not None:
            cut_inside = alloc.name + (f"[{alloc.ix}]" if alloc.ix is not None else "")
        snap.notes.append(_cut_note(cut_inside, printable(section, 80), len(snap.allocators)))
    _header(snap, head)
    tables.store(snap.extra, snap.notes, snap.wordsize or 8)
    # What the reader got to: a cut dump's analysis says what it could not see (analysis.py)
    snap.extra["dump_read"] = {"sections_read": sections,
                               "last_section": printable(section or "", 80),
                               "memory": bool(snap.memory), "ended": ended}
    if cut_inside is not None:  # a key only where it is so: an uncut dump's JSON is as it was
        snap.extra["dump_read"]["cut_inside"] = cut_inside
    snap.raw = "\n".join(raw)
    if not snap.allocators:
        raise CrashDumpError(
            f"{name}: no complete =allocator: section"
            + (" (the dump is truncated before them)" if snap.truncated else "")
        )
    return snap


def _cut_note(cut_inside: str | None, last: str | None, instances: int) -> str:
    """The one text of the note that says where a crash dump was cut."""
    if cut_inside is not None:
        return (f"the crash dump is truncated inside =allocator:{cut_inside}: that instance is "
                f"dropped, {instances} complete instances are kept, "
                "and allocators after it are missing")
    return f"the crash dump is truncated (after ={last}): {instances} allocator instances were read"


def truncation_note(snap: Snapshot) -> str | None:
    """The note a truncated crash dump's reader wrote (`_cut_note`), made again from the data it
    kept (`truncated`, `extra["dump_read"]`), so a reader of the snapshot never looks for it
    among the notes by its words; None where the snapshot is not a cut dump."""
    dr = snap.extra.get("dump_read")
    if not snap.truncated or not isinstance(dr, dict):
        return None
    last = dr.get("last_section")
    return _cut_note(dr.get("cut_inside"), last if last else None, len(snap.allocators))


#: The release family each erts series shipped with, for the headers that name only the
#: emulator ("Erlang (BEAM) emulator version 5.6.1"; docs/erts/alloc_util.md §6.3). The family,
#: not the patch level: 5.6.1 is R12B (R12B-1), 5.4.12 is R10B (R10B-10).
ERTS_SERIES = {
    (5, 0): "R7B", (5, 1): "R8B", (5, 2): "R9B", (5, 3): "R9C", (5, 4): "R10B", (5, 5): "R11B",
    (5, 6): "R12B", (5, 7): "R13B", (5, 8): "R14B", (5, 9): "R15B", (5, 10): "R16B",
}  # fmt: skip


def _release_of_erts(erts: str) -> str | None:
    parts = erts.split(".")
    try:
        return ERTS_SERIES.get((int(parts[0]), int(parts[1])))
    except (ValueError, IndexError):
        return None


def _header(snap: Snapshot, head: list[str]) -> None:
    if head:
        # The dump's second line is the dying node's local time, in a time zone the dump does
        # not name: kept as it was written, never as a Unix time (which would claim UTC).
        with contextlib.suppress(ValueError):
            t = time.strptime(head[0].strip(), "%a %b %d %H:%M:%S %Y")
            local = time.strftime("%Y-%m-%d %H:%M:%S", t)
            snap.extra["local_time"] = local
            snap.notes.append(f"written {local}, the node's local time (the dump names no time "
                              "zone, so no UTC time is given)")
    for line in head:
        if line.startswith("Slogan: "):
            # Some dumps lack the newline after the slogan: "...by userSystem version: ...".
            slogan, glued, version = line[8:].partition("System version: ")
            # a slogan is any term the node died with: escape sequences shown, never run
            snap.extra["slogan"] = clean(slogan, 0)
            if not glued:
                continue
            line = glued + version
        if not line.startswith("System version: "):
            continue
        bits = smp = None
        if m := _SYSVER.search(line):
            snap.otp_release, snap.erts_version = m.group(1), m.group(2)
            bits, smp = m.group(3), m.group(4)
        elif m := _SYSVER_OLD.search(line):
            snap.erts_version = m.group(2) or m.group(3)
            snap.otp_release = m.group(1) or _release_of_erts(snap.erts_version)
            bits, smp = m.group(4), m.group(5)
        else:
            continue
        # "[64-bit]" is printed by 64-bit emulators only. Its absence means 32-bit, unless an
        # option holds 2^64-1, the 64-bit ~0 (no 32-bit word holds it).
        if bits:
            snap.wordsize = int(bits) // 8
        elif any(v == UINT64_MAX for a in snap.allocators for v in a.options.values()):
            snap.wordsize = 8
        else:
            snap.wordsize = 4
        # "[smp:S:O]" is printed by the SMP emulator; without it the emulator had one scheduler
        # (and the dump one instance per allocator, as the R10B and R12B dumps show).
        snap.schedulers = int(smp) if smp else 1
        break
    if snap.wordsize == 4:
        widen_word_limits(snap)


#: `~0` of a 32-bit word: erts prints it for "infinite" sizes and counts (sbct of ll_alloc and
#: literal_alloc, mmmbc: docs/erts/alloc_util.md §2.3) on 32-bit emulators.
UINT32_MAX = (1 << 32) - 1


def widen_word_limits(snap: Snapshot) -> None:
    """A 32-bit node's ~0 means what a 64-bit node's ~0 means: "infinite" (never a single-block
    carrier, no limit). Stored as the 64-bit ~0, the one value every consumer already reads as
    infinite, instead of 4 GiB; the note says so."""
    n = 0
    tables = [inst.options for inst in snap.allocators]
    tables += [o for sec in snap.extra.values() if isinstance(sec, dict) for o in sec.values()
               if isinstance(o, dict)]  # sys_alloc and alloc_util options (mmc)
    for options in tables:
        for k, v in options.items():
            if v == UINT32_MAX:
                options[k] = UINT64_MAX
                n += 1
    if n:
        snap.notes.append(f"32-bit node: {n} options set to 4294967295 (~0, \"infinite\") are "
                          "read as infinite")


def read_crashdump(path: str) -> Snapshot:
    """A crash dump file, opened as every input is (beamalloc/files.py: a FIFO or a device is
    refused before open)."""
    from beamalloc.files import open_input

    with open_input(path) as f:
        snap = read_crashdump_file(f, path)
    snap.check()
    return snap
