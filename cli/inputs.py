"""What several commands read from a SOURCE given on the command line: its snapshot, and for a
live node or a crash dump its processes and ETS tables (the holders, docs/processes.md). Each
reads its options off the command's arguments and reaches a node with the run's access."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from beamalloc.console import note, say
from beamalloc.errors import InputError
from beamalloc.limits import MAX_CARRIERS

if TYPE_CHECKING:
    from beamalloc.cli.context import Context
    from beamalloc.collector.processes import ProcessTable
    from beamalloc.snapshot import Snapshot


def _cookie(args: argparse.Namespace, ctx: Context) -> str:
    """The run's cookie, resolved once into its access (collector/access.py Access.cookie):
    the snapshot, the scans and the probe of one command present the one cookie read once."""
    if ctx.access is None:  # a Context built without one (main() builds it for node commands)
        from beamalloc.collector.access import from_args

        ctx.access = from_args(args)
    return ctx.access.cookie()


def load(source: str, args: argparse.Namespace, ctx: Context) -> Snapshot:
    """A node name (has '@') is snapshotted live; anything else is read as a file."""
    from beamalloc.collector import sources

    if sources.is_node_name(source):
        from beamalloc.collector import live

        secret = _cookie(args, ctx)
        snap = live.snapshot_node(source, secret, timeout=args.timeout,
                                  max_carriers=getattr(args, "max_carriers", MAX_CARRIERS),
                                  access=ctx.access)
        if snap.carriers_unavailable:
            note(f"beamalloc: note: no per-carrier data: {snap.carriers_unavailable}")
        if snap.carriers_skipped:
            note(f"beamalloc: note: {snap.carriers_skipped} carriers not read "
                 f"(--max-carriers {args.max_carriers})")
        return snap
    if source == "-" or getattr(args, "no_processes", True):  # no holders() for these
        return sources.read_file(source)
    from beamalloc.analyzer.holders import DumpMembers
    from beamalloc.collector.procdump import ProcSections

    procs = ProcSections(keep=DumpMembers())  # a dump's processes: only what holders() uses
    # One at a time (Context.dump_procs): holders() then reads an earlier dump again, as it
    # always did, and a dump never asked for its holders (--rate-from) keeps no table.
    ctx.dump_procs = None
    snap = sources.read_file(source, procs=procs)
    if procs.fed:  # a crash dump
        ctx.dump_procs = (snap, procs)
    return snap


def process_table(source: str, args: argparse.Namespace, ctx: Context) -> ProcessTable | None:
    """A live node's process table, read-only (the first of two reads: holders(earlier=)); None
    for other sources and with --no-processes."""
    from beamalloc.collector import sources

    if args.no_processes or not sources.is_node_name(source):
        return None
    from beamalloc.collector import processes

    return processes.scan_node(source, _cookie(args, ctx),
                               timeout=args.timeout, max_processes=args.max_processes,
                               access=ctx.access)


def holders(source: str, args: argparse.Namespace, ctx: Context, snap: Snapshot,
            table: ProcessTable | None = None, earlier: ProcessTable | None = None
            ) -> dict[str, Any] | None:  # fmt: skip
    """The `processes` section for SOURCE (docs/processes.md): a live node's process scan
    (`table` when already read), judged idle against an `earlier` read where there is one, with
    `--gc-probe N` the one action of beamalloc that changes the node (announced on stderr
    before it starts); a crash dump's =proc sections; None for other sources, with
    --no-processes, or a dump read from stdin."""
    from beamalloc.analyzer.holders import DumpMembers, probe_candidates, processes_json
    from beamalloc.collector import sources

    probe_n = getattr(args, "gc_probe", 0)
    live = sources.is_node_name(source)
    if probe_n and not live:
        raise InputError(f"--gc-probe takes a live node (name@host), not {source!r}")
    if probe_n and args.no_processes:
        raise InputError("--gc-probe needs the process scan: drop --no-processes")
    if args.no_processes:
        return None
    if live:
        from beamalloc.collector import processes

        table = table or process_table(source, args, ctx)
        assert table is not None  # a live node, and --no-processes returned above
        probe = None
        if probe_n:
            secret = _cookie(args, ctx)
            pids = probe_candidates(table, probe_n, earlier)
            say(f"beamalloc: --gc-probe {probe_n}: garbage-collecting {len(pids)} idle "
                f"processes of {source} one at a time, measured before and after: this "
                "changes the node (the one beamalloc action that does)")
            probe = processes.gc_probe(source, secret, pids, timeout=args.timeout + len(pids),
                                       access=ctx.access)
        return processes_json(table, probe, earlier)
    if snap.source == "crashdump" and source != "-":  # the dump itself, not its snapshot JSON
        from beamalloc.collector.crashdump import MAGIC
        from beamalloc.collector.dumpscan import line_of
        from beamalloc.collector.procdump import read_procdump

        read, ctx.dump_procs = ctx.dump_procs, None
        try:
            with open(source, "rb") as f:
                if not f.read(len(MAGIC)).startswith(MAGIC.encode()):
                    return None
            if read is not None and read[0] is snap:  # read with the allocators, in one pass
                sums = read[1].keep
                return processes_json(read[1].table(None, lambda at: line_of(source, at)),
                                      sums=sums if isinstance(sums, DumpMembers) else None)
            return processes_json(read_procdump(source))
        except OSError as e:
            raise InputError(f"cannot read {source}: {e.strerror}") from None
    return None


def ets_tables(source: str, args: argparse.Namespace, ctx: Context, snap: Snapshot) -> None:
    """A live node's ETS tables, read-only (collector/ets.py), into its snapshot where a dump
    keeps its =ets sections: the holders of the ets category. Not with --no-processes."""
    from beamalloc.collector import sources

    if args.no_processes or not sources.is_node_name(source):
        return
    from beamalloc.collector.ets import scan_ets

    snap.extra["ets"] = scan_ets(source, _cookie(args, ctx),
                                 timeout=args.timeout, access=ctx.access)
