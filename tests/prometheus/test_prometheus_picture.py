"""Every byte in Prometheus (issue 24 items 2 and 4): each erlang:memory() category with the
allocator that holds it, and the node's memory cgroup whole (charge, limit, memory.stat's anon,
file and inactive_file, the working set, the headroom), from a real snapshot's sample. The
exposition is checked by the real promtool (`promtool check metrics`), and the category gauge
joined with the allocator gauges by the real promtool's PromQL engine (`promtool test rules`).
A real node in a real cgroup scraped from `watch --prometheus`: tests/live/test_cgroup.py."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import ROOT

from beamalloc.analyzer.categories import OWN
from beamalloc.collector.sources import read_file
from beamalloc.timeseries.prometheus import WatchCollector, categories
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.watch import NodeStatus

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is installed by make setup")
NODE = "app@host"
MIB = 1 << 20
#: What a v2 cgroup of 512 MiB would hold (collector/cgroup.py's record of it).
CGROUP = {"version": 2, "path": "/app", "current": 300 * MIB, "limit": 512 * MIB,
          "anon": 200 * MIB, "file": 90 * MIB, "inactive_file": 60 * MIB, "notes": [],
          "working_set": 240 * MIB, "headroom": 272 * MIB}


def _exposition(cgroup: dict | None = CGROUP) -> tuple[str, object]:
    snap = copy.deepcopy(read_file(str(ROOT / "samples" / "workloads" / "snapshots"
                                       / "etschurn.json")))
    snap.node = NODE
    if cgroup is not None:
        snap.extra["cgroup"] = cgroup
    else:
        snap.extra.pop("cgroup", None)
    point = derive(snap)
    reg = CollectorRegistry()
    reg.register(WatchCollector(lambda: {NODE: NodeStatus(NODE, up=True, last_t=1.7e9,
                                                          point=point)}))
    return generate_latest(reg).decode(), snap


def test_every_category_with_the_allocator_that_holds_it() -> None:
    text, snap = _exposition()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    got = {s.labels["category"]: (s.labels["allocator"], s.value)
           for s in fams["beamalloc_memory_category_bytes"].samples}
    mem = snap.memory
    rest = mem["system"] - sum(mem[k] for k in ("atom", "binary", "code", "ets"))
    assert rest >= 0
    want = {k: mem[k] for k in ("processes", "binary", "ets", "atom", "code")} | {
        "other_system": rest}
    assert {k: v for k, (_, v) in got.items()} == want
    assert {k: a for k, (a, _) in got.items()} == {k: OWN.get(k, "") for k in want}
    assert got["ets"][0] == "ets_alloc" and got["binary"][0] == "binary_alloc"
    # and the allocator it names is exported beside it, to join on
    allocated = {s.labels["allocator"] for s in fams["beamalloc_allocated_bytes"].samples}
    assert {a for a, _ in got.values() if a} <= allocated


def test_the_cgroup_whole_and_none_without_one() -> None:
    text, _ = _exposition()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    val = {n: fams[n].samples[0].value for n in (
        "beamalloc_cgroup_memory_bytes", "beamalloc_cgroup_limit_bytes",
        "beamalloc_cgroup_working_set_bytes", "beamalloc_cgroup_headroom_bytes",
        "beamalloc_cgroup_anon_bytes", "beamalloc_cgroup_file_bytes",
        "beamalloc_cgroup_inactive_file_bytes")}
    assert val == {"beamalloc_cgroup_memory_bytes": 300 * MIB,
                   "beamalloc_cgroup_limit_bytes": 512 * MIB,
                   "beamalloc_cgroup_working_set_bytes": 240 * MIB,
                   "beamalloc_cgroup_headroom_bytes": 272 * MIB,
                   "beamalloc_cgroup_anon_bytes": 200 * MIB,
                   "beamalloc_cgroup_file_bytes": 90 * MIB,
                   "beamalloc_cgroup_inactive_file_bytes": 60 * MIB}
    text, _ = _exposition(None)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert not any(f.samples for n, f in fams.items() if n.startswith("beamalloc_cgroup_"))


def test_a_negative_rest_of_system_is_left_out() -> None:
    point = {"mem_system": 100, "mem_atom": 50, "mem_binary": 40, "mem_code": 30, "mem_ets": 1,
             "mem_processes": 7}
    assert categories(point) == {"processes": 7, "binary": 40, "ets": 1, "atom": 50,
                                 "code": 30}
    assert categories({**point, "mem_system": 200})["other_system"] == 79


@needs_promtool
def test_promtool_checks_the_exposition(tmp_path: Path) -> None:
    text, _ = _exposition()
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promql_joins_a_category_with_its_allocator(tmp_path: Path) -> None:
    """The query docs/metrics.md gives (the share of an allocator's carriers its category
    uses), evaluated by promtool's PromQL engine over the exported values."""
    text, snap = _exposition()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    ets = next(s.value for s in fams["beamalloc_memory_category_bytes"].samples
               if s.labels["category"] == "ets")
    carriers = next(s.value for s in fams["beamalloc_allocated_bytes"].samples
                    if s.labels["allocator"] == "ets_alloc")
    series = [f"beamalloc_memory_category_bytes{{node=\"{NODE}\", category=\"ets\", "
              f"allocator=\"ets_alloc\"}}", f"beamalloc_allocated_bytes{{node=\"{NODE}\", "
              "allocator=\"ets_alloc\"}"]
    (tmp_path / "rules.yml").write_text("groups: []\n")
    (tmp_path / "t.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
        "    input_series:\n"
        f"      - series: '{series[0]}'\n        values: '{int(ets)}x2'\n"
        f"      - series: '{series[1]}'\n        values: '{int(carriers)}x2'\n"
        "    promql_expr_test:\n"
        "      - expr: beamalloc_memory_category_bytes / on(node, allocator) group_left "
        "beamalloc_allocated_bytes\n        eval_time: 1m\n        exp_samples:\n"
        f"          - labels: '{{node=\"{NODE}\", category=\"ets\", allocator=\"ets_alloc\"}}'\n"
        f"            value: {ets / carriers!r}\n")
    out = subprocess.run([PROMTOOL, "test", "rules", "t.yml"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 0 < ets / carriers <= 1.5 and snap.memory["ets"] == ets


def test_the_largest_process_groups_of_the_latest_scan() -> None:
    """Who holds the memory, per node (issue 24 item 2): the HOLDER_GROUPS largest process
    groups of the node's latest stored scan (a real scan of samples/workloads/holders.erl,
    tests/data/holders_scan.json), their memory, processes and binaries as the scan summed
    them; no holder series for a node without a scan; and promtool takes the exposition."""
    import json

    from beamalloc.timeseries import scans
    from beamalloc.timeseries.prometheus import HOLDER_GROUPS

    table = scans.table_from_doc(json.loads((ROOT / "tests" / "data" / "holders_scan.json")
                                            .read_text()))
    assert len(table.groups) > HOLDER_GROUPS
    snap = read_file(str(ROOT / "samples" / "workloads" / "snapshots" / "etschurn.json"))
    point = derive(snap)
    reg = CollectorRegistry()
    reg.register(WatchCollector(
        lambda: {n: NodeStatus(n, up=True, last_t=1.7e9, point=point) for n in (NODE, "b@h")},
        lambda: {NODE: table}))
    text = generate_latest(reg).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    mem = {s.labels["initial_call"]: s.value
           for s in fams["beamalloc_process_group_memory_bytes"].samples}
    top = sorted(table.groups, key=lambda g: -g.memory)[:HOLDER_GROUPS]
    assert mem == {g.initial_call: float(g.memory) for g in top}
    assert {s.labels["node"] for s in fams["beamalloc_process_group_processes"].samples} == {NODE}
    count = {s.labels["initial_call"]: s.value
             for s in fams["beamalloc_process_group_processes"].samples}
    assert count == {g.initial_call: float(g.count) for g in top}
    assert [s.value for s in fams["beamalloc_process_scan_timestamp_seconds"].samples] == [
        table.taken_at]
    if PROMTOOL is not None:
        out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_the_largest_ets_tables_of_the_latest_scan() -> None:
    """The ETS tables read with a node's latest scan (the shape collector/ets.py gives a live
    node and collector/dumptables.py a dump: here the repo's real OTP 25 dump's 20 tables): the
    HOLDER_GROUPS largest by their own name, id and type, and all of them summed."""
    from beamalloc.timeseries.prometheus import HOLDER_GROUPS

    ets = read_file(str(ROOT / "samples" / "otp25" / "erl_crash.dump")).extra["ets"]
    assert len(ets["tables"]) > HOLDER_GROUPS
    snap = read_file(str(ROOT / "samples" / "workloads" / "snapshots" / "etschurn.json"))
    point = derive(snap)
    reg = CollectorRegistry()
    reg.register(WatchCollector(lambda: {NODE: NodeStatus(NODE, up=True, last_t=1.7e9,
                                                           point=point)},
                                ets=lambda: {NODE: ets}))
    text = generate_latest(reg).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    got = {(s.labels["table"], s.labels["id"], s.labels["type"]): s.value
           for s in fams["beamalloc_ets_table_bytes"].samples}
    top = sorted(ets["tables"], key=lambda t: -t["bytes"])[:HOLDER_GROUPS]
    assert got == {(t["name"], t["table"], t["type"]): float(t["bytes"]) for t in top}
    assert ("code", top[0]["table"], "set") in got  # the code server's table is the largest
    (total,) = fams["beamalloc_ets_tables_bytes"].samples
    assert total.value == ets["bytes"] == sum(t["bytes"] for t in ets["tables"])
    if PROMTOOL is not None:
        out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout + out.stderr
