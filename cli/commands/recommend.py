"""`beamalloc recommend`: the +M flags to set, each with its rule, numbers and cost.

The command checks its options, builds the stage's typed options and renders what it returns;
the reads of the source (two of a live node, the replays run while it waits for the second) are
the stage's (advice/reading.py `recommend_source`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.cli.inputs import reader
from beamalloc.cli.options import (
    BYTES_HELP,
    DETAILS_HELP,
    SOURCE_HELP,
    node_options,
    process_options,
)
from beamalloc.errors import InputError
from beamalloc.limits import FORMATS

#: `recommend --trace-for` records at most this long: block tracing costs the node CPU.
MAX_TRACE_FOR = 600.0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("recommend", help="the +M flags to set, each with its rule, numbers, cost")
    p.add_argument("source", metavar="SOURCE", help=SOURCE_HELP)
    p.add_argument("--format", default="vm.args",
                   choices=FORMATS,
                   help="where the flags go (default vm.args)")  # fmt: skip
    p.add_argument("--flags-in-use", metavar="FLAGS",
                   help="the node's +M flags as written (e.g. from vm.args), to lint them")
    p.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    p.add_argument("--details", action="store_true", help=DETAILS_HELP)
    p.add_argument("--bytes", action="store_true", help=BYTES_HELP)
    p.add_argument("--no-predict", action="store_true", help="skip the replay of each flag set "
                   "on a trace synthesized from the snapshot (faster; then no flag is advised, "
                   "each is listed with why)")  # fmt: skip
    p.add_argument("--rate-seconds", type=float, default=5.0, metavar="S",
                   help="for a live node: sample it again after S seconds to measure carrier "
                   "calls per second, which speed-trade flags need (default 5; 0 skips)")
    p.add_argument("--rate-from", metavar="FILE", help="an earlier snapshot of the same node: "
                   "the carrier-call rate between it and SOURCE")  # fmt: skip
    trace = p.add_mutually_exclusive_group()
    trace.add_argument("--trace", metavar="TRACE", help="a block trace of the same node "
                       "(`beamalloc trace -o`): its own allocations replayed from its carriers "
                       "instead of a fitted workload")  # fmt: skip
    trace.add_argument("--trace-for", type=float, metavar="S", help="for a live node on this "
                       "host: record that trace for S seconds with eBPF (as root) first")
    node_options(p)
    process_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.advice.reading import RecommendOptions, recommend_source
    from beamalloc.collector.sources import is_node_name

    if args.rate_seconds < 0:
        raise InputError(f"--rate-seconds must be 0 or more, got {args.rate_seconds}")
    live = is_node_name(args.source)
    if args.trace_for is not None and not (live and 0 < args.trace_for <= MAX_TRACE_FOR):
        raise InputError("--trace-for takes a live node and 1 to "
                         f"{MAX_TRACE_FOR:g} seconds, got {args.trace_for:g}")  # fmt: skip
    trace = Path(args.trace) if args.trace else None
    if trace is not None:
        from beamalloc.trace import TraceError, read_header

        try:
            read_header(trace)
        except TraceError as e:
            raise InputError(str(e)) from None
    opts = RecommendOptions(flags_in_use=args.flags_in_use, predict=not args.no_predict,
                            rate_seconds=args.rate_seconds, rate_from=args.rate_from,
                            trace=trace, trace_for=args.trace_for)
    result = recommend_source(reader(args, ctx), args.source, opts)
    if args.json:
        from beamalloc.reporters.paste import paste  # without rich: --json draws nothing

        ctx.write(None, json.dumps({**result, "paste": paste(result, args.format)}, indent=1))
        return 0
    from beamalloc.reporters.recommend import render
    from beamalloc.units import exact_bytes

    with exact_bytes(args.bytes):  # the rendering's sizes; the verdict's words stay as said
        render(result, ctx.term.console(), fmt=args.format, details=args.details)
    return 0
