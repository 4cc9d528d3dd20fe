"""Where an entry uprobe goes so that a hit costs one trap, not two.

A uprobe writes int3 over the first byte of an instruction. After the BPF program has run, the
kernel must still execute the instruction it covered: x86 emulates a few (push of a register,
jmp, call, conditional jumps) and single-steps every other one in an out-of-line slot, a
second trap. Measured on this VM (docs/ebpf.md, "Where the cost goes"): ~0.55 µs per hit on a
push or a je, ~11 µs on a `test %rdx,%rdx`. erts_alcu_free_thr_pref (every free of every
thread-preferred allocator) and glibc's free open with exactly such a test, the free(NULL)
check, followed by its je.

A test or cmp of two registers (and endbr64) writes no register but the flags, so an entry
probe may sit on the instruction after it: every call passes there, with the argument
registers as they were at the call. Only entry probes move: a uretprobe must stay on the first
instruction, where the return address is on top of the stack (and an entry probe that shares
a function with one costs nothing more there). Anything this decoder does not know keeps the
probe on the first instruction: slower, never wrong.
"""

from __future__ import annotations

from pathlib import Path

from beamalloc.ebpf.procmem import ProcError, Symbol, code_bytes

_REX = range(0x40, 0x50)
_ENDBR64 = bytes.fromhex("f30f1efa")


def _flags_only(code: bytes) -> int:
    """Length of a leading instruction that writes only the flags, or 0: test/cmp of two
    registers (84, 85, 38, 39, 3a, 3b with a register ModRM, optional REX) or endbr64."""
    if code.startswith(_ENDBR64):
        return 4
    i = 1 if code[:1] and code[0] in _REX else 0
    if len(code) >= i + 2 and code[i] in (0x84, 0x85, 0x38, 0x39, 0x3A, 0x3B) \
            and code[i + 1] >> 6 == 3:
        return i + 2
    return 0


def emulated(code: bytes) -> bool:
    """Whether the kernel runs the instruction at the start of `code` without single-stepping
    it (arch/x86/kernel/uprobes.c: branch and push emulation): jcc, jmp, call, push reg."""
    if not code:
        return False
    op = code[0]
    if 0x70 <= op <= 0x7F or op in (0xE8, 0xE9, 0xEB) or 0x50 <= op <= 0x57:
        return True
    if op == 0x0F and len(code) > 1 and 0x80 <= code[1] <= 0x8F:
        return True
    return op == 0x41 and len(code) > 1 and 0x50 <= code[1] <= 0x57  # push r8..r15


def entry_offset(code: bytes) -> int:
    """Offset from a function's start for an entry-only probe, given its first bytes."""
    if emulated(code):
        return 0
    n = _flags_only(code)
    return n if n and emulated(code[n:]) else 0


def entry_addrs(binary: str | Path, syms: dict[str, Symbol], names: list[str]
                ) -> dict[str, int]:
    """Link-time address for an entry-only probe on each of `names` (symbol + offset)."""
    out = {}
    for name in names:
        sym = syms[name]
        try:
            code = code_bytes(binary, sym.value, 16)
        except (OSError, ProcError):
            code = b""
        out[name] = sym.value + entry_offset(code)
    return out
