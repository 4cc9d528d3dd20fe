"""`beamalloc replay` and refalloc/replay.py: a replay is a Snapshot (source "replay") that the
analyzer reads unchanged, plus a peak and a footprint series (issue 4)."""

from __future__ import annotations

import json

import pytest
from support import DATA, run_cli

from beamalloc.analyzer.analysis import analyze
from beamalloc.cli import main
from beamalloc.refalloc.replay import replay_snapshot
from beamalloc.snapshot import Snapshot
from beamalloc.trace import Event, Op, TraceHeader, TraceWriter

BIN = 10


@pytest.fixture
def trace(tmp_path):
    """Instance 1 of binary_alloc (S=2): 600 blocks of growing size, then every other freed."""
    p = tmp_path / "t.batr"
    with TraceWriter(p, TraceHeader(schedulers=2, node="a@h")) as w:
        for i in range(600):
            w.write(Event(i * 1_000_000, Op.ALLOC, BIN, 1, 214, 100 + i * 50, i + 1))
        w.write(Event(700_000_000, Op.ALLOC, BIN, 2, 214, 600_000, 10_000))  # an SBC
        for i in range(0, 600, 2):
            w.write(Event(800_000_000 + i, Op.FREE, BIN, 1, 214, 0, i + 1))
    return p


def test_snapshot_has_the_collectors_shape(trace):
    r = replay_snapshot(trace, "+MBas aobf")
    snap = r.snapshot
    assert snap.source == "replay" and snap.node == "a@h" and snap.schedulers == 2
    assert Snapshot.from_json(snap.to_json()) == snap  # lossless through the schema
    b1 = next(i for i in snap.instances("binary_alloc") if i.instance == 1)
    assert b1.options["as"] == "aobf" and b1.options["sbct"] == 512 * 1024
    assert b1.mbcs.block_count.current == 300 and b1.mbcs.block_count.max == 600
    assert b1.calls["binary_alloc"] == 600 and b1.calls["binary_free"] == 300
    b2 = next(i for i in snap.instances("binary_alloc") if i.instance == 2)
    assert b2.sbcs.carriers.current == 1 and b2.sbcs.mseg_carriers == 1
    assert len(snap.mseg) == 3  # mseg instances 0..S
    assert snap.extra["replay"]["events"] == 901
    # the series ends with the final state; the peak is its largest footprint
    total = sum(
        i.mbcs.carriers_size.current + i.sbcs.carriers_size.current for i in snap.allocators
    )
    assert r.series[-1]["carriers_size"] == total
    assert r.peak["footprint"]["carriers_size"] == max(s["carriers_size"] for s in r.series)
    assert r.peak["allocators"]["binary_alloc"]["blocks"] == 601


def test_json_runs_in_order_with_the_analyze_output(trace, tmp_path, capsys):
    flags = ["+MBas aobf +MBlmbcs 512", "+MBas bf", "+MBsbct 16"]
    assert main(["replay", str(trace), "--flags", flags[0], "--compare", *flags[1:], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["flags"] for r in doc["runs"]] == flags
    for run in doc["runs"]:
        assert set(run) == {"flags", "snapshot", "analysis", "peak", "series"}
        snap = Snapshot.from_dict(run["snapshot"])
        assert run["analysis"] == json.loads(json.dumps(analyze(snap).to_json()))
        # ... and exactly what `beamalloc analyze --json` prints for that snapshot
        f = tmp_path / "s.json"
        f.write_text(json.dumps(run["snapshot"]))
        assert main(["analyze", str(f), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == run["analysis"]
    sbcs = [r["analysis"]["allocator_types"] for r in doc["runs"]]
    by = [{t["allocator"]: t for t in x}["binary_alloc"]["sbcs_carriers_size"] for x in sbcs]
    assert by[2] > by[0] > 0  # +MBsbct 16 turns the blocks of 16 KB and more into SBCs


def test_defaults_first_when_no_flags(trace, capsys):
    assert main(["replay", str(trace), "--compare", "+MBas aobf", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["flags"] for r in runs] == ["", "+MBas aobf"]
    opts = runs[0]["snapshot"]["allocators"]
    assert {a["options"]["as"] for a in opts if a["allocator"] == "binary_alloc"} == {"aoffcbf"}


def test_table_side_by_side(trace, capsys):
    assert main(["replay", str(trace), "--flags", "+MBas aobf", "--compare", "+MBas bf"]) == 0
    out = capsys.readouterr().out
    assert "+MBas aobf" in out and "+MBas bf" in out and "binary_alloc" in out
    assert "carriers final / peak" in out and "mseg alloc" in out


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--flags", "+MBfoo 1"], "unknown parameter"),
        (["--compare", "+MBas xx"], "bad value"),
        (["--schedulers", "0"], "from 1 to 1,024"),
    ],
)
def test_bad_input_is_one_line_exit_2(trace, capsys, args, msg):
    assert main(["replay", str(trace), *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_unreadable_trace(tmp_path, capsys):
    bad = tmp_path / "x.batr"
    bad.write_bytes(b"garbage")
    assert main(["replay", str(bad)]) == 2
    assert "not a beamalloc trace" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing")]) == 2


BAD_TRACES = sorted(p for p in (DATA / "bad_traces").iterdir() if p.name != "README.md")


@pytest.mark.parametrize("path", BAD_TRACES, ids=[p.name for p in BAD_TRACES])
def test_bad_traces_are_refused_with_one_line(path):
    res = run_cli("replay", str(path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "panicked" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"beamalloc: {path}"), res.stderr


@pytest.mark.parametrize("ms", [100, 10, 2.5])
def test_sample_ms_sets_the_series_interval(trace, ms):
    """--sample-ms: a footprint sample at the first event of every MS of trace time that has
    one (nothing changes in an interval without events), then the final state at the last
    event (docs/refalloc.md, `series`)."""
    res = run_cli("replay", str(trace), "--sample-ms", str(ms), "--json")
    assert res.returncode == 0, res.stderr
    series = json.loads(res.stdout)["runs"][0]["series"]
    step = round(ms * 1_000_000)
    events = [i * 1_000_000 for i in range(600)] + [700_000_000] + [
        800_000_000 + i for i in range(0, 600, 2)]  # the fixture's event times
    firsts: dict[int, int] = {}
    for t in events:
        firsts.setdefault(t // step, t)
    assert [x["t_ns"] for x in series] == [*sorted(firsts.values()), events[-1]]
