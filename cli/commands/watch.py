"""`beamalloc watch`: sample nodes every interval into the store (timeseries/watch.py)."""

from __future__ import annotations

import argparse
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.cli.options import node_options, process_options
from beamalloc.errors import InputError
from beamalloc.limits import CARRIERS_EVERY, PROCESSES_EVERY


def add_parser(sub: Any) -> None:
    p = sub.add_parser("watch", help="sample nodes every interval into the store")
    p.add_argument("nodes", metavar="NODE", nargs="+", help="node names (app@host)")
    p.add_argument("--interval", type=float, default=10.0, metavar="S",
                   help="seconds between samples of a node (default 10)")
    p.add_argument("--store", metavar="DB",
                   help="SQLite file (default $XDG_DATA_HOME/beamalloc/watch.db)")
    p.add_argument("--prometheus", metavar="HOST:PORT", help="serve /metrics here")
    p.add_argument("--carriers-every", type=int, default=CARRIERS_EVERY, metavar="N",
                   help="read per-carrier data (instrument:carriers/1) on every Nth sample of "
                   f"a node, the first included (default {CARRIERS_EVERY}; 0: never)")
    p.add_argument("--processes-every", type=float, default=PROCESSES_EVERY, metavar="S",
                   help="scan a node's processes (who holds the memory, read-only, as "
                   "`recommend` does) on its first sample and then every S seconds, for its "
                   f"snapshot pages (default {PROCESSES_EVERY:g}; 0: never)")
    p.add_argument("--retain", type=float, metavar="DAYS", help="delete samples older than this")
    p.add_argument("--cluster", action="store_true",
                   help="also watch every node the given nodes are connected to")
    p.add_argument("--duration", type=float, metavar="S", help="stop after this many seconds")
    p.add_argument("--status-every", type=float, metavar="S",
                   help="when stderr is a log, not a terminal: a status line (nodes sampled, "
                   "spread, rows written) every S seconds (default 60 or the interval, the "
                   "longer; --quiet: none)")
    node_options(p)
    process_options(p, probe=False)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    import signal

    from beamalloc.collector import cookie, live
    from beamalloc.timeseries.store import Store, StoreError, default_path
    from beamalloc.timeseries.watch import Watcher

    if not args.interval > 0:
        raise InputError("--interval must be a positive number of seconds")
    if args.carriers_every < 0:
        raise InputError(f"--carriers-every must be 0 or more, got {args.carriers_every}")
    if args.status_every is not None and not 0 < args.status_every <= 86400:  # NaN too
        raise InputError(f"--status-every must be more than 0 and at most 86400 seconds, "
                         f"got {args.status_every:g}")
    if args.retain is not None and not args.retain > 0:
        raise InputError("--retain must be a positive number of days")
    for n in args.nodes:
        live.split_node(n)
    secret = cookie.resolve_cookie(args.cookie_file)  # an unusable cookie: before any file
    path = args.store or default_path()
    try:  # open (create, migrate) it now: a store we cannot use is one line, said before all else
        Store(path).close()
    except OSError as e:
        why = ("a part of its path is a file, not a directory"
               if isinstance(e, FileExistsError) else e.strerror or str(e))
        raise StoreError(f"cannot open the store {path}: {why}") from None
    w = Watcher(list(dict.fromkeys(args.nodes)), secret,
                store_path=args.store, interval=args.interval, timeout=args.timeout,
                retain_days=args.retain, cluster=args.cluster,
                carriers_every=args.carriers_every, max_carriers=args.max_carriers,
                quiet=args.quiet, status_every=args.status_every, access=ctx.access,
                processes_every=0 if args.no_processes else args.processes_every,
                max_processes=args.max_processes)
    if args.prometheus:
        from beamalloc.timeseries.prometheus import serve

        _server, port = serve(args.prometheus, lambda: dict(w.status),
                              lambda: dict(w.scanner.latest), lambda: dict(w.scanner.latest_ets))
        host = args.prometheus.rpartition(":")[0] or "0.0.0.0"
        print(f"serving http://{host}:{port}/metrics", file=ctx.stderr, flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: w.stop.set())
    ctx.term.note(f"watching {len(w.nodes)} node(s) every {args.interval:g} s into {path}")
    try:
        written = w.run(args.duration)
    except Exception as e:
        if isinstance(e, InputError):
            raise
        raise StoreError(f"cannot write to the store {path}: {e}") from None
    ctx.term.note(f"stopped: {written} samples written; {w.status_line()}")
    return 0
