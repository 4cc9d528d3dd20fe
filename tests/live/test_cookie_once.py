"""The cookie is resolved once per command (issue 27 item 2, 4): `analyze NODE` reads the node
three ways (the snapshot, the process scan, the ETS scan), all with the one cookie its Access
read (collector/access.py Access.cookie)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from beamalloc.cli.main import main
from beamalloc.collector import access, cookie

from .conftest import start_node

pytestmark = pytest.mark.live


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cookie files read from now on, in order (collector/cookie.py `_read`)."""
    reads: list[str] = []
    real = cookie._read

    def counted(path, what):
        reads.append(str(path))
        return real(path, what)

    monkeypatch.setattr(cookie, "_read", counted)
    return reads


def test_one_command_reads_its_cookie_once(tmp_path, monkeypatch) -> None:
    n = start_node()
    f = tmp_path / "cookie"
    f.write_text(n.cookie)
    reads = _count_reads(monkeypatch)
    try:
        out = io.StringIO()
        with redirect_stdout(out):
            rc = main(["analyze", n.node, "--json", "--cookie-file", str(f), "--timeout", "30"])
    finally:
        n.stop()
    assert rc == 0 and '"processes"' in out.getvalue()  # the process scan ran too
    assert reads == [str(f)]


def test_an_access_resolves_its_cookie_once(tmp_path) -> None:
    f = tmp_path / "cookie"
    f.write_text("FIRST")
    a = access.Access(cookie_file=str(f))
    assert a.cookie() == "FIRST"
    f.write_text("SECOND")  # rewritten meanwhile: the command keeps the one it read
    assert a.cookie() == "FIRST"
    assert "FIRST" not in repr(a) and a == access.Access(cookie_file=str(f))
    assert access.merge(a, epmd_port=4370).cookie_file == str(f)


def test_trace_finds_its_node_with_the_commands_cookie(tmp_path, monkeypatch) -> None:
    """`trace --node` (and `recommend --trace-for`) find the node's pid with a snapshot made
    with the Access's cookie: the file is read once for the command, not again by the tracer."""
    from beamalloc.ebpf.run import Options, _target

    n = start_node()
    f = tmp_path / "cookie"
    f.write_text(n.cookie)
    reads = _count_reads(monkeypatch)
    a = access.Access(cookie_file=str(f))
    try:
        assert a.cookie() == n.cookie
        pid, snap = _target(Options(node=n.node, timeout=30, access=a))
    finally:
        n.stop()
    assert pid == snap.os_pid and pid > 1
    assert reads == [str(f)]
