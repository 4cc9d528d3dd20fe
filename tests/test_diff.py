"""`beamalloc diff` on the real samples (samples/workloads/snapshots, samples/otp25): the numbers
are analyze()'s, the flags read in their units, the verdict judges what stays unused."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from support import ROOT, SAMPLES

from beamalloc.advice.diff import diff
from beamalloc.analyzer.analysis import analyze
from beamalloc.analyzer.options import format_option, option_unit
from beamalloc.collector.sources import read_file
from beamalloc.flags import UINT_MAX
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.units import human

SNAPS = ROOT / "samples" / "workloads" / "snapshots"
MiB = 1 << 20


def shrunk(snap: Snapshot, allocator: str, by: int) -> Snapshot:
    """A copy of a real snapshot whose `allocator` instances hold `by` fewer carrier bytes
    (empty carriers handed back, largest instance first), everything else as collected."""
    s = Snapshot.from_json(snap.to_json())
    for inst in sorted(s.instances(allocator), key=lambda i: -i.mbcs.carriers_size.current):
        mb = inst.mbcs
        free = mb.carriers_size.current - sum(b.size.current for b in mb.blocks.values())
        take = max(0, min(by, free))
        mb.carriers_size = replace(mb.carriers_size, current=mb.carriers_size.current - take)
        by -= take
        pool = inst.mbcs_pool  # pooled carriers count as their owner's mbcs (recon)
        if pool is not None:
            take = max(0, min(by, pool.carriers_size - pool.block_size))
            pool.carriers_size -= take
            by -= take
    assert by == 0
    s.taken_at = (s.taken_at or 0) + 60
    return s


def test_numbers_are_analyzes(cli) -> None:
    a, b = SNAPS / "binspike.json", SNAPS / "healthy.json"
    r = cli("diff", str(a), str(b), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "beamalloc.diff/2"
    for side, path in (("a", a), ("b", b)):
        an = analyze(read_file(str(path))).to_json()
        t = doc["total"][side]
        assert (t["carriers_size"], t["used"], t["unused"]) == (
            an["totals_all"]["allocated"], an["totals_all"]["used"], an["totals_all"]["unused"])
        binary = next(x for x in doc["types"] if x["allocator"] == "binary_alloc")[side]
        row = next(x for x in an["allocator_types"] if x["allocator"] == "binary_alloc")
        assert binary["unused"] == row["unused"]
        assert binary["mbcs_carriers"] == sum(i["mbcs_carriers"] for i in an["allocators"]
                                              if i["allocator"] == "binary_alloc")
        assert doc[side]["rss"] == an["os"]["rss"]
    assert doc["rss"]["delta"] == doc["b"]["rss"] - doc["a"]["rss"]
    assert not doc["same_node"] and doc["notes"][0].startswith("different nodes")
    assert doc["verdict"]["outcome"] == "helped"  # 172 MiB unused down to 23 MiB


def test_flags_in_their_units(cli) -> None:
    """binspike under the defaults against binspike under `+MBas bf`: the options the VMs
    report, acul a percentage (not '60 B'), acnl a count."""
    r = cli("diff", str(SNAPS / "binspike.json"), str(SNAPS / "binspike_bf.json"), "--json")
    flags = {f["flag"]: f for f in json.loads(r.stdout)["flags"]}
    assert flags["+MBas"]["a_text"] == "aoffcbf" and flags["+MBas"]["b_text"] == "bf"
    assert (flags["+MBacul"]["a_text"], flags["+MBacul"]["b_text"]) == ("60 %", "0 %")
    assert flags["+MBacnl"]["unit"] == "count" and flags["+MBacnl"]["a_text"] == "1,000"
    text = cli("diff", str(SNAPS / "binspike.json"), str(SNAPS / "binspike_bf.json")).stdout
    assert "+MBacul  60 % → 0 %" in text and "60 B" not in text and "0 B → " not in text
    # the same memory under both: no change, and it says 172 MiB stays unused
    assert "no change: 172.3 MiB unused before and after" in text


def test_option_units() -> None:
    assert option_unit("acful") == "percent" and format_option("acful", 40) == "40 %"
    assert format_option("sbct", 524288) == "512.0 KiB"
    assert format_option("lmbcs", 5 << 20) == "5.0 MiB"
    assert format_option("mmmbc", UINT_MAX) == "infinity"
    assert format_option("ramv", False) == "false" and format_option("as", None) == "-"


def test_an_option_change_below_the_display_rounding_is_a_change() -> None:
    """mmbcs 32768 KiB -> 32800 KiB both read "32.0 MiB": still a flag change, listed, and the
    verdict does not say that no option differs (options compare by value, not by text)."""
    a = read_file(str(SNAPS / "binspike.json"))
    b = Snapshot.from_json(a.to_json())
    for inst in b.instances("binary_alloc"):
        inst.options["mmbcs"] = 32800 * 1024
    for inst in a.instances("binary_alloc"):
        inst.options["mmbcs"] = 32768 * 1024
    d = diff(a, b)
    assert [(f.option, f.a, f.b) for f in d.flags] == [("mmbcs", 32768 * 1024, 32800 * 1024)]
    assert not any("no +M option differs" in ln for ln in d.verdict.lines)


def test_three_percent_drop_is_barely_helped() -> None:
    """The issue's case: a small relative drop while most memory stays unused is never a
    success. A real fragmented node (frag) and the same with 3 % of its unused bytes gone."""
    a = read_file(str(SNAPS / "binspike.json"))
    unused = analyze(a).totals_all.unused
    b = shrunk(a, "binary_alloc", int(0.03 * unused) // 4096 * 4096)
    d = diff(a, b)
    v = d.verdict
    assert d.total.b is not None
    left = d.total.b.unused
    assert v.outcome == "barely_helped" and v.level in ("warn", "bad")
    assert v.headline.startswith(f"barely helped: {human(left)} still unused (only ")
    assert "-3.0 %" in v.headline
    assert d.total.level == "bad"  # 167 MiB unused at 7.7 % usage


def test_grew_and_helped_wording() -> None:
    a = read_file(str(SNAPS / "binspike.json"))
    worse = diff(shrunk(a, "binary_alloc", 40 * MiB), a)  # B holds 40 MiB more, all unused
    assert worse.verdict.outcome == "worse" and worse.verdict.level == "bad"
    assert worse.verdict.headline.startswith("worse: unused grew by 40.0 MiB")
    half = diff(a, shrunk(a, "binary_alloc", 60 * MiB))
    assert half.verdict.outcome == "helped_partly"
    assert "but 112.3 MiB still unused" in half.verdict.headline
    assert half.verdict.level != "ok"
    assert not any(x.startswith("but unused grew") for x in half.verdict.lines)
    # the total falls by 60 MiB while ets_alloc gains 10 MiB of empty carriers: that is said
    mixed = shrunk(a, "binary_alloc", 60 * MiB)
    ets = max(mixed.instances("ets_alloc"), key=lambda i: i.mbcs.carriers_size.current)
    ets.mbcs.carriers_size = replace(ets.mbcs.carriers_size,
                                     current=ets.mbcs.carriers_size.current + 10 * MiB)
    lines = diff(a, mixed).verdict.lines
    assert any(x.startswith("but unused grew in ets_alloc: ") for x in lines), lines
    same = diff(a, a)
    assert same.verdict.outcome == "unchanged" and not same.notes


def test_a_lighter_load_is_not_credited_to_the_flags() -> None:
    """Issue 22 item 9: a restart with new flags that also ran a lighter load. Raw unused fell
    44 % (156.5 -> 87.8 MiB), which read "helped partly"; per used byte it fell 16 %, while
    usage went 5.7 % -> 6.7 %: the load is said first, and the flags barely helped."""
    from beamalloc.advice.diff import _numbers, verdict

    a = _numbers(int(166.0 * MiB), int(9.46 * MiB), 40, 0)
    b = _numbers(int(94.1 * MiB), int(6.3 * MiB), 22, 0)
    v = verdict(a, b, True, [])
    assert v.outcome == "barely_helped" and v.load_change is not None
    assert round(v.load_change, 2) == -0.33
    assert v.headline.startswith("the load moved (used 9.5 MiB → 6.3 MiB, -33.4 %); judged "
                                 "per used byte: barely helped: 87.8 MiB still unused")
    assert "unused per used byte 16.55 → 13.94 (-15.8 %)" in v.headline
    assert any(x.startswith("raw unused 156.5 MiB → 87.8 MiB (-43.9 %)") for x in v.lines)
    # the same raw drop with the load held still is the flags' doing: helped partly
    same = verdict(a, _numbers(int(97.25 * MiB), int(9.46 * MiB), 22, 0), True, [])
    assert same.outcome == "helped_partly" and same.load_change is None
    assert same.headline.startswith("helped partly: 68.8 MiB less unused (-43.9 %)")


def test_restart_and_otp_notes() -> None:
    a = read_file(str(SNAPS / "binspike.json"))
    b = Snapshot.from_json(a.to_json())
    b.os_pid = (a.os_pid or 1) + 1
    b.otp_release, b.erts_version = "26", "14.2"
    notes = diff(a, b).notes
    assert any("restarted between A and B" in n for n in notes)
    assert any(n.startswith("different OTP versions: A runs OTP 25 (erts 13.1.5), B OTP 26")
               for n in notes)
    recon = diff(read_file(str(SAMPLES / "recon_snapshot.txt")),
                 read_file(str(SAMPLES / "erl_crash.dump")))
    assert any("OTP version of A is unknown" in n for n in recon.notes)
    assert recon.rss is None


@pytest.mark.parametrize("cols", ["80", "100"])
def test_text_fits_80_columns(cli, cols: str) -> None:
    env = {**os.environ, "COLUMNS": cols}
    for a, b in ((SNAPS / "frag.json", SNAPS / "healthy.json"),
                 (SAMPLES / "recon_snapshot.txt", SAMPLES / "erl_crash.dump")):
        r = cli("diff", str(a), str(b), env=env)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert max(len(x) for x in lines) <= 80, max(lines, key=len)
        assert "…" not in r.stdout
        doc = json.loads(cli("diff", str(a), str(b), "--json").stdout)
        named = {"all allocators": doc["total"], **{t["allocator"]: t for t in doc["types"]}}
        shown = {x.split()[0] if not x.startswith("all ") else "all allocators": x
                 for x in lines if x.split()[:1] and (x.split()[0] in named
                                                      or x.startswith("all allocators "))}
        assert "all allocators" in shown and len(shown) >= 3  # the total and the big types
        for name, x in shown.items():  # A's line: every number whole, in its column
            a_side = named[name]["a"]
            cells = [f"{a_side['mbcs_carriers']:,}", f"{a_side['sbcs_carriers']:,}",
                     human(a_side["carriers_size"]), human(a_side["used"]),
                     human(a_side["unused"])]
            assert all(c in x for c in cells), (x, cells)


def test_store_spelling(cli, tmp_path: Path) -> None:
    a = read_file(str(SNAPS / "binspike.json"))
    b = shrunk(a, "binary_alloc", 60 * MiB)
    db = tmp_path / "watch.db"
    with Store(db) as st:
        for s in (a, b):
            st.add_sample(s, derive(s), force_keep=True)
    r = cli("diff", "--node", a.node, "--store", str(db), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["total"]["delta"]["carriers_size"] == -60 * MiB
    assert doc["b"]["label"].startswith("store sample ")
    iso = cli("diff", "--node", a.node, "--store", str(db), "--from", "1970-01-01T00:00Z",
              "--to", "9999-01-01T00:00:00+00:00", "--json")
    assert json.loads(iso.stdout)["total"] == doc["total"]


@pytest.mark.parametrize("args, says", [
    (["diff", str(SNAPS / "frag.json")], "diff takes two SOURCEs"),
    (["diff", str(SNAPS / "frag.json"), str(SNAPS / "frag.json"), str(SNAPS / "frag.json")],
     "diff takes two SOURCEs"),
    (["diff", str(SNAPS / "frag.json"), "--node", "x@y"], "not both"),
    (["diff", str(SNAPS / "frag.json"), "/nonexistent.json"], "/nonexistent.json"),
    (["diff", str(SAMPLES / "README.md"), str(SNAPS / "frag.json")], "README.md"),
    (["diff", "--node", "x@y", "--store", "/nonexistent/watch.db"], "no store at"),
    (["diff", "--node", "x@y", "--from", "yesterday"], "--from: expected Unix seconds"),
    (["diff", "-", "-"], "only one of A and B"),
])
def test_bad_input_one_line(cli, args: list[str], says: str) -> None:
    r = cli(*args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("beamalloc:") == 1


def test_unknown_node_in_a_real_store(cli, tmp_path: Path) -> None:
    a = read_file(str(SNAPS / "healthy.json"))
    db = tmp_path / "watch.db"
    with Store(db) as st:
        st.add_sample(a, derive(a), force_keep=True)
    r = cli("diff", "--node", "nobody@nowhere", "--store", str(db))
    assert r.returncode == 2 and "no node 'nobody@nowhere'" in r.stderr
    r = cli("diff", "--node", a.node, "--store", str(db))
    assert r.returncode == 2 and "1 stored snapshot" in r.stderr


def test_terminal_and_compare_render_the_diff_records_not_their_json(monkeypatch) -> None:
    """Issue 27 item 1: the terminal reporter and the compare partial (page and HTML report)
    read the Diff record's attributes. With every diff record's JSON emptied they come out the
    same; a reader of the dict would fail or change them."""
    from beamalloc.advice import diff_records as dr
    from beamalloc.htmlreport.html import _env
    from beamalloc.reporters.diff import lines
    from beamalloc.webui.compare import compare_view

    a = read_file(str(SNAPS / "binspike.json"))
    pairs = [(a, shrunk(a, "binary_alloc", 60 * MiB)),  # helped partly, same node: no notes
             (read_file(str(SNAPS / "binspike_bf.json")), a),  # flags changed
             (read_file(str(SAMPLES / "recon_snapshot.txt")),
              read_file(str(SAMPLES / "erl_crash.dump")))]  # notes, no RSS
    analyses = [(analyze(x), analyze(y)) for x, y in pairs]

    def rendered() -> list[object]:
        out: list[object] = []
        for (x, y), (ax, ay) in zip(pairs, analyses, strict=True):
            out.append(lines(diff(x, y, ("A", "B"), analyses=(ax, ay))))
            c = compare_view([x, y], [ax, ay], ["ra", "rb"])
            out.append(_env().get_template("_compare.html").render(c=c, p="cmp-",
                                                                   with_links=True))
        return out

    before = rendered()
    assert any("helped partly" in str(x) for x in before)
    assert any("+MBas" in str(x) for x in before) and any("OTP version" in str(x) for x in before)
    for cls in (dr.Diff, dr.DiffVerdict, dr.Side, dr.Numbers, dr.TypeDiff, dr.OptionChange,
                dr.RssChange):
        monkeypatch.setattr(cls, "to_json", lambda self: {})
    assert diff(*pairs[0], analyses=analyses[0]).to_json() == {}  # emptied indeed
    assert rendered() == before


def test_headline_of_a_side_using_nothing_is_one_line() -> None:
    """Where the load moved to nothing used on B, the per-used-byte figure is absent (None): the
    headline says so instead of failing to format it (a traceback before)."""
    from beamalloc.advice.diff import verdict
    from beamalloc.advice.diff_records import Numbers

    a = Numbers(10, 0, 100 << 20, 60 << 20, 40 << 20, 0.6)
    b = Numbers(4, 0, 32 << 20, 0, 32 << 20, 0.0)
    v = verdict(a, b, True, [])
    assert v.headline.startswith("the load moved (used 60.0 MiB → 0 B")
    assert "nothing used" in v.headline and "\n" not in v.headline
