"""Containers, limits and known defects without a node: cgroup v2 and v1 files as the kernel
writes them (this host mounts the memory controller as v1 only, so v2 is read from a tree of
the same files), missing or unreadable files one note each; the defect table matched by erts
version and symptom on real snapshots."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from support import SAMPLES, run_cli

from beamalloc.analyzer.analysis import analyze
from beamalloc.analyzer.defects import DEFECTS, defect_findings
from beamalloc.analyzer.limits import limit_findings
from beamalloc.collector.cgroup import read_cgroup, read_nofile
from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Triple

STAT_V2 = "anon 104857600\nfile 52428800\nkernel 1048576\ninactive_file 41943040\n"
STAT_V1 = ("cache 2\nrss 1\ninactive_file 1\nhierarchical_memory_limit 9223372036854771712\n"
           "total_cache 20\ntotal_rss 10\ntotal_inactive_file 5\n")


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
    root, proc = _tree(tmp_path, 2, {"memory.current": "209715200\n", "memory.max": "max\n",
                                     "memory.stat": STAT_V2})
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.limit is None and cg.headroom is None and cg.notes == []


def test_v1_no_limit_is_none(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path, 1, {"memory.usage_in_bytes": "4096\n",
                                     "memory.limit_in_bytes": "9223372036854771712\n",
                                     "memory.stat": STAT_V1})
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.version == 1 and cg.path == "/docker/abc"
    # the total_* lines (the cgroup and its descendants, as usage_in_bytes counts), not its own
    assert (cg.current, cg.limit, cg.anon, cg.file, cg.inactive_file) == (4096, None, 10, 20, 5)
    assert cg.notes == []


@pytest.mark.parametrize("broken", ["missing", "garbage", "unreadable"])
def test_a_bad_cgroup_file_is_one_note(tmp_path: Path, broken: str) -> None:
    files = {"memory.current": "209715200\n", "memory.max": "4096\n", "memory.stat": STAT_V2}
    if broken in ("missing", "unreadable"):
        del files["memory.max"]
    elif broken == "garbage":
        files["memory.max"] = "\x1b[31m9" * 40000
    root, proc = _tree(tmp_path, 2, files)
    if broken == "unreadable":  # a directory where the file should be: EISDIR, as root too
        (Path(root) / "system.slice" / "rabbit.service" / "memory.max").mkdir()
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.limit is None and cg.current == 209715200
    assert len(cg.notes) == 1 and "memory.max" in cg.notes[0]
    assert "\x1b" not in cg.notes[0]


#: Every cgroup file broken each way: (file, fault, the field it empties, a word of its note).
ABSURD = [
    ("memory.current", "missing", "current", "not read"),
    ("memory.current", "unreadable", "current", "not read"),
    ("memory.current", "-5\n", "current", "not a byte count"),
    ("memory.current", f"{1 << 60}\n", "current", "beyond any memory"),
    ("memory.current", "9" * 30 + "\n", "current", "not a byte count"),
    ("memory.max", "0\n", "limit", "is 0"),
    ("memory.max", "1e9\n", "limit", "not a byte count"),
    ("memory.stat", "missing", "anon", "not read"),
    ("memory.stat", "unreadable", "anon", "not read"),
    ("memory.stat", "anon 1\n", "file", "lacks file, inactive_file"),
    ("memory.stat", f"anon {1 << 60}\nfile 1\ninactive_file 1\n", "anon", "absurd"),
    ("memory.stat", "anon 1\nfile 1\ninactive_file 999999999999\n", "inactive_file",
     "absurd"),
    ("memory.stat", "\x00\xff" * 50000, "anon", "lacks"),
]


@pytest.mark.parametrize(("name", "fault", "emptied", "word"), ABSURD,
                         ids=[f"{n}-{f[:12]!r}" for n, f, _, _ in ABSURD])
def test_every_cgroup_file_broken_is_one_note(tmp_path: Path, name: str, fault: str,
                                              emptied: str, word: str) -> None:
    """One note naming the file and what is wrong, the field None, the others kept; the
    container's sentence and the analysis still made, no escape byte printed."""
    files = {"memory.current": "209715200\n", "memory.max": "536870912\n",
             "memory.stat": STAT_V2}
    if fault in ("missing", "unreadable"):
        del files[name]
    else:
        files[name] = fault
    root, proc = _tree(tmp_path, 2, files)
    if fault == "unreadable":  # a directory where the file should be: EISDIR, as root too
        (Path(root) / "system.slice" / "rabbit.service" / name).mkdir()
    cg = read_cgroup(42, root, proc)
    assert cg is not None and getattr(cg, emptied) is None
    assert len(cg.notes) == 1 and name in cg.notes[0] and word in cg.notes[0], cg.notes
    assert cg.notes[0].isprintable() and len(cg.notes[0]) < 200
    kept = {"current": 209715200, "limit": 536870912}
    for k, v in kept.items():
        assert getattr(cg, k) in (v, None) and (getattr(cg, k) == v or k == emptied)
    snap = read_file(str(SAMPLES / "erl_crash.dump"))
    snap.extra["cgroup"] = cg.to_json()
    c = analyze(snap).to_json()["container"]
    assert c["notes"] == cg.notes and c["message"].startswith("The node's cgroup (v2)")
    assert "None" not in c["message"]


def test_a_cgroup_over_its_limit_says_so(tmp_path: Path) -> None:
    """A charge above the limit (a lowered memory.max before reclaim): negative headroom, in
    words that say over, not a minus sign before 'left'."""
    root, proc = _tree(tmp_path, 2, {"memory.current": "209715200\n", "memory.max": "104857600\n",
                                     "memory.stat": STAT_V2})
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.headroom == 104857600 - (209715200 - 41943040) < 0
    snap = read_file(str(SAMPLES / "erl_crash.dump"))
    snap.extra["cgroup"] = cg.to_json()
    msg = analyze(snap).to_json()["container"]["message"]
    assert "60.0 MiB over it" in msg and "charged 200.0 MiB (anon 100.0 MiB, file 50.0 MiB, " \
        "inactive file 40.0 MiB)" in msg, msg


def test_a_cgroup_outside_our_namespace_is_not_read(tmp_path: Path) -> None:
    """A node seen from another cgroup namespace: /proc/PID/cgroup says /../sibling. Joined to
    the mount it would name another cgroup's files (here a decoy one level up): not read."""
    root, proc = _tree(tmp_path, 1, {"memory.usage_in_bytes": "4096\n"})
    (Path(proc) / "42" / "cgroup").write_text("4:memory:/../decoy\n")
    (Path(root) / "decoy").mkdir()
    (Path(root) / "decoy" / "memory.usage_in_bytes").write_text("777\n")
    cg = read_cgroup(42, root, proc)
    assert cg is not None and cg.current is None and cg.limit is None and cg.headroom is None
    assert len(cg.notes) == 1 and "namespace" in cg.notes[0]
    snap = read_file(str(SAMPLES / "erl_crash.dump"))
    snap.extra["cgroup"] = cg.to_json()
    c = analyze(snap).to_json()["container"]
    assert c["message"] == "The node's cgroup (v1) has no memory limit; its charge was not read."
    assert c["notes"] == cg.notes


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
        snap.__class__(**{**snap.__dict__, "erts_version": "12.1"})).to_json()["defects"])
    snap = copy.deepcopy(base)
    snap.memory.update(binary=3 << 30, total=4 << 30)
    for erts, want in (("13.2.2.4", True), ("13.2.2.5", False), ("14.1", True),
                       ("14.2", False), ("12.3.2.15", False)):
        snap.erts_version = erts
        assert (DEFECTS[1].ticket in [d.ticket for d in defect_findings(snap)]) == want, erts


def test_process_default_by_release() -> None:
    """OTP 27 raised +P's default to 2^20 and an entry's cost to 32 bytes
    (docs/erts/memory-categories.md §6): +P is never advised below the release's default, and
    the bytes are counted at its cost."""
    snap = read_file(str(SAMPLES / "erl_crash.dump"))
    snap.extra["limits"] = {"process_limit": 1 << 22, "process_count": 80}
    for release, default, per in (("25", 1 << 18, 16), ("26", 1 << 18, 16),
                                  ("27", 1 << 20, 32), ("29", 1 << 20, 32),
                                  (None, 1 << 18, 16), ("R16B03", 1 << 18, 16)):
        snap.otp_release = release
        (f,) = limit_findings(snap)
        assert f.flag == f"+P {default}" and f.saving == ((1 << 22) - default) * per
        assert f.bytes_per_entry == per and f"{per} bytes an entry" in f.message


#: A snapshot file's extra.cgroup is outside input: (what it holds, the sentence, its notes).
FILE_CGROUPS = [
    ({"version": -3, "limit": -1, "current": -1, "anon": [], "notes": "abc"},
     "The node's cgroup has no memory limit; its charge was not read.", 3),
    ({"version": 1, "limit": 100, "current": (1 << 64) - 1, "working_set": 5, "headroom": 95},
     "The node's cgroup (v1) allows 100 B; its charge was not read.", 1),
    ({"version": 2, "limit": 1 << 30, "current": 1 << 20, "inactive_file": 1 << 29,
      "working_set": 0, "headroom": 1 << 30, "notes": [7, "kept"]},
     "The node's cgroup (v2) allows 1.0 GiB and is charged 1.0 MiB; its working set (charge "
     "minus inactive file pages) is 1.0 MiB, so 1023.0 MiB is left", 2),
]


@pytest.mark.parametrize(("cg", "sentence", "notes"), FILE_CGROUPS)
def test_a_snapshot_files_cgroup_is_checked_again(tmp_path: Path, cg: dict, sentence: str,
                                                  notes: int) -> None:
    """Numbers that are no byte counts are left out with a note each; the working set and the
    headroom are the analysis' own, never the file's; the CLI prints them, exit 0."""
    doc = json.loads(read_file(str(SAMPLES / "erl_crash.dump")).to_json())
    doc["extra"]["cgroup"] = cg
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc))
    r = run_cli("analyze", str(f), "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["container"]
    assert c["message"].startswith(sentence) and len(c["notes"]) == notes, c
    r = run_cli("analyze", str(f), "--details", env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert sentence.split(";")[0] in r.stdout
