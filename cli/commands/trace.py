"""`beamalloc trace`: follow a live beam.smp with eBPF (ebpf/run.py): a summary or a trace
file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.cli.options import node_options


def add_parser(sub: Any) -> None:
    p = sub.add_parser("trace", help="follow a live beam.smp with eBPF: a summary or a trace file")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", type=int, help="the beam.smp process to follow")
    who.add_argument("--node", metavar="NODE", help="a node on this host (its options and "
                     "type table go into the trace header)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds "
                   "(else at Ctrl-C, SIGTERM or the node's end)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--summary", action="store_true", help="print per-allocator tables "
                      "(the default)")
    what.add_argument("-o", "--output", metavar="TRACE", help="write every alloc_util call "
                      "to TRACE (docs/trace-format.md)")
    p.add_argument("--level", choices=("block", "carrier", "all"), default="block",
                   help="block: every alloc_util call; carrier: mmap/mseg/sys_alloc/libc only "
                   "(cheap); all: both (summary only; default block)")
    p.add_argument("--sample", type=float, metavar="F", help="attach the block probes for a "
                   "fraction F of the time (time slices) and scale the counts")
    p.add_argument("--slice-ms", type=float, default=1000.0, metavar="MS",
                   help="length of one attached slice when sampling (default 1000)")
    p.add_argument("--max-overhead", type=float, metavar="PCT", help="sample so that the "
                   "probes cost about PCT %% of the machine")
    p.add_argument("--no-libc", action="store_true", help="carrier level without libc "
                   "malloc/free probes")
    p.add_argument("--json", action="store_true", help="print the summary (or the trace's "
                   "counts) as JSON")
    node_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.ebpf.errors import EbpfUnavailable
    from beamalloc.ebpf.run import Options, run

    opts = Options(pid=args.pid, node=args.node, duration=args.duration, output=args.output,
                   level=args.level, sample=args.sample,
                   slice_s=args.slice_ms / 1000, max_overhead=args.max_overhead,
                   libc=not args.no_libc, cookie_file=args.cookie_file, timeout=args.timeout,
                   quiet=args.quiet, access=ctx.access, term=ctx.term)
    try:
        doc = run(opts)
    except EbpfUnavailable:
        raise
    except OSError as e:
        raise EbpfUnavailable(f"trace failed: {e}") from None
    if args.json:
        print(json.dumps(doc), file=ctx.stdout)
    elif not args.output:
        from beamalloc.reporters.trace import render

        render(doc, ctx.term.console())
    return 0
