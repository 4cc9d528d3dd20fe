"""`beamalloc replay`'s table heads: a flag per line, laid out from the typed flags the replay
carries (ReplayResult.flag_list), never by splitting the flag text (issue 27 item 1)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from beamalloc.flags import Flag, FlagSet
from beamalloc.refalloc import tracegen
from beamalloc.refalloc.replay import replay_snapshot
from beamalloc.reporters.replay import render


def _table(results: list) -> str:
    out = io.StringIO()
    render(results, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_heads_are_the_typed_flags(tmp_path: Path) -> None:
    trace = tmp_path / "t.batr"
    tracegen.spike_and_drop(trace, base_live=50, churn=200)
    glued = replay_snapshot(trace, "+MBasaobf +MBlmbcs 1024")  # erts takes a glued value too
    assert glued.flag_list == (Flag("B", "as", "aobf"), Flag("B", "lmbcs", 1024 << 10))
    typed = replay_snapshot(trace, FlagSet((Flag("B", "lmbcs", 512 << 10), Flag("B", "as", "bf"))))
    assert typed.flags == "+MBas bf +MBlmbcs 512"  # a FlagSet is named canonically
    assert [f.render() for f in typed.flag_list] == ["+MBas bf", "+MBlmbcs 512"]
    default = replay_snapshot(trace, None)
    text = _table([glued, typed, default])
    lines = text.splitlines()
    # each flag heads its column on a line of its own, its value spelt as erts takes it
    first = next(i for i, x in enumerate(lines) if "+MBas aobf" in x)
    assert "+MBas bf" in lines[first]
    assert all(x in lines[first + 1] for x in ("+MBlmbcs 1024", "+MBlmbcs 512", "(defaults)"))
    assert "+MBasaobf" not in text
