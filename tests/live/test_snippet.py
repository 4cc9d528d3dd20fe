"""`beamalloc snippet`'s expression run through a real remote shell (docs/access.md, "No new
connection allowed"): `erl -remsh` on a pseudo-terminal (without one, erl ignores -remsh and
evaluates locally), and `iex --remsh` where Elixir is installed. The file it writes is read back
and checked against a snapshot of the same node taken over distribution.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import otp
import pytest

from beamalloc.collector import etf, live, snippet
from beamalloc.errors import InputError

from .conftest import HOST, Node, epmd_names, start_node

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def remote_shell(argv: list[str], lines: list[str], prompt: bytes, until: re.Pattern[bytes],
                 limit: float = 60) -> str:
    """Run a remote shell on a pseudo-terminal, type `lines` once its first `prompt` shows,
    and return what it printed once `until` matches; the shell's own node is killed after (the
    target lives on: quitting a remote shell with q() would stop the target)."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    out = b""
    end = time.monotonic() + limit

    def wait_for(check) -> bool:
        nonlocal out
        while not check(out) and time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
        return check(out)

    try:
        if not wait_for(lambda b: prompt in b):
            raise AssertionError(f"no prompt from {argv[0]}: {out[-500:]!r}")
        for line in lines:
            os.write(master, line.encode() + b"\n")
        if not wait_for(lambda b: until.search(b) is not None):
            raise AssertionError(f"the remote shell did not finish: {out[-1500:]!r}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(master)
    return out.decode("utf-8", "replace").replace("\r", "")


def _compare_with_live(snap, target: Node, cookie: str) -> None:
    """The snippet's snapshot holds what a snapshot over distribution holds: the same node, OS
    pid, release, schedulers and allocator instances, and an RSS of the same order."""
    ref = live.snapshot_node(target.node, cookie, timeout=30, max_carriers=0)
    assert snap.node == ref.node == target.node
    assert snap.os_pid == ref.os_pid == target.pid
    assert (snap.otp_release, snap.schedulers, snap.wordsize) == (
        ref.otp_release, ref.schedulers, ref.wordsize)
    assert {(a.allocator, a.instance) for a in snap.allocators} == {
        (a.allocator, a.instance) for a in ref.allocators}
    assert snap.rss is not None and ref.rss is not None
    assert 0.5 < snap.rss / ref.rss < 2.0
    assert snap.mem_available and snap.mem_available > snap.rss
    assert snap.memory and snap.memory.get("total", 0) > 0
    assert snap.carriers is None  # no instrument on the node


def test_erlang_snippet_through_remsh(otp_release: str) -> None:
    """Typed into `erl -remsh TARGET` (the target's release's own erl, on OTP 25, 27 and 29):
    the expression runs on the target, loads no module there, writes the file, and the file
    reads as a snapshot of the target."""
    rt = otp.runtime(otp_release)
    target = start_node(["+S", "3"], release=otp_release)
    here, there = rt.scratch()  # the node writes on its own file system (its chroot's)
    try:
        out_file = Path(there) / "node.etf"
        expr = snippet.erlang_expression(str(out_file))
        assert "\n" not in expr and "'" not in expr
        text = remote_shell(
            rt.argv("erl", "-sname", f"t_sh_{secrets.token_hex(4)}", "-setcookie",
                    target.cookie, "-hidden", "-remsh", target.node),
            ["{warm, [1, 2, 3]}.",  # the shell's own scanning and printing load first
             "M1 = [M || {M, _} <- code:all_loaded()].",
             expr,
             "{loaded, [M || {M, _} <- code:all_loaded()] -- M1}."],
            prompt=f"({target.node})1>".encode(), until=re.compile(rb"\{loaded,\[[^\]]*\]\}"))
        assert f'{{beamalloc_snippet,"{out_file}",' in text, text[-800:]
        assert "{loaded,[]}" in text, text[-800:]  # nothing loaded on the target
        snap = snippet.read_snippet((here / "node.etf").read_bytes(), str(out_file))
        assert snap.schedulers == 3 and snap.otp_release == otp_release
        _compare_with_live(snap, target, target.cookie)
    finally:
        target.stop()
        shutil.rmtree(here, ignore_errors=True)


def test_erlang_snippet_default_path(tmp_path: Path) -> None:
    """Without a path the file is /tmp/beamalloc-snippet-OSPID.etf on the node's host."""
    target = start_node()
    path = Path(f"/tmp/beamalloc-snippet-{target.pid}.etf")
    try:
        text = remote_shell(
            ["erl", "-sname", f"t_sh_{secrets.token_hex(4)}", "-setcookie", target.cookie,
             "-hidden", "-remsh", target.node],
            [snippet.erlang_expression()], prompt=f"({target.node})1>".encode(),
            until=re.compile(rb"\{beamalloc_snippet,\"[^\"]*\",\s*\d+\}"))
        assert f'"{path}"' in text
        assert snippet.read_snippet(path.read_bytes(), str(path)).os_pid == target.pid
    finally:
        target.stop()
        path.unlink(missing_ok=True)


@pytest.mark.skipif(not (shutil.which("elixir") and shutil.which("iex")),
                    reason="Elixir not installed (Debian: elixir)")
def test_elixir_snippet_through_iex_remsh(tmp_path: Path) -> None:
    """`beamalloc snippet --elixir` typed into `iex --remsh` on an Elixir node."""
    name = f"t_{secrets.token_hex(4)}"
    cookie = f"C{secrets.token_hex(12)}"
    proc = subprocess.Popen(["elixir", "--sname", name, "--cookie", cookie, "--no-halt",
                             "-e", ":ok"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    target = Node(name, cookie, proc)
    try:
        end = time.monotonic() + 30
        while name not in epmd_names():
            assert proc.poll() is None and time.monotonic() < end, "elixir node did not start"
            time.sleep(0.05)
        out_file = tmp_path / "ex.etf"
        expr = snippet.elixir_expression(str(out_file))
        assert "\n" not in expr and "'" not in expr
        text = remote_shell(
            ["iex", "--sname", f"t_sh_{secrets.token_hex(4)}", "--cookie", cookie,
             "--remsh", target.node],
            ["{:warm, [1, 2, 3]}",
             "m1 = for {m, _} <- :code.all_loaded(), do: m",
             expr,
             # each new module: ours, from the node's own OTP or Elixir install, or foreign
             "{:loaded, Enum.uniq(for m <- (for {m, _} <- :code.all_loaded(), do: m) -- m1, "
             "do: (cond do String.starts_with?(Atom.to_string(m), [\"beamalloc\", "
             "\"Elixir.Beamalloc\"]) -> :ours; :lists.prefix(:code.root_dir(), :code.which(m)) "
             "or :lists.prefix(:code.lib_dir(:elixir), :code.which(m)) -> :installed; "
             "true -> :foreign end))}"],
            prompt=f"iex({target.node})1>".encode(),
            until=re.compile(rb"\{:loaded, \[[^\]]*\]\}"))
        assert re.search(rf'\{{:beamalloc_snippet,\s*"{re.escape(str(out_file))}",\s*\d+\}}',
                         text), text[-800:]
        # IEx compiles the line, loading parts of Elixir's compiler and Inspect from the node's
        # own installation, as any line typed there does; nothing of ours, nothing else.
        assert re.search(r"\{:loaded, \[(:installed)?\]\}", text), text[-300:]
        snap = snippet.read_snippet(out_file.read_bytes(), str(out_file))
        _compare_with_live(snap, target, cookie)
    finally:
        target.stop()


def test_not_a_snippet_is_one_line(tmp_path: Path) -> None:
    """Other external terms, a truncated file, another version: InputError, one line, no bytes
    of the file."""
    cases = {
        "other": b"\x83d\x00\x0fsomething_else!",  # an atom
        "truncated": b"\x83h\x03d\x00\x11beamalloc_snippeta\x01l\x00\x00",
        "version": b"\x83h\x03d\x00\x11beamalloc_snippeta\x02j",
        "no_node": b"\x83h\x03d\x00\x11beamalloc_snippeta\x01j",
    }
    for name, data in cases.items():
        with pytest.raises(InputError) as e:
            snippet.read_snippet(data, name)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{name}: "), msg
        assert "something_else" not in msg
    assert "version 2" in _msg(cases["version"])
    with pytest.raises(etf.ETFError):
        etf.decode(cases["truncated"])


def _msg(data: bytes) -> str:
    try:
        snippet.read_snippet(data, "f")
    except InputError as e:
        return str(e)
    raise AssertionError("read")


def test_is_snippet() -> None:
    assert snippet.is_snippet(b"\x83P\x00\x00")
    assert not snippet.is_snippet(b"=erl_crash_dump:0.5")
    assert HOST


def test_snippet_file_through_sources_and_upload(tmp_path: Path) -> None:
    """The file is a SOURCE like any other: collector/sources.read_file (every command) and the
    web UI's upload both recognise it by its first byte."""
    from beamalloc.collector.sources import read_file
    from beamalloc.webui.data import parse_upload

    out = tmp_path / "local.etf"
    expr = snippet.erlang_expression(str(out)).removesuffix(".")
    r = subprocess.run(["erl", "-noshell", "-eval", f"io:format(\"~p~n\", [{expr}]), halt()."],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "beamalloc_snippet" in r.stdout, r.stderr
    snap = read_file(str(out))
    assert snap.node == "nonode@nohost" and snap.rss and len(snap.allocators) > 10
    up = parse_upload("node.etf", out.read_bytes())
    assert (up.node, up.os_pid, len(up.allocators)) == (snap.node, snap.os_pid,
                                                         len(snap.allocators))
