"""`beamalloc replay`: an allocation trace replayed through refalloc under flag sets."""

from __future__ import annotations

import argparse
import json
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.console import short
from beamalloc.errors import InputError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay an allocation trace through refalloc under flag sets")
    p.add_argument("trace", metavar="TRACE", help="a trace file (.batr binary or CSV)")
    p.add_argument(
        "--flags",
        default="",
        metavar="FLAGS",
        help='+M flags to replay under, e.g. "+MBas aobf +MBlmbcs 512" (default: none)',
    )
    p.add_argument(
        "--compare",
        nargs="+",
        action="extend",
        metavar="FLAGS",
        help="more flag sets, shown side by side after --flags",
    )
    p.add_argument(
        "--schedulers", type=int, metavar="N", help="scheduler count (default: the trace header's)"
    )
    p.add_argument(
        "--sample-ms",
        type=float,
        default=100.0,
        metavar="MS",
        help="footprint series interval in trace time (default 100 ms)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"runs": [{"flags", "snapshot", "analysis", "peak", "series"}]}',
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.refalloc.replay import replay_snapshot
    from beamalloc.reporters.replay import render

    if args.schedulers is not None and args.schedulers < 1:
        raise InputError(f"--schedulers must be at least 1, got {args.schedulers}")
    flag_sets = [args.flags or "", *(args.compare or [])]
    results = []
    with ctx.term.progress(f"replaying {short(args.trace)}") as p:
        for n, f in enumerate(flag_sets, 1):
            p.step(f"flag set {n} of {len(flag_sets)}: {f or '(defaults)'}")
            results.append(replay_snapshot(args.trace, f, schedulers=args.schedulers,
                                           sample_every_ns=int(args.sample_ms * 1e6)))
    if args.json:
        ctx.write(None, json.dumps({"runs": [r.to_run() for r in results]}, indent=1))
        return 0
    render(results, ctx.term.console())
    return 0
