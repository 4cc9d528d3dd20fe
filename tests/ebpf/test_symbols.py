"""Where the tracer finds a binary's symbols (ebpf/procmem.py symbol_table): .dynsym, .symtab of an
unstripped build, a debug file by build-id under /usr/lib/debug of the traced process's root or
this host's, and the one line saying which were missing. Real ELF files made by gcc, strip and
objcopy, as a distribution splits its debug packages (docs/erts/releases.md §3)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from beamalloc.ebpf import procmem

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("objcopy")),
                                reason="needs gcc and binutils to make the ELF files")

SOURCE = """
__attribute__((noinline)) static int hidden_helper(int x) { return x * 3; }
int erts_alcu_alloc_thr_pref(int x) { return hidden_helper(x) + 1; }
int main(int argc, char **argv) { (void)argv; return erts_alcu_alloc_thr_pref(argc); }
"""


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """full: unstripped; stripped: no .symtab, its debug part split off into debug/.build-id."""
    d = tmp_path_factory.mktemp("elf")
    (d / "t.c").write_text(SOURCE)
    full = d / "full"
    subprocess.run(["gcc", "-O0", "-fPIE", "-pie", "-Wl,--build-id", "-o", str(full),
                    str(d / "t.c")], check=True)
    dbg = d / "t.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(dbg)], check=True)
    stripped = d / "stripped"
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(full)], check=True)
    bid = procmem.build_id(stripped.read_bytes())
    assert bid and len(bid) == 40
    root = d / "root"
    place = root / "usr/lib/debug/.build-id" / bid[:2] / f"{bid[2:]}.debug"
    place.parent.mkdir(parents=True)
    shutil.copy(dbg, place)
    return {"full": full, "stripped": stripped, "root": root, "debug": place}


def test_symtab_of_an_unstripped_build(builds: dict[str, Path]) -> None:
    t = procmem.symbol_table(builds["full"])
    assert t.source.endswith(".symtab")
    assert "hidden_helper" in t.symbols  # a local (static) function: only .symtab has it
    assert "hidden_helper" not in procmem.dynamic_symbols(builds["full"])
    assert t.symbols["erts_alcu_alloc_thr_pref"].value > 0


def test_debug_file_found_by_build_id(builds: dict[str, Path]) -> None:
    full = procmem.symbol_table(builds["full"]).symbols
    t = procmem.symbol_table(builds["stripped"], ("/nonexistent", str(builds["root"])))
    assert t.source == f"debug file {builds['debug']}"
    for name in ("hidden_helper", "erts_alcu_alloc_thr_pref", "main"):
        assert t.symbols[name].value == full[name].value, name  # the same link-time address


def test_no_symbols_says_where_it_looked(builds: dict[str, Path], tmp_path: Path) -> None:
    t = procmem.symbol_table(builds["stripped"], (str(tmp_path),))
    bid = procmem.build_id(builds["stripped"].read_bytes())
    assert "hidden_helper" not in t.symbols
    assert t.source == ("dynamic symbols only, no .symtab, no debug file "
                        f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug")


def test_a_debug_file_that_is_not_elf_is_skipped(builds: dict[str, Path], tmp_path: Path) -> None:
    bid = procmem.build_id(builds["stripped"].read_bytes())
    bad = tmp_path / "usr/lib/debug/.build-id" / bid[:2] / f"{bid[2:]}.debug"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x7fELF garbage")
    t = procmem.symbol_table(builds["stripped"], (str(tmp_path), str(builds["root"])))
    assert t.source == f"debug file {builds['debug']}"


def test_target_path_of_a_chroot_and_of_this_root(tmp_path: Path) -> None:
    """A file mapped by a process of this root opens through /proc/PID/root unchanged; one in a
    chroot is named by its path inside (what bcc puts /proc/PID/root in front of)."""
    me = os.getpid()
    assert procmem.target_path(me, "/usr/lib/libc.so.6") == f"/proc/{me}/root/usr/lib/libc.so.6"
    assert procmem.target_path(me, "/x (deleted)") == f"/proc/{me}/root/x"
    if os.geteuid() != 0:
        pytest.skip("a chroot needs root")
    (tmp_path / "bin").mkdir()
    sleep = Path(shutil.which("sleep") or "/bin/sleep")
    shutil.copy(sleep, tmp_path / "bin/sleep")
    # sleep is dynamically linked: its libraries and loader go into the chroot too
    ld = subprocess.run(["ldd", str(sleep)], capture_output=True, text=True).stdout
    for word in ld.split():
        if word.startswith("/") and Path(word).exists():
            dest = tmp_path / word.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(word, dest)
    p = subprocess.Popen(["chroot", str(tmp_path), "/bin/sleep", "30"])
    try:
        for _ in range(500):  # until chroot has exec'd sleep
            exe = os.readlink(f"/proc/{p.pid}/exe")
            if exe.endswith("/bin/sleep"):
                break
            time.sleep(0.01)
        assert exe == f"{tmp_path}/bin/sleep"
        got = procmem.target_path(p.pid, exe)
        assert got == f"/proc/{p.pid}/root/bin/sleep"
        assert Path(got).read_bytes() == sleep.read_bytes()
    finally:
        p.kill()
        p.wait()
