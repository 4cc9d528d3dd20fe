"""The reader of the SOURCEs a command names (advice/reading.py): its typed options read off
the command's arguments (a command without process options reads no holders), the run's access
and terminal from its Context."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from beamalloc.limits import MAX_CARRIERS, MAX_PROCESSES

if TYPE_CHECKING:
    from beamalloc.advice.reading import Reader
    from beamalloc.cli.context import Context


def reader(args: argparse.Namespace, ctx: Context) -> Reader:
    from beamalloc.advice.reading import Reader, ReadOptions

    opts = ReadOptions(timeout=args.timeout, cookie_file=getattr(args, "cookie_file", None),
                       max_carriers=getattr(args, "max_carriers", MAX_CARRIERS),
                       processes=not getattr(args, "no_processes", True),
                       max_processes=getattr(args, "max_processes", MAX_PROCESSES),
                       gc_probe=getattr(args, "gc_probe", 0), access=ctx.access)
    return Reader(opts, ctx.term)
