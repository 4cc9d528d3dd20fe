"""`beamalloc trace` where it cannot trace: one line on stderr, exit code 2, no traceback, and
nothing left attached (docs/ebpf.md, "Requirements and failures")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ebpfhelp import HOST, Churn, probes_in_kernel, requires_bpf

from beamalloc.ebpf import kernel

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(os.geteuid() != 0, reason="runs the tracer as root")]


def trace(*args: str, env: dict[str, str] | None = None,
          prefix: tuple[str, ...] = ()) -> tuple[int, str]:
    r = subprocess.run([*prefix, sys.executable, "-m", "beamalloc.cli", "trace", *args],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stderr.strip()


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_not_root(churn: Churn) -> None:
    """The same command as an unprivileged user: setpriv drops to nobody, keeping only
    CAP_DAC_READ_SEARCH so that a checkout under a 0700 directory (/root) stays readable; the
    tracer goes by its effective uid, which is nobody's."""
    drop = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search")
    rc, err = trace("--pid", str(churn.pid), prefix=drop, env={"HOME": "/tmp"})
    assert rc == 2
    assert "needs root" in one_line(err) and "sudo" in err


@requires_bpf
def test_missing_headers(churn: Churn, tmp_path) -> None:
    """BEAMALLOC_KERNEL_HEADERS replaces /lib/modules/R/build: an empty directory, or Debian's
    arch headers alone (bcc needs the source tree beside them), fail before anything loads."""
    for where in (tmp_path, kernel.prepare_headers().resolve()):
        rc, err = trace("--pid", str(churn.pid), "--level", "carrier", "--duration", "1",
                        env={kernel.HEADERS_ENV: str(where)})
        assert rc == 2
        line = one_line(err)
        assert "no kernel headers" in line and str(where) in line
        assert kernel.HEADERS_ENV in line
    assert probes_in_kernel(churn.pid) == []


@requires_bpf
def test_a_beam_without_the_alloc_util_symbols(tmp_path) -> None:
    """A process whose executable is called beam.smp but has no erts_alcu_* symbol (a copy of
    sleep, stripped as a release build is): a block-level trace file is refused in one line
    naming the symbol and where it was looked for; the summary follows what it can reach
    (tests/ebpf/test_stripped.py does both on a real stripped OTP 29)."""
    fake = tmp_path / "beam.smp"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    p = subprocess.Popen([str(fake), "60"])
    try:
        rc, err = trace("--pid", str(p.pid), "-o", str(tmp_path / "t.batr"))
        rc2, err2 = trace("--pid", str(p.pid), "--duration", "0.2", "--json", "--no-libc")
    finally:
        p.kill()
        p.wait()
    assert rc == 2
    line = one_line(err)
    assert line.startswith(f"beamalloc: no block-level trace of pid {p.pid}: beam.smp has no "
                           "symbol for alloc_util (erts_alcu_alloc_thr_pref and 20 more)"), line
    assert "dynamic symbols only, no .symtab" in line
    assert rc2 == 0 and "block level unavailable" in err2.splitlines()[0], err2


@requires_bpf
def test_not_a_beam_and_no_such_pid() -> None:
    p = subprocess.Popen(["sleep", "60"])
    try:
        rc, err = trace("--pid", str(p.pid))
    finally:
        p.kill()
        p.wait()
    assert rc == 2 and "not an Erlang VM" in one_line(err)
    rc, err = trace("--pid", "999999999")
    assert rc == 2 and "no process with pid 999999999" in one_line(err)


@requires_bpf
def test_pid_1_as_root_does_not_ask_for_root() -> None:
    """Root may still be refused pid 1's executable (a container): say so, not 'run as root'."""
    rc, err = trace("--pid", "1")
    assert rc == 2
    line = one_line(err)
    assert "pid 1" in line and "run as root" not in line
    try:
        os.readlink("/proc/1/exe")
    except PermissionError:
        assert "refuses even root" in line
    else:
        assert "not an Erlang VM" in line or Path("/proc/1/exe").resolve().name.startswith("beam")


# The four machine-level failures of docs/ebpf.md, each made real for one run of the tracer: a
# seccomp filter that answers bpf() with ENOSYS, and private mount namespaces (unshare --mount)
# that hide the uprobe event source, tracefs (with CAP_SYS_ADMIN dropped, so it cannot be
# mounted again) or Debian's bcc package. Nothing outside that one process is changed.

NO_BPF = """
import ctypes, os, struct, sys
# seccomp: on x86_64, bpf() (321) fails with ENOSYS (38); everything else is allowed.
code = [(0x20, 0, 0, 4), (0x15, 0, 3, 0xC000003E), (0x20, 0, 0, 0), (0x15, 0, 1, 321),
        (0x06, 0, 0, 0x00050000 | 38), (0x06, 0, 0, 0x7FFF0000)]
buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *c) for c in code))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(len(code), ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0, os.strerror(ctypes.get_errno())
os.execv(sys.argv[1], sys.argv[1:])
"""


def _in_mount_ns(setup: str, *wrap: str) -> tuple[str, ...]:
    return ("unshare", "--mount", "sh", "-c", f'{setup} && exec {" ".join(wrap)} "$0" "$@"')


@pytest.mark.parametrize("what, prefix, words", [
    ("no bpf()", (sys.executable, "-c", NO_BPF), "this kernel has no BPF (bpf() returns ENOSYS)"),
    ("no uprobes", _in_mount_ns("mount -t tmpfs none /sys/bus/event_source/devices"),
     "this kernel has no uprobe events"),
    ("tracefs", _in_mount_ns(f"mount -t tmpfs none {kernel.TRACEFS}", "setpriv",
                             "--bounding-set=-sys_admin"),
     f"cannot mount tracefs on {kernel.TRACEFS}"),
    ("bcc missing", _in_mount_ns(f"mount -t tmpfs none {kernel.BCC_DIST}"),
     "bcc is not installed"),
], ids=["no-bpf", "no-uprobes", "tracefs", "bcc-missing"])
def test_machine_failures(churn: Churn, what: str, prefix: tuple[str, ...], words: str) -> None:
    rc, err = trace("--pid", str(churn.pid), prefix=prefix)
    assert rc == 2, err
    assert words in one_line(err), what
    assert probes_in_kernel(churn.pid) == []


def test_unreachable_node_is_exit_code_3(tmp_path) -> None:
    """--node names a node that is not there: exit code 3 and one line, as for the collector."""
    cookie = tmp_path / "cookie"
    cookie.write_text("whatever\n")
    name = f"nobody_{os.getpid()}"
    rc, err = trace("--node", f"{name}@{HOST}", "--cookie-file", str(cookie))
    assert rc == 3
    assert one_line(err).startswith(f"beamalloc: no node named {name} on host {HOST}")
    rc, err = trace("--node", "someone@nohost.invalid", "--cookie-file", str(cookie))
    assert rc == 3 and "cannot reach epmd on host nohost.invalid" in one_line(err)
