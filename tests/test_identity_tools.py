"""The identity tools' shared part (tests/tools/identity.py): what differs between two checkouts of
one tree is masked, so an output of an unchanged tree is identical whether its files were
checked out, copied or touched since: a recon file's time taken from its modification time,
the checkout's path in the report's links to the docs. Browser-free and BEAM-free: the commands
run in this process."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from support import SAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
import identity

RECON = SAMPLES / "recon_snapshot.txt"


def _analyze_json(path: Path) -> bytes:
    from beamalloc.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["analyze", str(path), "--json"]) == 0
    return out.getvalue().encode()


def _copy(tmp: Path, name: str, mtime: float) -> Path:
    """A copy of the recon sample, as a copy of the tree holds it: same bytes, its own time."""
    (tmp / name).mkdir()
    p = tmp / name / RECON.name
    shutil.copyfile(RECON, p)
    os.utime(p, (mtime, mtime))
    return p


def test_a_time_from_a_files_mtime_is_masked(tmp_path: Path) -> None:
    a = _copy(tmp_path, "base", 1_700_000_000.25)
    b = _copy(tmp_path, "work", 1_764_000_000.5)
    out_a, out_b = _analyze_json(a), _analyze_json(b)
    assert out_a != out_b  # what the tools compared raw: a copy said "differs"
    assert b"2023-11-14T22:13:20.250000Z" in out_a
    masked_a = identity.masked(out_a, identity.mtime_masks([a]))
    masked_b = identity.masked(out_b, identity.mtime_masks([b]))
    assert masked_a == masked_b and b"MTIME" in masked_a
    # a time that is not the file's stays as it is
    assert identity.masked(b"2023-11-14 22:14", identity.mtime_masks([a])) == b"2023-11-14 22:14"


def test_the_checkouts_docs_path_is_masked() -> None:
    page = (b'<a href="file:///work/wt-x/docs/erts/tuning.md#r2">R2</a> '
            b"<a href='file:///tmp/copy/layout/beamalloc/docs/erts/alloc_util.md#s3'>")
    other = page.replace(b"/work/wt-x/", b"/srv/base/").replace(b"/tmp/copy/layout/beamalloc/",
                                                                b"/x/")
    assert page != other
    got = identity.masked(page, identity.path_masks())
    assert got == identity.masked(other, identity.path_masks())
    assert got.count(b"file:///CHECKOUT/docs/erts/") == 2


def test_capture_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outs = {"a.txt": b"one", "b.txt": b"two"}
    assert identity.compare("capture", tmp_path, outs, "out", "diff")[:2] == (2, 0)
    total, bad, digest = identity.compare("check", tmp_path, outs, "out", "diff")
    assert (total, bad) == (2, 0) and len(digest) == 16
    total, bad, _ = identity.compare("check", tmp_path, {**outs, "b.txt": b"2"}, "out", "diff")
    assert (total, bad) == (2, 1)
    assert (tmp_path / "diff" / "b.txt").read_bytes() == b"2"
    assert "DIFFERS: b.txt" in capsys.readouterr().out


def test_the_base_runs_without_the_checkouts_modules(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """With a base folder, `python -S` and the venv's packages named: the editable install's
    finder (a .pth file) is not read, so a module the base lacks is not the checkout's."""
    monkeypatch.setattr(identity, "BASE", str(tmp_path))
    argv, env = identity.python(["-m", "beamalloc.cli"])
    assert argv[1] == "-S" and argv[2:] == ["-m", "beamalloc.cli"]
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), identity.site_packages()]
    assert Path(identity.site_packages(), "flask").is_dir()
    monkeypatch.setattr(identity, "BASE", None)
    argv, env = identity.python(["-c", "pass"])
    assert argv == [identity.PY, "-c", "pass"]
