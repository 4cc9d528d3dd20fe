"""A crash dump read once (issue 28 item 1): the =proc sections the holders need are fed to
procdump.ProcSections in the pass that reads the allocators, and give what procdump's own read
gives; the native header search (collector/native/src/dumpscan.rs) finds what its pattern finds."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
from support import ROOT, run_cli

from beamalloc.collector.crashdump import WANT
from beamalloc.collector.dumpscan import Headers
from beamalloc.collector.procdump import WANT as PROC_WANT
from beamalloc.collector.procdump import ProcSections, read_procdump
from beamalloc.collector.sources import read_file

DUMPS = ROOT.parent / "shared" / "samples" / "real-dumps"
SAMPLE = ROOT.parent / "shared" / "samples" / "otp25" / "erl_crash.dump"
needs_sample = pytest.mark.skipif(not SAMPLE.exists(), reason=f"{SAMPLE} is absent (../shared)")


def _json(table: object) -> str:
    return json.dumps(table, default=vars, sort_keys=True)


def _one_pass(path: Path) -> tuple[str, str]:
    procs, said = ProcSections(), io.StringIO()
    read_file(str(path), procs=procs)
    return _json(procs.table(said, lambda at: path.read_bytes().count(b"\n", 0, at) + 1)), \
        said.getvalue()


def _alone(path: Path) -> tuple[str, str]:
    said = io.StringIO()
    return _json(read_procdump(path, said)), said.getvalue()


@pytest.mark.slow
@pytest.mark.skipif(not DUMPS.is_dir(), reason=f"{DUMPS} is absent (../shared)")
def test_every_real_dump_gives_procdumps_table_in_one_pass() -> None:
    paths = sorted(DUMPS.glob("*.dump"))
    assert len(paths) >= 40
    for path in paths:
        one, alone = _one_pass(path), _alone(path)
        assert one == alone, path.name
        assert json.loads(one[0])["count"] == path.read_bytes().count(b"\n=proc:")


def _bad_procs_dump(tmp_path: Path) -> Path:
    """The OTP 25 sample with two process sections procdump skips, one after =end."""
    data = SAMPLE.read_bytes()
    end = data.index(b"\n=end") + 1
    bad = (b"=proc:<0.9999.0>\nState: Waiting\nOldHeap: 1\n"  # no Stack+heap
           b"=proc:nopid\nStack+heap: 1\nOldHeap: 1\n")
    late = b"=proc:<0.9998.0>\nState: Waiting\nStack+heap: 233\nOldHeap: 0\nMemory: 4242\n"
    path = tmp_path / "erl_crash.dump"
    path.write_bytes(data[:end] + bad + data[end:] + late)
    return path


@needs_sample
def test_skipped_sections_are_said_as_procdump_says_them(tmp_path: Path) -> None:
    path = _bad_procs_dump(tmp_path)
    one, alone = _one_pass(path), _alone(path)
    assert one == alone
    assert one[1].count("beamalloc: skipped the process section at line ") == 2
    assert "(<0.9999.0>): no 'Stack+heap' line" in one[1]
    assert '"<0.9998.0>"' in one[0]  # read after =end, as procdump reads it


@needs_sample
def test_analyze_says_a_skipped_section_once_and_not_without_processes(tmp_path: Path) -> None:
    path = _bad_procs_dump(tmp_path)
    r = run_cli("analyze", "--json", str(path))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("skipped the process section") == 2, r.stderr
    procs = json.loads(r.stdout)["processes"]
    assert procs["count"] == _alone(path)[0].count('"pid"') + 2 == procs["scanned"] + 2
    r = run_cli("analyze", "--json", "--no-processes", str(path))
    assert r.returncode == 0 and "skipped the process section" not in r.stderr


def test_the_native_search_finds_what_the_pattern_finds() -> None:
    """Random bytes over the letters headers are made of, at random starts: the native search
    (boxed for its SIMD's alignment: long data once faulted) and the regex agree."""
    rnd = random.Random(281)
    pieces = [b"\n", b"=", b"\r", b"end", b"ets", b"proc", b"proc:", b"allocator:", b"memory",
              b"node:", b"x", b"e", b":", b"\n=", b"=fun:"]
    for want in (WANT, PROC_WANT, Headers(("a",), ("b", ""))):
        assert want._native is not None, "the extension is built by `make setup`"
        for _ in range(3000):
            data = b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 200)))
            start = rnd.randrange(0, len(data) + 2)
            m = want.pattern.search(data, start)
            assert want.search(data, start) == (m.start() if m else -1), (data, start)
    long = b"abc\n=fun:1\n" * 100_000 + b"\n=end\r\r"
    assert WANT.search(long, 0) == len(long) - 7


def test_the_native_values_are_what_the_pattern_finds() -> None:
    """A section's `Key: value` lines (dumpscan.Keys): the native reader and the regex agree on
    random text over the keys' pieces, stripped and read as counts as the Python reference
    reads them (Python's whitespace, other scripts' digits, 20 digits, the bound)."""
    from beamalloc.collector.dumpscan import parse
    from beamalloc.collector.procdump import MAX_WORDS, PROC_INTS, VALUES

    assert VALUES._native is not None, "the extension is built by `make setup`"
    rnd = random.Random(282)
    pieces = ["\n", ": ", "Memory", "OldHeap", "OldHeap unused", "State", "Name", " ", "\t",
              "\x1c", "\xa0", "\u2003", "\u0663", "7", "0", "18446744073709551616", "x", "\r",
              "Stack+heap", "Spawned as", "é", ":"]
    for _ in range(5000):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 60)))
        assert VALUES.values(text) == VALUES.reference(text), repr(text)
        got = VALUES.parsed(text, len(PROC_INTS), MAX_WORDS)
        assert got == parse(VALUES.reference(text), len(PROC_INTS), MAX_WORDS), repr(text)
    vals, bad = VALUES.parsed("Memory: 12 \nOldHeap: x\nMemory: 3\nName:  a\xa0", 10, 99)
    assert (vals[7], vals[1], vals[VALUES.keys.index("Name")], bad) == (12, "x", "a", 1)


@pytest.mark.slow
@pytest.mark.skipif(not DUMPS.is_dir(), reason=f"{DUMPS} is absent (../shared)")
def test_holders_of_the_processes_kept_are_those_of_them_all() -> None:
    """A dump's processes kept by holders.DumpMembers (the ones the section can name, the
    groups' members summed) give the `processes` section every process gives, on every real
    dump and on one whose processes repeat (ties, groups of thousands)."""
    from beamalloc.advice.holders import DumpMembers, processes_json

    sample = max(DUMPS.glob("*.dump"), key=lambda p: p.stat().st_size).read_bytes()
    procs = sample[sample.index(b"\n=proc:") + 1:sample.rindex(b"\n=proc_") + 1]
    many = sample.replace(procs, procs * 40)
    for name, data in [(p.name, p.read_bytes()) for p in sorted(DUMPS.glob("*.dump"))] + [
            ("repeated", many)]:
        sums = DumpMembers()
        kept, every = ProcSections(keep=sums), ProcSections()
        read_file_bytes(data, kept)
        read_file_bytes(data, every)
        small = kept.table(io.StringIO())
        assert len(small.procs) <= len(every.procs)
        assert _json(processes_json(small, sums=sums)) == _json(
            processes_json(every.table(io.StringIO()))), name
    assert len(small.procs) < len(every.procs) // 10  # the repeated dump keeps few


def read_file_bytes(data: bytes, procs: ProcSections) -> None:
    from beamalloc.collector.crashdump import read_crashdump_file

    read_crashdump_file(io.BytesIO(data), "t", procs=procs)


@needs_sample
def test_a_dump_of_many_processes_keeps_few() -> None:
    """The OTP 25 sample's processes twenty times over: the holders keep the few the section
    names and give what all of them give."""
    from beamalloc.advice.holders import DumpMembers, processes_json

    data = SAMPLE.read_bytes()
    procs = data[data.index(b"\n=proc:") + 1:data.rindex(b"\n=proc_") + 1]
    data = data.replace(procs, procs * 20)
    sums = DumpMembers()
    kept, every = ProcSections(keep=sums), ProcSections()
    read_file_bytes(data, kept)
    read_file_bytes(data, every)
    small, big = kept.table(io.StringIO()), every.table(io.StringIO())
    assert small.scanned == big.scanned == len(big.procs) > 400
    assert len(small.procs) <= 60
    assert _json(processes_json(small, sums=sums)) == _json(processes_json(big))
