"""collector/dumpscan.py: a crash dump's sections found at byte level, read in blocks. What the
block reader gives is what the line reader gives (the simple reference) wherever the blocks
cut the file, and its memory is bounded by what is kept, not by the file."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ROOT

from beamalloc.collector import dumpscan
from beamalloc.collector.crashdump import (
    CrashDumpError,
    read_crashdump_file,
    read_crashdump_lines,
)
from beamalloc.collector.procdump import WANT as PROC_WANT
from beamalloc.collector.procdump import read_proc_lines, read_proc_sections
from beamalloc.collector.sources import read_file

DUMPS = ROOT.parent / "shared" / "samples" / "real-dumps"
SAMPLE = ROOT.parent / "shared" / "samples" / "otp25" / "erl_crash.dump"
needs_dumps = pytest.mark.skipif(not DUMPS.is_dir(), reason=f"{DUMPS} is absent (../shared)")


def _by_lines(data: bytes) -> str:
    try:
        return read_crashdump_lines(data.decode("latin-1").split("\n"), "d").to_json()
    except CrashDumpError as e:
        return str(e)


def _by_blocks(data: bytes) -> str:
    try:
        return read_crashdump_file(io.BytesIO(data), "d").to_json()
    except CrashDumpError as e:
        return str(e)


def _procs(table: object) -> str:
    return json.dumps(table, default=lambda o: o.__dict__, sort_keys=True)


@needs_dumps
@pytest.mark.slow
def test_blocks_read_what_lines_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every real dump, whole and cut at random places, with blocks of 4 MiB and of 61 bytes
    (a header then straddles two blocks somewhere): the same Snapshot and the same processes,
    or the same one-line error."""
    rnd = random.Random(28)
    cases = 0
    for path in sorted(DUMPS.glob("*.dump")):
        data = path.read_bytes()
        for cut in (len(data), rnd.randrange(len(data)), rnd.randrange(len(data))):
            d = data[:cut]
            want = _by_lines(d)
            for chunk in (4 << 20, 61):
                monkeypatch.setattr(dumpscan, "CHUNK", chunk)
                assert _by_blocks(d) == want, (path.name, cut, chunk)
                err = io.StringIO()
                blocks = read_proc_sections(
                    dumpscan.scan(io.BytesIO(d), PROC_WANT, dumpscan.Stats()), err,
                    lambda at, d=d: d.count(b"\n", 0, at) + 1)
                err2 = io.StringIO()
                lines = read_proc_lines(io.StringIO(d.decode("latin-1"), newline="\n"), err2)
                assert _procs(blocks) == _procs(lines) and err.getvalue() == err2.getvalue()
                cases += 1
    assert cases >= 200


def _dump(*middle: bytes) -> bytes:
    sample = SAMPLE.read_bytes()
    end = sample.index(b"\n=end") + 1
    return sample[:end] + b"".join(middle) + sample[end:]


@pytest.mark.skipif(not SAMPLE.exists(), reason=f"{SAMPLE} is absent (../shared)")
def test_long_sections_pass_over_and_kept_ones_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 3 MiB binary section and a 3 MiB header line are passed over; a =proc section longer
    than MAX_SECTION keeps its first lines (its keys are there) and what follows is still read."""
    monkeypatch.setattr(dumpscan, "MAX_SECTION", 1 << 20)
    big = b"=binary:0x1\n" + b"A" * (3 << 20) + b"\n"
    long_header = b"=" + b"x" * (3 << 20) + b"\n"
    proc = (b"=proc:<0.999.0>\nState: Running\nSpawned as: big:one/0\nStack+heap: 100\n"
            b"OldHeap: 0\nMemory: 987654\n" + b"Link list: []\n" * 200_000)
    base = json.loads(_by_blocks(_dump()))
    snap = json.loads(_by_blocks(_dump(big, long_header, proc)))
    assert snap["allocators"] == base["allocators"]
    rows = snap["extra"]["dump_procs"]["procs"]
    assert any(r["pid"] == "<0.999.0>" and r["memory"] == 987654 for r in rows)
    assert snap["extra"]["dump_read"]["ended"] is True


@pytest.mark.skipif(not SAMPLE.exists(), reason=f"{SAMPLE} is absent (../shared)")
def test_a_header_at_every_block_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dump's first 40 KiB (its header block, =memory, allocators: cut, so the reader says
    so) in blocks of 50 to 119 bytes: every header falls across a block boundary at many
    offsets, and `$` in the pattern must not match at a block's end."""
    data = SAMPLE.read_bytes()[:40_000]
    want = _by_lines(data)
    assert "memory" in want
    for chunk in range(50, 120):
        monkeypatch.setattr(dumpscan, "CHUNK", chunk)
        assert _by_blocks(data) == want, chunk


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLE.exists(), reason=f"{SAMPLE} is absent (../shared)")
def test_memory_is_bounded_by_what_is_kept(tmp_path: Path) -> None:
    """A 160 MiB dump (binaries and heaps) read in a child: its peak RSS grows by far less than
    the file over a child that reads the bare sample (os.wait4's rusage of each child)."""
    filler = (b"=binary:0x7f\n" + b"9:" + b"AB" * 2000 + b"\n"
              + b"=proc_heap:<0.1.0>\n" + b"7F00:t2:H,I1\n" * 300) * 20_000
    big = tmp_path / "big.dump"
    big.write_bytes(_dump(filler))
    assert big.stat().st_size > 150 << 20
    code = textwrap.dedent("""
        import resource, sys  # ru_maxrss: KiB on Linux
        from beamalloc.collector.crashdump import read_crashdump
        snap = read_crashdump(sys.argv[1])
        assert snap.allocators and snap.extra["dump_read"]["ended"]
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    rss = [int(subprocess.run([sys.executable, "-c", code, str(p)], check=True,
                              capture_output=True, text=True).stdout) * 1024
           for p in (SAMPLE, big)]
    assert rss[1] - rss[0] < 40 << 20, rss


def test_a_dump_after_blank_lines_is_read() -> None:
    """A dump shorter than 64 KiB after blank lines: the blank lines read past (sources._head)
    are the whole file, and the dump in them is still read section by section (it was one line
    to the line reader, "truncated before the allocators")."""
    path = ROOT / "tests" / "corpus" / "bad" / "otp25_dump__leading_newlines.dump"
    snap = read_file(str(path))
    assert snap.allocators and not snap.truncated and snap.otp_release == "25"


def test_the_native_scan_is_the_python_one(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """collector/native/src/dumpscan.rs `Scanner` against scan_py, its reference: random bytes
    over the pieces headers are made of, under small limits (blocks of one byte up, short lines,
    capped sections, a head already read), through f.read; and a file read at its offsets from
    where its head ends. The same sections, offsets and Stats."""
    from beamalloc.collector.crashdump import WANT

    rnd = random.Random(283)
    pieces = [b"\n", b"=", b"\r", b"end", b"ets", b"proc:", b"allocator:", b"memory", b"node:",
              b"x", b"\n=", b"=fun:", b"Memory: 12", b"\r\n"]

    def both(f: io.BufferedIOBase, data: bytes, want: dumpscan.Headers, head: bytes) -> None:
        s1, s2 = dumpscan.Stats(), dumpscan.Stats()
        native = list(dumpscan.scan(f, want, s1, head))
        assert list(dumpscan.scan_py(io.BytesIO(data), want, s2, head)) == native, data
        assert s1 == s2, data

    for _ in range(4000):
        data = b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 80)))
        for k, v in [("CHUNK", (1, 2, 5, 64, 1 << 20)), ("MAX_LINE", (4, 16, 1 << 20)),
                     ("MAX_SECTION", (8, 32, 4 << 20)), ("MAX_HEADER", (3, 256))]:
            monkeypatch.setattr(dumpscan, k, rnd.choice(v))
        head = data[:rnd.randrange(0, 10)] if rnd.random() < 0.3 else b""
        want = rnd.choice([WANT, PROC_WANT])
        both(io.BytesIO(data[len(head):]), data[len(head):], want, head)
    data = SAMPLE.read_bytes() if SAMPLE.exists() else b"=erl_crash_dump:0.5\n" * 3000
    path = tmp_path / "d"
    path.write_bytes(data)
    for chunk in (61, 4093, 1 << 20):
        monkeypatch.setattr(dumpscan, "CHUNK", chunk)
        for k in (0, 64, 1000):
            with open(path, "rb") as f:  # a regular file: the native side reads it itself
                head = f.read(k)
                both(f, data[k:], WANT, head)
