"""ETS tables of a live node, read through the CLI as users run it. (Containers and limits on
real nodes: tests/live/test_cgroup.py.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support import run_cli

from .conftest import Node, start_node

pytestmark = pytest.mark.live


def _env(node: Node, tmp: Path) -> dict[str, str]:
    return {**os.environ, "BEAMALLOC_COOKIE": node.cookie, "HOME": str(tmp),
            "COLUMNS": "100"}


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
