"""Containers and limits on real nodes (issue 24 items 4 and 8): a node started inside a memory
cgroup this test makes (the v1 memory controller this host mounts) with a limit, and a node
started with a large +Q, read through the CLI as users run it."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import run_cli

from beamalloc.analyzer.limits import BYTES_PER_ENTRY
from beamalloc.collector.cgroup import read_cgroup
from beamalloc.collector.sources import read_file
from beamalloc.timeseries.series import derive, view

from .conftest import Node, epmd_names, start_node

pytestmark = pytest.mark.live

V1 = Path("/sys/fs/cgroup/memory")
LIMIT = 768 << 20


def _env(node: Node, tmp: Path) -> dict[str, str]:
    return {**os.environ, "BEAMALLOC_COOKIE": node.cookie, "HOME": str(tmp),
            "COLUMNS": "100"}


@pytest.fixture
def cgroup_node(tmp_path: Path) -> Iterator[tuple[Node, Path]]:
    """A node whose beam.smp runs in a v1 memory cgroup of its own, limited to LIMIT."""
    d = V1 / f"beamalloc-test-{secrets.token_hex(4)}"
    try:
        d.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a memory cgroup here ({V1}: {e.strerror})")
    node: Node | None = None
    try:
        (d / "memory.limit_in_bytes").write_text(str(LIMIT))
        name, cookie = f"t_{secrets.token_hex(4)}", f"C{secrets.token_hex(12)}"
        # the shell joins the cgroup, then becomes erl (which execs beam.smp): same pid
        proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {d}/cgroup.procs && exec erl -sname {name} '
             f"-setcookie {cookie} -noshell"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        node = Node(name, cookie, proc)
        deadline = time.monotonic() + 20
        while name not in epmd_names():
            assert proc.poll() is None and time.monotonic() < deadline, "node did not start"
            time.sleep(0.02)
        yield node, d
    finally:
        if node is not None:
            node.stop()
        for _ in range(50):  # the cgroup empties once the node's processes are gone
            with contextlib.suppress(OSError):
                d.rmdir()
                break
            time.sleep(0.1)


def test_node_in_a_limited_cgroup(cgroup_node: tuple[Node, Path], tmp_path: Path) -> None:
    node, d = cgroup_node
    cg = read_cgroup(node.pid)
    assert cg is not None and cg.version == 1 and cg.path.endswith(d.name)
    assert cg.limit == LIMIT
    charged = int((d / "memory.usage_in_bytes").read_text())
    assert cg.current is not None and 0 < cg.current <= LIMIT
    assert abs(cg.current - charged) < 64 << 20  # read moments apart
    assert cg.headroom == LIMIT - cg.working_set
    r = run_cli("analyze", node.node, "--json", "--no-processes", env=_env(node, tmp_path))
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout)
    c = a["container"]
    assert c["version"] == 1 and c["limit"] == LIMIT and c["rss"] == a["os"]["rss"]
    assert c["headroom"] == LIMIT - c["working_set"] and 0 < c["working_set"] < LIMIT
    r = run_cli("analyze", node.node, "--no-processes", "--details", env=_env(node, tmp_path))
    assert r.returncode == 0, r.stderr
    assert "cgroup (v1) allows 768.0 MiB" in " ".join(r.stdout.split())
    # the watch series keeps the container's gauges
    snap = read_file(str(_snapshot(node, tmp_path)))
    v = view(derive(snap))
    assert v["cg_limit"] == LIMIT and v["cg_headroom"] is not None
    assert v["mem_processes"] == snap.memory["processes"]


def _snapshot(node: Node, tmp: Path) -> Path:
    out = tmp / "snap.json"
    r = run_cli("snapshot", node.node, "-o", str(out), env=_env(node, tmp))
    assert r.returncode == 0, r.stderr
    return out


def test_a_large_port_limit_is_found_with_its_bytes(tmp_path: Path) -> None:
    """+Q 2^24: the port table's ll_alloc bytes, measured against a default node, are within
    a quarter of what the finding estimates, and +Q 65536 is advised."""
    big = start_node(["+Q", str(1 << 24)])
    plain = start_node([])
    try:
        r = run_cli("analyze", big.node, "--json", "--no-processes", env=_env(big, tmp_path))
        assert r.returncode == 0, r.stderr
        a = json.loads(r.stdout)
        (f,) = [x for x in a["limits"] if x["table"] == "port"]
        assert f["limit"] == 1 << 24 and f["flag"] == "+Q 65536"
        assert f["saving"] == ((1 << 24) - 65536) * BYTES_PER_ENTRY
        assert 0 < f["in_use"] < 100
        r = run_cli("analyze", plain.node, "--json", "--no-processes",
                    env=_env(plain, tmp_path))
        assert r.returncode == 0, r.stderr
        b = json.loads(r.stdout)
        assert b["limits"] == []

        def ll(x: dict) -> int:
            return next(t["allocated"] for t in x["allocator_types"]
                        if t["allocator"] == "ll_alloc")

        measured = ll(a) - ll(b)
        assert abs(measured - f["saving"]) <= 0.25 * f["saving"], (measured, f["saving"])
        r = run_cli("analyze", big.node, "--no-processes", "--details",
                    env=_env(big, tmp_path))
        assert "`+Q 65536` gives back about" in " ".join(r.stdout.split())
    finally:
        big.stop()
        plain.stop()


#: A table of 40,000 rows of 20-element lists, owned by a registered process that keeps it,
#: and a binary prim_file's NIF allocated (lists.beam read whole), which it keeps too.
ETS_EVAL = ("spawn(fun() -> register(cache_owner, self()), "
            "ets:new(picture_cache, [named_table, public, ordered_set]), "
            "[ets:insert(picture_cache, {I, lists:seq(1, 20)}) || I <- lists:seq(1, 40000)], "
            "{ok, B} = file:read_file(code:which(lists)), "
            "receive stop -> B end end).")


def test_ets_tables_of_a_live_node(tmp_path: Path) -> None:
    """Read-only: the largest table named with its owner, type, objects and bytes, as
    ets:info/1 gives them on the node itself; the verdict names it as the largest holder."""
    n = start_node([], eval_=ETS_EVAL)
    try:
        info = None
        for _ in range(100):  # the eval fills the table after the node registers
            r = run_cli("analyze", n.node, "--json", "--timeout", "30", env=_env(n, tmp_path))
            assert r.returncode == 0, r.stderr
            a = json.loads(r.stdout)
            info = next((h for c in a["categories"]["categories"] if c["name"] == "ets"
                         for h in c["holders"] if h["name"] == "picture_cache"), None)
            if info and "40000 objects" in info["detail"]:
                break
            time.sleep(0.2)
        assert info is not None and "40000 objects" in info["detail"], info
        assert "ordered_set" in info["detail"]
        owner = _eval(n, "rpc:call(T, erlang, pid_to_list, "
                      "[rpc:call(T, erlang, whereis, [cache_owner])])")
        assert f"owner {owner}" in info["detail"]
        words = int(_eval(n, "rpc:call(T, ets, info, [picture_cache, memory])"))
        assert info["bytes"] == words * 8
        assert a["categories"]["largest"]["name"] == "picture_cache"
        ets = a["categories"]["categories"]
        tables = next(c for c in ets if c["name"] == "ets")["holders"]
        assert [h["bytes"] for h in tables] == sorted((h["bytes"] for h in tables), reverse=True)
        assert len(tables) == 10  # a fresh node has more tables than the ten shown
        # binaries a NIF or driver allocated, tagged by instrument: prim_file's read of lists.beam
        binary = next(c for c in ets if c["name"] == "binary")
        size = int(_eval(n, "filelib:file_size(code:which(lists))"))
        assert any(h["kind"] == "origin" and h["name"] == "prim_file" and h["bytes"] >= size // 2
                   for h in binary["holders"]), binary["holders"]
        # read-only: the table is as it was
        assert int(_eval(n, "rpc:call(T, ets, info, [picture_cache, size])")) == 40000
    finally:
        n.stop()


def _eval(n: Node, expr: str) -> str:
    from .conftest import erl_eval

    return erl_eval(n, expr).strip().strip('"')
