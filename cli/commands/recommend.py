"""`beamalloc recommend`: the +M flags to set, each with its rule, numbers and cost.

The second read of a live node (carrier-call rates, turnover, idle processes) is a workflow of
this command and stays here: it waits, reads again and hands both reads to the stages. The
verdict judges the first read (the one the ETS tables and the first process table were read
with); the replays of its prediction need nothing of the second, so they run while the command
waits for it (docs/recommend.md, "What it costs")."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beamalloc.cli.context import Context
from beamalloc.cli.inputs import ets_tables, holders, load, process_table
from beamalloc.cli.options import (
    BYTES_HELP,
    DETAILS_HELP,
    SOURCE_HELP,
    node_options,
    process_options,
)
from beamalloc.console import Progress, note, short, wide_console
from beamalloc.errors import InputError
from beamalloc.limits import FORMATS

if TYPE_CHECKING:
    from beamalloc.analyzer.predict import Predictor

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
    import tempfile
    import time

    from beamalloc.analyzer.findings import facts
    from beamalloc.analyzer.predict import TURNOVER_SECONDS, Predictor, measure_turnover
    from beamalloc.analyzer.recommend import carrier_rate, recommend, speed_trades
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
    with Progress(f"recommending for {short(args.source)}") as p:
        p.step("reading the allocators")
        snap = load(args.source, args, ctx)
        p.step("reading the processes and ETS tables")
        if getattr(args, "gc_probe", 0) and (not live or args.no_processes):
            holders(args.source, args, ctx, snap)  # its one-line refusal
        first = process_table(args.source, args, ctx)  # the same moment as the snapshot
        procs = None
        ets_tables(args.source, args, ctx, snap)
    with tempfile.TemporaryDirectory(prefix="beamalloc-recommend-") as tmp, \
            contextlib.ExitStack() as stack:  # fmt: skip
        if args.trace_for is not None:
            trace = _record_trace(args, ctx, Path(tmp) / "node.batr")
        rate, why, turn = None, None, None
        pr = None
        trades = speed_trades(snap)
        if args.rate_from:  # an earlier sample of the same node: a watch series, another snapshot
            earlier = load(args.rate_from, args, ctx)
            rate, why = carrier_rate(earlier, snap)
            turn = measure_turnover(earlier, snap)  # and how fast it replaces its binaries
        elif live and args.rate_seconds > 0 and (trades or not args.no_predict):
            # A speed trade needs calls per second now, not over the node's life (issue 17);
            # the prediction, how fast the node replaces its blocks (issue 22).
            wait = args.rate_seconds if trades else min(args.rate_seconds, TURNOVER_SECONDS)
            what = (f"{', '.join(trades)} trade memory for speed" if trades
                    else "the prediction needs the node's turnover")  # fmt: skip
            note(f"{what}: sampling {args.source} again in {wait:g} s (--rate-seconds 0 "
                 "skips it)")  # fmt: skip
            if not args.no_predict:  # the first read's replays, while we wait for the second
                pr = stack.enter_context(Predictor(snap, facts(snap), trace=trace))
                ahead = _Ahead(pr, args.flags_in_use)
                stack.callback(ahead.join)
            with Progress(f"recommending for {short(args.source)}") as p:
                p.step(f"waiting {wait:g} s for the rates")
                time.sleep(wait)
                later = load(args.source, args, ctx)
                # idle is what did nothing between the reads (issue 24 item 6)
                procs = (holders(args.source, args, ctx, later, earlier=first) if first
                         else None)  # fmt: skip
            rate, why = carrier_rate(snap, later)
            turn = measure_turnover(snap, later)
            if pr is not None:
                ahead.join()
                pr.turnover = turn
        elif live and trades:
            why = "--rate-seconds 0: no rate measured, so no speed-trade flag"
        elif live:
            why = "no speed-trade rule fires on this node, so no rate was measured"
        if procs is None:  # one read: a live node's scan above, a crash dump's =proc sections
            procs = holders(args.source, args, ctx, snap, table=first)
        with Progress(f"recommending for {short(args.source)}") as p:
            p.step("replaying each candidate flag set" if not args.no_predict
                   else "applying the rules")
            result = recommend(snap, given_flags=args.flags_in_use,
                               predict=not args.no_predict, rate=rate, rate_unavailable=why,
                               trace=trace, processes=procs, turnover=turn, predictor=pr)
    if args.json:
        from beamalloc.reporters.recommend import paste

        ctx.write(None, json.dumps({**result, "paste": paste(result, args.format)}, indent=1))
        return 0
    from beamalloc.reporters.recommend import render
    from beamalloc.units import exact_bytes

    with exact_bytes(args.bytes):  # the rendering's sizes; the verdict's words stay as said
        render(result, wide_console(), fmt=args.format, details=args.details)
    return 0


class _Ahead:
    """The verdict on the first read alone, in a thread while the command waits for the second:
    it replays every flag set the rules propose into `pr`'s caches (refalloc releases the GIL),
    so the verdict on both reads replays only what the rates or the turnover change. Its
    result is dropped, its errors too: the verdict after the second read meets them again."""

    def __init__(self, pr: Predictor, given_flags: str | None) -> None:
        import threading

        self._thread = threading.Thread(target=self._run, args=(pr, given_flags), daemon=True,
                                        name="beamalloc-replays-ahead")  # fmt: skip
        self._thread.start()

    @staticmethod
    def _run(pr: Predictor, given_flags: str | None) -> None:
        from beamalloc.analyzer.recommend import verdict

        with contextlib.suppress(Exception):
            verdict(pr.snap, given_flags, trace=pr.trace, predictor=pr)

    def join(self) -> None:
        self._thread.join()


def _record_trace(args: argparse.Namespace, ctx: Context, path: Path) -> Path | None:
    """`beamalloc trace --node NODE --duration S -o PATH`, for `recommend --trace-for S`; None
    (and one line on stderr: the prediction then replays a fitted workload) where eBPF is not
    available here."""
    from beamalloc.ebpf.errors import EbpfUnavailable
    from beamalloc.ebpf.run import Options, run

    note(f"tracing {args.source}'s allocations for {args.trace_for:g} s with eBPF "
         "(docs/ebpf.md) to replay them from its carriers")
    opts = Options(node=args.source, duration=args.trace_for, output=str(path), quiet=True,
                   libc=False, cookie_file=args.cookie_file, timeout=args.timeout,
                   access=ctx.access)
    try:
        run(opts)
    except (EbpfUnavailable, OSError) as e:
        print(f"no trace: {e}; the prediction replays a workload fitted to the snapshot",
              file=ctx.stderr)
        return None
    return path
