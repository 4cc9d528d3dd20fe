"""Opening input files and writing output files, safely (docs/robustness.md, "Files").

Reading: only a regular file (or standard input) is read. A FIFO would block `open()` until a
writer comes, a device can stream forever, a directory or a symlink loop is not data; each is
refused with one line *before* it is opened, and checked again on the opened descriptor, so a
path swapped between the two checks is refused too.

Writing: a regular file (or a new one) is replaced atomically: a temporary file beside it,
renamed into place, so an interrupted or failed write never leaves half a file where a good one
was. Anything else is written through, never renamed over: a character device (`/dev/null`,
`/dev/stdout`), a FIFO (only when a reader is already there, so that we never hang) and a symlink
(followed to what it names, and that is treated by these same rules; the link stays a link).
Renaming a file over `/dev/null` as root breaks every other program on the machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from beamalloc.errors import InputError


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "is a character device"
    if stat.S_ISBLK(mode):
        return "is a block device"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return "is not a regular file"


def _why(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "Too many levels of symbolic links (a symlink loop)"
    return e.strerror or type(e).__name__


def open_input(path: str | Path, name: str | None = None) -> BinaryIO:
    """Open a regular file for reading, binary. Everything else (FIFO, device, socket,
    directory, symlink loop, missing file) is an InputError naming `name` (default: the path),
    raised without opening the file, so nothing blocks."""
    name = str(path) if name is None else name
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{name}: {_why(e)}") from None
    except ValueError:  # an embedded NUL byte
        raise InputError(f"{name}: not a valid file name") from None
    if (what := _kind(st.st_mode)) is not None:
        raise InputError(f"{name}: {what}, not a file beamalloc can read")
    try:
        # O_NONBLOCK: if the path became a FIFO since stat(), open() returns at once instead of
        # waiting for a writer; the fstat below refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError(f"{name}: {_why(e)}") from None
    try:
        st = os.fstat(fd)
        if (what := _kind(st.st_mode)) is not None:
            raise InputError(f"{name}: {what}, not a file beamalloc can read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` (docstring of this module: atomic for regular files, written
    through for devices, FIFOs and symlinks). Errors are one line."""
    write_bytes(path, text.encode("utf-8", "surrogateescape"))


def write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    try:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise InputError(f"cannot write {path}: is a directory")
        if st is not None and not stat.S_ISREG(st.st_mode):
            _write_through(path, target, st.st_mode, data)
        else:
            _replace(path, target, st, data)
    except OSError as e:
        raise InputError(f"cannot write {path}: {_why(e)}") from None


def _write_through(path: Path, target: Path, mode: int, data: bytes) -> None:
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    if stat.S_ISFIFO(mode):
        flags |= os.O_NONBLOCK  # no reader: ENXIO at once, not a hang
    elif stat.S_ISSOCK(mode):
        raise InputError(f"cannot write {path}: is a socket")
    try:
        fd = os.open(target, flags)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise InputError(f"cannot write {path}: a FIFO with no reader") from None
        raise
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _replace(path: Path, target: Path, st: os.stat_result | None, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a stale one of an earlier, killed run of this pid
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666 if st is None else stat.S_IMODE(st.st_mode))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
