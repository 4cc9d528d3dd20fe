"""The traced beam.smp: its binary, its type table and its allocator instances.

Everything is read from the running process (docs/erts/alloc_util.md §7): the numbers of types,
their
names and allocators, and the `Allctr_t *` of every instance, so that a block's owner (read in
the kernel from its carrier header) maps to (allocator, instance).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from beamalloc.ebpf.errors import EbpfUnavailable
from beamalloc.ebpf.procmem import ProcError, ProcessMemory, SymbolTable, symbol_table, target_path
from beamalloc.trace import TypeInfo

#: Entry points of alloc_util, one family per way an allocator is reached (docs/erts/alloc_util.md
#: §7):
#: thread-preferred (most), thread-specific (temp_alloc), thread-safe (literal, `t false`), plain.
FAMILIES = ("_thr_pref", "_thr_spec", "_ts", "")
ALLOC_FUNCS = tuple(f"erts_alcu_alloc{f}" for f in FAMILIES)
FREE_FUNCS = tuple(f"erts_alcu_free{f}" for f in FAMILIES)
REALLOC_FUNCS = tuple(f"erts_alcu_realloc{f}" for f in FAMILIES) + tuple(
    f"erts_alcu_realloc_mv{f}" for f in FAMILIES
)
#: Data symbols read from the process (docs/erts/alloc_util.md §7, "Data").
TABLES = ("erts_alc_n2t", "erts_alc_n2td", "erts_alc_a2ad", "erts_allctr_thr_spec",
          "erts_allctrs")
REQUIRED = ALLOC_FUNCS + FREE_FUNCS + REALLOC_FUNCS + TABLES
_THR_SPEC = struct.Struct("<iiiiQ")  # ErtsAllocatorThrSpec_t {enabled, dd, aix, size, allctr}
_ALLOC_FNS = struct.Struct("<QQQQ")  # ErtsAllocatorFunctions_t {alloc, realloc, free, extra}


@dataclass
class BeamProcess:
    pid: int
    binary: str  # as opened here and given to bcc: /proc/PID/root/... (procmem.target_path)
    symbols: SymbolTable | None = None
    #: Why alloc_util cannot be followed block by block (its symbols are missing), or None.
    blind: str | None = None
    types: list[TypeInfo] = field(default_factory=list)
    allocators: dict[int, str] = field(default_factory=dict)  # A -> "binary_alloc"
    instances: dict[int, tuple[int, int]] = field(default_factory=dict)  # Allctr_t* -> (A, ix)
    type_shift: int = 7  # N = T >> type_shift
    alloc_mask: int = 0xF  # A = T & alloc_mask

    def threads(self) -> dict[int, str]:
        """tid -> thread name (1_scheduler, 2_dirty_cpu_sch, 1_aux, ...; §2.4)."""
        out = {}
        for t in Path(f"/proc/{self.pid}/task").glob("*"):
            try:
                out[int(t.name)] = (t / "comm").read_text().strip()
            except (OSError, ValueError):
                continue
        return out


def beam_files(pid: int) -> tuple[str, str]:
    """The beam executable of `pid`: (as opened here, as /proc/PID/maps names it), or
    EbpfUnavailable saying why it is not a BEAM."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise EbpfUnavailable(f"no process with pid {pid}") from None
    except PermissionError:
        if os.geteuid() != 0:
            raise EbpfUnavailable(f"cannot inspect pid {pid}: permission denied (run as root)"
                                  ) from None
        # Root and still refused: ptrace access mode checks (another user namespace, Yama,
        # a container's policy), as for pid 1 of the host seen from a container.
        raise EbpfUnavailable(f"cannot inspect pid {pid}: the kernel refuses even root access "
                              "to its executable (another user namespace or a ptrace "
                              "restriction); it is not a BEAM this tracer can follow") from None
    exe = exe.removesuffix(" (deleted)")
    if not os.path.basename(exe).startswith("beam"):
        raise EbpfUnavailable(f"pid {pid} runs {exe}, not an Erlang VM (beam.smp)")
    return target_path(pid, exe), exe


def beam_binary(pid: int) -> str:
    """The beam executable of `pid` as opened here (in its own root: a chroot, a container)."""
    return beam_files(pid)[0]


def inspect(pid: int) -> BeamProcess:
    """The process's allocators and types; where its symbols do not reach alloc_util, a
    BeamProcess with `blind` saying what is missing (the carrier level still works)."""
    binary, mapped = beam_files(pid)
    try:
        table = symbol_table(binary, (f"/proc/{pid}/root", "/"))
        mem = ProcessMemory(pid, binary, mapped, table)
    except ProcError as e:
        raise EbpfUnavailable(str(e)) from None
    missing = [s for s in REQUIRED if s not in mem.symbols]
    if missing:
        mem.close()
        return BeamProcess(pid, binary, table, blind=(
            f"{os.path.basename(binary)} has no symbol for alloc_util ({missing[0]} and "
            f"{len(missing) - 1} more): {table.source}"))
    try:
        with mem:
            bp = _read_tables(mem, pid)
    except ProcError as e:
        raise EbpfUnavailable(str(e)) from None
    bp.symbols = table
    return bp


def _read_tables(mem: ProcessMemory, pid: int) -> BeamProcess:
    bp = BeamProcess(pid, mem.binary)
    a2ad = mem.symbol_bytes("erts_alc_a2ad")
    for a, ptr in enumerate(struct.unpack(f"<{len(a2ad) // 8}Q", a2ad)):
        if a and ptr:
            bp.allocators[a] = mem.cstring(ptr)
    bp.alloc_mask = (1 << (max(bp.allocators).bit_length())) - 1
    n2t = mem.symbol_bytes("erts_alc_n2t")
    n2td = mem.symbol_bytes("erts_alc_n2td")
    count = len(n2td) // 8
    tsize = len(n2t) // count  # ErtsAlcType_t's width on this build
    t_of = [int.from_bytes(n2t[i * tsize:(i + 1) * tsize], "little") for i in range(count)]
    names = struct.unpack(f"<{count}Q", n2td)
    # N = T >> (A_BITS + C_BITS): find the shift from the table itself (§7, "Type number").
    bp.type_shift = next(s for s in range(4, 16)
                         if all(t >> s == n for n, t in enumerate(t_of) if n and t))
    for n in range(1, count):
        if t_of[n] and names[n]:
            bp.types.append(TypeInfo(n, mem.cstring(names[n]), t_of[n] & bp.alloc_mask))
    spec = mem.symbol_bytes("erts_allctr_thr_spec")
    fns = mem.symbol_bytes("erts_allctrs")
    for a in bp.allocators:
        if (a + 1) * _THR_SPEC.size <= len(spec):
            enabled, _dd, _aix, size, arr = _THR_SPEC.unpack_from(spec, a * _THR_SPEC.size)
            if enabled and arr:
                for ix in range(size):
                    bp.instances[mem.u64(arr + 8 * ix)] = (a, ix)
                continue
        if (a + 1) * _ALLOC_FNS.size <= len(fns):
            extra = _ALLOC_FNS.unpack_from(fns, a * _ALLOC_FNS.size)[3]
            if extra and a != 1:  # sys_alloc's extra is not an Allctr_t
                bp.instances.setdefault(extra, (a, 0))
    return bp
