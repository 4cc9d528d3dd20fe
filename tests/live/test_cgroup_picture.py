"""A node in a limited cgroup, seen whole (issue 24 items 2 and 4), on OTP 25, 27 and 29: what
`watch --prometheus` exports of its cgroup (charge, limit, memory.stat, working set, headroom)
against the cgroup's own files, and every erlang:memory() category against the node's own
erlang:memory(), checked by the real promtool; and what the node can still take, which is the
container's (its headroom, or the host's MemAvailable where less), not the host's alone, in
`analyze --json` and on the report's memory table. The cgroup is made by the test
(tests/live/test_cgroup.py's fixture)."""

from __future__ import annotations

import html
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from otp import release_params, start_workload
from prometheus_client.parser import text_string_to_metric_families
from support import run_cli

from beamalloc.units import human

from .conftest import erl_eval
from .test_cgroup import DRIFT, LIMIT, _env, _files, cgroup  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.live, pytest.mark.slow]
PROMTOOL = shutil.which("promtool")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int, node: str, within: float = 60) -> str:
    """/metrics once it carries the node's cgroup gauges and its first scan's holders."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            if all(f'{name}{{node="{node}"}}' in text for name in (
                    "beamalloc_cgroup_working_set_bytes",
                    "beamalloc_process_scan_timestamp_seconds", "beamalloc_ets_tables_bytes")):
                return text
        except OSError:
            pass
        assert time.monotonic() < deadline, "no cgroup gauges scraped"
        time.sleep(0.5)


@pytest.mark.parametrize("otp_release", release_params(), indirect=True)
def test_prometheus_and_available_memory_of_a_node_in_a_cgroup(
        otp_release: str, cgroup: tuple[Path, int], tmp_path: Path) -> None:  # noqa: F811
    d, version = cgroup
    node = start_workload(otp_release, "healthy", env={"LIVE": "5000"}, cgroup=d)
    try:
        node.wait_ready()
        env = _env(node, tmp_path)
        port = _free_port()
        before = _files(d, version)
        watch = subprocess.Popen(
            [sys.executable, "-m", "beamalloc.cli", "watch", node.node, "--store",
             str(tmp_path / "w.db"), "--interval", "1", "--prometheus", f"127.0.0.1:{port}"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "watch.stderr").open("wb"))  # fmt: skip
        try:
            text = _scrape(port, node.node)
        finally:
            watch.terminate()
            watch.wait(timeout=20)
        after = _files(d, version)
        mem = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"\{(\w+),(\d+)\}", erl_eval(node, "rpc:call(T, erlang, memory, [])"))}
        if PROMTOOL:  # the exposition as Prometheus' own linter reads it
            out = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stdout + out.stderr
        fams = {f.name: f for f in text_string_to_metric_families(text)}

        def one(name: str) -> float:
            (s,) = [s for s in fams[name].samples if s.labels["node"] == node.node]
            return s.value

        assert one("beamalloc_cgroup_limit_bytes") == LIMIT
        for key, name in (("current", "memory"), ("anon", "anon"), ("file", "file"),
                          ("inactive_file", "inactive_file")):
            lo, hi = sorted((before[key], after[key]))
            got = one(f"beamalloc_cgroup_{name}_bytes")
            assert lo - DRIFT <= got <= hi + DRIFT, (name, got, before, after)
        ws = one("beamalloc_cgroup_working_set_bytes")
        assert ws == one("beamalloc_cgroup_memory_bytes") - one(
            "beamalloc_cgroup_inactive_file_bytes")
        assert one("beamalloc_cgroup_headroom_bytes") == LIMIT - ws
        # every category, against the node's own erlang:memory() read a moment later
        cats = {s.labels["category"]: (s.labels["allocator"], s.value)
                for s in fams["beamalloc_memory_category_bytes"].samples}
        assert set(cats) == {"processes", "binary", "ets", "atom", "code", "other_system"}
        assert cats["ets"][0] == "ets_alloc" and cats["other_system"][0] == ""
        for k in ("processes", "binary", "ets", "atom", "code"):
            assert abs(cats[k][1] - mem[k]) <= max(DRIFT // 8, mem[k] // 10), (k, cats, mem)
        rest = mem["system"] - sum(mem[k] for k in ("atom", "binary", "code", "ets"))
        assert abs(cats["other_system"][1] - rest) <= DRIFT // 8, (cats, rest)
        # who holds it: the largest process groups of the watch's first scan, within the
        # node's processes category (healthy.erl's holders, 200 per worker, are one group)
        groups = {s.labels["initial_call"]: s.value
                  for s in fams["beamalloc_process_group_memory_bytes"].samples}
        counts = {s.labels["initial_call"]: s.value
                  for s in fams["beamalloc_process_group_processes"].samples}
        assert 0 < len(groups) <= 5 and set(groups) == set(counts), groups
        assert 0 < sum(groups.values()) <= mem["processes"] + DRIFT // 8, (groups, mem)
        assert max(counts.values()) >= 200, counts
        # and its ETS tables: each worker's table `t` of LIVE rows among the largest, all of
        # them within erlang:memory(ets)
        tables = {s.labels["table"] for s in fams["beamalloc_ets_table_bytes"].samples}
        assert "t" in tables and len(tables) <= 5, tables
        assert 0 < one("beamalloc_ets_tables_bytes") <= mem["ets"] + DRIFT // 8, mem

        # what the node can still take: the container's, beside the host's
        a = json.loads(run_cli("analyze", node.node, "--json", "--no-processes", env=env,
                               timeout=120).stdout)
        c, host = a["container"], a["os"]["mem_available"]
        assert host is not None and c["mem_available_host"] == host
        assert c["available"] == max(0, min(c["headroom"], host)) <= LIMIT
        r = run_cli("report", node.node, "-o", str(tmp_path / "r.html"), "--no-processes",
                    env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        page = html.unescape((tmp_path / "r.html").read_text())
        m = re.search(r"<th>available in the container \(cgroup headroom, or the host's "
                      r"MemAvailable where less\)</th><td class=\"n\">([0-9.]+ [KMG]iB)</td>",
                      page)
        assert m, "no container row"
        assert "<th>MemAvailable (host, beyond the cgroup's limit)</th>" in page
        assert "<th>MemAvailable (host)</th>" not in page
        assert human(LIMIT) in page
    finally:
        node.stop()
