"""`beamalloc report`: a self-contained HTML report of one or more sources."""

from __future__ import annotations

import argparse
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.cli.inputs import reader
from beamalloc.cli.options import BYTES_HELP, SOURCE_HELP, node_options, process_options
from beamalloc.console import short


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report")
    p.add_argument("sources", metavar="SOURCE", nargs="+", help=SOURCE_HELP)
    p.add_argument("-o", "--output", metavar="FILE", default="report.html",
                   help="the HTML file to write (default report.html)")
    p.add_argument("--bytes", action="store_true", help=BYTES_HELP)
    node_options(p)
    process_options(p, probe=False)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.analyzer.analysis import analyze
    from beamalloc.htmlreport.html import write_report
    from beamalloc.units import exact_bytes

    rd = reader(args, ctx)
    with ctx.term.progress("writing the report") as p:
        snaps, analyses = [], []
        for n, source in enumerate(args.sources, 1):
            p.step(f"reading {short(source)} ({n} of {len(args.sources)})")
            snaps.append(rd.load(source))
            rd.ets_tables(source, snaps[-1])
            analyses.append(analyze(snaps[-1], processes=rd.holders(source, snaps[-1])))
        p.step(f"rendering {args.output}")
        with exact_bytes(args.bytes):  # the pages' sizes (the recommender speaks human)
            write_report(analyses, args.output, snapshots=snaps)
    ctx.term.note(f"wrote {args.output}")
    return 0
