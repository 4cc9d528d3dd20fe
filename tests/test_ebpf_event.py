"""The BPF event layout has one home, ebpf/event.bpf.h (issue 11 item 4): Python's unpacking of
it (ebpf/event.py) must be what a C compiler makes of the same header. gcc compiles the header
here and prints each field's offset and size; tests/ebpf/test_event_layout.py checks it against
the compiled BPF program itself (bcc's view), as root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from beamalloc.ebpf import event

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (Debian: gcc)")


def _c_layout(tmp: Path) -> tuple[list[tuple[str, int, int]], int, dict[str, int]]:
    fields = [name for name, _, _ in event.layout()]
    prints = "\n".join(
        f'    printf("{f} %zu %zu\\n", offsetof(struct event, {f}), '
        f"sizeof(((struct event *)0)->{f}));" for f in fields)
    consts = "\n".join(f'    printf("#{k} %d\\n", (int){k});' for k in event.CONSTS)
    src = tmp / "layout.c"
    src.write_text(f"""#include <stddef.h>
#include <stdio.h>
typedef unsigned long long u64;
typedef unsigned int u32;
#include "{event.HEADER}"
int main(void) {{
{prints}
{consts}
    printf("!sizeof %zu\\n", sizeof(struct event));
    return 0;
}}
""")
    exe = tmp / "layout"
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    rows, size, defs = [], 0, {}
    for line in out.splitlines():
        k, *v = line.split()
        if k == "!sizeof":
            size = int(v[0])
        elif k.startswith("#"):
            defs[k[1:]] = int(v[0])
        else:
            rows.append((k, int(v[0]), int(v[1])))
    return rows, size, defs


def test_python_unpacks_what_c_lays_out(tmp_path: Path) -> None:
    rows, size, defs = _c_layout(tmp_path)
    assert rows == event.layout()
    assert size == event.EVENT.size
    assert defs == event.CONSTS
    assert {"OP_ALLOC", "OP_FREE", "OP_REALLOC", "OP_RET"} <= set(defs)


@pytest.mark.parametrize("bad, why", [
    ("struct event {\n    u32 op;\n    u64 t_ns;\n};", "needs padding"),
    ("struct event {\n    u64 t_ns;\n    u32 op;\n};", "not a multiple of 8"),
    ("struct event {\n    u16 op;\n};", "is not `u64 name;`"),
    ("struct other { u64 a; };", "no `struct event"),
])
def test_a_header_python_cannot_mirror_fails_at_import(bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        event.parse(bad)
