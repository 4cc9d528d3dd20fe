"""Outputs are written through devices, FIFOs and symlinks, never renamed over them; inputs that
are not regular files are refused before they are opened (beamalloc/files.py).

Issue 16: `beamalloc snapshot SRC -o /dev/null` as root replaced /dev/null with a regular file,
and every other program on the machine that wrote to it failed from then on. These tests use a
private character device (the same device numbers as /dev/null, made in tmp_path), never the
machine's own.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from support import DATA, run_cli

from beamalloc.errors import InputError
from beamalloc.files import atomic_write_text, open_input

SRC = str(DATA / "hand_recon.txt")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


@root_only
def test_snapshot_to_a_private_char_device_leaves_it_a_device(tmp_path: Path) -> None:
    dev = tmp_path / "null"
    os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    before = os.stat(dev)
    res = run_cli("snapshot", SRC, "-o", str(dev))
    assert res.returncode == 0, res.stderr
    after = os.stat(dev)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino  # the same inode: nothing was renamed over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temporary left
    for cmd in (["report", SRC, "-o", str(dev)],):
        res = run_cli(*cmd)
        assert res.returncode == 0, res.stderr
        assert stat.S_ISCHR(os.stat(dev).st_mode)


@root_only
def test_symlink_to_a_device_is_written_through(tmp_path: Path) -> None:
    dev = tmp_path / "null"
    os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    link = tmp_path / "out.json"
    link.symlink_to(dev)
    assert run_cli("snapshot", SRC, "-o", str(link)).returncode == 0
    assert link.is_symlink() and stat.S_ISCHR(os.stat(dev).st_mode)


def test_symlink_to_a_regular_file_stays_a_symlink(tmp_path: Path) -> None:
    """The file it names is replaced (atomically, beside it); the link still points there."""
    real = tmp_path / "real.json"
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    res = run_cli("snapshot", SRC, "-o", str(link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())["schema"] == "beamalloc.snapshot/1"
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640  # the mode it had


def test_fifo_output_with_a_reader_gets_the_bytes(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(0.2)  # the reader is in open(), waiting for a writer
    atomic_write_text(fifo, "through the pipe\n")
    t.join(10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_fifo_output_without_a_reader_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    res = run_cli("snapshot", SRC, "-o", str(fifo), timeout=30)
    assert res.returncode == 2
    assert res.stderr.strip() == f"beamalloc: cannot write {fifo}: a FIFO with no reader"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_directory_and_symlink_loop_outputs_are_refused(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for out, why in ((tmp_path, "is a directory"), (loop, "symbolic links")):
        res = run_cli("snapshot", SRC, "-o", str(out))
        assert res.returncode == 2 and why in res.stderr and len(res.stderr.splitlines()) == 1


def test_regular_file_is_replaced_atomically(tmp_path: Path) -> None:
    out = tmp_path / "snap.json"
    out.write_text("old")
    ino = os.stat(out).st_ino
    atomic_write_text(out, "new")
    assert out.read_text() == "new" and os.stat(out).st_ino != ino  # a new file, renamed in
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]


@pytest.mark.parametrize("kind", ["fifo", "dir", "loop", "socket", "dev"])
def test_open_input_refuses_before_open(kind: str, tmp_path: Path) -> None:
    import socket

    p = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(p)  # nothing writes to it: an open() would wait forever
    elif kind == "dir":
        p.mkdir()
    elif kind == "loop":
        p.symlink_to(p)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    else:
        p = Path("/dev/zero")
    with pytest.raises(InputError) as e:
        open_input(p)
    assert str(e.value).startswith(f"{p}: ") and "\n" not in str(e.value)
