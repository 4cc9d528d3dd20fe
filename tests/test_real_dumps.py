"""The 44 real crash dumps of ../shared/samples/real-dumps (their INDEX.tsv says where each
comes from): read as they are, and the verdict on each is one an operator can act on."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from support import ROOT

from beamalloc.collector.sources import read_file

DUMPS = ROOT.parent / "shared" / "samples" / "real-dumps"
pytestmark = pytest.mark.skipif(
    not (DUMPS / "INDEX.tsv").exists(),
    reason=f"the real crash dumps are not here ({DUMPS}: ../shared is absent)",
)


def _index() -> list[dict[str, str]]:
    if not (DUMPS / "INDEX.tsv").exists():
        return []
    with open(DUMPS / "INDEX.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


INDEX = _index()


def _path(row: dict[str, str]) -> Path:
    return DUMPS / row["file"]


@pytest.mark.parametrize("row", INDEX, ids=[r["file"][:40] for r in INDEX])
def test_header_read_as_written(row: dict[str, str]) -> None:
    """Release and erts version from every header shape: `Erlang/OTP 20 [erts-9.3]` without
    `[64-bit]`, `Erlang R16B02 (erts-5.10.3)`, `emulator version 5.6.1`, and a slogan with the
    `System version:` glued onto it."""
    snap = read_file(str(_path(row)))
    assert snap.erts_version == row["erts"]
    head = _path(row).read_bytes()[:600].decode("latin-1")
    if f"OTP {row['otp']}" in head or f"Erlang {row['otp']} " in head:
        assert snap.otp_release == row["otp"]
    assert "System version" not in snap.extra.get("slogan", "")
