"""Loader of carriers.bpf.c: the carrier level (syscalls, mseg, sys_alloc, foreign malloc)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from beamalloc.ebpf import beam
from beamalloc.ebpf.errors import EbpfUnavailable
from beamalloc.ebpf.placement import entry_addrs
from beamalloc.ebpf.procmem import dynamic_symbols, symbol_table, target_path

SOURCE = Path(__file__).with_name("carriers.bpf.c")
KINDS = ("mmap", "munmap", "mremap", "madvise", "mseg_alloc", "mseg_dealloc", "mseg_realloc",
         "sys_alloc", "sys_realloc", "sys_free", "libc_alloc", "libc_free", "libc_realloc")
SYSCALLS = KINDS[:4]
#: (symbol in beam.smp, BPF function); docs/erts/alloc_util.md §7 gives the signatures.
ERTS_PROBES = (
    ("erts_mseg_alloc_opt", "mseg_alloc"), ("erts_mseg_dealloc_opt", "mseg_dealloc"),
    ("erts_mseg_realloc_opt", "mseg_realloc"), ("erts_sys_alloc", "sys_alloc"),
    ("erts_sys_realloc", "sys_realloc"), ("erts_sys_free", "sys_free"),
    ("erts_sys_aligned_alloc", "sys_aligned_alloc"), ("erts_sys_aligned_free", "sys_aligned_free"),
)
#: libc entry points: (symbol, entry function, return function or None).
LIBC_PROBES = (
    ("malloc", "libc_malloc", "libc_alloc_return"),
    ("calloc", "libc_calloc", "libc_alloc_return"),
    ("realloc", "libc_realloc", "libc_alloc_return"),
    ("aligned_alloc", "libc_aligned_alloc", "libc_alloc_return"),
    ("posix_memalign", "libc_posix_memalign", "libc_posix_memalign_return"),
    ("free", "libc_free", None),
)


def libc_path(pid: int) -> str:
    """The libc `pid` maps, as opened here (in its own root: procmem.target_path)."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and Path(parts[5]).name.startswith("libc.so"):
            return target_path(pid, parts[5])
    raise EbpfUnavailable(f"pid {pid} maps no libc.so: cannot follow malloc")


class CarrierProbes:
    def __init__(self, bcc: ModuleType, proc: beam.BeamProcess, *, libc: bool = True,
                 max_live: int = 1 << 17) -> None:
        self.proc = proc
        self.unseen: list[str] = []  # erts entry points without a symbol: not followed
        # -I: for its #include "bits.bpf.h" (bcc compiles the source as /virtual/main.c).
        cflags = [f"-I{SOURCE.parent}", f"-DTGID={proc.pid}", f"-DMAX_LIVE={max_live}"]
        try:
            # TRACEPOINT_PROBEs attach when the program loads: the syscalls are followed from here
            self.bpf = bcc.BPF(src_file=str(SOURCE).encode(), cflags=cflags)
            binary = proc.binary.encode()
            # Entry-only probes go where one trap does (placement.py): glibc's free opens
            # with the test a single-step would cost ~20x more on.
            syms = (proc.symbols or symbol_table(proc.binary)).symbols
            # Without erts's symbols (a stripped OTP 29 build), mseg and sys_alloc stay unseen;
            # the syscalls and libc are followed all the same.
            self.unseen = [sym for sym, _ in ERTS_PROBES if sym not in syms]
            here = [(sym, fn) for sym, fn in ERTS_PROBES if sym in syms]
            addrs = entry_addrs(proc.binary, syms, [sym for sym, _ in here])
            for sym, fn in here:
                self.bpf.attach_uprobe(name=binary, addr=addrs[sym], fn_name=fn.encode(),
                                       pid=proc.pid)
            if libc:
                lib = libc_path(proc.pid)
                path = lib.encode()
                alone = entry_addrs(lib, dynamic_symbols(lib),
                                    [sym for sym, _, ret in LIBC_PROBES if not ret])
                for sym, fn, ret in LIBC_PROBES:
                    if sym in alone:
                        self.bpf.attach_uprobe(name=path, addr=alone[sym], fn_name=fn.encode(),
                                               pid=proc.pid)
                    else:
                        self.bpf.attach_uprobe(name=path, sym=sym.encode(),
                                               fn_name=fn.encode(), pid=proc.pid)
                    if ret:
                        self.bpf.attach_uretprobe(name=path, sym=sym.encode(),
                                                  fn_name=ret.encode(), pid=proc.pid)
        except EbpfUnavailable:
            raise
        except Exception as e:
            if hasattr(self, "bpf"):
                self.bpf.cleanup()
            raise EbpfUnavailable(f"cannot load the carrier-level probes: {e}") from None

    def close(self) -> None:
        """Detach everything (uprobes, uretprobes, tracepoints) and free the maps."""
        self.bpf.cleanup()

    def stats(self) -> list[tuple[str, int, int, int, int]]:
        """(kind, sub, slot, count, bytes) summed over CPUs."""
        out = []
        for k, vals in self.bpf["cstats"].items():
            out.append((KINDS[k.kind], k.sub, k.slot, sum(v.count for v in vals),
                        sum(v.bytes for v in vals)))
        return out

    def foreign(self, top: int = 10) -> dict[str, Any]:
        """Outstanding foreign malloc bytes and the stacks that hold the most of them."""
        by_stack: Counter[int] = Counter()
        blocks: Counter[int] = Counter()
        for _p, live in self.bpf["foreign"].items():
            by_stack[live.stack] += live.size
            blocks[live.stack] += 1
        stacks = self.bpf["stacks"]
        out = []
        for sid, size in by_stack.most_common(top):
            frames = []
            if sid >= 0:
                try:
                    for addr in stacks.walk(sid):
                        frames.append(self.bpf.sym(addr, self.proc.pid, show_module=True,
                                                   show_offset=True).decode("utf-8", "replace"))
                except KeyError:
                    pass
            out.append({"bytes": size, "blocks": blocks[sid], "stack": frames[:12]})
        return {"outstanding_bytes": sum(by_stack.values()),
                "outstanding_blocks": sum(blocks.values()),
                "untracked": int(sum(self.bpf["lost"][0])), "top_stacks": out}
