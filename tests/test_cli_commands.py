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
