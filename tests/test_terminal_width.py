"""Every screen fits 80 and 100 columns and never cuts a number (issue 15 item 3).

Each command of COMMANDS runs twice as users run it, piped with COLUMNS set: once with --json
(the numbers) and once as text. The text must keep every line within COLUMNS (bar the paste
block, which must reach a file whole), hold no "…" (rich's mark of a cut cell), and show each
number of the JSON that the screen is about intact, as one token ("171.4 MiB", never "171…" nor
"171.4" at the end of one line and "MiB" in a cell below).

COMMANDS is the list to extend: a new command's screen is one more entry, with the function
that lists the numbers its JSON says the text must show.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import SAMPLES, run_cli

from beamalloc.units import human, pct

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (80, 100)
SNAPSHOTS = ROOT / "samples" / "workloads" / "snapshots"


def _analyze_numbers(a: dict[str, Any]) -> list[str]:
    """What analyze's tables show: per allocator type and per listed instance."""
    out = [human(a["totals"]["allocated"]), human(a["totals"]["unused"]), pct(a["totals"]["usage"])]
    for r in a["allocator_types"]:
        out += [human(r["allocated"]), human(r["used"]), human(r["unused"]), pct(r["usage"]),
                human(r["max_allocated"]), human(r["mbcs_average_block_size"])]
    for r in a["allocators"][:20]:
        out += [human(r["unused"]), pct(r["mbcs_usage"]), pct(r["max"]["mbcs_usage"]),
                f"{r['mbcs_blocks']} / {r['max']['mbcs_blocks']}"]
    return out + _holders_numbers(a.get("processes"))


def _holders_numbers(p: dict[str, Any] | None) -> list[str]:
    """What the "who holds the memory" tables show (reporters/holders.py)."""
    if not p:
        return []
    out = []
    for r in (p.get("top_binary") or [])[:10]:
        out += [human(r["binary_bytes"])] + ([human(r["total_heap_bytes"])]
                                             if r["total_heap_bytes"] is not None else [])
    for r in (p.get("top_heap") or [])[:10]:
        out += [human(r["total_heap_bytes"]), human(r["memory"])]
    for g in (p.get("groups") or [])[:10]:
        out += [f"{g['count']:,}", human(g["memory"]), human(g["binary_bytes"])]
    return out


#: A number found whole: no digit (or digit group) just before or after it; a full stop or a
#: comma after it ends a sentence or a list.
_WHOLE = r"(?<!\d)(?<!\d[.,]){}(?!\d|[.,]\d|%)"
_SIZE = re.compile(r"\d[\d,]*(?:\.\d+)? (?:B|KiB|MiB|GiB|TiB)\b|\d+(?:\.\d+)? %")


def _recommend_numbers(r: dict[str, Any]) -> list[str]:
    """Every size and percentage of the verdict and the findings' messages, as written."""
    texts = [r["verdict"]["headline"]] + [f["message"] for f in r["findings"]]
    return [m for t in texts for m in _SIZE.findall(t)] + _holders_numbers(r.get("processes"))


def _held_numbers(doc: dict[str, Any]) -> list[str]:
    """For a live node, whose allocators move between the text run and the JSON run: the bytes
    of binaries its holders keep (the workload's own, fixed once it is ready)."""
    return [human(r["binary_bytes"]) for r in doc["processes"]["top_binary"][:6]]


def _replay_numbers(doc: dict[str, Any]) -> list[str]:
    """Each run's footprint peak and binary_alloc's rows (final / peak), as the table words them
    (reporters/replay.py's allocator_rows over the run's snapshot in the JSON)."""
    from beamalloc.reporters.replay import allocator_rows
    from beamalloc.snapshot import Snapshot

    out = []
    for run in doc["runs"]:
        out.append(human(run["peak"]["footprint"]["carriers_size"]))
        out += [v for _, v in allocator_rows(Snapshot.from_dict(run["snapshot"]), "binary_alloc")]
    return out


def _diff_numbers(d: dict[str, Any]) -> list[str]:
    """The verdict's sizes and percentages as written, and both sides of the total row."""
    texts = [d["verdict"]["headline"], *d["verdict"]["lines"]]
    out = [m for t in texts for m in _SIZE.findall(t)]
    for side in ("a", "b"):
        out += [human(d["total"][side][k]) for k in ("carriers_size", "used", "unused")]
    return out


@dataclass(frozen=True)
class Screen:
    name: str
    args: tuple[str, ...]
    numbers: Callable[[dict[str, Any]], list[str]]
    live: bool = False  # args name the live node of the `node` fixture as {node}
    #: args name the trace of the `trace_file` fixture as {trace}


def _short_analyze_numbers(a: dict[str, Any]) -> list[str]:
    """What analyze's short output shows: the totals and the allocator types it lists."""
    from beamalloc.reporters.analyze import SHORT_TYPES

    out = [human(a["totals"]["allocated"]), human(a["totals"]["unused"]),
           pct(a["totals"]["usage"])]
    for r in a["allocator_types"][:SHORT_TYPES]:
        out += [human(r["allocated"]), human(r["used"]), human(r["unused"]), pct(r["usage"]),
                human(r["max_allocated"])]
    return out


def _short_recommend_numbers(r: dict[str, Any]) -> list[str]:
    """The sizes and percentages of the verdict's why lines, and of its table of mostly-empty
    allocators (the short output's decision, where no flag is advised)."""
    out = [m for t in r["verdict"]["why"] for m in _SIZE.findall(t)]
    for e in r["verdict"]["no_flag_helps"][:4]:
        out += [human(e["unused"]), human(e["allocated"]), pct(e["usage"])]
    return out


#: analyze and recommend are short by default (tests/test_terminal_short.py holds that); their
#: every table is under --details, whose numbers these screens check.
DETAILS = "--details"
COMMANDS = [
    Screen("analyze recon file", ("analyze", str(SAMPLES / "recon_snapshot.txt"), DETAILS),
           _analyze_numbers),
    Screen("analyze crash dump (holders)", ("analyze", str(SAMPLES / "erl_crash.dump"),
                                            DETAILS), _analyze_numbers),
    Screen("analyze allocator dump", ("analyze", str(SAMPLES / "raw_allocator_dump.txt"),
                                      DETAILS), _analyze_numbers),
    Screen("analyze fragmented node", ("analyze", str(SNAPSHOTS / "binspike.json"), DETAILS),
           _analyze_numbers),
    Screen("analyze fragmented node, short", ("analyze", str(SNAPSHOTS / "binspike.json")),
           _short_analyze_numbers),
    Screen("recommend fragmented node", ("recommend", str(SNAPSHOTS / "binspike.json"),
                                         DETAILS), _recommend_numbers),
    Screen("recommend fragmented node, short", ("recommend", str(SNAPSHOTS / "churn_kept.json")),
           _short_recommend_numbers),
    Screen("recommend change flags (rabbitmq)", ("recommend", str(SNAPSHOTS / "heapchurn.json"),
                                                 "--format", "rabbitmq", DETAILS),
           _recommend_numbers),
    Screen("recommend frag node", ("recommend", str(SNAPSHOTS / "frag.json"), "--no-predict",
                                   DETAILS), _recommend_numbers),
    Screen("recommend crash dump (holders)", ("recommend", str(SAMPLES / "erl_crash.dump"),
                                              "--no-predict", DETAILS), _recommend_numbers),
    Screen("diff of two nodes", ("diff", str(SNAPSHOTS / "binspike.json"),
                                 str(SNAPSHOTS / "heapchurn.json")), _diff_numbers),
    Screen("replay three flag sets", ("replay", "{trace}", "--flags", "+MBas aobf +MBlmbcs 512",
                                      "--compare", "+MBas bf +MBsbct 1024", "+MBacul 0"),
           _replay_numbers),
    Screen("analyze live holders node", ("analyze", "{node}", "--timeout", "60", DETAILS),
           _held_numbers, live=True),
    Screen("recommend live holders node", ("recommend", "{node}", "--no-predict",
                                           "--rate-seconds", "0", "--timeout", "60", DETAILS),
           _held_numbers, live=True),
]


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, dict[str, str]]]:
    """A real node whose processes hold binaries (samples/workloads/holders.erl)."""
    from beamalloc.cli.demo import WorkloadNode

    with WorkloadNode("holders", env={"WORKERS": "60"}) as wl:
        wl.wait_ready()
        yield wl.node, {**os.environ, "BEAMALLOC_COOKIE": wl.cookie}


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """binary_alloc blocks of growing size, every other one freed: a replay with carriers of
    every kind (tests/refalloc/test_replay_cli.py's shape, larger)."""
    from beamalloc.trace import Event, Op, TraceHeader, TraceWriter

    p = tmp_path_factory.mktemp("trace") / "t.batr"
    with TraceWriter(p, TraceHeader(schedulers=2, node="a@h")) as w:
        for i in range(3000):
            w.write(Event(i * 1_000_000, Op.ALLOC, 10, 1 + i % 2, 214, 100 + i * 50, i + 1))
        for i in range(0, 3000, 2):
            w.write(Event(4_000_000_000 + i, Op.FREE, 10, 1 + i % 2, 214, 0, i + 1))
    return p


def _run(screen: Screen, width: int, request: pytest.FixtureRequest, *extra: str) -> str:
    env = {**os.environ}
    args = list(screen.args)
    if any("{trace}" in a for a in args):
        trace = str(request.getfixturevalue("trace_file"))
        args = [a.replace("{trace}", trace) for a in args]
    if screen.live:
        name, env = request.getfixturevalue("node")
        args = [a.replace("{node}", name) for a in args]
    env.update(COLUMNS=str(width), TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    r = run_cli(*args, *extra, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _screen_lines(text: str) -> list[str]:
    """The lines that must fit: all but the paste block (recommend's last section) and the
    lines that hold one link alone (a link cannot wrap; recommend lists them once at the end)."""
    return [ln for ln in text.split("\nPaste (")[0].splitlines()
            if not re.fullmatch(r"\s*<file://\S+>", ln)]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("screen", [pytest.param(s, id=s.name, marks=[pytest.mark.live]
                                                 if s.live else []) for s in COMMANDS])
def test_screen_fits_and_cuts_no_number(screen: Screen, width: int,
                                        request: pytest.FixtureRequest) -> None:
    text = _run(screen, width, request)
    doc = json.loads(_run(screen, width, request, "--json"))
    assert "\x1b[" not in text  # a pipe gets no colours
    too_wide = [ln for ln in _screen_lines(text) if len(ln) > width]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}: {too_wide[:3]}"
    assert "…" not in text, [ln for ln in text.splitlines() if "…" in ln][:3]
    # a cell rich cut without its mark: a size or a percentage that lost its unit at the edge
    bare = [ln for ln in _screen_lines(text) if re.search(r"\d\.\d+$", ln.rstrip())]
    assert not bare, bare[:3]
    wanted = screen.numbers(doc)
    assert len(wanted) >= 5, wanted  # the check has something to check
    missing = [n for n in dict.fromkeys(wanted)
               if not re.search(_WHOLE.format(re.escape(n)), text)]
    assert not missing, f"numbers of the JSON not shown whole at {width} columns: {missing[:8]}"


def test_columns_that_do_not_fit_move_to_a_second_table() -> None:
    """At 80 columns analyze's per-allocator table is split, its allocator column repeated, and
    every column of the 100-column version is still there."""
    src = str(SAMPLES / "recon_snapshot.txt")
    headers: dict[int, set[str]] = {}
    for width in WIDTHS:
        r = run_cli("analyze", src, "--details", env={**os.environ, "COLUMNS": str(width)})
        assert r.returncode == 0, r.stderr
        part = r.stdout.partition("Per allocator")[2].partition("Per instance")[0]
        heads = re.findall(r"^┃(.*)┃$", part, flags=re.M)
        headers[width] = {h.strip() for line in heads for h in line.split("┃")}
        if width == 80:
            assert "(continued)" in part and len(heads) >= 2
            assert all(line.split("┃")[0].strip() == "allocator" for line in heads)
    assert headers[80] == headers[100] and "max allocated" in headers[80]


def test_piped_output_without_columns_is_100_wide() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = run_cli("analyze", str(SAMPLES / "recon_snapshot.txt"), "--details", env=env)
    assert r.returncode == 0, r.stderr
    assert max(len(ln) for ln in r.stdout.splitlines()) == 100


def _trace_doc() -> dict[str, Any]:
    """A `beamalloc trace` summary document (ebpf/summary.py's shape) with counts as large as a
    busy node's: eBPF needs root and a node, and what is checked here is the rendering."""
    def ty(a: int, f: int, r: int, req: int, out: int) -> dict[str, Any]:
        return {"alloc": a, "free": f, "realloc": r, "requested_bytes": req,
                "outstanding_bytes": out, "log2_hist": {}}

    return {
        "pid": 4_194_303, "node": "very_long_application_name@host.example.internal",
        "elapsed_s": 600.25, "mode": {"level": "all", "attached_fraction": 0.25},
        "lost": {"total": 0},
        "blocks": {"binary_alloc": {
            "calls": {"alloc": 1_712_345_678, "free": 1_712_000_000, "realloc": 12_345_678},
            "rates_per_s": {"alloc": 2_852_712.3}, "requested_bytes": 171_234_567_890_123,
            "outstanding_bytes": 123_456_789, "instances": {},
            "types": {"binary": ty(1_700_000_000, 1_699_000_000, 10_000_000,
                                   170_000_000_000_000, 123_000_000),
                      "drv_binary": ty(12_345_678, 1_000, 2_345_678, 1_234_567_890, 4_567)}}},
        "carriers": {
            "syscalls": {"mmap": {"all": {"count": 1_234_567, "bytes": 1_712_345_678_901}},
                         "madvise": {"dontneed": {"count": 12, "bytes": 123_456}}},
            "mseg": {"binary_alloc": {"mseg_alloc": {"mbc": {"count": 100, "bytes": 104_857_600},
                                                     "sbc": {"count": 12, "bytes": 12_345_678}}}},
            "sys_alloc": {"sys_alloc": {"aligned (MBC carriers)": {"count": 3,
                                                                   "bytes": 3_145_728}}}},
        "foreign_malloc": None,
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_trace_summary_fits(width: int) -> None:
    import io

    from rich.console import Console

    from beamalloc.reporters.trace import render

    buf = io.StringIO()
    render(_trace_doc(), Console(file=buf, width=width, color_system=None))
    text = buf.getvalue()
    assert max(len(ln) for ln in text.splitlines()) <= width and "…" not in text
    for n in ("1712345678", "12345678", "2852712.3", human(171_234_567_890_123),
              human(1_712_345_678_901), "1234567", human(123_456_789)):
        assert re.search(_WHOLE.format(re.escape(n)), text), (n, text)
