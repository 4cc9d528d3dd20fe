"""Read a running beam.smp: its symbols and its memory (/proc/PID/mem).

beam.smp is a stripped PIE. Debian's OTP 25 and 27 builds export the allocator entry points and
tables the tracer needs (.dynsym); its OTP 29 build exports only the NIF and driver API, so
there they come from a .symtab (an unstripped build) or a debug file found by build-id
(docs/erts/releases.md §3). The tables (docs/erts/alloc_util.md §7): the type table
(`erts_alc_n2t`, `erts_alc_n2td`), the allocator names (`erts_alc_a2ad`) and the instances
(`erts_allctr_thr_spec`, `erts_allctrs`). Reading them from the live process gets relocated
pointers for free and states the numbers of this very build.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path


class ProcError(OSError):
    """The process or its binary cannot be read (gone, not ours to read, not ELF)."""


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int  # link-time address (relative to the load base for a PIE)
    size: int


SHT_SYMTAB, SHT_NOTE, SHT_DYNSYM = 2, 7, 11
#: Where debug files are looked up by build-id, as gdb and debuginfod's clients do: Debian's
#: -dbgsym packages install /usr/lib/debug/.build-id/xx/yyyy.debug.
DEBUG_DIR = "/usr/lib/debug"


def _sections(data: bytes, path: str | Path) -> list[tuple[int, ...]]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ProcError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shoff + shnum * shentsize > len(data):
        raise ProcError(f"{path}: section table past the end of the file")
    return [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
            for i in range(shnum)]


def _symbols(data: bytes, path: str | Path, kinds: tuple[int, ...]) -> dict[str, Symbol]:
    """Defined, named symbols of the symbol tables of types `kinds`; a global wins over a local
    of the same name (static functions of two files may share one)."""
    sections = _sections(data, path)
    out: dict[str, Symbol] = {}
    local: dict[str, Symbol] = {}
    for _name, stype, _flags, _addr, off, size, link, _info, _align, entsize in sections:
        if stype not in kinds:
            continue
        stroff = sections[link][4]
        for pos in range(off, off + size, entsize or 24):
            st_name, st_info, _other, shndx, value, st_size = struct.unpack_from(
                "<IBBHQQ", data, pos)
            if shndx == 0 or not st_name:  # undefined (imported) or unnamed
                continue
            end = data.index(b"\0", stroff + st_name)
            name = data[stroff + st_name:end].decode("ascii", "replace")
            (local if st_info >> 4 == 0 else out).setdefault(name, Symbol(name, value, st_size))
    return {**local, **out}


def dynamic_symbols(path: str | Path) -> dict[str, Symbol]:
    """The defined symbols of an ELF64 little-endian file's .dynsym."""
    return _symbols(Path(path).read_bytes(), path, (SHT_DYNSYM,))


def build_id(data: bytes, path: str | Path = "?") -> str | None:
    """The GNU build-id (hex) of an ELF64 file's .note.gnu.build-id, or None."""
    for _name, stype, _flags, _addr, off, size, *_rest in _sections(data, path):
        pos = off
        while stype == SHT_NOTE and pos + 12 <= off + size:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name_at = pos + 12
            desc_at = name_at + (namesz + 3) // 4 * 4
            if ntype == 3 and data[name_at:name_at + namesz] == b"GNU\0":  # NT_GNU_BUILD_ID
                return data[desc_at:desc_at + descsz].hex()
            pos = desc_at + (descsz + 3) // 4 * 4
    return None


@dataclass(frozen=True)
class SymbolTable:
    """Every symbol known for one binary, and where they were read (`source`, for messages)."""

    symbols: dict[str, Symbol]
    source: str


def symbol_table(binary: str | Path, debug_roots: tuple[str, ...] = ("/",)) -> SymbolTable:
    """The symbols of `binary`: its .dynsym and .symtab (an unstripped build), and where it has no
    .symtab, a debug file with its build-id under DEBUG_DIR of each of `debug_roots` (the
    traced process's root first: a container's own debug package). Link-time addresses are
    the same in a debug file as in the binary it was split from."""
    data = Path(binary).read_bytes()
    sections = _sections(data, binary)
    syms = _symbols(data, binary, (SHT_DYNSYM, SHT_SYMTAB))
    if any(s[1] == SHT_SYMTAB for s in sections):
        return SymbolTable(syms, f"{binary}'s .symtab")
    bid = build_id(data, binary)
    if bid and len(bid) > 2:
        for root in debug_roots:
            debug = Path(root, DEBUG_DIR.lstrip("/"), ".build-id", bid[:2], f"{bid[2:]}.debug")
            try:
                extra = _symbols(debug.read_bytes(), debug, (SHT_SYMTAB,))
            except (OSError, ProcError, struct.error, ValueError):
                continue
            return SymbolTable({**extra, **syms}, f"debug file {debug}")
    return SymbolTable(syms, "dynamic symbols only, no .symtab, "
                       + (f"no debug file {DEBUG_DIR}/.build-id/{bid[:2]}/{bid[2:]}.debug"
                          if bid else "no build-id to find a debug file by"))


def target_path(pid: int, mapped: str) -> str:
    """A file process `pid` maps, named so that it opens here and so that bcc attaches to that
    very file: /proc/PID/root + its path in the process's own root. /proc/PID/maps names it
    as seen from our root (the chroot's directory in front, for a chroot) or, for another
    mount namespace, as seen in that one; bcc puts /proc/PID/root in front of any path that
    does not start with /proc (docs/erts/releases.md §3)."""
    mapped = mapped.removesuffix(" (deleted)")
    if mapped.startswith("/proc/"):
        return mapped
    try:
        root = os.readlink(f"/proc/{pid}/root")
    except OSError:
        root = "/"
    inside = mapped[len(root):] if root != "/" and mapped.startswith(root + "/") else mapped
    return f"/proc/{pid}/root{inside}"


def file_offset(path: str | Path, vaddr: int, size: int = 1) -> int:
    """Where link-time address `vaddr` (and `size` bytes after it) sits in an ELF64 file: its
    PT_LOAD segment's file offset plus the distance into the segment. uprobes are placed by
    file offset (the kernel lists them so)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ProcError(f"{path}: not a 64-bit little-endian ELF file")
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        ptype, _flags, off, addr, _paddr, filesz = struct.unpack_from(
            "<IIQQQQ", table, i * phentsize)
        if ptype == 1 and addr <= vaddr and vaddr + size <= addr + filesz:  # PT_LOAD
            return off + vaddr - addr
    raise ProcError(f"{path}: no loaded segment holds {size} bytes at {vaddr:#x}")


def code_bytes(path: str | Path, vaddr: int, size: int) -> bytes:
    """`size` bytes of an ELF64 file at link-time address `vaddr`, read from the file, never
    from a process: a running one may hold another tracer's int3 where the code starts."""
    with open(path, "rb") as f:
        f.seek(file_offset(path, vaddr, size))
        return f.read(size)


class ProcessMemory:
    """Reads of a process's memory at the run-time addresses of a mapped file's symbols.

    `binary` is the file as opened here (target_path), `mapped` as /proc/PID/maps names it."""

    def __init__(self, pid: int, binary: str, mapped: str,
                 symbols: SymbolTable | None = None) -> None:
        self.pid = pid
        self.binary = binary
        self.mapped = mapped
        self.table = symbols or symbol_table(binary)
        self.symbols = self.table.symbols
        self.base = self._load_base()
        try:
            self._mem = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115
        except OSError as e:
            raise ProcError(f"cannot read the memory of pid {pid}: {e.strerror}") from None

    def _load_base(self) -> int:
        try:
            maps = Path(f"/proc/{self.pid}/maps").read_text()
        except OSError as e:
            raise ProcError(f"pid {self.pid}: {e.strerror}") from None
        for line in maps.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5] == self.mapped and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16)
        raise ProcError(f"pid {self.pid} does not map {self.mapped}")

    def close(self) -> None:
        self._mem.close()

    def __enter__(self) -> ProcessMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def address(self, symbol: str) -> int:
        return self.base + self.symbols[symbol].value

    def read(self, addr: int, size: int) -> bytes:
        try:
            self._mem.seek(addr)
            data = self._mem.read(size)
        except OSError as e:
            raise ProcError(f"pid {self.pid}: cannot read {size} bytes at {addr:#x}: "
                            f"{e.strerror}") from None
        if len(data) != size:
            raise ProcError(f"pid {self.pid}: short read at {addr:#x}")
        return data

    def u64(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, 8), "little")

    def cstring(self, addr: int, limit: int = 256) -> str:
        chunk = self.read(addr, limit)
        return chunk.split(b"\0", 1)[0].decode("ascii", "replace")

    def symbol_bytes(self, symbol: str) -> bytes:
        return self.read(self.address(symbol), self.symbols[symbol].size)
