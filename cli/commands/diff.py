"""`beamalloc diff` (issue 15 item 2): before and after a change, from two SOURCEs or from the
first and last stored snapshot of a node in the watch store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beamalloc.cli.context import Context
from beamalloc.cli.inputs import reader
from beamalloc.cli.options import SOURCE_HELP, node_options
from beamalloc.errors import InputError

if TYPE_CHECKING:
    from beamalloc.snapshot import Snapshot


def add_parser(sub: Any) -> None:
    p = sub.add_parser("diff", help="before and after a change: per allocator carriers, used, "
                       "unused, RSS, the +M flags that changed, and whether it helped")
    p.add_argument("sources", metavar="SOURCE", nargs="*",
                   help=f"A (before) and B (after), each {SOURCE_HELP}")
    p.add_argument("--node", metavar="NODE", help="instead of A and B: the first and the last "
                   "stored snapshot of NODE in the watch store")
    p.add_argument("--store", metavar="DB", help="with --node: the SQLite file written by watch "
                   "(default $XDG_DATA_HOME/beamalloc/watch.db)")
    p.add_argument("--from", dest="start", metavar="T", help="with --node: from this time (Unix "
                   "seconds or ISO 8601, e.g. 2026-11-23T18:00Z; default the first sample)")
    p.add_argument("--to", dest="end", metavar="T", help="with --node: up to this time (default "
                   "the last sample)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON "
                   "(docs/diff.md)")
    node_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from beamalloc.advice.diff import diff

    if args.node is not None:
        if args.sources:
            raise InputError("diff takes either two SOURCEs or --node NODE (the store's first "
                             "and last snapshot), not both")
        a, b, la, lb = _store_pair(args)
    else:
        if len(args.sources) != 2 or any(x is not None for x in (args.store, args.start, args.end)):
            raise InputError("diff takes two SOURCEs (A before, B after), or --node NODE "
                             "[--store DB] [--from T] [--to T]")
        if args.sources == ["-", "-"]:
            raise InputError("only one of A and B can be standard input ('-')")
        rd = reader(args, ctx)
        a, b = (rd.load(s) for s in args.sources)
        la, lb = args.sources
    result = diff(a, b, (la, lb))
    if args.json:
        ctx.write(None, json.dumps(result.to_json(), indent=1))
        return 0
    from beamalloc.reporters.diff import render

    render(result, ctx.term.console())
    return 0


def _time(name: str, text: str | None) -> float | None:
    from datetime import UTC, datetime

    from beamalloc.units import unix_time

    if text is None:
        return None
    try:
        return unix_time(name, text)
    except InputError:
        try:
            t = datetime.fromisoformat(text.strip())
        except ValueError:
            raise InputError(f"{name}: expected Unix seconds or an ISO 8601 time such as "
                             f"2026-11-23T18:00Z, got {text[:40]!r}") from None
        return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _store_pair(args: argparse.Namespace) -> tuple[Snapshot, Snapshot, str, str]:
    from datetime import UTC, datetime

    from beamalloc.timeseries.store import Store, StoreError, default_path

    start, end = _time("--from", args.start), _time("--to", args.end)
    path = Path(args.store) if args.store else default_path()
    if not path.exists():
        raise StoreError(f"no store at {path}: beamalloc watch --store {path} writes one")
    with Store(path, readonly=True) as st:
        if not st.list_nodes(only=args.node):
            raise StoreError(f"no node {args.node!r} in {path}")
        rows = st.snapshots(args.node, start, end)
        if len(rows) < 2:
            raise StoreError(f"{args.node} has {len(rows)} stored snapshot(s) in that range of "
                             f"{path}: diff needs two (watch keeps one every few samples)")
        a, b = st.snapshot(rows[0]["id"]), st.snapshot(rows[-1]["id"])

    def label(r: dict[str, Any]) -> str:
        t = datetime.fromtimestamp(r["t"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"store sample {r['id']} of {t}"
    return a, b, label(rows[0]), label(rows[-1])
