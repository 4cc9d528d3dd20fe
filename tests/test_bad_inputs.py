"""Bad input gets one clear line and exit code 2, never a traceback, and nothing stored is lost."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import DATA, ROOT

BAD = sorted(p for p in (DATA / "bad").iterdir() if p.name != "README.md")


def _one_clear_line(res) -> str:
    err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode()
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("beamalloc: ")
    return lines[0]


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_bad_file_is_refused_with_one_line(path, cli):
    res = cli("analyze", str(path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    line = _one_clear_line(res)
    assert path.name in line  # the message names the file it is about
    assert res.stdout == ""


@pytest.mark.parametrize("path", BAD[:6], ids=[p.name for p in BAD[:6]])
def test_a_bad_file_never_replaces_a_stored_snapshot(path, tmp_path, cli):
    out = tmp_path / "stored.json"
    good = cli("snapshot", str(DATA / "hand_recon.txt"), "-o", str(out))
    assert good.returncode == 0
    before = out.read_bytes()
    res = cli("snapshot", str(path), "-o", str(out))
    assert res.returncode == 2
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["stored.json"]  # no temporary left behind


def test_two_gigabyte_integer_literal_on_stdin():
    """Streamed: the reader stops at its size bound instead of swallowing 2 GiB."""
    feeder = subprocess.Popen(
        ["sh", "-c", "printf '{[{total,'; head -c 2147483648 /dev/zero | tr '\\0' 9"],
        stdout=subprocess.PIPE,
    )
    try:
        res = subprocess.run(
            [sys.executable, "-m", "beamalloc.cli", "analyze", "-"],
            stdin=feeder.stdout,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        feeder.kill()
        feeder.wait()
    assert res.returncode == 2
    assert "standard input" in _one_clear_line(res)


def test_two_gigabyte_file(tmp_path, cli):
    f = tmp_path / "huge.txt"
    with open(f, "wb") as fh:
        fh.write(b"{[{total," + b"9" * 4096)
        fh.truncate(2 << 30)  # sparse: costs no disk
    res = cli("analyze", str(f))
    assert res.returncode == 2
    assert "too large" in _one_clear_line(res)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["analyze"], "required"),
        (["frobnicate"], "invalid choice"),
        (["analyze", "/nonexistent/snap.json"], "no such file"),
        (["analyze", str(ROOT)], "is a directory"),
        (["analyze", "no_at_sign"], "no such file"),
        (["analyze", "--top", "x", "f"], "--top: expected a whole number"),
    ],
)
def test_usage_errors(args, needle, cli):
    res = cli(*args)
    assert res.returncode == 2
    assert needle in _one_clear_line(res)


@pytest.mark.parametrize("command", ["snapshot", "report"])
def test_unwritable_output_is_one_line(command, cli, tmp_path):
    res = cli(command, str(DATA / "hand_recon.txt"), "-o", str(tmp_path / "no" / "dir.out"))
    assert res.returncode == 2
    assert "cannot write" in _one_clear_line(res)
