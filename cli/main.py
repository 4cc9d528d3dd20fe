"""`beamalloc`: one command, one subcommand per stage (docs/design.md, "Conventions").

This module builds the top-level parser, asks each module of cli/commands/ to add its
subcommand, builds the run's Context once and calls the command's `run(args, ctx)` inside the
one error boundary. Exit codes: 0 success, 2 bad input or usage (one line on stderr), 3 node
unreachable, authentication failed or timed out.

Startup: the command modules import at their top only what building their parser needs (its
defaults come from beamalloc/limits.py); each `run` imports its own stages, so a command pays for
what it runs and `beamalloc --version` for almost nothing (tests/bench/bench_startup.py). A run
builds whole only the subcommand its argv names (the others: their --help line), and its help
formatter reads the terminal's width without shutil.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from beamalloc.cli.commands import (
    analyze,
    demo,
    diff,
    recommend,
    replay,
    report,
    serve,
    snapshot,
    snippet,
    trace,
    watch,
)
from beamalloc.cli.context import Context
from beamalloc.console import clean
from beamalloc.errors import InputError, NodeUnavailable
from beamalloc.units import apply_ranges

#: the subcommands, in the order `beamalloc --help` lists them
COMMANDS = (snapshot, watch, analyze, recommend, report, replay, serve, trace, snippet, demo, diff)
#: their names, as each module's add_parser() gives it (tests/test_cli_commands.py)
_NAMES = frozenset(m.__name__.rpartition(".")[2] for m in COMMANDS)


def _columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil (and with it lzma and bz2,
    a tenth of `beamalloc --version`): $COLUMNS, else the terminal of stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's own, given the width it would have read through shutil."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kw)

    def error(self, message: str) -> NoReturn:
        # main() says "beamalloc: " once; a subcommand names itself after it
        sub = self.prog.partition(" ")[2]
        hint = f"beamalloc {sub} --help" if sub else "beamalloc --help"
        raise InputError(f"{sub + ': ' if sub else ''}{message} (see {hint})")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, each given the options every command has. With `only`,
    the other subcommands get their name and help line alone (what `--help` lists): a run
    parses one command line, and argparse's add_argument costs a formatter each (~130 of them:
    `beamalloc --version` paid for them all, tests/bench/bench_startup.py)."""
    parser = _Parser(
        prog="beamalloc",
        description="Why does a BEAM node hold more memory than it uses, "
        "and which +M flags fix it.",
    )
    # prog given: argparse would build a help formatter to work out this same "beamalloc"
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                prog="beamalloc")
    for command in COMMANDS:
        command.add_parser(sub if only is None else _Only(sub, only))
    parser.add_argument("--version", action=_Version,
                        help="print the version of the installed beamalloc package and exit")
    _terminal_options(parser, top=True)
    for name, p in sub.choices.items():
        if only is None or name == only:
            _terminal_options(p, top=False)
    return parser


class _Only:
    """The `sub` a command's add_parser() is given when only the command `name` is parsed: the
    others' sub.add_parser(...) is made (their --help line), their options go nowhere."""

    def __init__(self, sub: Any, name: str) -> None:
        self._sub, self._name = sub, name

    def add_parser(self, name: str, **kw: Any) -> Any:
        p = self._sub.add_parser(name, **kw)
        return p if name == self._name else _Nowhere()


class _Nowhere:
    """Takes any call (add_argument, groups, set_defaults) and does nothing."""

    def __getattr__(self, _name: str) -> Any:
        return self

    def __call__(self, *_args: Any, **_kw: Any) -> Any:
        return self


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (the options before
    a subcommand take no value); None when there is none, or it names no subcommand."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in _NAMES else None


class _Version(argparse.Action):
    """argparse's "version" action, the version read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        print(f"beamalloc {version()}")
        parser.exit()


def version() -> str:
    """The package's version: beamalloc/__init__.py, which setup.cfg's [metadata] reads, so it
    is the installed distribution's too."""
    import beamalloc

    return beamalloc.__version__


def _terminal_options(p: argparse.ArgumentParser, top: bool) -> None:
    """--quiet and --no-color, before or after the subcommand (the run's Terminal). On a
    subcommand their default is "not given", so one given before it is not undone."""
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="no progress, notes or \"wrote FILE\" lines on stderr (errors still)")
    p.add_argument("--no-color", action="store_true", default=default,
                   help="no colours (also when $NO_COLOR is set, or output is not a terminal)")


def main(argv: Sequence[str] | None = None) -> int:
    run: Callable[[argparse.Namespace, Context], int]
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        word = _command_word(argv)
        # without a subcommand word (--version, --help, a misspelt one) none is built whole
        parser = apply_ranges(build_parser(only=word or ""))  # docs/robustness.md, "Ranges"
        args = parser.parse_args(argv)
        if args.command is None:  # `beamalloc` alone: the commands, not an error
            parser.print_help()
            return 0
        access = None
        if hasattr(args, "proto_dist"):  # a command that may connect: how (docs/access.md)
            from beamalloc.collector.access import from_args

            access = from_args(args)
        ctx = Context(stdout=sys.stdout, stderr=sys.stderr, quiet=args.quiet,
                      no_color=args.no_color, access=access)
        run = args.run
        return run(args, ctx)
    except (InputError, NodeUnavailable) as e:
        print(f"beamalloc: {_one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("beamalloc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _one_line(e: Any) -> str:
    """The error as one printable line (console.clean: a message may quote a peer or a file)."""
    return clean(" ".join(str(e).split())) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
