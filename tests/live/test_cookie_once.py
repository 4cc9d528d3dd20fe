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


def test_one_command_reads_its_cookie_once(tmp_path, monkeypatch) -> None:
    n = start_node()
    f = tmp_path / "cookie"
    f.write_text(n.cookie)
    reads: list[str] = []
    real = cookie._read

    def counted(path, what):
        reads.append(str(path))
        return real(path, what)

    monkeypatch.setattr(cookie, "_read", counted)
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
