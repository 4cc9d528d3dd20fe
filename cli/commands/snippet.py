"""`beamalloc snippet`: one line to paste into the node's remote shell (collector/snippet.py)."""

from __future__ import annotations

import argparse
from typing import Any

from beamalloc.cli.context import Context


def add_parser(sub: Any) -> None:
    p = sub.add_parser("snippet", help="one line to paste into the node's remote shell "
                       "(remote_console, rpc, iex --remsh) that writes a SOURCE file, where no "
                       "new distribution connection is allowed")
    p.add_argument("--elixir", action="store_true", help="Elixir syntax (bin/app rpc, iex)")
    p.add_argument("-o", "--output", metavar="PATH", help="the file the line writes on the "
                   "node's host (default /tmp/beamalloc-snippet-OSPID.etf)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    import contextlib
    import io

    from beamalloc.collector.snippet import cli

    if not ctx.quiet:
        return cli(args)
    with contextlib.redirect_stderr(io.StringIO()):  # --quiet: the line alone, not where it goes
        return cli(args)
