"""The `beamalloc` command at a terminal (issue 15 item 3, issue 13 item 4's progress): the
command list, --version, one error prefix, help for every option, `serve --port 0`, colours
(--no-color, NO_COLOR), the width a terminal gives, progress on stderr only when it is a
terminal (a real pty) and not --quiet, and `watch`'s status line in a log."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from support import SAMPLES, run_cli

from beamalloc.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
SLOW = str(ROOT / "samples" / "workloads" / "snapshots" / "binspike.json")  # recommend: ~2 s
RECON = str(SAMPLES / "recon_snapshot.txt")
#: An SGR sequence that sets a colour (30-37, 90-97 and 38;... foreground; 40-47, 48;... back).
COLOUR = re.compile(rb"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7]|4[0-8])(?:;[0-9;]*)?m")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    return {**env, "TERM": "xterm-256color", **extra}


def _on_pty(args: list[str], env: dict[str, str], stdout_tty: bool = False,
            cols: int = 100) -> tuple[int, bytes, bytes]:
    """Run `beamalloc ARGS` with stderr (and stdout, if asked) on a real pseudo-terminal of
    `cols` columns: (exit code, what the terminal got, stdout when it is a pipe)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "beamalloc.cli", *args], env=env,
                            stdin=subprocess.DEVNULL, stderr=slave,
                            stdout=slave if stdout_tty else subprocess.PIPE)
    os.close(slave)
    seen = bytearray()
    out = bytearray()
    streams = [master] + ([] if stdout_tty else [proc.stdout.fileno()])  # type: ignore[union-attr]
    deadline = time.monotonic() + 120
    while streams and time.monotonic() < deadline:
        ready, _, _ = select.select(streams, [], [], 1.0)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the pty's other end closed
                chunk = b""
            if not chunk:
                streams.remove(fd)
            elif fd == master:
                seen += chunk
            else:
                out += chunk
    os.close(master)
    return proc.wait(timeout=30), bytes(seen), bytes(out)


# ---- the command itself -----------------------------------------------------------------


def test_beamalloc_alone_lists_the_commands() -> None:
    r = run_cli()
    assert r.returncode == 0 and r.stderr == ""
    for cmd in ("snapshot", "watch", "analyze", "recommend", "report", "replay", "serve",
                "trace", "snippet", "demo"):
        assert re.search(rf"^\s+{cmd}\s+\S", r.stdout, flags=re.M), cmd


def test_version_is_the_installed_package_version() -> None:
    r = run_cli("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"beamalloc {metadata.version('beamalloc')}"
    assert re.fullmatch(r"beamalloc \d+\.\d+\.\d+\S*", r.stdout.strip())


@pytest.mark.parametrize("args, where", [
    (["analyze"], "analyze: the following arguments are required: SOURCE"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["recommend", RECON, "--format", "toml"], "recommend: argument --format"),
    (["serve", "--port", "x"], "serve: argument --port"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_one_error_prefix(args: list[str], where: str) -> None:
    r = run_cli(*args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("beamalloc: ") and lines[0].count("beamalloc:") == 1, lines[0]
    assert where in lines[0] and "--help" in lines[0]


def _walk(parser: argparse.ArgumentParser, path: str = "beamalloc") -> Iterator[tuple[str, Any]]:
    for action in parser._actions:  # argparse has no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", helps.get(name)
                yield from _walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield f"{path} {'/'.join(action.option_strings) or action.dest}", action.help


def test_every_option_of_every_command_has_help() -> None:
    seen = list(_walk(build_parser()))
    assert len(seen) > 80  # the whole tree was walked
    assert any(p == "beamalloc report -o/--output" for p, _ in seen)
    assert any(p == "beamalloc serve --port" for p, _ in seen)
    missing = [p for p, h in seen if not (h and h.strip() and h is not argparse.SUPPRESS)]
    assert not missing, f"options without help text: {missing}"


def test_quiet_and_no_color_on_every_command() -> None:
    paths = {p for p, _ in _walk(build_parser())}
    commands = {p for p in paths if p.count(" ") == 1 and not p.split()[1].startswith("-")}
    assert len(commands) >= 10
    for c in commands:
        assert {f"{c} -q/--quiet", f"{c} --no-color"} <= paths, c
    after = build_parser().parse_args(["analyze", RECON, "--quiet", "--no-color"])
    assert after.quiet and after.no_color
    before = build_parser().parse_args(["--quiet", "analyze", RECON])
    assert before.quiet and not before.no_color  # before the subcommand: not undone by it


def test_serve_port_0_binds_a_port_and_prints_it(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "beamalloc.cli", "serve", "--port", "0",
                             "--store", str(tmp_path / "none.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        m = re.search(r"on http://127\.0\.0\.1:(\d+)/", line)
        assert m, (line, proc.poll())
        port = int(m.group(1))
        assert port != 0
        for _ in range(50):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"nothing answers on the port printed ({port})")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# ---- width and colours ---------------------------------------------------------------------


def test_a_terminal_gives_its_own_width_and_colours() -> None:
    code, seen, _ = _on_pty(["analyze", RECON], _env(), stdout_tty=True, cols=90)
    assert code == 0
    text = re.sub(rb"\x1b\[[0-9;]*m", b"", seen).decode()
    widths = [len(ln) for ln in text.splitlines()]
    assert 80 < max(widths) <= 90
    assert COLOUR.search(seen)  # usage is coloured on a terminal


@pytest.mark.parametrize("how", ["NO_COLOR", "--no-color"])
def test_no_color(how: str) -> None:
    env = _env(NO_COLOR="1") if how == "NO_COLOR" else _env()
    args = ["analyze", RECON] + ([how] if how.startswith("--") else [])
    code, seen, _ = _on_pty(args, env, stdout_tty=True)
    assert code == 0 and b"Per allocator" in seen
    assert not COLOUR.search(seen), COLOUR.search(seen)


def test_columns_is_followed_on_a_terminal_too() -> None:
    code, seen, _ = _on_pty(["analyze", RECON], _env(COLUMNS="80"), stdout_tty=True, cols=120)
    assert code == 0
    text = re.sub(rb"\x1b\[[0-9;]*m", b"", seen).decode()
    assert max(len(ln) for ln in text.splitlines()) <= 80


# ---- progress -----------------------------------------------------------------------------


def test_progress_on_a_terminal_and_stdout_unchanged() -> None:
    """stderr a pty: the progress line is drawn, refreshed in place and erased at the end;
    stdout (a pipe) is the same as without a terminal."""
    code, seen, out = _on_pty(["recommend", SLOW], _env(BEAMALLOC_PROGRESS_AFTER="0"))
    assert code == 0
    assert b"beamalloc: recommending for" in seen and b"replaying each candidate" in seen
    assert seen.endswith(b"\r\x1b[K")  # erased: the terminal is left clean
    piped = run_cli("recommend", SLOW, env=_env(BEAMALLOC_PROGRESS_AFTER="0"))
    assert piped.returncode == 0 and out.decode() == piped.stdout


def test_no_progress_through_a_pipe() -> None:
    r = run_cli("recommend", SLOW, env=_env(BEAMALLOC_PROGRESS_AFTER="0"))
    assert r.returncode == 0 and "UNDECIDED" in r.stdout
    assert r.stderr == ""


def test_quiet_silences_progress_on_a_terminal() -> None:
    code, seen, out = _on_pty(["recommend", SLOW, "--quiet"], _env(BEAMALLOC_PROGRESS_AFTER="0"))
    assert code == 0 and b"UNDECIDED" in out
    assert seen == b""


@pytest.mark.slow
def test_progress_of_replay_and_report(tmp_path: Path) -> None:
    from beamalloc.trace import Event, Op, TraceHeader, TraceWriter

    trace = tmp_path / "t.batr"
    with TraceWriter(trace, TraceHeader(schedulers=2, node="a@h")) as w:
        for i in range(20_000):
            w.write(Event(i * 1000, Op.ALLOC, 10, 1, 214, 100 + i % 5000, i + 1))
    env = _env(BEAMALLOC_PROGRESS_AFTER="0")
    code, seen, out = _on_pty(["replay", str(trace), "--compare", "+MBas bf", "+MBas aobf"],
                              env)
    assert code == 0 and b"refalloc replay" in out
    assert b"beamalloc: replaying" in seen and b"flag set" in seen
    report = tmp_path / "r.html"
    code, seen, _ = _on_pty(["report", SLOW, "-o", str(report)], env)
    assert code == 0 and report.stat().st_size > 0
    assert b"beamalloc: writing the report" in seen and b"wrote " in seen
    code, seen, _ = _on_pty(["report", SLOW, "-o", str(report), "-q"], env)
    assert code == 0 and seen == b""


# ---- recon files and instances without sbcs ---------------------------------------------


def test_recon_file_says_what_it_does_not_record() -> None:
    r = run_cli("analyze", RECON, env=_env(COLUMNS="100"))
    assert r.returncode == 0
    assert "?" not in r.stdout.split("\n\n")[0]
    assert "does not record the OTP release, erts version or scheduler count" in r.stdout
    r = run_cli("recommend", RECON, env=_env(COLUMNS="100"))
    assert r.returncode == 0 and "OTP ?" not in r.stdout
    assert "OTP release not recorded" in r.stdout


def test_instances_without_sbcs_show_none() -> None:
    a = json.loads(run_cli("analyze", RECON, "--json").stdout)
    no_sbcs = [f"{r['allocator']}[{r['instance']}]" for r in a["allocators"][:20]
               if not r["sbcs_carriers"]]
    assert no_sbcs and all(r["sbcs_usage"] == 1.0 for r in a["allocators"]
                           if not r["sbcs_carriers"])  # recon's convention, kept in JSON
    r = run_cli("analyze", RECON, "--details", env=_env(COLUMNS="200"))
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^│ (\w+\[\d+\]) .*$", r.stdout, re.M)}
    for name in no_sbcs:
        cells = [c.strip() for c in rows[name].split("│")]
        assert "none" in cells and "100.0 %" not in cells, rows[name]


# ---- watch ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, str]]:
    from beamalloc.cli.demo import WorkloadNode

    with WorkloadNode("healthy") as wl:
        wl.wait_ready()
        yield wl.node, wl.cookie


@pytest.mark.live
@pytest.mark.parametrize("quiet", [False, True])
def test_watch_logs_a_status_line_while_all_is_well(node: tuple[str, str], quiet: bool,
                                                    tmp_path: Path) -> None:
    name, cookie = node
    r = run_cli("watch", name, "--interval", "1", "--duration", "4.5", "--status-every", "1",
                "--store", str(tmp_path / "w.db"), *(["--quiet"] if quiet else []),
                env=_env(BEAMALLOC_COOKIE=cookie), timeout=120)
    assert r.returncode == 0, r.stderr
    well = re.findall(r"^\d\d:\d\d:\d\d all well: last interval: (\d+) of (\d+) nodes sampled, "
                      r"spread (\d+\.\d\d) s; (\d+) rows written", r.stderr, flags=re.M)
    if quiet:
        assert r.stderr == ""
        return
    assert len(well) >= 2, r.stderr
    assert all(s == n == "1" for s, n, _, _ in well)
    rows = [int(w[3]) for w in well]
    assert rows == sorted(rows) and rows[-1] >= 1


def test_quiet_leaves_the_answer_alone(tmp_path: Path) -> None:
    """--quiet drops what is said about the work ("wrote FILE", where to paste), never the
    answer itself, and says errors still."""
    out = tmp_path / "s.json"
    loud = run_cli("snapshot", RECON, "-o", str(out))
    assert loud.returncode == 0 and loud.stderr.startswith(f"wrote {out}")
    quiet = run_cli("snapshot", RECON, "-o", str(out), "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(out.read_text())
    loud, quiet = run_cli("snippet"), run_cli("-q", "snippet")
    assert "paste the line above" in loud.stderr and quiet.stderr == ""
    assert quiet.stdout == loud.stdout and "erlang:system_info" in quiet.stdout
    bad = run_cli("analyze", str(tmp_path / "missing.txt"), "-q")
    assert bad.returncode == 2 and bad.stderr.startswith("beamalloc: ")


def test_usage_colour_weighs_unused_bytes() -> None:
    """heapchurn: eheap_alloc (288 MiB unused, usage 2.9%) is red; temp_alloc (384 KiB unused,
    usage 0.0%) is not, however low its ratio (rules.usage_level, the web UI's rule too)."""
    import io

    from rich.console import Console

    from beamalloc.analyzer.analysis import analyze
    from beamalloc.collector.sources import read_file
    from beamalloc.reporters import analyze as rep

    a = analyze(read_file(str(Path(__file__).parent.parent / "samples/workloads/snapshots"
                              / "heapchurn.json")))
    buf = io.StringIO()
    rep.render(a, Console(file=buf, force_terminal=True, color_system="standard", width=160),
               details=True)
    lines = buf.getvalue().splitlines()
    red, green = "\x1b[31m", "\x1b[32m"
    # the per-type table's rows: the first with a usage (a % cell) for each type
    eheap = next(ln for ln in lines if ln.startswith("│ eheap_alloc ") and "%" in ln)
    temp = next(ln for ln in lines if ln.startswith("│ temp_alloc ") and "%" in ln)
    assert red in eheap and red not in temp and green in temp, (eheap, temp)
