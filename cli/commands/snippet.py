"""`beamalloc snippet`: one line to paste into the node's remote shell (collector/snippet.py)."""

from __future__ import annotations

import argparse
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.errors import InputError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("snippet", help="one line to paste into the node's remote shell "
                       "(remote_console, rpc, iex --remsh) that writes a SOURCE file, where no "
                       "new distribution connection is allowed")
    p.add_argument("--elixir", action="store_true", help="Elixir syntax (bin/app rpc, iex)")
    p.add_argument("-o", "--output", metavar="PATH", help="the file the line writes on the "
                   "node's host (default /tmp/beamalloc-snippet-OSPID.etf)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """The line on stdout, alone (so that it can be piped or copied whole); where to paste it
    on stderr, unless --quiet."""
    from beamalloc.collector.snippet import elixir_expression, erlang_expression, how_to_paste

    path = args.output
    if path and ("'" in path or "\n" in path):
        raise InputError("snippet -o: the path must hold no single quote or newline (the "
                         "line is pasted inside '...')")
    print(elixir_expression(path) if args.elixir else erlang_expression(path), file=ctx.stdout)
    ctx.term.note(f"beamalloc: {how_to_paste(args.elixir)}")
    return 0
