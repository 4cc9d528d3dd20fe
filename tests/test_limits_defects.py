"""Containers, limits and known defects without a node: cgroup v2 and v1 files as the kernel
writes them (this host mounts the memory controller as v1 only, so v2 is read from a tree of
the same files), missing or unreadable files one note each; the defect table matched by erts
version and symptom on real snapshots."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from support import SAMPLES

from beamalloc.analyzer.analysis import analyze
from beamalloc.analyzer.defects import DEFECTS, defect_findings
from beamalloc.analyzer.limits import limit_findings
from beamalloc.collector.cgroup import read_cgroup, read_nofile
from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Triple

STAT_V2 = "anon 104857600\nfile 52428800\nkernel 1048576\ninactive_file 41943040\n"


def _tree(tmp: Path, version: int, files: dict[str, str]) -> tuple[str, str]:
    """A /proc/PID/cgroup and a cgroup root holding `files` for pid 42."""
    proc, root = tmp / "proc", tmp / "cg"
    (proc / "42").mkdir(parents=True)
    if version == 2:
        (proc / "42" / "cgroup").write_text("0::/system.slice/rabbit.service\n")
        d = root / "system.slice" / "rabbit.service"
        d.mkdir(parents=True)
        (root / "cgroup.controllers").write_text("cpu memory pids\n")
    else:
        (proc / "42" / "cgroup").write_text("5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n")
        d = root / "memory" / "docker" / "abc"
        d.mkdir(parents=True)
    for k, v in files.items():
        (d / k).write_text(v)
    return str(root), str(proc)


def test_v2_current_max_stat_and_headroom(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path, 2, {"memory.current": "209715200\n",
                                     "memory.max": "536870912\n", "memory.stat": STAT_V2})
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.version == 2 and cg.path == "/system.slice/rabbit.service"
    assert (cg.current, cg.limit, cg.anon, cg.file, cg.inactive_file) == (
        209715200, 536870912, 104857600, 52428800, 41943040)
    assert cg.working_set == 209715200 - 41943040
    assert cg.headroom == 536870912 - (209715200 - 41943040) and cg.notes == []


def test_v2_without_a_limit(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path, 2, {"memory.current": "1000\n", "memory.max": "max\n",
                                     "memory.stat": STAT_V2})
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.limit is None and cg.headroom is None and cg.notes == []


def test_v1_no_limit_is_none(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path, 1, {"memory.usage_in_bytes": "4096\n",
                                     "memory.limit_in_bytes": "9223372036854771712\n",
                                     "memory.stat": "rss 10\ncache 20\ntotal_inactive_file 5\n"})
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.version == 1 and cg.path == "/docker/abc"
    assert (cg.current, cg.limit, cg.anon, cg.file, cg.inactive_file) == (4096, None, 10, 20, 5)


@pytest.mark.parametrize("broken", ["missing", "garbage", "unreadable"])
def test_a_bad_cgroup_file_is_one_note(tmp_path: Path, broken: str) -> None:
    files = {"memory.current": "1000\n", "memory.max": "4096\n", "memory.stat": STAT_V2}
    if broken in ("missing", "unreadable"):
        del files["memory.max"]
    elif broken == "garbage":
        files["memory.max"] = "\x1b[31m9" * 40000
    root, proc = _tree(tmp_path, 2, files)
    if broken == "unreadable":  # a directory where the file should be: EISDIR, as root too
        (Path(root) / "system.slice" / "rabbit.service" / "memory.max").mkdir()
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.limit is None and cg.current == 1000
    assert len(cg.notes) == 1 and "memory.max" in cg.notes[0]
    assert "\x1b" not in cg.notes[0]


def test_no_cgroup_file_is_none(tmp_path: Path) -> None:
    assert read_cgroup(42, str(tmp_path), str(tmp_path)) is None


def test_nofile_of_this_process() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert read_nofile(os.getpid()) == (None if soft == resource.RLIM_INFINITY else soft)


def test_limits_from_a_snapshot() -> None:
    snap = read_file(str(SAMPLES / "erl_crash.dump"))
    # a container whose nofile is "infinity" (1073741816): erts takes its largest port table
    snap.extra["limits"] = {"port_limit": 1 << 27, "port_count": 30000, "nofile": 1073741816,
                            "process_limit": 262144, "process_count": 80}
    (f,) = limit_findings(snap)
    # 4 x 30000 in use rounds up to 2^17: that is the advice, and what it gives back
    assert f.table == "port" and f.flag == "+Q 131072" and f.saving == ((1 << 27) - (1 << 17)) * 16
    assert f.table_bytes == 2 << 30 and "nofile 1073741816" in f.message
    snap.extra["limits"]["port_limit"] = 1 << 20  # 16 MiB: under the threshold
    assert limit_findings(snap) == []
    snap.extra["limits"]["port_limit"] = 65536
    assert limit_findings(snap) == []


def test_defects_need_the_release_and_the_symptom() -> None:
    base = read_file(str(SAMPLES / "erl_crash.dump"))
    assert base.erts_version and defect_findings(base) == []  # healthy: no symptom
    snap = copy.deepcopy(base)
    fix = snap.instances("fix_alloc")[0]
    fix.mbcs.carriers_size = Triple(8 << 30, 8 << 30, 8 << 30)
    for erts, want in (("12.3.2.9", True), ("12.3.2.10", False), ("13.1.5", True),
                       ("13.2", False), ("11.2", False)):
        snap.erts_version = erts
        got = [d.ticket for d in defect_findings(snap)]
        assert (DEFECTS[0].ticket in got) == want, erts
    assert DEFECTS[0].ticket in " ".join(d["message"] for d in analyze(
        snap.__class__(**{**snap.__dict__, "erts_version": "12.1"}))["defects"])
    snap = copy.deepcopy(base)
    snap.memory.update(binary=3 << 30, total=4 << 30)
    for erts, want in (("13.2.2.4", True), ("13.2.2.5", False), ("14.1", True),
                       ("14.2", False), ("12.3.2.15", False)):
        snap.erts_version = erts
        assert (DEFECTS[1].ticket in [d.ticket for d in defect_findings(snap)]) == want, erts
