"""Read a running beam.smp: its exported symbols (ELF .dynsym) and its memory (/proc/PID/mem).

beam.smp is a stripped PIE, but the allocator tables the tracer needs are exported data
(docs/erts/alloc_util.md §7): the type table (`erts_alc_n2t`, `erts_alc_n2td`), the allocator names
(`erts_alc_a2ad`) and the instances (`erts_allctr_thr_spec`, `erts_allctrs`). Reading them from
the live process gets relocated pointers for free and states the numbers of this very build.
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


def dynamic_symbols(path: str | Path) -> dict[str, Symbol]:
    """The defined symbols of an ELF64 little-endian file's .dynsym."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ProcError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    out: dict[str, Symbol] = {}
    for _name, stype, _flags, _addr, off, size, link, _info, _align, entsize in sections:
        if stype != 11:  # SHT_DYNSYM
            continue
        stroff = sections[link][4]
        for pos in range(off, off + size, entsize or 24):
            st_name, _st_info, _other, shndx, value, st_size = struct.unpack_from(
                "<IBBHQQ", data, pos)
            if shndx == 0 or not st_name:  # undefined (imported) or unnamed
                continue
            end = data.index(b"\0", stroff + st_name)
            name = data[stroff + st_name:end].decode("ascii", "replace")
            out[name] = Symbol(name, value, st_size)
    return out


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
    """Reads of a process's memory at the run-time addresses of a mapped file's symbols."""

    def __init__(self, pid: int, binary: str | Path) -> None:
        self.pid = pid
        self.binary = os.path.realpath(binary)
        self.symbols = dynamic_symbols(self.binary)
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
            if len(parts) == 6 and parts[5] == self.binary and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16)
        raise ProcError(f"pid {self.pid} does not map {self.binary}")

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
