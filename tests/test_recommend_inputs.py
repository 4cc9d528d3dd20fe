"""What `recommend` says about inputs that cannot carry the whole story (issue 16 item 7): a
truncated crash dump says so in its verdict and in the JSON notes, and a release older than OTP
20, whose allocators the replay does not model, gets no flag and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import DATA, SAMPLES, run_cli

from beamalloc.collector.sources import read_file


def _recommend(path: Path, *args: str) -> dict:
    r = run_cli("recommend", str(path), "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("frac", [0.4, 0.7])
def test_truncated_dump_says_so(tmp_path: Path, frac: float) -> None:
    """Issue 16: on a dump cut short, recommend said HEALTHY from the instances before the cut
    and never mentioned the rest (analyze did)."""
    data = (SAMPLES / "erl_crash.dump").read_bytes()
    cut = tmp_path / "erl_crash.dump"
    cut.write_bytes(data[: int(len(data) * frac)])
    snap = read_file(str(cut))
    assert snap.truncated
    doc = _recommend(cut, "--no-predict")
    v = doc["verdict"]
    assert v["why"][0].startswith("The input is truncated")  # said first under the headline
    assert f"{len(snap.allocators)} " in v["why"][0]  # how much of it was judged
    assert any("truncated" in n for n in doc["notes"])
    text = run_cli("recommend", str(cut), "--no-predict")
    assert text.returncode == 0 and "truncated" in text.stdout


def test_whole_dump_says_nothing_of_truncation() -> None:
    doc = _recommend(SAMPLES / "erl_crash.dump", "--no-predict")
    assert "truncated" not in " ".join([doc["verdict"]["headline"], *doc["verdict"]["why"]])
    assert not any("truncated" in n for n in doc["notes"])


@pytest.mark.parametrize("release, erts", [("R16B02", "5.10.3"), ("19", "8.3"),
                                           ("R12B", "5.6.1")])
def test_pre_otp20_gets_no_flag_and_the_reason(tmp_path: Path, release: str, erts: str) -> None:
    """The same allocator state that gets flags on OTP 25 (tests/data/pooltest_raw.txt), labelled
    as an older release: the replay models OTP 25-27's allocators, whose strategies and
    defaults did not exist before OTP 20 (docs/erts/alloc_util.md §2.5), so no flag is advised,
    each is held back with that reason, and the verdict says why."""
    modern = _recommend(DATA / "pooltest_raw.txt")
    assert modern["emulator_flags"]  # the rules do fire on this state
    snap = read_file(str(DATA / "pooltest_raw.txt"))
    snap.otp_release, snap.erts_version = release, erts
    old = tmp_path / "old.json"
    old.write_text(snap.to_json())
    doc = _recommend(old)
    assert doc["emulator_flags"] == "" and doc["recommendations"] == []
    assert doc["held_back"] and all(release in h["why"] for h in doc["held_back"])
    assert "OTP 20" in doc["verdict"]["headline"] or any("OTP 20" in h["why"]
                                                         for h in doc["held_back"])
