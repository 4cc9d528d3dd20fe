"""`beamalloc demo`: what the tool is for, on real nodes (the workflow: cli/demo.py)."""

from __future__ import annotations

import argparse
from typing import Any

from beamalloc.cli.context import Context


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="a stale +MBas bf judged, the advised flags measured on a second node, "
                     "then a case no flag helps; writes demo-report.html"
    )
    p.add_argument("--report", default="demo-report.html", metavar="FILE",
                   help="the HTML report to write (default demo-report.html)")
    p.add_argument("--keep-node", action="store_true", help="leave the demo node running")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.cli.demo import run_demo

    return run_demo(ctx.term, report_path=args.report, keep_node=args.keep_node)
