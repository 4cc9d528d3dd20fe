"""A crash dump's =proc and =ets sections read natively (collector/native/src/procrecs.rs,
issue 28 item 1) give what the Python readers give: the Snapshot's ETS tables and dump
processes (dumptables.DumpTables), the process table and the `processes` section the holders
keep (procdump.ProcSections with holders.DumpMembers), on dumps made to tie, rank, skip and cut."""

from __future__ import annotations

import io
import json
import random

import pytest
from support import ROOT

from beamalloc.advice.holders import DumpMembers, processes_json
from beamalloc.collector import dumpscan
from beamalloc.collector.crashdump import read_crashdump_file, read_crashdump_lines
from beamalloc.collector.procdump import ProcSections
from beamalloc.errors import InputError

HEAD = (b"=erl_crash_dump:0.5\nThu Nov 26 10:00:00 2026\nSlogan: eheap_alloc: Cannot allocate "
        b"10 bytes of memory (of type \"heap\").\nSystem version: Erlang/OTP 25 [erts-13.0] "
        b"[64-bit] [smp:2:2]\n=memory\ntotal: 1000\nprocesses: 600\n")
#: a dump's allocator sections (tests/data/otp22_crash.dump's), that it reads as a snapshot
_OTP22 = (ROOT / "tests" / "data" / "otp22_crash.dump").read_bytes()
ALLOC = _OTP22[_OTP22.index(b"=allocator:"):_OTP22.index(b"=end")]
STATES = [b"Waiting", b"Running", b"Garbing", b"waiting ", b"RUNNING", b"Exiting", b"\xe9tat", b""]
SPAWNS = [b"gen_server:init_it/6", b"proc_lib:init_p/5", b"erts_code_purger:start/0",
          b"application_master:init/4", b"bad spawn", b"", b"m:f/x", b"my_app:worker/1"]
NAMES = [None, None, None, b"my_proc", b"code_server", b"bad name!", b"caf\xe9", b"_", b"a_b"]
PCS = [b"0x00007f00 (gen_server:loop/7 + 256)", b"0x00007f01 (my_app:wait/2 + 8)", b"0x0 (x)",
       b"0x00007f02 (prim_inet:recv0/3 + 40)"]


def _num(rng: random.Random) -> bytes:
    return rng.choice([b"0", b"1", b"233", b"376", b"233", b"6772", b"10958", b"987",
                       b" 42 ", b"x", b"-1", b"9" * 21, str(1 << 61).encode(),
                       b" " * 198 + b"12345", b"4096"])


def _proc(rng: random.Random, i: int) -> bytes:
    pid = b"<0.%d.0>" % i if rng.random() > 0.03 else rng.choice([b"notapid", b"<0.1>",
                                                                   b"<0.12345678901.0>"])
    keys = [(b"State", rng.choice(STATES)), (b"Name", rng.choice(NAMES)),
            (b"Spawned as", rng.choice(SPAWNS)), (b"Program counter", rng.choice(PCS))]
    ints = [b"Stack+heap", b"OldHeap", b"Heap unused", b"OldHeap unused", b"Heap fragment data",
            b"BinVHeap", b"OldBinVHeap", b"Memory", b"Message queue length", b"Reductions"]
    sure = rng.random() > 0.1  # most sections are a node's: counts only
    keys += [(k, rng.choice([b"0", b"1", b"233", b"376", b"6772", b"10958"]) if sure
              else _num(rng)) for k in ints if rng.random() > 0.05]
    rng.shuffle(keys)
    lines = [b"=proc:" + pid]
    if rng.random() < 0.05:
        lines.append(b"Internal State: State: running")
    lines += [k + b": " + v for k, v in keys if v is not None]
    if rng.random() < 0.05:
        lines.append(b"Memory: 1")  # a second line of a key: the first counts
    return b"\n".join(lines) + b"\n"


def _ets(rng: random.Random, i: int) -> bytes:
    words = rng.choice([b"10", b"500", b"500", b"70000", b"x", b"", str(1 << 62).encode(),
                        b" 99 "])
    return (b"=ets:<0.%d.0>\nSlot: 1\nTable: t%d\nName: tab%d\nWords: %s\nObjects: %d\n"
            b"Type: set\nProtection: public\n" % (rng.randrange(50), i, i % 7, words, i))


def dump(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    parts = [HEAD, ALLOC]
    for i in range(n):
        parts.append(_proc(rng, i) if rng.random() < 0.8 else _ets(rng, i))
        if rng.random() < 0.02:
            parts.append(b"=proc_heap:<0.%d.0>\nabc\n" % i)
    if seed % 3 == 0:  # sections after =end: the holders read them, the tables do not
        parts.insert(len(parts) - 5, b"=end\n")
    elif seed % 3 == 1:
        parts.append(b"=end\n")
    # else: cut inside its last section
    return b"".join(parts).rstrip(b"\n") if seed % 3 == 2 else b"".join(parts)


def _snap(how) -> str:  # type: ignore[no-untyped-def]
    try:
        return str(how().to_json())
    except InputError as e:
        return str(e)


@pytest.mark.parametrize("seed", range(12))
def test_the_native_tables_are_the_python_ones(seed: int) -> None:
    data = dump(seed, 400 + 40 * seed)
    lines = _snap(lambda: read_crashdump_lines(data.decode("latin-1").split("\n")))
    alone = _snap(lambda: read_crashdump_file(io.BytesIO(data), "crash dump"))
    kept = _snap(lambda: read_crashdump_file(io.BytesIO(data), "crash dump",
                                             procs=ProcSections(keep=DumpMembers())))
    assert alone == lines
    assert kept == lines
    snap = json.loads(lines)
    assert snap["extra"]["ets"]["count"] > 50 and len(snap["extra"]["dump_procs"]["procs"]) > 8


@pytest.mark.parametrize("seed", range(12))
def test_the_native_holders_are_the_python_ones(seed: int) -> None:
    data = dump(seed, 400 + 40 * seed)
    out = []
    for native in (True, False):
        sums = DumpMembers()
        procs = ProcSections(keep=sums, native=native)
        read_crashdump_file(io.BytesIO(data), "crash dump", procs=procs)
        assert (procs.native is not None) == native
        said = io.StringIO()
        table = procs.table(said, int)
        out.append((json.dumps(table, default=vars), said.getvalue(),
                    json.dumps(processes_json(table, sums=sums), default=str)))
    assert out[0] == out[1]
    table = json.loads(out[0][0])
    assert table["scanned"] > 100 and out[0][1].count("\n") > 3  # some skipped, said
    assert any(g["names"] for g in table["groups"])


def test_blocks_straddling_sections_are_read_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """61-byte blocks: every section the native reader takes straddles two of them."""
    data = dump(5, 300)
    want = _snap(lambda: read_crashdump_lines(data.decode("latin-1").split("\n")))
    monkeypatch.setattr(dumpscan, "CHUNK", 61)
    sums = DumpMembers()
    got = _snap(lambda: read_crashdump_file(io.BytesIO(data), "crash dump",
                                            procs=ProcSections(keep=sums)))
    assert got == want
