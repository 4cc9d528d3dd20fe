"""Containers and boot-time limits on real nodes (issue 24 items 4 and 8, docs/containers.md).

A workload node started inside a memory cgroup this test makes on the cgroup filesystem (v1's
memory controller where the host mounts it, as this one does; else v2), with a limit: what
`snapshot`, `analyze` (JSON and terminal), `report`, `watch` and the web UI's snapshot page say
of that cgroup, against its files read here. Then nodes started with a large +Q and +P against
a node with the defaults, on OTP 25 and a chroot release.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from otp import Node, release_params, start_node, start_workload
from support import run_cli

from beamalloc.analyzer.limits import DEFAULT_PORTS, bytes_per_entry
from beamalloc.collector.cgroup import cgroup_paths
from beamalloc.collector.sources import read_file
from beamalloc.timeseries.store import Store
from beamalloc.units import human

pytestmark = pytest.mark.live

ROOT = Path("/sys/fs/cgroup")
LIMIT = 512 << 20
#: Bytes a settled node's charge may move between the test's read and beamalloc's, moments
#: apart (the workload idles; the kernel still ages and reclaims pages).
DRIFT = 24 << 20


@pytest.fixture
def cgroup() -> Iterator[tuple[Path, int]]:
    """(a new memory cgroup's directory, its version) limited to LIMIT; removed afterwards. (v2:
    under the root, the one cgroup that may hold processes and give its children memory.)"""
    if (ROOT / "memory" / "cgroup.procs").exists():
        # under the test's own memory cgroup: the node stays inside whatever limits this run
        _, own = cgroup_paths(os.getpid())
        version, parent = 1, ROOT / "memory" / (own or "/").lstrip("/")
    elif (ROOT / "cgroup.controllers").exists():
        version, parent = 2, ROOT
        with contextlib.suppress(OSError):
            (ROOT / "cgroup.subtree_control").write_text("+memory")
    else:
        pytest.skip(f"no cgroup filesystem with a memory controller under {ROOT}")
    d = parent / f"beamalloc-test-{secrets.token_hex(4)}"
    try:
        d.mkdir()
        (d / ("memory.limit_in_bytes" if version == 1 else "memory.max")).write_text(str(LIMIT))
    except OSError as e:
        with contextlib.suppress(OSError):
            d.rmdir()
        pytest.skip(f"cannot make a limited memory cgroup in {parent}: {e.strerror}")
    try:
        yield d, version
    finally:
        for _ in range(100):  # empty once the node's processes are reaped
            with contextlib.suppress(OSError):
                d.rmdir()
                break
            time.sleep(0.1)
        assert not d.exists(), f"cgroup {d} left behind"


def _files(d: Path, version: int) -> dict[str, int | None]:
    """The cgroup's charge, limit and memory.stat as the kernel writes them, read directly."""
    if version == 1:
        names, keys = ("memory.usage_in_bytes", "memory.limit_in_bytes"), (
            "total_rss", "total_cache", "total_inactive_file")
    else:
        names, keys = ("memory.current", "memory.max"), ("anon", "file", "inactive_file")
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    limit = (d / names[1]).read_text().strip()
    return {"current": int((d / names[0]).read_text()),
            "limit": None if limit == "max" else int(limit),
            **{k: int(stat[s]) for k, s in zip(("anon", "file", "inactive_file"), keys,
                                                strict=True)}}


def _near(got: dict, before: dict, after: dict, what: str) -> None:
    """`got`'s cgroup numbers between the direct reads before and after it, give or take DRIFT;
    the limit exact; working set and headroom what the charge and stat make of them."""
    assert got["limit"] == LIMIT == before["limit"], what
    for k in ("current", "anon", "file", "inactive_file"):
        lo, hi = sorted((before[k], after[k]))
        assert got[k] is not None and lo - DRIFT <= got[k] <= hi + DRIFT, (what, k, got, before)
    assert got["anon"] > 0 and got["current"] <= LIMIT, (what, got)
    assert got["working_set"] == got["current"] - got["inactive_file"], what
    assert got["headroom"] == LIMIT - got["working_set"], what


def _env(node: Node, tmp: Path) -> dict[str, str]:
    return {**os.environ, "BEAMALLOC_COOKIE": node.cookie, "HOME": str(tmp), "COLUMNS": "100"}


def _cli(*args: str, env: dict[str, str]) -> str:
    r = run_cli(*args, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("otp_release", release_params(), indirect=True)
def test_a_node_in_a_limited_cgroup(otp_release: str, cgroup: tuple[Path, int],
                                    tmp_path: Path) -> None:
    d, version = cgroup
    node = start_workload(otp_release, "healthy", env={"LIVE": "5000"}, cgroup=d)
    try:
        node.wait_ready()
        assert str(node.pid) in (d / "cgroup.procs").read_text().split()
        env = _env(node, tmp_path)
        # snapshot: the JSON keeps the cgroup's files as read
        before = _files(d, version)
        _cli("snapshot", node.node, "-o", str(tmp_path / "s.json"), env=env)
        after = _files(d, version)
        snap = read_file(str(tmp_path / "s.json"))
        cg = snap.extra["cgroup"]
        assert cg["version"] == version and cg["path"].endswith(d.name) and cg["notes"] == []
        _near(cg, before, after, "snapshot")
        # analyze: the container beside the node's RSS and carriers
        before = _files(d, version)
        a = json.loads(_cli("analyze", node.node, "--json", "--no-processes", env=env))
        after = _files(d, version)
        c = a["container"]
        _near(c, before, after, "analyze")
        # RSS may exceed the charge: shared library pages another cgroup faulted in first stay
        # charged there; the node's anonymous memory is all charged here
        assert c["rss"] == a["os"]["rss"] and 0 < c["anon"] <= c["rss"] + DRIFT
        # the terminal: the limit, the charge and its parts, the headroom
        text = " ".join(_cli("analyze", node.node, "--no-processes", "--details",
                             env=env).split())
        m = re.search(rf"cgroup \(v{version}\) allows {re.escape(human(LIMIT))} and is charged "
                      r"([0-9.]+ MiB) \(anon ([0-9.]+ MiB), file [0-9.]+ [KMG]?i?B, inactive "
                      r"file [0-9.]+ [KMG]?i?B\).*?so ([0-9.]+ MiB) is left before the OOM", text)
        assert m, text
        charged = float(m.group(1).split()[0]) * (1 << 20)
        assert abs(charged - after["current"]) <= DRIFT, (m.group(0), after)
        assert abs(float(m.group(3).split()[0]) * (1 << 20)
                   - (LIMIT - after["current"] + after["inactive_file"])) <= DRIFT
        # without --details too: the container's line is the first of the picture's
        short = " ".join(_cli("analyze", node.node, "--no-processes", env=env).split())
        assert f"cgroup (v{version}) allows {human(LIMIT)} and is charged" in short
        # the HTML report: the same sentence and the memory table's cgroup rows
        _cli("report", node.node, "-o", str(tmp_path / "r.html"), "--no-processes", env=env)
        page = (tmp_path / "r.html").read_text()
        assert f"cgroup (v{version}) allows {human(LIMIT)}" in page
        limit_row = "memory.limit_in_bytes" if version == 1 else "memory.max"
        assert re.search(rf"<th>cgroup limit \({limit_row}\)</th><td class=\"n\">"
                         rf"{re.escape(human(LIMIT))}</td>", page), "no cgroup limit row"
        assert "<th>cgroup headroom (limit − working set)</th>" in page
        # watch: every sample carries the cgroup's gauges; its stored snapshot's web page too
        db = tmp_path / "watch.db"
        before = _files(d, version)
        _cli("watch", node.node, "--store", str(db), "--interval", "1", "--duration", "3",
             "--carriers-every", "1", env=env)
        after = _files(d, version)
        with Store(db, readonly=True) as st:
            cols = st.series(node.node)["columns"]
            (stored, *_) = st.snapshots(node.node)
        assert len(cols["cg_limit"]) >= 2 and set(cols["cg_limit"]) == {LIMIT}
        for k in ("current", "anon", "file", "inactive_file"):
            lo, hi = sorted((before[k], after[k]))
            assert all(lo - DRIFT <= v <= hi + DRIFT for v in cols[f"cg_{k}"]), (k, cols)
        assert all(w == c - i for w, c, i in zip(cols["cg_working_set"], cols["cg_current"],
                                                 cols["cg_inactive_file"], strict=True))
        from beamalloc.webui.app import create_app

        web = create_app(db).test_client()
        r = web.get(f"/snapshot/s{stored['id']}")
        assert r.status_code == 200
        html = r.get_data(as_text=True)
        assert re.search(rf"<th>cgroup limit \({limit_row}\)</th><td class=\"n\">"
                         rf"{re.escape(human(LIMIT))}</td>", html)
        assert "cgroup anon · file · inactive file (memory.stat)" in html
        assert f"cgroup (v{version}) allows {human(LIMIT)}" in html
        # the node page's memory figure draws the charge against the limit, sample by sample
        r = web.get("/api/node", query_string={"n": node.node})
        assert r.status_code == 200
        fig = json.loads(r.get_data(as_text=True))["memory"]
        lines = {t["name"]: t for t in fig["data"]}
        assert [y for y in lines["cgroup limit"]["y"] if y is not None] == cols["cg_limit"]
        assert [y for y in lines["cgroup charge"]["y"] if y is not None] == cols["cg_current"]
        assert fig["layout"]["meta"]["yscale"] == 1 << 20  # drawn in MiB: 512 MiB on the axis
    finally:
        node.stop()


#: The emulator flags of the node with large tables: 2^22 ports and processes, 64 MiB each.
BIG = 1 << 22


@pytest.mark.slow
@pytest.mark.parametrize("otp_release", release_params(), indirect=True)
def test_large_port_and_process_limits(otp_release: str, tmp_path: Path) -> None:
    """+Q and +P 2^22: both tables found with their bytes and the flag that gives them back,
    which a node with the defaults does not get; the bytes measured as ll_alloc's growth."""
    big = start_node(["+Q", str(BIG), "+P", str(BIG)], release=otp_release)
    plain = start_node([], release=otp_release)
    try:
        a = json.loads(_cli("analyze", big.node, "--json", "--no-processes",
                            env=_env(big, tmp_path)))
        b = json.loads(_cli("analyze", plain.node, "--json", "--no-processes",
                            env=_env(plain, tmp_path)))
        assert b["limits"] == [], b["limits"]
        by = {f["table"]: f for f in a["limits"]}
        assert set(by) == {"port", "process"}, a["limits"]
        port, proc = by["port"], by["process"]
        per = bytes_per_entry(a["otp_release"])
        assert per == (16 if otp_release == "25" else 32) == port["bytes_per_entry"]
        assert port["limit"] == BIG and port["flag"] == f"+Q {DEFAULT_PORTS}"
        assert port["table_bytes"] == BIG * per
        assert port["saving"] == (BIG - DEFAULT_PORTS) * per
        # +P's default differs by release (docs/erts/memory-categories.md §6): never advised below
        default_p = int(plain.eval("erlang:system_info(process_limit)"))
        assert proc["limit"] == BIG and proc["flag"] == f"+P {default_p}"
        assert proc["saving"] == (BIG - default_p) * per
        assert 0 < port["in_use"] < 100 and 0 < proc["in_use"] < 1000

        def ll(x: dict) -> int:
            return next(t["allocated"] for t in x["allocator_types"]
                        if t["allocator"] == "ll_alloc")

        # what the plain node's tables take for its own defaults is in its ll_alloc too
        measured = ll(a) - ll(b)
        estimate = port["saving"] + proc["saving"]
        assert abs(measured - estimate) <= 0.25 * estimate, (measured, estimate)
        text = " ".join(_cli("analyze", big.node, "--no-processes", "--details",
                             env=_env(big, tmp_path)).split())
        assert f"`+Q {DEFAULT_PORTS}` gives back about {human(port['saving'])}" in text
        assert f"`{proc['flag']}` gives back about {human(proc['saving'])}" in text
        assert "nofile" not in port["message"] or port["nofile"] >= BIG
    finally:
        big.stop()
        plain.stop()
