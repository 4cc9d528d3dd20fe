"""`beamalloc analyze`: usage, fragmentation and carriers, with the verdict's line first."""

from __future__ import annotations

import argparse
import json
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
from beamalloc.console import short


def add_parser(sub: Any) -> None:
    p = sub.add_parser("analyze", help="usage, fragmentation and carriers, recon-exact and more")
    p.add_argument("source", metavar="SOURCE", help=SOURCE_HELP)
    p.add_argument(
        "--json", action="store_true", help="print the analysis as JSON (docs/analysis-schema.md)"
    )
    p.add_argument(
        "--top",
        type=int,
        default=20,
        metavar="N",
        help="instances to list with --details (default 20)",
    )
    p.add_argument("--details", action="store_true", help=DETAILS_HELP)
    p.add_argument("--bytes", action="store_true", help=BYTES_HELP)
    node_options(p)
    process_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.analyzer.analysis import analyze

    rd = reader(args, ctx)
    with ctx.term.progress(f"analyzing {short(args.source)}") as p:
        p.step("reading the allocators")
        snap = rd.load(args.source)
        p.step("reading the processes and ETS tables")
        rd.ets_tables(args.source, snap)
        result = analyze(snap, processes=rd.holders(args.source, snap))
    if args.json:
        ctx.write(None, json.dumps(result.to_json(), indent=1))
        return 0

    from beamalloc.advice.recommend import recommend
    from beamalloc.reporters.analyze import render
    from beamalloc.units import exact_bytes

    # its verdict's line comes first
    with ctx.term.progress(f"analyzing {short(args.source)}") as p:
        p.step("judging it")
        v = recommend(snap, processes=result.processes).records.verdict
    with exact_bytes(args.bytes):  # the rendering's sizes; the verdict's words stay as said
        render(result, ctx.term.console(), top=args.top, verdict=v, details=args.details)
    return 0
