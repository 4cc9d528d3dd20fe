"""cli/commands/: one module per subcommand, each listed once in cli/main.py's COMMANDS, named as
its subcommand, with `add_parser` and a `run(args, ctx)` that the parser dispatches to."""

from __future__ import annotations

import argparse
import inspect
import io
from pathlib import Path

from beamalloc.cli.context import Context
from beamalloc.cli.main import COMMANDS, build_parser, main

COMMANDS_DIR = Path(__file__).resolve().parents[1] / "cli" / "commands"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_module_is_a_listed_subcommand():
    files = sorted(p.stem for p in COMMANDS_DIR.glob("*.py") if p.stem != "__init__")
    names = [m.__name__.rpartition(".")[2] for m in COMMANDS]
    assert sorted(names) == files and len(set(names)) == len(names)
    assert list(_subparsers(build_parser())) == names  # --help lists them in COMMANDS' order


def test_each_parser_dispatches_to_its_modules_run():
    subs = _subparsers(build_parser())
    for module in COMMANDS:
        name = module.__name__.rpartition(".")[2]
        assert subs[name].get_default("run") is module.run, name
        assert list(inspect.signature(module.run).parameters) == ["args", "ctx"], name


def test_context_writes_to_its_stdout_not_sys_stdout(capsys):
    out = io.StringIO()
    Context(out, io.StringIO()).write(None, "x")
    Context(out, io.StringIO()).write("-", "y\n")
    assert out.getvalue() == "x\ny\n" and capsys.readouterr().out == ""


def test_an_unknown_subcommand_is_one_line_and_exit_2(capsys):
    assert main(["nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("beamalloc: ") and "invalid choice" in err


def test_a_run_builds_its_own_subcommand_whole_and_the_others_help_lines_alone():
    """main() builds only the subcommand its argv names (startup: tests/bench/bench_startup.py):
    that one's parser is the full build's, the others list the same help line."""
    full = _subparsers(build_parser())
    for module in COMMANDS:
        name = module.__name__.rpartition(".")[2]
        part = _subparsers(build_parser(only=name))
        assert list(part) == list(full)
        assert part[name].format_help() == full[name].format_help(), name
        assert part[name].get_default("run") is module.run
        others = [n for n in part if n != name]
        assert all(len(part[n]._actions) == 1 for n in others)  # -h alone
    assert build_parser(only="").format_help() == build_parser().format_help()


def test_the_command_word_is_the_first_word_that_is_no_option():
    from beamalloc.cli.main import _command_word

    assert _command_word(["-q", "--no-color", "analyze", "x"]) == "analyze"
    assert _command_word(["--", "watch"]) == "watch"
    assert _command_word(["--version"]) is None
    assert _command_word(["nosuch", "analyze"]) is None  # argparse refuses it, naming the choices
