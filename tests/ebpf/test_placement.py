"""Where the entry probes go (ebpf/placement.py): past a flags-only test onto an instruction the
kernel emulates, and nowhere else; and, as root, that the kernel holds the probes where the
placement says (bpftool lists each uprobe's file offset)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ebpfhelp import Churn, Tracer, requires_bpf

from beamalloc.ebpf import beam, blocks, placement, procmem

TEST_RDX_JE32 = bytes.fromhex("4885d2" "0f84ff000000")  # erts_alcu_free_thr_pref on OTP 25.2.3
TEST_RDI_JE8 = bytes.fromhex("4885ff" "7405")  # glibc's free
ENDBR_PUSH = bytes.fromhex("f30f1efa" "4157")


@pytest.mark.parametrize(("code", "offset"), [
    (TEST_RDX_JE32, 3),
    (TEST_RDI_JE8, 3),
    (ENDBR_PUSH, 4),
    (bytes.fromhex("85d2" "7405"), 2),  # test %edx,%edx; je
    (bytes.fromhex("4839f7" "7f10"), 3),  # cmp %rsi,%rdi; jg
    (bytes.fromhex("4157" "4156"), 0),  # push r15 first: emulated where it stands
    (bytes.fromhex("55"), 0),  # push rbp
    (bytes.fromhex("4885d2" "4889d7"), 0),  # test, then a mov (single-stepped anyway)
    (bytes.fromhex("488507" "7405"), 0),  # test with a memory operand: not decoded, stays
    (bytes.fromhex("4889d7" "e9000000"), 0),  # mov writes rdi: never skipped
    (bytes.fromhex("48b8f8ffffffffffff7f"), 0),  # movabs (erts_alcu_alloc)
    (b"", 0),
])
def test_entry_offset(code: bytes, offset: int) -> None:
    assert placement.entry_offset(code) == offset


def test_emulated_instructions() -> None:
    for code in ("7405", "0f8400000000", "e800000000", "e900000000", "eb00", "50", "4157"):
        assert placement.emulated(bytes.fromhex(code)), code
    for code in ("4885d2", "c3", "4889d7", "90", "0f0b"):
        assert not placement.emulated(bytes.fromhex(code)), code


@pytest.mark.live
def test_only_entry_probes_without_a_return_move() -> None:
    """An alloc keeps its entry probe on the first instruction, where its uretprobe is (the
    two share one trap); a free moves where its first bytes say (on OTP 25.2.3's
    erts_alcu_free_thr_pref: past its test, onto the je)."""
    binary = _installed_beam()
    syms = procmem.dynamic_symbols(binary)
    placed = blocks.placement(binary)
    returns = {p.sym for p, _ in placed if p.kind == "return"}
    for p, addr in placed:
        off = addr - syms[p.sym].value
        if p.kind == "return" or p.sym in returns:
            assert off == 0, p
        code = procmem.code_bytes(binary, syms[p.sym].value, 16)
        assert off == placement.entry_offset(code) or p.sym in returns
    entry = {p.sym: addr for p, addr in placed if p.kind == "entry"}
    code = procmem.code_bytes(binary, syms["erts_alcu_free_thr_pref"].value, 16)
    if placement.entry_offset(code):  # the build this repository is tested on (OTP 25.2.3)
        assert placement.emulated(procmem.code_bytes(binary, entry["erts_alcu_free_thr_pref"],
                                                     8))


def _installed_beam() -> str:
    out = subprocess.run(["erl", "-noshell", "-eval",
                          "io:format(\"~s\", [code:root_dir()]), halt()."],
                         capture_output=True, text=True, check=True).stdout
    found = sorted(Path(out).glob("erts-*/bin/beam.smp"))
    if not found:
        pytest.skip("no beam.smp under the Erlang root")
    return str(found[-1])


def _kernel_offsets(pid: int) -> set[int]:
    r = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True,
                       check=True)
    return {int(item["offset"]) for item in json.loads(r.stdout or "[]")
            if item.get("fd_type") in ("uprobe", "uretprobe")
            and f"/proc/{pid}/" in item.get("filename", "") and "beam" in item["filename"]}


@requires_bpf
@pytest.mark.live
def test_the_kernel_holds_the_probes_where_placed(churn: Churn) -> None:
    tr = Tracer("--pid", str(churn.pid), "--json")
    try:
        got = _kernel_offsets(churn.pid)
    finally:
        rc, _out, err = tr.stop()
    assert rc == 0, err
    binary = beam.beam_binary(churn.pid)
    want = {procmem.file_offset(binary, addr) for _p, addr in blocks.placement(binary)}
    assert got == want
