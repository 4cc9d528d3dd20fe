"""R10's prediction for a restart with `+Mumadtn true` (docs/erts/releases.md §4): RSS less the
LazyFree pages acful gave back with MADV_FREE, no LazyFree, the same carrier bytes. Measured
against a real restart in tests/test_otp_runtimes.py (test_madtn_gives_acful_pages_back_at_once)."""

from __future__ import annotations

from recommend_fixtures import load

from beamalloc.advice.findings import Finding, facts
from beamalloc.advice.rules import evaluate

MIB = 1 << 20


def _lazy(erts: str, rss: int, lazyfree: int) -> list[Finding]:
    """binspike's snapshot with acful 40 in force on binary_alloc."""
    s = load("binspike")
    s.erts_version, s.rss, s.rss_lazyfree = erts, rss, lazyfree
    for inst in s.instances("binary_alloc"):
        inst.options["acful"] = 40
    return [f for f in evaluate(facts(s)) if "rss_with_madtn" in f.evidence]


def test_the_restart_is_predicted_from_rss_and_lazyfree() -> None:
    (f,) = _lazy("17.1", 144 * MIB, 53 * MIB)
    assert f.evidence["rss_with_madtn"] == 91 * MIB and f.evidence["rss_lazyfree_with_madtn"] == 0
    assert "predicted, RSS about 91.0 MiB instead of 144.0 MiB (LazyFree none)" in f.message
    assert "the same carrier bytes" in f.message and f.advice == []


def test_before_otp_28_1_the_prediction_says_from_when() -> None:
    (f,) = _lazy("15.2.7", 400 * MIB, 100 * MIB)
    assert f.evidence["rss_with_madtn"] == 300 * MIB
    assert "From OTP 28.1, +Mumadtn true" in f.message and "about 300.0 MiB" in f.message


def test_no_prediction_where_lazyfree_is_small_or_unread() -> None:
    assert _lazy("17.1", 400 * MIB, 8 * MIB) == []
    assert _lazy("17.1", 400 * MIB, 0) == []
