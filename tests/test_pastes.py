"""beamalloc/pastes.py: the blocks each format prints, run through a real shell where they are
shell, and the docs' table against the module's. Each format in force on a real install:
tests/live/test_pastes_live.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from beamalloc.limits import FORMATS as PARSER_CHOICES
from beamalloc.pastes import FORMATS, PASTES, render

ROOT = Path(__file__).resolve().parent.parent
PASTED = ["+MBas ageffcbf", "+MBsbct 256", "+MBlmbcs 512", "+MBacul de"]


def test_docs_table_is_the_modules() -> None:
    doc = (ROOT / "docs" / "recommend.md").read_text()
    section = doc.split("## Paste formats (`--format`)", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert rows == [f"| `{p.name}` | {p.where} | {p.how} |" for p in PASTES.values()]
    assert f"[--format {'|'.join(FORMATS)}]" in doc


def test_parser_offers_every_format() -> None:
    assert PARSER_CHOICES == FORMATS == tuple(PASTES)
    assert FORMATS[0] == "vm.args"  # the default `--format`


@pytest.mark.parametrize("fmt", [p.name for p in PASTES.values() if p.kind == "shell"])
def test_shell_block_appends_in_a_real_shell(fmt: str) -> None:
    """Sourced by sh after the variable's own value (Debian's ejabberdctl.cfg sets ERL_OPTIONS),
    the block keeps that value and adds the flags after it."""
    p = PASTES[fmt]
    old = "-env ERL_CRASH_DUMP_BYTES 0"
    script = f'{p.variable}="{old}"\n{render(PASTED, fmt)}\nprintf "%s" "${p.variable}"'
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == f"{old} {' '.join(PASTED)}"
    if p.export:  # the environment of the program the shell starts
        r = subprocess.run(["sh", "-c", f"{render(PASTED, fmt)}\nenv"], capture_output=True,
                           text=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
        assert f"{p.variable}= {' '.join(PASTED)}" in r.stdout.splitlines()


@pytest.mark.parametrize("fmt", [p.name for p in PASTES.values() if p.kind == "lines"])
def test_args_file_block_is_one_flag_a_line(fmt: str) -> None:
    head, *lines = render(PASTED, fmt).splitlines()
    assert head == PASTES[fmt].head and head.startswith("#")
    assert lines == PASTED  # erl takes each line's words as arguments, in this order


def test_heads_fit_80_columns_and_name_the_place() -> None:
    for p in PASTES.values():
        assert len(p.head) <= 80, p.name
        if p.kind == "shell":
            assert p.variable in p.how
    assert "ejabberdctl.cfg" in PASTES["ejabberd"].head
    assert "rel/vm.args.eex" in PASTES["mix"].head


def test_no_flags_says_so_in_every_format() -> None:
    for fmt in FORMATS:
        block = render([], fmt, note="`+MBas bf` is kept")
        if fmt == "flags":
            assert block == ""
        else:
            assert block.splitlines() == ["# beamalloc: no +M flags to set",
                                          "# `+MBas bf` is kept"]
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        render(PASTED, "yaml")


def test_cli_renders_ejabberd(cli) -> None:
    snap = ROOT / "samples" / "workloads" / "snapshots" / "churn_bf.json"
    r = cli("recommend", str(snap), "--format", "ejabberd", "--no-predict", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    parts = [f"{x['flag']} {x['value']}" for x in doc["recommendations"]]
    assert doc["paste"].splitlines()[0] == (PASTES["ejabberd"].head if parts
                                            else "# beamalloc: no +M flags to set")


def test_readme_names_every_format_and_cookie_source() -> None:
    """The README a newcomer reads first lists the formats and the cookie sources in the order
    collector/cookie.py tries them."""
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{f}`" in readme for f in FORMATS if f != "vm.args")
    order = ["`--cookie-file F`", "`$BEAMALLOC_COOKIE`", "`$RELEASE_COOKIE`",
             "`$RELEASE_ROOT/releases/COOKIE`", "`~/.erlang.cookie`"]
    at = [readme.index(f"| {s} |") for s in order]
    assert at == sorted(at)
