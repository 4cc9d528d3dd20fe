"""The run's Terminal (beamalloc/console.py): its settings are its own, not a module's, so two
Terminals in one process (two runs of main(), a test beside a run) never see each other's
--quiet, colours or progress lines."""

from __future__ import annotations

import io
from pathlib import Path

from beamalloc.cli.main import main
from beamalloc.console import Terminal


class _Tty(io.StringIO):
    """A stderr that says it is a terminal, so progress lines are drawn."""

    def isatty(self) -> bool:
        return True


def test_quiet_silences_notes_not_what_must_be_said() -> None:
    err = io.StringIO()
    t = Terminal(io.StringIO(), err, quiet=True)
    t.note("wrote x")
    t.say("beamalloc: --gc-probe 3: this changes the node")
    assert err.getvalue() == "beamalloc: --gc-probe 3: this changes the node\n"


def test_a_line_said_erases_its_own_terminals_progress_only(monkeypatch) -> None:
    monkeypatch.setenv("BEAMALLOC_PROGRESS_AFTER", "0")
    a_err, b_err = _Tty(), io.StringIO()
    a, b = Terminal(io.StringIO(), a_err), Terminal(io.StringIO(), b_err)
    with a.progress("replaying") as p:
        p.step("flag set 1 of 2")
        b.say("a note of another run")
        a.say("a note")
    assert b_err.getvalue() == "a note of another run\n"  # no erase sequence: not its progress
    assert "\r\x1b[Kbeamalloc: replaying: flag set 1 of 2" in a_err.getvalue()
    assert "\r\x1b[Ka note\n" in a_err.getvalue()
    assert a_err.getvalue().endswith("\r\x1b[K")  # erased when it ends


def test_colour_follows_its_own_setting(monkeypatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Terminal(no_color=False).color_wanted()
    assert not Terminal(no_color=True).color_wanted()
    assert Terminal(io.StringIO(), no_color=True).console().no_color


def test_one_runs_quiet_does_not_outlive_it(tmp_path, capsys) -> None:
    """Each main() builds its own Terminal from its own options (before, --quiet was a
    module global every run set again)."""
    snap = tmp_path / "s.json"
    recon = Path(__file__).resolve().parents[1] / "samples" / "otp25" / "recon_snapshot.txt"
    assert main(["snapshot", str(recon), "-o", str(snap), "-q"]) == 0
    assert capsys.readouterr().err == ""
    out = tmp_path / "t.json"
    assert main(["snapshot", str(snap), "-o", str(out)]) == 0
    assert capsys.readouterr().err.startswith(f"wrote {out}: ")
