"""`beamalloc`: one command, one subcommand per stage (docs/design.md, "Conventions").

Exit codes: 0 success, 2 bad input or usage (one line on stderr), 3 node unreachable,
authentication failed or timed out.

Startup: this module imports only what building the parser needs (its defaults come from
beamalloc/limits.py); each `cmd_*` imports its own stages, so a command pays for what it runs
and `beamalloc --version` for almost nothing (tests/bench/bench_startup.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from beamalloc.console import Progress, clean, configure, note, say, short, wide_console
from beamalloc.errors import InputError, NodeUnavailable
from beamalloc.limits import CARRIERS_EVERY, FORMATS, MAX_CARRIERS, MAX_PROCESSES
from beamalloc.units import apply_ranges

if TYPE_CHECKING:
    from beamalloc.collector.processes import ProcessTable
    from beamalloc.snapshot import Snapshot

#: `analyze` and `recommend` are short by default (issue 26 item 2).
DETAILS_HELP = "print every table and section, not only the answer and what it rests on"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # main() says "beamalloc: " once; a subcommand names itself after it
        sub = self.prog.partition(" ")[2]
        hint = f"beamalloc {sub} --help" if sub else "beamalloc --help"
        raise InputError(f"{sub + ': ' if sub else ''}{message} (see {hint})")


def load(source: str, args: argparse.Namespace) -> Snapshot:
    """A node name (has '@') is snapshotted live; anything else is read as a file."""
    from beamalloc.collector import sources

    if sources.is_node_name(source):
        from beamalloc.collector import cookie, live

        secret = cookie.resolve_cookie(getattr(args, "cookie_file", None))
        snap = live.snapshot_node(source, secret, timeout=args.timeout,
                                  max_carriers=getattr(args, "max_carriers", MAX_CARRIERS))
        if snap.carriers_unavailable:
            note(f"beamalloc: note: no per-carrier data: {snap.carriers_unavailable}")
        if snap.carriers_skipped:
            note(f"beamalloc: note: {snap.carriers_skipped} carriers not read "
                 f"(--max-carriers {args.max_carriers})")
        return snap
    return sources.read_file(source)


def _write(path: str | None, text: str) -> None:
    if path in (None, "-"):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    from beamalloc.files import atomic_write_text

    atomic_write_text(path, text)


def cmd_snapshot(args: argparse.Namespace) -> int:
    if args.cluster:
        return _snapshot_cluster(args)
    with Progress(f"reading {short(args.source)}"):
        snap = load(args.source, args)
    text = snap.to_json(indent=None if args.json or args.output else 1)
    if args.output:
        _write(args.output, text)
        if not args.json:
            note(f"wrote {args.output}: {snap.node}, {len(snap.allocators)} allocator "
                 f"instances ({snap.source})")
    if args.json or not args.output:
        _write(None, text)
    return 0


def _snapshot_cluster(args: argparse.Namespace) -> int:
    """`beamalloc snapshot NODE --cluster`: every member's snapshot, one failure line each."""
    from beamalloc.collector import cookie
    from beamalloc.collector.live import NodeError, NodeNameError
    from beamalloc.collector.session import snapshot_cluster
    from beamalloc.snapshot import Snapshot

    if "@" not in args.source:
        raise NodeNameError("--cluster needs a node name (app@host) as SOURCE")
    secret = cookie.resolve_cookie(args.cookie_file)
    with Progress(f"snapshotting the cluster of {args.source}"):
        results = snapshot_cluster(args.source, secret, args.timeout, args.max_carriers)
    snaps = {n: r for n, r in results.items() if isinstance(r, Snapshot)}
    if args.output:
        out = Path(args.output)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for n, s in snaps.items():
                (out / f"{n}.json").write_text(s.to_json(indent=1), encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot write to {out}: {e.strerror}") from None
        note(f"wrote {len(snaps)} snapshots to {out}")
    if args.json or not args.output:
        doc = {"schema": "beamalloc.cluster/1", "snapshots": [s.to_dict() for s in snaps.values()],
               "errors": {n: str(e) for n, e in results.items() if isinstance(e, NodeError)}}
        print(json.dumps(doc, indent=None if args.json else 1))
    for n, e in results.items():
        if isinstance(e, NodeError):
            print(f"beamalloc: {clean(f'{n}: {e}')}", file=sys.stderr)
    return 0 if len(snaps) == len(results) else NodeError.exit_code


def cmd_watch(args: argparse.Namespace) -> int:
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
                quiet=args.quiet, status_every=args.status_every)
    if args.prometheus:
        from beamalloc.timeseries.prometheus import serve

        _server, port = serve(args.prometheus, lambda: dict(w.status))
        host = args.prometheus.rpartition(":")[0] or "0.0.0.0"
        print(f"serving http://{host}:{port}/metrics", file=sys.stderr, flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: w.stop.set())
    note(f"watching {len(w.nodes)} node(s) every {args.interval:g} s into {path}")
    try:
        written = w.run(args.duration)
    except Exception as e:
        if isinstance(e, InputError):
            raise
        raise StoreError(f"cannot write to the store {path}: {e}") from None
    note(f"stopped: {written} samples written; {w.status_line()}")
    return 0


def process_table(source: str, args: argparse.Namespace) -> ProcessTable | None:
    """A live node's process table, read-only (the first of two reads: holders(earlier=)); None
    for other sources and with --no-processes."""
    from beamalloc.collector import sources

    if args.no_processes or not sources.is_node_name(source):
        return None
    from beamalloc.collector import cookie, processes

    return processes.scan_node(source, cookie.resolve_cookie(getattr(args, "cookie_file", None)),
                               timeout=args.timeout, max_processes=args.max_processes)


def holders(source: str, args: argparse.Namespace, snap: Snapshot,
            table: ProcessTable | None = None, earlier: ProcessTable | None = None
            ) -> dict[str, Any] | None:  # fmt: skip
    """The `processes` section for SOURCE (docs/processes.md): a live node's process scan
    (`table` when already read), judged idle against an `earlier` read where there is one, with
    `--gc-probe N` the one action of beamalloc that changes the node (announced on stderr
    before it starts); a crash dump's =proc sections; None for other sources, with
    --no-processes, or a dump read from stdin."""
    from beamalloc.analyzer.holders import probe_candidates, processes_json
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
        from beamalloc.collector import cookie, processes

        secret = cookie.resolve_cookie(getattr(args, "cookie_file", None))
        table = table or processes.scan_node(source, secret, timeout=args.timeout,
                                             max_processes=args.max_processes)
        probe = None
        if probe_n:
            pids = probe_candidates(table, probe_n, earlier)
            say(f"beamalloc: --gc-probe {probe_n}: garbage-collecting {len(pids)} idle "
                f"processes of {source} one at a time, measured before and after: this "
                "changes the node (the one beamalloc action that does)")
            probe = processes.gc_probe(source, secret, pids, timeout=args.timeout + len(pids))
        return processes_json(table, probe, earlier)
    if snap.source == "crashdump" and source != "-":  # the dump itself, not its snapshot JSON
        from beamalloc.collector.crashdump import MAGIC
        from beamalloc.collector.procdump import read_procdump

        try:
            with open(source, "rb") as f:
                if not f.read(len(MAGIC)).startswith(MAGIC.encode()):
                    return None
            return processes_json(read_procdump(source))
        except OSError as e:
            raise InputError(f"cannot read {source}: {e.strerror}") from None
    return None


def ets_tables(source: str, args: argparse.Namespace, snap: Snapshot) -> None:
    """A live node's ETS tables, read-only (collector/ets.py), into its snapshot where a dump
    keeps its =ets sections: the holders of the ets category. Not with --no-processes."""
    from beamalloc.collector import sources

    if args.no_processes or not sources.is_node_name(source):
        return
    from beamalloc.collector import cookie
    from beamalloc.collector.ets import scan_ets

    snap.extra["ets"] = scan_ets(source, cookie.resolve_cookie(getattr(args, "cookie_file", None)),
                                 timeout=args.timeout)


def cmd_analyze(args: argparse.Namespace) -> int:
    from beamalloc.analyzer.analysis import analyze

    with Progress(f"analyzing {short(args.source)}") as p:
        p.step("reading the allocators")
        snap = load(args.source, args)
        p.step("reading the processes and ETS tables")
        ets_tables(args.source, args, snap)
        result = analyze(snap, processes=holders(args.source, args, snap))
    if args.json:
        _write(None, json.dumps(result, indent=1))
        return 0

    from beamalloc.analyzer.recommend import recommend
    from beamalloc.reporters.analyze import render

    with Progress(f"analyzing {short(args.source)}") as p:  # its verdict's line comes first
        p.step("judging it")
        v = recommend(snap, processes=result["processes"])["verdict"]
    render(result, wide_console(), top=args.top, verdict=v, details=args.details)
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    import tempfile
    import time

    from beamalloc.analyzer.predict import TURNOVER_SECONDS, measure_turnover
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
        snap = load(args.source, args)
        p.step("reading the processes and ETS tables")
        if getattr(args, "gc_probe", 0) and (not live or args.no_processes):
            holders(args.source, args, snap)  # its one-line refusal
        first = process_table(args.source, args)  # the same moment as the snapshot
        procs = None
        ets_tables(args.source, args, snap)
    with tempfile.TemporaryDirectory(prefix="beamalloc-recommend-") as tmp:
        if args.trace_for is not None:
            trace = _record_trace(args, Path(tmp) / "node.batr")
        rate, why, turn = None, None, None
        trades = speed_trades(snap)
        if args.rate_from:  # an earlier sample of the same node: a watch series, another snapshot
            earlier = load(args.rate_from, args)
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
            with Progress(f"recommending for {short(args.source)}") as p:
                p.step(f"waiting {wait:g} s for the rates")
                time.sleep(wait)
                earlier, snap = snap, load(args.source, args)
                # idle is what did nothing between the reads (issue 24 item 6)
                procs = holders(args.source, args, snap, earlier=first) if first else None
            rate, why = carrier_rate(earlier, snap)
            turn = measure_turnover(earlier, snap)
        elif live and trades:
            why = "--rate-seconds 0: no rate measured, so no speed-trade flag"
        elif live:
            why = "no speed-trade rule fires on this node, so no rate was measured"
        if procs is None:  # one read: a live node's scan above, a crash dump's =proc sections
            procs = holders(args.source, args, snap, table=first)
        with Progress(f"recommending for {short(args.source)}") as p:
            p.step("replaying each candidate flag set" if not args.no_predict
                   else "applying the rules")
            result = recommend(snap, given_flags=args.flags_in_use,
                               predict=not args.no_predict, rate=rate, rate_unavailable=why,
                               trace=trace, processes=procs, turnover=turn)
    if args.json:
        from beamalloc.reporters.recommend import paste

        _write(None, json.dumps({**result, "paste": paste(result, args.format)}, indent=1))
        return 0
    from beamalloc.reporters.recommend import render

    render(result, wide_console(), fmt=args.format, details=args.details)
    return 0


#: `recommend --trace-for` records at most this long: block tracing costs the node CPU.
MAX_TRACE_FOR = 600.0


def _record_trace(args: argparse.Namespace, path: Path) -> Path | None:
    """`beamalloc trace --node NODE --duration S -o PATH`, for `recommend --trace-for S`; None
    (and one line on stderr: the prediction then replays a fitted workload) where eBPF is not
    available here."""
    from beamalloc.ebpf.errors import EbpfUnavailable
    from beamalloc.ebpf.run import Options, run

    note(f"tracing {args.source}'s allocations for {args.trace_for:g} s with eBPF "
         "(docs/ebpf.md) to replay them from its carriers")
    opts = Options(node=args.source, duration=args.trace_for, output=str(path), quiet=True,
                   libc=False, cookie_file=args.cookie_file, timeout=args.timeout)
    try:
        run(opts)
    except (EbpfUnavailable, OSError) as e:
        print(f"no trace: {e}; the prediction replays a workload fitted to the snapshot",
              file=sys.stderr)
        return None
    return path


def cmd_report(args: argparse.Namespace) -> int:
    from beamalloc.analyzer.analysis import analyze
    from beamalloc.reporters.html import write_report

    with Progress("writing the report") as p:
        snaps, analyses = [], []
        for n, source in enumerate(args.sources, 1):
            p.step(f"reading {short(source)} ({n} of {len(args.sources)})")
            snaps.append(load(source, args))
            ets_tables(source, args, snaps[-1])
            analyses.append(analyze(snaps[-1], processes=holders(source, args, snaps[-1])))
        p.step(f"rendering {args.output}")
        write_report(analyses, args.output, snapshots=snaps)
    note(f"wrote {args.output}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from beamalloc.refalloc.replay import replay_snapshot
    from beamalloc.reporters.replay import render

    if args.schedulers is not None and args.schedulers < 1:
        raise InputError(f"--schedulers must be at least 1, got {args.schedulers}")
    flag_sets = [args.flags or "", *(args.compare or [])]
    results = []
    with Progress(f"replaying {short(args.trace)}") as p:
        for n, f in enumerate(flag_sets, 1):
            p.step(f"flag set {n} of {len(flag_sets)}: {f or '(defaults)'}")
            results.append(replay_snapshot(args.trace, f, schedulers=args.schedulers,
                                           sample_every_ns=int(args.sample_ms * 1e6)))
    if args.json:
        _write(None, json.dumps({"runs": [r.to_run() for r in results]}, indent=1))
        return 0
    render(results, wide_console())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from beamalloc.timeseries.store import default_path
    from beamalloc.webui.app import serve

    token = args.token or os.environ.get("BEAMALLOC_TOKEN") or None
    port = args.port if args.port != 0 else _free_port(args.host)
    serve(args.store or str(default_path()), args.host, port, token)
    return 0


def _free_port(host: str) -> int:
    """`serve --port 0`: a port the OS picks, as `watch --prometheus HOST:0` does. It is bound
    here and released just before the web server binds it again (the server prints it); should
    another process take it in between, the server says it cannot listen, in one line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    except OSError as e:
        raise InputError(f"cannot listen on {host}: {e.strerror or e}") from None


def cmd_demo(args: argparse.Namespace) -> int:
    from beamalloc.cli.demo import run_demo

    return run_demo(report_path=args.report, keep_node=args.keep_node)


def cmd_trace(args: argparse.Namespace) -> int:
    from beamalloc.ebpf.errors import EbpfUnavailable
    from beamalloc.ebpf.run import Options, run

    opts = Options(pid=args.pid, node=args.node, duration=args.duration, output=args.output,
                   level=args.level, sample=args.sample,
                   slice_s=args.slice_ms / 1000, max_overhead=args.max_overhead,
                   libc=not args.no_libc, cookie_file=args.cookie_file, timeout=args.timeout,
                   quiet=args.quiet)
    try:
        doc = run(opts)
    except EbpfUnavailable:
        raise
    except OSError as e:
        raise EbpfUnavailable(f"trace failed: {e}") from None
    if args.json:
        print(json.dumps(doc))
    elif not args.output:
        from beamalloc.reporters.trace import render

        render(doc, wide_console())
    return 0


def cmd_snippet(args: argparse.Namespace) -> int:
    import contextlib
    import io

    from beamalloc.collector.snippet import cli

    if not args.quiet:
        return cli(args)
    with contextlib.redirect_stderr(io.StringIO()):  # --quiet: the line alone, not where it goes
        return cli(args)


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def _process_options(p: argparse.ArgumentParser, probe: bool = True) -> None:
    """Who holds the memory (docs/processes.md): a live node's processes are read, read-only,
    unless --no-processes; --gc-probe is the one option that changes the node."""
    p.add_argument("--no-processes", action="store_true", help="do not read the processes (nor "
                   "the ETS tables) of a live node or the process sections of a crash dump")
    p.add_argument("--max-processes", type=_positive, default=MAX_PROCESSES, metavar="N",
                   help=f"read at most N processes of a live node: the registered ones and a "
                   f"fair sample of the rest (default {MAX_PROCESSES:,})")
    if probe:
        p.add_argument("--gc-probe", type=_non_negative, default=0, metavar="N",
                       help="CHANGES THE NODE: garbage-collect its N strongest idle holders, one "
                       "at a time, and measure what each releases (default 0: none)")


def _positive(text: str) -> int:
    n = _non_negative(text)
    if n == 0:
        raise argparse.ArgumentTypeError("must be 1 or more, got 0")
    return n


def _node_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cookie-file",
        metavar="FILE",
        help="file holding the Erlang cookie (else $BEAMALLOC_COOKIE, "
        "else ~/.erlang.cookie); the cookie never appears in argv or output",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="give up on a node after this many seconds (default 10)",
    )
    p.add_argument(
        "--max-carriers",
        type=_non_negative,
        default=MAX_CARRIERS,
        metavar="N",
        help="read at most N carriers of a live node with OTP's instrument:carriers/1, "
        f"whole allocator instances, largest first (default {MAX_CARRIERS}; 0: none)",
    )
    # How our hidden node reaches the node (docs/access.md); else $BEAMALLOC_PROTO_DIST,
    # $BEAMALLOC_SSL_DIST_OPTFILE, $ERL_EPMD_PORT, $BEAMALLOC_DIST_PORT.
    p.add_argument("--proto-dist", metavar="MOD", help="the node's -proto_dist: inet_tls (TLS), "
                   "inet6_tcp (IPv6), inet6_tls (default inet_tcp)")
    p.add_argument("--ssl-dist-optfile", metavar="FILE", help="the TLS option file the node's "
                   "cluster uses (-ssl_dist_optfile); alone, it means --proto-dist inet_tls")
    p.add_argument("--epmd-port", type=int, metavar="PORT",
                   help="epmd listens on PORT, here and on the node's host (ERL_EPMD_PORT)")
    p.add_argument("--dist-port", type=int, metavar="PORT", help="the node runs without epmd "
                   "(-start_epmd false -erl_epmd_port PORT): connect to PORT directly")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, each given the options every command has."""
    parser = _commands()
    parser.add_argument("--version", action=_Version,
                        help="print the version of the installed beamalloc package and exit")
    _terminal_options(parser, top=True)
    for action in parser._actions:  # argparse has no public walk of its subcommands
        if isinstance(action, argparse._SubParsersAction):
            for p in action.choices.values():
                _terminal_options(p, top=False)
    return parser


class _Version(argparse.Action):
    """argparse's "version" action, the version read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        print(f"beamalloc {version()}")
        parser.exit()


def version() -> str:
    """The package's version: beamalloc/__init__.py, which setup.cfg's [metadata] reads, so it
    is the installed distribution's too."""
    import beamalloc

    return beamalloc.__version__


def _terminal_options(p: argparse.ArgumentParser, top: bool) -> None:
    """--quiet and --no-color, before or after the subcommand (beamalloc/console.py). On a
    subcommand their default is "not given", so one given before it is not undone."""
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="no progress, notes or \"wrote FILE\" lines on stderr (errors still)")
    p.add_argument("--no-color", action="store_true", default=default,
                   help="no colours (also when $NO_COLOR is set, or output is not a terminal)")


def _commands() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="beamalloc",
        description="Why does a BEAM node hold more memory than it uses, "
        "and which +M flags fix it.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    source_help = (
        "a node name (app@host) or a file: beamalloc JSON, a recon_alloc snapshot "
        "file, an allocator dump, an erl_crash.dump or a `beamalloc snippet` file ('-' reads "
        "standard input)"
    )
    p = sub.add_parser("snapshot", help="snapshot a node or convert a file to beamalloc JSON")
    p.add_argument("source", metavar="SOURCE", help=source_help)
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON snapshot here")
    p.add_argument("--json", action="store_true", help="print the JSON snapshot to stdout")
    p.add_argument(
        "--cluster",
        action="store_true",
        help="SOURCE is a node: snapshot it and every node it is connected to, in parallel "
        "(-o is then a directory, one NODE.json per node)",
    )
    _node_options(p)
    p.set_defaults(func=cmd_snapshot)

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
    p.add_argument("--retain", type=float, metavar="DAYS", help="delete samples older than this")
    p.add_argument("--cluster", action="store_true",
                   help="also watch every node the given nodes are connected to")
    p.add_argument("--duration", type=float, metavar="S", help="stop after this many seconds")
    p.add_argument("--status-every", type=float, metavar="S",
                   help="when stderr is a log, not a terminal: a status line (nodes sampled, "
                   "spread, rows written) every S seconds (default 60 or the interval, the "
                   "longer; --quiet: none)")
    _node_options(p)
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("analyze", help="usage, fragmentation and carriers, recon-exact and more")
    p.add_argument("source", metavar="SOURCE", help=source_help)
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
    _node_options(p)
    _process_options(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("recommend", help="the +M flags to set, each with its rule, numbers, cost")
    p.add_argument("source", metavar="SOURCE", help=source_help)
    p.add_argument("--format", default="vm.args",
                   choices=FORMATS,
                   help="where the flags go (default vm.args)")  # fmt: skip
    p.add_argument("--flags-in-use", metavar="FLAGS",
                   help="the node's +M flags as written (e.g. from vm.args), to lint them")
    p.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    p.add_argument("--details", action="store_true", help=DETAILS_HELP)
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
    _node_options(p)
    _process_options(p)
    p.set_defaults(func=cmd_recommend)

    p = sub.add_parser("report", help="write a self-contained HTML report")
    p.add_argument("sources", metavar="SOURCE", nargs="+", help=source_help)
    p.add_argument("-o", "--output", metavar="FILE", default="report.html",
                   help="the HTML file to write (default report.html)")
    _node_options(p)
    _process_options(p, probe=False)
    p.set_defaults(func=cmd_report)

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
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("serve", help="the web UI over the watch store, uploads and compare")
    p.add_argument("--store", metavar="DB",
                   help="SQLite file written by watch (default $XDG_DATA_HOME/beamalloc/watch.db)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else needs --token)")
    p.add_argument("--port", type=int, default=8050,
                   help="port to listen on (default 8050; 0: one the OS picks, printed)")
    p.add_argument("--token", metavar="TOKEN",
                   help="required on every request (else $BEAMALLOC_TOKEN); needed off loopback")
    p.set_defaults(func=cmd_serve)

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
    _node_options(p)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("snippet", help="one line to paste into the node's remote shell "
                       "(remote_console, rpc, iex --remsh) that writes a SOURCE file, where no "
                       "new distribution connection is allowed")
    p.add_argument("--elixir", action="store_true", help="Elixir syntax (bin/app rpc, iex)")
    p.add_argument("-o", "--output", metavar="PATH", help="the file the line writes on the "
                   "node's host (default /tmp/beamalloc-snippet-OSPID.etf)")
    p.set_defaults(func=cmd_snippet)

    p = sub.add_parser(
        "demo", help="a stale +MBas bf judged, the advised flags measured on a second node, "
                     "then a case no flag helps; writes demo-report.html"
    )
    p.add_argument("--report", default="demo-report.html", metavar="FILE",
                   help="the HTML report to write (default demo-report.html)")
    p.add_argument("--keep-node", action="store_true", help="leave the demo node running")
    p.set_defaults(func=cmd_demo)
    _diff_parser(sub, source_help)  # `beamalloc diff`: its block is below
    return parser


# ---- `beamalloc diff` (issue 15 item 2): parser and cmd_diff, kept together ---------------------


def _diff_parser(sub: Any, source_help: str) -> None:
    p = sub.add_parser("diff", help="before and after a change: per allocator carriers, used, "
                       "unused, RSS, the +M flags that changed, and whether it helped")
    p.add_argument("sources", metavar="SOURCE", nargs="*",
                   help=f"A (before) and B (after), each {source_help}")
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
    _node_options(p)
    p.set_defaults(func=cmd_diff)


def _diff_time(name: str, text: str | None) -> float | None:
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


def _diff_store_pair(args: argparse.Namespace) -> tuple[Snapshot, Snapshot, str, str]:
    from datetime import UTC, datetime

    from beamalloc.timeseries.store import Store, StoreError, default_path

    start, end = _diff_time("--from", args.start), _diff_time("--to", args.end)
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


def cmd_diff(args: argparse.Namespace) -> int:
    from beamalloc.analyzer.diff import diff

    if args.node is not None:
        if args.sources:
            raise InputError("diff takes either two SOURCEs or --node NODE (the store's first "
                             "and last snapshot), not both")
        a, b, la, lb = _diff_store_pair(args)
    else:
        if len(args.sources) != 2 or any(x is not None for x in (args.store, args.start, args.end)):
            raise InputError("diff takes two SOURCEs (A before, B after), or --node NODE "
                             "[--store DB] [--from T] [--to T]")
        if args.sources == ["-", "-"]:
            raise InputError("only one of A and B can be standard input ('-')")
        a, b = (load(s, args) for s in args.sources)
        la, lb = args.sources
    result = diff(a, b, (la, lb))
    if args.json:
        _write(None, json.dumps(result, indent=1))
        return 0
    from beamalloc.reporters.diff import render

    render(result, wide_console())
    return 0


# ---- end of `beamalloc diff` ----------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    run: Callable[[argparse.Namespace], int]
    try:
        parser = apply_ranges(build_parser())  # docs/robustness.md, "Ranges"
        args = parser.parse_args(argv)
        configure(quiet=args.quiet, no_color=args.no_color)
        if args.command is None:  # `beamalloc` alone: the commands, not an error
            parser.print_help()
            return 0
        if hasattr(args, "proto_dist"):  # a command that may connect: how (docs/access.md)
            from beamalloc.collector import access

            access.configure(access.from_args(args))
        run = args.func
        return run(args)
    except (InputError, NodeUnavailable) as e:
        print(f"beamalloc: {_one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("beamalloc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _one_line(e: Any) -> str:
    """The error as one printable line (console.clean: a message may quote a peer or a file)."""
    return clean(" ".join(str(e).split())) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
