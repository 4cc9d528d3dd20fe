"""`beamalloc snapshot`: a node's snapshot, or a file converted to beamalloc JSON; with
--cluster, every node of the cluster."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from beamalloc.cli.context import Context
from beamalloc.cli.inputs import reader
from beamalloc.cli.options import SOURCE_HELP, node_options
from beamalloc.console import clean, short
from beamalloc.errors import InputError
from beamalloc.gcpause import paused_gc


def add_parser(sub: Any) -> None:
    p = sub.add_parser("snapshot", help="snapshot a node or convert a file to beamalloc JSON")
    p.add_argument("source", metavar="SOURCE", help=SOURCE_HELP)
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON snapshot here")
    p.add_argument("--json", action="store_true", help="print the JSON snapshot to stdout")
    p.add_argument(
        "--cluster",
        action="store_true",
        help="SOURCE is a node: snapshot it and every node it is connected to, in parallel "
        "(-o is then a directory, one NODE.json per node)",
    )
    node_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.cluster:
        return _cluster(args, ctx)
    # A snapshot is built and written at once, and nothing of it is cyclic: the cyclic
    # collector's passes over its ~150,000 objects (and the imports') would be for nothing.
    with paused_gc():
        with ctx.term.progress(f"reading {short(args.source)}"):
            snap = reader(args, ctx).load(args.source)
        text = snap.to_json(indent=None if args.json or args.output else 1)
    if args.output:
        ctx.write(args.output, text)
        if not args.json:
            ctx.term.note(f"wrote {args.output}: {snap.node}, {len(snap.allocators)} allocator "
                 f"instances ({snap.source})")
    if args.json or not args.output:
        ctx.write(None, text)
    return 0


def _cluster(args: argparse.Namespace, ctx: Context) -> int:
    """`beamalloc snapshot NODE --cluster`: every member's snapshot, one failure line each."""
    from beamalloc.collector import cookie
    from beamalloc.collector.live import NodeError, NodeNameError
    from beamalloc.collector.session import snapshot_cluster
    from beamalloc.snapshot import Snapshot

    if "@" not in args.source:
        raise NodeNameError("--cluster needs a node name (app@host) as SOURCE")
    secret = cookie.resolve_cookie(args.cookie_file)
    with ctx.term.progress(f"snapshotting the cluster of {args.source}"):
        results = snapshot_cluster(args.source, secret, args.timeout, args.max_carriers,
                                   access=ctx.access)
    snaps = {n: r for n, r in results.items() if isinstance(r, Snapshot)}
    if args.output:
        out = Path(args.output)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for n, s in snaps.items():
                (out / f"{n}.json").write_text(s.to_json(indent=1), encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot write to {out}: {e.strerror}") from None
        ctx.term.note(f"wrote {len(snaps)} snapshots to {out}")
    if args.json or not args.output:
        doc = {"schema": "beamalloc.cluster/1", "snapshots": [s.to_dict() for s in snaps.values()],
               "errors": {n: str(e) for n, e in results.items() if isinstance(e, NodeError)}}
        print(json.dumps(doc, indent=None if args.json else 1), file=ctx.stdout)
    for n, e in results.items():
        if isinstance(e, NodeError):
            print(f"beamalloc: {clean(f'{n}: {e}')}", file=ctx.stderr)
    return 0 if len(snaps) == len(results) else NodeError.exit_code
