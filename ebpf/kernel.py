"""Can this machine trace? Root, BPF, uprobes, tracefs, kernel headers for bcc, and bcc itself.

Each check fails with one line (EbpfUnavailable, exit 2) that names the missing piece and how to
get it. Headers: bcc compiles its C against /lib/modules/$(uname -r)/build; a kernel that ships
none (this VM's 6.18) works with Debian's linux-headers-amd64 exposed there (`build` = the
arch tree, `source` = the common tree). `make ebpf-prep` does the same as prepare_headers().
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from beamalloc.ebpf.errors import EbpfUnavailable

BCC_DIST = Path("/usr/lib/python3/dist-packages/bcc")
TRACEFS = Path("/sys/kernel/tracing")
_bcc: ModuleType | None = None


def check_root() -> None:
    if os.geteuid() != 0:
        raise EbpfUnavailable("beamalloc trace needs root (BPF programs and uprobes on another "
                              "process): run it with sudo")


def check_bpf() -> None:
    """The bpf() syscall exists (ENOSYS otherwise) and the kernel has uprobe perf events."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(321, 0xFFFF, None, 0)  # SYS_bpf with a bad command: EINVAL if BPF is there
    if ctypes.get_errno() == 38:
        raise EbpfUnavailable("this kernel has no BPF (bpf() returns ENOSYS): "
                              "CONFIG_BPF_SYSCALL is off")
    if not Path("/sys/bus/event_source/devices/uprobe").exists():
        raise EbpfUnavailable("this kernel has no uprobe events (CONFIG_UPROBE_EVENTS is off)")


def mount_tracefs() -> None:
    """bcc resolves tracepoints through tracefs; mount it where the kernel expects it."""
    if (TRACEFS / "events").is_dir():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nodev", str(TRACEFS).encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        raise EbpfUnavailable(f"cannot mount tracefs on {TRACEFS}: {os.strerror(err)}")


#: A complete kernel tree to compile against instead of /lib/modules/R/build (handed to bcc as
#: BCC_KERNEL_SOURCE, which is both its build and its source tree: Debian's split arch/common
#: header packages do not qualify); nothing is linked or guessed when it is set.
HEADERS_ENV = "BEAMALLOC_KERNEL_HEADERS"


def headers_dir(release: str | None = None) -> Path:
    return Path("/lib/modules") / (release or os.uname().release) / "build"


def _has_headers(build: Path) -> bool:
    return (build / "include" / "linux").is_dir() or (build / "include" / "generated").is_dir()


def prepare_headers(release: str | None = None) -> Path:
    """Headers for bcc: $BEAMALLOC_KERNEL_HEADERS if set, else /lib/modules/R/build if it has
    them, else Debian's amd64 headers linked there (newest installed). Returns the build
    directory."""
    given = os.environ.get(HEADERS_ENV)
    if given:
        build = Path(given)
        if not _has_headers(build) or not (build / "include/linux/kconfig.h").exists():
            raise EbpfUnavailable(f"no kernel headers in {build} ({HEADERS_ENV}): point it at a "
                                  "complete kernel tree (include/linux/kconfig.h and the "
                                  "generated headers in one directory) or unset it")
        os.environ["BCC_KERNEL_SOURCE"] = str(build)
        return build
    release = release or os.uname().release
    build = headers_dir(release)
    if _has_headers(build):
        return build
    candidates = sorted(glob.glob("/usr/src/linux-headers-*-amd64"))
    if not candidates:
        raise EbpfUnavailable(f"no kernel headers for {release}: install linux-headers-amd64 "
                              "(`make setup` does it in a checkout) so bcc can compile its "
                              "programs")
    arch = Path(candidates[-1])
    common = Path(str(arch).removesuffix("-amd64") + "-common")
    try:
        build.parent.mkdir(parents=True, exist_ok=True)
        for link, dest in ((build, arch), (build.parent / "source", common)):
            if link.is_symlink() or not link.exists():
                tmp = link.with_name(link.name + ".beamalloc-tmp")
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(dest)
                tmp.replace(link)
    except OSError as e:
        raise EbpfUnavailable(f"cannot expose kernel headers at {build}: {e.strerror}") from None
    return build


def load_bcc() -> ModuleType:
    """Debian's bcc module (pure Python over libbcc via ctypes) from its dist-packages, without
    putting all of dist-packages on sys.path."""
    global _bcc
    if _bcc is not None:
        return _bcc
    if "bcc" in sys.modules:
        _bcc = sys.modules["bcc"]
        return _bcc
    init = BCC_DIST / "__init__.py"
    if not init.exists():
        raise EbpfUnavailable("bcc is not installed: apt-get install python3-bpfcc bpfcc-tools "
                              "(Debian's; `make setup` does it in a checkout)")
    spec = importlib.util.spec_from_file_location("bcc", init,
                                                  submodule_search_locations=[str(BCC_DIST)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bcc"] = mod
    try:
        spec.loader.exec_module(mod)
    except (OSError, ImportError) as e:
        del sys.modules["bcc"]
        raise EbpfUnavailable(f"cannot load bcc: {e}") from None
    _bcc = mod
    return mod


def preflight() -> ModuleType:
    """All checks in order; returns the bcc module."""
    check_root()
    check_bpf()
    mount_tracefs()
    prepare_headers()
    return load_bcc()
