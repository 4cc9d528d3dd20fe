"""Every input format becomes the same Snapshot (docs/erts/recon-formulas.md §0.1-§0.2, §3;
docs/erts/alloc_util.md §6)."""

from __future__ import annotations

import json

import pytest
from support import DATA, SAMPLES

from beamalloc.collector.crashdump import read_crashdump_lines, truncation_note
from beamalloc.collector.sources import read_file
from beamalloc.errors import InputError
from beamalloc.snapshot import Snapshot, Triple

UTIL = (
    "temp_alloc",
    "sl_alloc",
    "std_alloc",
    "ll_alloc",
    "eheap_alloc",
    "ets_alloc",
    "fix_alloc",
    "binary_alloc",
    "driver_alloc",
)


def _shape(snap):
    return sorted(a.key for a in snap.allocators)


@pytest.mark.parametrize("name", ["recon_snapshot.txt", "raw_allocator_dump.txt", "erl_crash.dump"])
def test_real_otp25_inputs_hold_every_instance(name):
    snap = read_file(str(SAMPLES / name))
    # 2 schedulers: instances 0..2 of each util allocator, and one literal_alloc.
    assert _shape(snap) == sorted([(a, i) for a in UTIL for i in range(3)] + [("literal_alloc", 0)])
    assert [x.instance for x in sorted(snap.mseg, key=lambda x: x.instance)] == [0, 1, 2]
    assert snap.memory["total"] > 0
    for inst in snap.allocators:
        # The pool section exists exactly where carrier migration is on (docs/erts/alloc_util.md
        # §6.1).
        assert (inst.mbcs_pool is not None) == (
            inst.instance > 0 and inst.allocator not in ("temp_alloc", "literal_alloc")
        ), inst.key
        assert inst.mbcs.carriers_size.current >= inst.mbcs.block_size.current
        assert inst.options["as"]


def test_recon_normalized_blocks_are_read_per_type():
    snap = read_file(str(SAMPLES / "recon_snapshot.txt"))
    b0 = next(a for a in snap.allocators if a.key == ("binary_alloc", 0))
    assert b0.mbcs.blocks["binary_alloc"].count == Triple(9, 9, 49)
    assert b0.mbcs.blocks["binary_alloc"].size == Triple(310672, 310672, 1726048)
    assert b0.sbcs.carriers_size == Triple(659456, 659456, 659456)
    assert b0.calls["binary_alloc"] == 196
    assert b0.options["cp"] == "undefined" and b0.options["mmmbc"] == 18446744073709551615
    assert "erts_mmap" in snap.extra and snap.extra["sys_alloc"]["0"]["m"] == "libc"


def test_crash_dump_header_and_sections():
    snap = read_file(str(SAMPLES / "erl_crash.dump"))
    assert (snap.node, snap.otp_release, snap.erts_version, snap.schedulers, snap.wordsize) == (
        "nonode@nohost",
        "25",
        "13.1.5",
        2,
        8,
    )
    assert snap.source == "crashdump" and not snap.truncated
    b1 = next(a for a in snap.allocators if a.key == ("binary_alloc", 1))
    assert b1.mbcs.blocks["binary_alloc"].size == Triple(0, 10448, 10448)
    assert b1.options["cp"] == "B" and b1.options["t"] == 3 and b1.options["atags"] is True
    # the dump lists zero lines for every type; like system_info we keep the used ones only
    assert list(b1.mbcs.blocks) == ["binary_alloc"]
    fix0 = next(a for a in snap.allocators if a.key == ("fix_alloc", 0))
    assert fix0.fix_types and fix0.fix_types[0].type == "enif_select_data_state"
    assert snap.mseg[0].cache_hits == 2 and snap.mseg[0].segments == Triple(5, 7, 7)
    assert any("test_alloc is not enabled" in n for n in snap.notes)


def _cut_inside(section: str) -> list[str]:
    lines = (SAMPLES / "erl_crash.dump").read_text(encoding="latin-1").splitlines(keepends=True)
    start = lines.index(f"={section}\n")
    return lines[: start + 30]


def test_truncated_crash_dump_keeps_every_complete_instance():
    snap = read_crashdump_lines(iter(_cut_inside("allocator:binary_alloc[1]")))
    keys = [a.key for a in snap.allocators]
    assert ("binary_alloc", 0) in keys and ("binary_alloc", 1) not in keys
    assert ("ets_alloc", 2) in keys and ("driver_alloc", 0) not in keys
    assert snap.truncated
    assert any("truncated inside =allocator:binary_alloc[1]" in n for n in snap.notes)


@pytest.mark.parametrize("cut", ["allocator:binary_alloc[1]", "proc:<0.1.0>"])
def test_truncation_note_is_made_again_from_the_data(cut: str) -> None:
    """recommend takes the note as data (truncation_note), never by its words: the same text
    as the reader's note, from the snapshot and from its JSON."""
    snap = read_crashdump_lines(iter(_cut_inside(cut)))
    note = truncation_note(snap)
    assert note is not None and note in snap.notes
    assert ("inside =allocator:binary_alloc[1]" in note) == cut.startswith("allocator")
    again = Snapshot.from_json(snap.to_json())
    again.notes = []
    assert truncation_note(again) == note
    whole = read_file(str(SAMPLES / "erl_crash.dump"))
    assert truncation_note(whole) is None


def test_truncated_crash_dump_through_the_cli(tmp_path, cli):
    f = tmp_path / "cut.dump"
    f.write_text("".join(_cut_inside("allocator:binary_alloc[1]")), encoding="latin-1")
    res = cli("analyze", str(f), "--json")
    assert res.returncode == 0, res.stderr
    a = json.loads(res.stdout)
    assert a["truncated"] is True
    assert any("truncated" in n for n in a["notes"])
    human = cli("analyze", str(f))
    assert human.returncode == 0 and "truncated inside =allocator:binary_alloc[1]" in " ".join(
        human.stdout.split()
    )


def test_crash_dump_cut_before_the_allocators_is_bad_input(tmp_path, cli):
    f = tmp_path / "early.dump"
    f.write_text("".join(_cut_inside("memory")), encoding="latin-1")
    res = cli("analyze", str(f))
    assert res.returncode == 2
    assert "no complete =allocator: section" in res.stderr and "truncated" in res.stderr


def test_single_allocator_dump():
    snap = read_file(str(SAMPLES / "system_info_binary_alloc.txt"))
    assert _shape(snap) == [("binary_alloc", 0), ("binary_alloc", 1), ("binary_alloc", 2)]
    b0 = snap.allocators[0]
    assert b0.mbcs.blocks["binary_alloc"].count == Triple(4, 53, 53)
    assert b0.mbcs.carriers_size == Triple(65536, 3735552, 3735552)


def test_otp22_totals_are_kept_under_the_instance_type():
    snap = read_file(str(DATA / "otp22_raw.txt"))
    b1 = next(a for a in snap.allocators if a.key == ("binary_alloc", 1))
    assert b1.mbcs.blocks == {"binary_alloc": b1.mbcs.blocks["binary_alloc"]}
    assert b1.mbcs.block_size == Triple(50000, 60000, 900000)
    assert b1.mbcs_pool is not None and b1.mbcs_pool.blocks == {"binary_alloc": (7, 7000)}
    assert b1.mbcs_pool.counters == {"fetch": 4, "fail": 1}


def test_unknown_crash_dump_version_is_read_with_a_note():
    lines = (DATA / "otp22_crash.dump").read_text().splitlines(keepends=True)
    lines[0] = "=erl_crash_dump:9.1\n"
    snap = read_crashdump_lines(iter(lines))
    assert any("9.1" in n for n in snap.notes) and snap.allocators


def test_a_recon_file_with_unexpected_terms_is_refused():
    with pytest.raises(InputError, match="not a recon snapshot"):
        read_file(str(DATA / "bad" / "recon_unexpected.txt"))
