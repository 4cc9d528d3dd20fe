"""End-to-end: trace file -> beamalloc._refalloc.replay -> system_info-shaped statistics (the
native result that refalloc/replay.py turns into a Snapshot; ReplayResult.native keeps it)."""

from __future__ import annotations

import pytest

from beamalloc.errors import InputError
from beamalloc.refalloc.replay import replay_snapshot
from beamalloc.trace import Event, Op, TraceHeader, TraceWriter

BIN = 10  # binary_alloc


def replay(path, flags=None, *, schedulers=None):
    return replay_snapshot(path, flags, schedulers=schedulers).native


def write(path, events, schedulers=2):
    with TraceWriter(path, TraceHeader(schedulers=schedulers)) as w:
        for ev in events:
            w.write(ev)
    return path


def test_sbc_and_main_carrier_match_the_real_sample(tmp_path):
    # docs/erts/alloc_util.md §6.4: a 657 104-B binary block lives in a 659 456-B mseg SBC;
    # instance 1 keeps its 64 KB
    # sys_alloc main carrier (S=2).
    p = write(tmp_path / "t.batr", [
        Event(0, Op.ALLOC, BIN, 1, 214, 657_088, 1),
        Event(1, Op.ALLOC, BIN, 1, 214, 100, 2),
    ])  # fmt: skip
    out = replay(p)
    inst = out["allocators"]["binary_alloc"][1]
    assert inst["instance"] == 1
    sbcs = inst["sbcs"]
    assert sbcs["blocks"]["binary_alloc"]["size"] == (657_104, 657_104, 657_104)
    assert sbcs["carriers_size"] == (659_456, 659_456, 659_456)
    assert sbcs["mseg_alloc_carriers"] == 1
    mbcs = inst["mbcs"]
    assert mbcs["carriers_size"][0] == 65_536 and mbcs["sys_alloc_carriers"] == 1
    assert mbcs["blocks"]["binary_alloc"]["size"][0] == 120  # 100 + 8 header + 8 atag, 8-B units
    assert inst["calls"]["binary_alloc"] == 2
    assert "mbcs_pool" in inst
    assert "mbcs_pool" not in out["allocators"]["binary_alloc"][0]
    assert len(out["allocators"]["binary_alloc"]) == 3
    assert out["events"] == 2 and out["live_blocks"] == 2


def test_growth_stages_s2(tmp_path):
    # §3.3: S=2 -> 512K, 1M, 2M mseg MBCs (max carriers_size 64K + 512K + 1M + 2M = 3 735 552).
    events = [Event(i, Op.ALLOC, BIN, 0, 214, 400_000, i + 1) for i in range(6)]
    events += [Event(10 + i, Op.FREE, BIN, 0, 214, 0, i + 1) for i in range(6)]
    out = replay(write(tmp_path / "g.batr", events), "+MBas aoffcbf")
    mbcs = out["allocators"]["binary_alloc"][0]["mbcs"]
    assert mbcs["carriers_size"][2] == 65_536 + 524_288 + 1_048_576 + 2_097_152
    assert mbcs["carriers_size"][0] == 65_536  # freeing everything leaves the main carrier
    # footprint = carriers of every allocator (main carriers of all instances remain)
    total = sum(
        inst[sec]["carriers_size"][0]
        for insts in out["allocators"].values()
        for inst in insts
        for sec in ("mbcs", "sbcs")
    )
    assert out["footprint"][-1][1] == total
    assert out["footprint_columns"][1] == "carriers_size"
    assert out["mseg_alloc"][0]["cached_segments"] == 3


def test_flags_change_the_result(tmp_path):
    events = [Event(i, Op.ALLOC, BIN, 1, 214, 300_000, i + 1) for i in range(3)]
    p = write(tmp_path / "f.batr", events)
    default = replay(p)["allocators"]["binary_alloc"][1]
    small_sbct = replay(p, "+MBsbct 256")["allocators"]["binary_alloc"][1]
    assert default["sbcs"]["carriers"][0] == 0
    assert small_sbct["sbcs"]["carriers"][0] == 3


def test_csv_traces_and_bad_files(tmp_path):
    csv = tmp_path / "h.csv"
    csv.write_text(
        "t_ns,op,allocator,instance,type,size,id,new_id\n"
        "0,alloc,binary_alloc,1,binary,100,1,\n"
        "1,realloc,binary_alloc,1,binary,5000,1,2\n"
        "2,free,binary_alloc,1,binary,,2,\n"
        "3,free,binary_alloc,1,binary,,99,\n"
    )
    out = replay(csv, schedulers=2)
    assert out["anomalies"]["unknown_free"] == 1
    assert out["allocators"]["binary_alloc"][1]["calls"]["binary_realloc"] == 1
    bad = tmp_path / "bad.batr"
    bad.write_bytes(
        write(tmp_path / "ok.batr", [Event(0, Op.ALLOC, BIN, 0, 1, 8, 1)]).read_bytes()[:-2]
    )
    with pytest.raises(ValueError, match="no END record"):
        replay(bad)
    with pytest.raises(InputError, match=r"missing\.batr"):
        replay(tmp_path / "missing.batr")
