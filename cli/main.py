"""`beamalloc`: one command, one subcommand per stage (docs/design.md, "Conventions").

This module builds the top-level parser, asks each module of cli/commands/ to add its
subcommand, builds the run's Context once and calls the command's `run(args, ctx)` inside the
one error boundary. Exit codes: 0 success, 2 bad input or usage (one line on stderr), 3 node
unreachable, authentication failed or timed out.

Startup: the command modules import at their top only what building their parser needs (its
defaults come from beamalloc/limits.py); each `run` imports its own stages, so a command pays for
what it runs and `beamalloc --version` for almost nothing (tests/bench/bench_startup.py).
"""

from __future__ import annotations

import argparse
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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # main() says "beamalloc: " once; a subcommand names itself after it
        sub = self.prog.partition(" ")[2]
        hint = f"beamalloc {sub} --help" if sub else "beamalloc --help"
        raise InputError(f"{sub + ': ' if sub else ''}{message} (see {hint})")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, each given the options every command has."""
    parser = _Parser(
        prog="beamalloc",
        description="Why does a BEAM node hold more memory than it uses, "
        "and which +M flags fix it.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    parser.add_argument("--version", action=_Version,
                        help="print the version of the installed beamalloc package and exit")
    _terminal_options(parser, top=True)
    for p in sub.choices.values():
        _terminal_options(p, top=False)
    return parser


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
        parser = apply_ranges(build_parser())  # docs/robustness.md, "Ranges"
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
