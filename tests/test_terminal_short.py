"""The answer first, short by default (issue 26 items 1, 2 and 7).

`analyze`, `recommend` and `report` run as users run them, piped with COLUMNS at 80 and 100,
against the real crash dumps in ../shared/samples/real-dumps (OTP R10B to 28; skipped where
that copy is absent) and against live workload nodes. What must hold:

- the first line stands alone: it is the whole of the line the wording module builds for that
  width (a dump's cause of death, else the verdict's: state, bytes at stake, the one thing to
  do), at most 100 characters and within the width, and the verdict's line follows whole;
- by default at most DEFAULT_LINES lines at 80 columns; `--details` prints more;
- no Python repr (`True`, `None`, `{'`), no `18446744073709551615` (erts's infinite is said
  "infinity"), no rate of zero calls, no usage of zero carriers;
- under 60 columns the same content wrapped, a number never cut from its unit.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from otp import SYSTEM, Node, start_workload
from support import run_cli

from beamalloc.advice import wording
from beamalloc.analyzer.death import Death
from beamalloc.reporters.analyze import DEFAULT_LINES

ROOT = Path(__file__).resolve().parent.parent
DUMPS = ROOT.parent / "shared" / "samples" / "real-dumps"
NO_DUMPS = f"{DUMPS} is absent (the CI clone has shared/ beside the repository)"
WIDTHS = (80, 100)
#: One dump of each cause of death, and the oldest format (the whole set runs as `slow`).
KINDS = {
    "out of memory": "Vintinthethird__erlang_benchmarking__ebin_erl_crash.dump.dump",
    "died at boot (OTP 28)": "0xAdafang__HN_Smart_Hub__erl_crash.dump.dump",
    "died at boot (R10B)": "weiss__ejabberd-debian__src_erl_crash.dump.dump",
    "dump on request": "Acero-AD__elixir-tryouts__erl_crash.dump.dump",
}
#: What a Python value printed as such looks like; no output says it.
REPR = re.compile(r"\bTrue\b|\bNone\b|\{'")
UINT_MAX_TEXT = "18446744073709551615"
STATES = ("HEALTHY", "CHANGE FLAGS", "FLAGS IN FORCE", "NO FLAG HELPS", "UNDECIDED")


def _dumps() -> list[Path]:
    return sorted(DUMPS.glob("*.dump")) if DUMPS.is_dir() else []


def _dump(name: str) -> Path:
    path = DUMPS / name
    if not path.is_file():
        pytest.skip(NO_DUMPS)
    return path


def _cli(*args: str, cols: int, env: dict[str, str] | None = None) -> str:
    env = {**(env or os.environ), "COLUMNS": str(cols), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    r = run_cli(*args, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _screen(text: str) -> list[str]:
    """The lines that must fit the width: all but the paste block's (each must reach a file
    whole) and the lines that hold one link alone."""
    lines, paste = [], False
    for ln in text.splitlines():
        if ln.startswith("Paste ("):
            paste = True
        elif paste and ln.startswith("--details"):
            paste = False
        if not paste and not re.fullmatch(r"\s*<file://\S+>", ln):
            lines.append(ln)
    return lines


def _first_lines(doc: dict[str, Any], verdict: dict[str, Any], cols: int) -> list[str]:
    """The lines the output must start with (a dump's cause of death) and hold whole (the
    verdict's), as the wording module builds them for this width."""
    width = min(cols, wording.HEADLINE_MAX)
    death = [wording.death_line(Death.from_json(doc["death"]), width)] if doc.get("death") else []
    return [*death, wording.fit(verdict["headline_parts"], width)]


def _check(text: str, doc: dict[str, Any], verdict: dict[str, Any], cols: int,
           short: bool = True) -> None:
    lines = text.splitlines()
    first, head = _first_lines(doc, verdict, cols)[0], _first_lines(doc, verdict, cols)[-1]
    assert lines[0] == first, (lines[0], first)
    assert len(first) <= min(cols, 100) and first.startswith(
        (*STATES, "OUT OF MEMORY", "DIED AT BOOT", "CRASHED", "DUMP ON REQUEST",
         "CAUSE UNKNOWN")), first
    assert head in lines, f"the verdict's line is not whole on a line of its own: {head!r}"
    assert head.startswith(verdict["state"]) and len(head) <= min(cols, 100)
    # the why lines are indented under it; the first line is never continued below
    assert not lines[1][:1].isalnum() or lines[1] == head, lines[:3]
    if short and cols == 80:
        assert len(lines) <= DEFAULT_LINES, f"{len(lines)} lines by default:\n{text}"
    assert UINT_MAX_TEXT not in text
    ours = _ours(lines, doc)
    assert not REPR.search("\n".join(ours)), [ln for ln in ours if REPR.search(ln)][:3]
    too_wide = [ln for ln in _screen(text) if len(ln) > cols]
    assert not too_wide, too_wide[:3]


def _ours(lines: list[str], doc: dict[str, Any]) -> list[str]:
    """The lines we wrote: without a dump's slogan (the dying program's own text, an Erlang
    term that may well hold `{'EXIT'`), which the first line and a "Slogan:" line quote."""
    kind = (doc.get("death") or {}).get("kind")
    out, quoting = [], False
    for n, ln in enumerate(lines):
        quoting = ln.startswith("  Slogan: ") or (quoting and ln.startswith("    "))
        if not quoting and not (n == 0 and kind in ("boot_failure", "crash")):
            out.append(ln)
    return out


def _analyze_and_recommend(source: str, cols: int) -> None:
    """Both commands on `source`, short and with --details, against their own JSON."""
    a = json.loads(_cli("analyze", source, "--json", cols=cols))
    r = json.loads(_cli("recommend", source, "--json", cols=cols))
    rec = r["verdict"]
    short = _cli("recommend", source, cols=cols)
    _check(short, r, rec, cols)
    assert "Paste (vm.args):" in short  # the paste block is in the short output
    full = _cli("recommend", source, "--details", cols=cols)
    _check(full, r, rec, cols, short=False)
    assert len(full.splitlines()) > len(short.splitlines()) and "Lint (flags in force" in full
    text = _cli("analyze", source, cols=cols)
    _check(text, a, rec, cols)  # analyze says the recommender's verdict on the same file
    full = _cli("analyze", source, "--details", cols=cols)
    assert len(full.splitlines()) > len(text.splitlines())
    assert "Per instance" in full and "Per instance" not in text
    assert UINT_MAX_TEXT not in full and not REPR.search("\n".join(_ours(full.splitlines(), a)))


# ---- real crash dumps -----------------------------------------------------------------------


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_real_dump_answers_first_and_short(kind: str, cols: int) -> None:
    _analyze_and_recommend(str(_dump(KINDS[kind])), cols)


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in _dumps()] or
                         [pytest.param("none", marks=pytest.mark.skip(reason=NO_DUMPS))])
def test_every_real_dump_at_80_columns(name: str) -> None:
    _analyze_and_recommend(str(_dump(name)), 80)


def test_out_of_memory_names_the_bytes_and_the_process_first() -> None:
    """A dump dead of memory: its first line says what could not be had and how much the node
    held; the line under it names the process, in human units (no "428624688 bytes")."""
    text = _cli("recommend", str(_dump(KINDS["out of memory"])), cols=80)
    lines = text.splitlines()
    assert lines[0] == "OUT OF MEMORY: eheap_alloc could not get 408.8 MiB; the node held 8.1 GiB"
    assert lines[1].startswith("  Process <0.59.0>") and "428624688" not in text
    assert any(ln.startswith("NO FLAG HELPS: the node died of one runaway allocation") for ln in
               lines)


@pytest.mark.parametrize("cols", (40, 50, 59))
def test_narrow_terminal_wraps_and_cuts_no_number(cols: int) -> None:
    """Under 60 columns the first line is wrapped at its words, never cut: its words are all
    there in order, and no size is parted from its unit at a line's end."""
    source = str(_dump(KINDS["out of memory"]))
    text = _cli("recommend", source, cols=cols)
    doc = json.loads(_cli("recommend", source, "--json", cols=cols))
    lines = text.splitlines()
    said = " ".join(ln.strip() for ln in lines[:4])
    want = wording.death_line(Death.from_json(doc["death"]), min(cols, 100))
    assert said.startswith(want), (said, want)
    assert len(lines[0]) <= cols
    for ln, nxt in itertools.pairwise(lines):
        cut = re.search(r"\d(?:\.\d+)?$", ln.rstrip()) and re.match(r"\s*(?:B|KiB|MiB|GiB|%)",
                                                                   nxt)
        assert not cut, (ln, nxt)


# ---- the HTML report ------------------------------------------------------------------------


class _Text(HTMLParser):
    """The report's visible text, and its headline paragraphs in order."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.headlines: list[str] = []
        self._skip = 0
        self._head: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "p" and "headline" in (dict(attrs).get("class") or ""):
            self._head = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        if tag == "p" and self._head is not None:
            self.headlines.append(" ".join("".join(self._head).split()))
            self._head = None

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)
            if self._head is not None:
                self._head.append(data)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["out of memory", "died at boot (OTP 28)"])
def test_report_starts_with_the_same_lines(kind: str, tmp_path: Path) -> None:
    """The HTML report's first headline is the dump's cause of death as the terminal says it,
    its verdict the recommender's line; no repr and no 18446744073709551615 in its text."""
    source = str(_dump(KINDS[kind]))
    out = tmp_path / "r.html"
    run = run_cli("report", source, "-o", str(out), timeout=300)
    assert run.returncode == 0, run.stderr
    page = _Text()
    page.feed(out.read_text())
    r = json.loads(_cli("recommend", source, "--json", cols=100))
    assert page.headlines[0] == wording.death_line(Death.from_json(r["death"]))
    assert r["verdict"]["headline"] in page.headlines
    assert all(len(h) <= 100 for h in page.headlines[:1])
    text = " ".join(page.text)
    assert UINT_MAX_TEXT not in text
    assert not REPR.search(text), REPR.findall(text)[:3]


# ---- live workload nodes --------------------------------------------------------------------


@pytest.fixture(scope="module", params=["binspike", "holders"])
def workload(request: pytest.FixtureRequest) -> Iterator[tuple[Node, dict[str, str]]]:
    """A node left fragmented by a binary spike, and one whose processes hold binaries
    (samples/workloads), under the system's OTP; stopped however the tests end."""
    env = {"BURST": "40000"} if request.param == "binspike" else {"WORKERS": "60"}
    with start_workload(SYSTEM, request.param, env=env) as wl:
        wl.wait_ready()
        yield wl, {**os.environ, "BEAMALLOC_COOKIE": wl.cookie}


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("cols", WIDTHS)
def test_live_node_answers_first_and_short(workload: tuple[Node, dict[str, str]],
                                           cols: int) -> None:
    wl, env = workload
    node, rate = wl.node, ("--rate-seconds", "0")
    r = json.loads(_cli("recommend", node, "--json", "--timeout", "60", *rate, cols=cols,
                        env=env))
    short = _cli("recommend", node, "--timeout", "60", *rate, cols=cols, env=env)
    _check(short, r, _same_state(short, r["verdict"]), cols)
    full = _cli("recommend", node, "--details", "--timeout", "60", *rate, cols=cols, env=env)
    _check(full, r, _same_state(full, r["verdict"]), cols, short=False)
    a = json.loads(_cli("analyze", node, "--json", "--timeout", "60", cols=cols, env=env))
    text = _cli("analyze", node, "--timeout", "60", cols=cols, env=env)
    _check(text, a, _same_state(text, r["verdict"]), cols)


def _same_state(text: str, rec: dict[str, Any]) -> dict[str, Any]:
    """A live node moves between two reads, and its prediction between two replays (a state
    may flip, UNDECIDED or CHANGE FLAGS, on the same node): the verdict line the output holds
    is checked as the line it is, with its own state."""
    line = next(ln for ln in text.splitlines() if ln.startswith(STATES))
    return {**rec, "state": line.split(":")[0], "headline_parts": [line]}


# ---- the pieces, each alone -------------------------------------------------------------------


def test_fit_keeps_whole_parts_and_their_shortest_wording() -> None:
    parts: list[Any] = ["UNDECIDED: 164.9 MiB of binary_alloc unused",
                        ["flags give -88 % if stragglers, -17 % if scattered",
                         "flags give -88 % to -17 %"], "read it live"]
    assert wording.fit(parts, 110) == ("UNDECIDED: 164.9 MiB of binary_alloc unused; flags give "
                                       "-88 % if stragglers, -17 % if scattered; read it live")
    assert wording.fit(parts, 100) == ("UNDECIDED: 164.9 MiB of binary_alloc unused; flags give "
                                       "-88 % if stragglers, -17 % if scattered")
    assert wording.fit(parts, 86) == ("UNDECIDED: 164.9 MiB of binary_alloc unused; flags give "
                                      "-88 % to -17 %; read it live")
    assert wording.fit(parts, 80) == ("UNDECIDED: 164.9 MiB of binary_alloc unused; flags give "
                                      "-88 % to -17 %")
    assert wording.fit(parts, 60) == "UNDECIDED: 164.9 MiB of binary_alloc unused"
    # a first part wider than the width is never cut: the caller wraps it at its words
    assert wording.fit(parts, 20) == parts[0]


@pytest.mark.parametrize("room", range(12, 60, 7))
def test_clip_never_cuts_inside_a_number(room: int) -> None:
    slogan = "Kernel pid terminated (application_controller) ({shutdown,12345678,{port,4096}})"
    out = wording.clip(slogan, room)
    assert len(out) <= room and out.endswith("...")
    kept = out[:-3]
    assert slogan.startswith(kept)
    assert not (kept[-1:].isdigit() and slogan[len(kept)].isdigit()), out


def test_evidence_says_no_python_value() -> None:
    from beamalloc.advice.findings import Bytes
    from beamalloc.reporters.recommend import evidence_line

    line = evidence_line({"sbct": Bytes(18446744073709551615), "runaway": True, "holder": None,
                          "unused": Bytes(1 << 20)})
    assert line == "sbct infinity, runaway yes, holder -, unused 1.0 MiB"


def test_a_long_term_wraps_at_its_separators_within_the_width() -> None:
    import io

    from rich.console import Console

    from beamalloc.reporters.table import prose

    term = "{application_start_failure,kernel,{{shutdown,{failed_to_start_child,net_sup," \
           "{shutdown,{failed_to_start_child,1234567890,nouser}}}},{kernel,start,[normal,[]]}}}"
    buf = io.StringIO()
    prose(Console(file=buf, width=50, color_system=None), f"Slogan: {term}.", indent="  ",
          hang="  ")
    lines = buf.getvalue().splitlines()
    assert len(lines) > 2 and all(len(ln) <= 50 for ln in lines), lines
    assert "".join(ln.strip() for ln in lines) == f"Slogan:{term}."  # only blanks added
    assert "1234567890" in buf.getvalue()
