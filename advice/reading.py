"""Reading a SOURCE for the advice: its snapshot, and for a live node or a crash dump its
holders (processes, ETS tables, docs/processes.md), with `--gc-probe N` the one action of
beamalloc that changes a node; and the two reads `recommend` makes of a live node (the
carrier-call rate, the turnover, idle processes) around the replays of its prediction.

The command line builds the typed options (`ReadOptions`, `RecommendOptions`) and hands this
stage the run's Terminal for its notes and progress lines (beamalloc/console.py); nothing here
reads argparse's namespace.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beamalloc.errors import InputError
from beamalloc.limits import MAX_CARRIERS, MAX_PROCESSES

if TYPE_CHECKING:
    from collections.abc import Callable

    from beamalloc.advice.predict import Predictor, Turnover
    from beamalloc.collector.access import Access
    from beamalloc.collector.procdump import ProcSections
    from beamalloc.collector.processes import ProcessTable
    from beamalloc.console import Terminal
    from beamalloc.flags import FlagSet
    from beamalloc.snapshot import Snapshot


@dataclass(frozen=True)
class ReadOptions:
    """How a source is read: the command line's node and process options."""

    #: seconds a live node has to answer each call
    timeout: float = 10.0
    #: where the cookie is (None: the environment's, collector/cookie.py)
    cookie_file: str | None = None
    #: carriers instrument:carriers/1 may list (0: none)
    max_carriers: int = MAX_CARRIERS
    #: read the holders (False: --no-processes, or a command without process options)
    processes: bool = False
    #: processes a live scan reads at most
    max_processes: int = MAX_PROCESSES
    #: idle processes to garbage-collect and measure (0: none; the one action that changes a node)
    gc_probe: int = 0
    #: how we reach the node (docs/access.md); None for the environment's
    access: Access | None = None


class Reader:
    """Reads sources with one set of options, saying its notes on `term`. It keeps the =proc
    sections of the crash dump `load` read last, gathered in the pass that read its
    allocators, until `holders` takes them (issue 28 item 1: a dump is read once); one at a
    time, its Snapshot kept beside them."""

    def __init__(self, opts: ReadOptions, term: Terminal) -> None:
        self.opts = opts
        self.term = term
        self._dump_procs: tuple[Snapshot, ProcSections] | None = None

    def _cookie(self) -> str:
        """The run's cookie, resolved once into its access (collector/access.py Access.cookie):
        the snapshot, the scans and the probe of one command present the one cookie read once."""
        if self.opts.access is not None:
            return self.opts.access.cookie()
        from beamalloc.collector import cookie

        return cookie.resolve_cookie(self.opts.cookie_file)

    def load(self, source: str) -> Snapshot:
        """A node name (has '@') is snapshotted live; anything else is read as a file."""
        from beamalloc.collector import sources

        o = self.opts
        if sources.is_node_name(source):
            from beamalloc.collector import live

            snap = live.snapshot_node(source, self._cookie(), timeout=o.timeout,
                                      max_carriers=o.max_carriers, access=o.access)
            if snap.carriers_unavailable:
                self.term.note(f"beamalloc: note: no per-carrier data: "
                               f"{snap.carriers_unavailable}")
            if snap.carriers_skipped:
                self.term.note(f"beamalloc: note: {snap.carriers_skipped} carriers not read "
                               f"(--max-carriers {o.max_carriers})")
            return snap
        if source == "-" or not o.processes:  # no holders() for these
            return sources.read_file(source)
        from beamalloc.advice.holders import DumpMembers
        from beamalloc.collector.procdump import ProcSections

        procs = ProcSections(keep=DumpMembers())  # a dump's processes: only what holders() uses
        # One at a time: holders() then reads an earlier dump again, as it always did, and a
        # dump never asked for its holders (--rate-from) keeps no table.
        self._dump_procs = None
        snap = sources.read_file(source, procs=procs)
        if procs.fed:  # a crash dump
            self._dump_procs = (snap, procs)
        return snap

    def process_table(self, source: str) -> ProcessTable | None:
        """A live node's process table, read-only (the first of two reads:
        holders(earlier=)); None for other sources and without the process options."""
        from beamalloc.collector import sources

        o = self.opts
        if not o.processes or not sources.is_node_name(source):
            return None
        from beamalloc.collector import processes

        return processes.scan_node(source, self._cookie(), timeout=o.timeout,
                                   max_processes=o.max_processes, access=o.access)

    def holders(self, source: str, snap: Snapshot, table: ProcessTable | None = None,
                earlier: ProcessTable | None = None) -> dict[str, Any] | None:
        """The `processes` section for SOURCE (docs/processes.md): a live node's process scan
        (`table` when already read), judged idle against an `earlier` read where there is one,
        with `gc_probe` the one action of beamalloc that changes the node (said on stderr,
        even with --quiet, before it starts); a crash dump's =proc sections; None for other
        sources, without processes, or a dump read from stdin."""
        from beamalloc.advice.holders import DumpMembers, probe_candidates, processes_json
        from beamalloc.collector import sources

        o = self.opts
        live = sources.is_node_name(source)
        if o.gc_probe and not live:
            raise InputError(f"--gc-probe takes a live node (name@host), not {source!r}")
        if o.gc_probe and not o.processes:
            raise InputError("--gc-probe needs the process scan: drop --no-processes")
        if not o.processes:
            return None
        if live:
            from beamalloc.collector import processes

            table = table or self.process_table(source)
            assert table is not None  # a live node, and no processes returned above
            probe = None
            if o.gc_probe:
                pids = probe_candidates(table, o.gc_probe, earlier)
                self.term.say(f"beamalloc: --gc-probe {o.gc_probe}: garbage-collecting "
                              f"{len(pids)} idle processes of {source} one at a time, measured "
                              "before and after: this changes the node (the one beamalloc "
                              "action that does)")
                probe = processes.gc_probe(source, self._cookie(), pids,
                                           timeout=o.timeout + len(pids), access=o.access)
            return processes_json(table, probe, earlier)
        if snap.source == "crashdump" and source != "-":  # the dump itself, not its JSON
            from beamalloc.collector.crashdump import MAGIC
            from beamalloc.collector.dumpscan import line_of
            from beamalloc.collector.procdump import read_procdump

            read, self._dump_procs = self._dump_procs, None
            try:
                with open(source, "rb") as f:
                    if not f.read(len(MAGIC)).startswith(MAGIC.encode()):
                        return None
                if read is not None and read[0] is snap:  # read with the allocators, one pass
                    sums = read[1].keep
                    return processes_json(read[1].table(self.term.stderr,
                                                        lambda at: line_of(source, at)),
                                          sums=sums if isinstance(sums, DumpMembers) else None)
                return processes_json(read_procdump(source, self.term.stderr))
            except OSError as e:
                raise InputError(f"cannot read {source}: {e.strerror}") from None
        return None

    def turnover(self, source: str, first: Snapshot, seconds: float,
                 ahead: _Ahead | None = None) -> Turnover | None:  # fmt: skip
        """binary_alloc's turnover since `first`, a live read of `source`: its counters alone
        read again (collector/counters.py) until they show the node replacing its blocks (not
        idle: advice/predict.Turnover), or `seconds` have passed, or the replays run `ahead`
        settled without a prediction it decides. A busy node shows it within a few tenths of
        a second; an idle one only ever shows it at the end, as one read `seconds` later did."""
        from beamalloc.advice.predict import measure_turnover
        from beamalloc.collector.counters import read_until

        def enough(later: Snapshot) -> bool:
            t = measure_turnover(first, later)
            return (t is not None and not t.idle) or (ahead is not None
                                                     and ahead.settled_without_turnover())

        later = read_until(source, self._cookie(), "binary_alloc", enough, seconds,
                           timeout=self.opts.timeout, access=self.opts.access)  # fmt: skip
        return measure_turnover(first, later)

    def ets_tables(self, source: str, snap: Snapshot) -> None:
        """A live node's ETS tables, read-only (collector/ets.py), into its snapshot where a
        dump keeps its =ets sections: the holders of the ets category. Not without processes."""
        from beamalloc.collector import sources

        if not self.opts.processes or not sources.is_node_name(source):
            return
        snap.extra["ets"] = self._ets_scan(source)

    def _ets_scan(self, source: str) -> Any:
        from beamalloc.collector.ets import scan_ets

        return scan_ets(source, self._cookie(), timeout=self.opts.timeout,
                        access=self.opts.access)  # fmt: skip

    def scans_beside(self, source: str) -> _Beside | None:
        """A live node's process and ETS scans started beside its first read, each on its own
        connection in a thread (our client holds a name per connection: collector/dist.py), so
        the three reads cost the longest's wall, not their sum (issue 28 item 3); None where
        they are not read, or go through the relay, which boots a hidden node per connection."""
        from beamalloc.collector import sources
        from beamalloc.collector.access import current
        from beamalloc.collector.transport import direct

        if not self.opts.processes or not sources.is_node_name(source):
            return None
        if not direct(self.opts.access or current()):
            return None
        self._cookie()  # read once, here, not by two threads at once
        return _Beside({"table": lambda: self.process_table(source),
                        "ets": lambda: self._ets_scan(source)})  # fmt: skip


def idleness_matters(first: ProcessTable | None, gc_probe: int = 0) -> bool:
    """Whether judging the processes idle over two reads instead of at the first read's
    instant could change a finding or the verdict (advice/holders.py): where their heaps
    together, the largest alone or the binaries one holds alone reach a finding's threshold,
    or the GC probe picks its processes by it; the scan read whole. Else the two judgements
    differ only in the idle counts of the processes section, which says which one it is."""
    from beamalloc.advice.holders import MIN_IDLE_HEAP, MIN_IDLE_HEAP_TOTAL, MIN_PINNED

    if first is None:
        return False
    if gc_probe or not first.complete or first.total_heap_bytes is None:
        return True
    if first.total_heap_bytes >= MIN_IDLE_HEAP_TOTAL:
        return True
    return any(p.total_heap_bytes >= MIN_IDLE_HEAP or (
        p.binary_exclusive_bytes if p.binary_exclusive_bytes is not None
        else p.binary_bytes or 0) >= MIN_PINNED for p in first.procs)  # fmt: skip


@dataclass(frozen=True)
class RecommendOptions:
    """What `recommend` asks beyond reading the source (docs/recommend.md)."""

    #: the node's +M flags as written, to lint them
    flags_in_use: str | None = None
    #: replay each flag set (False: --no-predict, then no flag is advised)
    predict: bool = True
    #: a live node: read it again after this many seconds for the rates (0: never)
    rate_seconds: float = 5.0
    #: an earlier snapshot of the same node, for the rate instead of a second read
    rate_from: str | None = None
    #: a block trace of the same node, replayed instead of a fitted workload
    trace: Path | None = None
    #: a live node on this host: record that trace for this many seconds with eBPF first
    trace_for: float | None = None


def recommend_source(reader: Reader, source: str, opts: RecommendOptions) -> dict[str, Any]:
    """The recommendation for SOURCE (advice/recommend.py `recommend`'s dict). A live node is
    read twice, `rate_seconds` apart, for the carrier-call rate speed-trade flags need (issue
    17), how fast it replaces its blocks (issue 22) and which processes stayed idle (issue 24
    item 6). The verdict judges the first read (the one the ETS tables and the first process
    table were read with); the replays of its prediction need nothing of the second, so they
    run while we wait for it (docs/recommend.md, "What it costs")."""
    import time

    from beamalloc.advice.findings import facts
    from beamalloc.advice.predict import TURNOVER_SECONDS, Predictor, measure_turnover
    from beamalloc.advice.recommend import carrier_rate, recommend, speed_trades
    from beamalloc.collector.sources import is_node_name
    from beamalloc.console import short

    term, live, trace = reader.term, is_node_name(source), opts.trace
    what = f"recommending for {short(source)}"
    # The first read's replays need its snapshot alone: where the node is read again they
    # start as soon as it is read, beside the scans and the second read.
    early = (live and opts.predict and opts.rate_seconds > 0 and not opts.rate_from
             and opts.trace_for is None)  # fmt: skip
    with contextlib.ExitStack() as stack:
        pr, ahead = None, None
        with term.progress(what) as p:
            p.step("reading the allocators")
            # where the node fails, the scans beside are left to their daemon threads: the
            # first read's error is the command's, said at once
            beside = reader.scans_beside(source)
            snap = reader.load(source)
            p.step("reading the processes and ETS tables")
            if reader.opts.gc_probe and (not live or not reader.opts.processes):
                reader.holders(source, snap)  # its one-line refusal
            if early:
                pr = stack.enter_context(Predictor(snap, facts(snap), trace=trace))
                ahead = _Ahead(pr, opts.flags_in_use)
                stack.push(ahead.end)  # joined, or abandoned on an error
            # the same moment as the snapshot
            first = beside.get("table") if beside else reader.process_table(source)
            procs = None
            if beside:
                snap.extra["ets"] = beside.get("ets")
            else:
                reader.ets_tables(source, snap)
        if opts.trace_for is not None:
            import tempfile  # only here: a share of the command's imports otherwise

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="beamalloc-recommend-"))
            trace = _record_trace(reader, source, opts.trace_for, Path(tmp) / "node.batr")
        rate, why, turn = None, None, None
        trades = speed_trades(snap)
        if opts.rate_from:  # an earlier sample of the same node: a watch series, a snapshot
            earlier = reader.load(opts.rate_from)
            rate, why = carrier_rate(earlier, snap)
            turn = measure_turnover(earlier, snap)  # and how fast it replaces its binaries
        elif live and opts.rate_seconds > 0 and (trades or opts.predict):
            # A speed trade needs calls per second now, not over the node's life (issue 17);
            # the prediction, how fast the node replaces its blocks (issue 22).
            if opts.predict and ahead is None:  # the replays of a recorded trace, meanwhile
                pr = stack.enter_context(Predictor(snap, facts(snap), trace=trace))
                ahead = _Ahead(pr, opts.flags_in_use)
                stack.push(ahead.end)  # joined, or abandoned on an error
            if trades or idleness_matters(first, reader.opts.gc_probe):
                wait = opts.rate_seconds if trades else min(opts.rate_seconds, TURNOVER_SECONDS)
                why_wait = (f"{', '.join(trades)} trade memory for speed" if trades
                            else "the prediction needs the node's turnover, and its idle "
                            "processes are judged over two reads")  # fmt: skip
                term.note(f"{why_wait}: sampling {source} again in {wait:g} s "
                          "(--rate-seconds 0 skips it)")  # fmt: skip
                with term.progress(what) as p:
                    p.step(f"waiting {wait:g} s for the rates")
                    time.sleep(wait)
                    later = reader.load(source)
                    # idle is what did nothing between the reads (issue 24 item 6)
                    procs = reader.holders(source, later, earlier=first) if first else None
                rate, why = carrier_rate(snap, later)
                turn = measure_turnover(snap, later)
            else:
                wait = min(opts.rate_seconds, TURNOVER_SECONDS)
                term.note(f"the prediction needs the node's turnover: reading {source}'s "
                          f"binary_alloc counters again for up to {wait:g} s, until they show "
                          "it (--rate-seconds 0 skips it)")  # fmt: skip
                with term.progress(what) as p:
                    p.step(f"sampling the turnover for up to {wait:g} s")
                    turn = reader.turnover(source, snap, wait, ahead)
                why = "no speed-trade rule fires on this node, so no rate was measured"
            if pr is not None and ahead is not None:
                ahead.join()
                pr.turnover = turn
        elif live and trades:
            why = "--rate-seconds 0: no rate measured, so no speed-trade flag"
        elif live:
            why = "no speed-trade rule fires on this node, so no rate was measured"
        if procs is None:  # one read: a live node's scan above, a crash dump's =proc sections
            procs = reader.holders(source, snap, table=first)
        with term.progress(what) as p:
            p.step("replaying each candidate flag set" if opts.predict else "applying the rules")
            return recommend(snap, given_flags=opts.flags_in_use, predict=opts.predict,
                             rate=rate, rate_unavailable=why, trace=trace, processes=procs,
                             turnover=turn, predictor=pr)


class _Beside:
    """Reads run in daemon threads from construction: `get(name)` waits for one and returns
    its result or raises its error, as the call would have in the caller's thread."""

    def __init__(self, reads: dict[str, Callable[[], Any]]) -> None:
        self._out: dict[str, tuple[bool, Any]] = {}
        self._threads = {name: threading.Thread(target=self._run, args=(name, fn), daemon=True,
                                                name=f"beamalloc-{name}-beside")
                         for name, fn in reads.items()}  # fmt: skip
        for t in self._threads.values():
            t.start()

    def _run(self, name: str, fn: Callable[[], Any]) -> None:
        try:
            self._out[name] = (True, fn())
        except BaseException as e:  # re-raised by get(), in the caller's thread
            self._out[name] = (False, e)

    def get(self, name: str) -> Any:
        self._threads[name].join()
        ok, value = self._out[name]
        if not ok:
            raise value
        return value


def _asked(pr: Predictor, given_flags: str | None) -> dict[str, list[FlagSet]]:
    """The flag sets, per allocator, that a verdict on `pr`'s snapshot proposes, found by one
    that replays nothing (every prediction refused, so every finding held back and every
    revert of a wasteful allocator asked: what the verdict on the first read asks, or more).
    `pr` replays each one's passes beside the first proposal's (Predictor.ahead): the verdict
    asked them one after the other, each pass on one core (issue 28 item 3)."""
    from beamalloc.advice.predict import PredictionError, Predictor
    from beamalloc.advice.recommend import verdict

    asked: dict[str, list[FlagSet]] = {}

    class Dry(Predictor):
        def predict(self, allocator: str | None, rule: str, flags: FlagSet) -> dict[str, Any]:
            mine = asked.setdefault(allocator or "", [])
            if all(x.render() != flags.render() for x in mine):
                mine.append(flags)
            raise PredictionError("not replayed: the flags asked are gathered")

    with Dry(pr.snap, pr.facts, trace=pr.trace) as dry:
        verdict(pr.snap, given_flags, trace=pr.trace, predictor=dry)
    return asked


class _Ahead:
    """The verdict on the first read alone, in a thread while the command waits for the second:
    it replays every flag set the rules propose into `pr`'s caches (refalloc releases the GIL),
    so the verdict on both reads replays only what the rates or the turnover change. Its
    result is dropped, its errors too: the verdict after the second read meets them again.
    A command that fails meanwhile does not wait for it (`end`)."""

    def __init__(self, pr: Predictor, given_flags: str | None) -> None:
        self._pr = pr
        self._ok = False
        self._thread = threading.Thread(target=self._run, args=(pr, given_flags), daemon=True,
                                        name="beamalloc-replays-ahead")  # fmt: skip
        self._thread.start()

    def _run(self, pr: Predictor, given_flags: str | None) -> None:
        from beamalloc.advice.recommend import verdict

        # the flag sets the verdict proposes, gathered in Python while its calibration replays
        # with the GIL released; its first proposal waits for them (Predictor.ahead)
        asked: dict[str, list[FlagSet]] = {}

        def gather() -> None:
            with contextlib.suppress(Exception):  # a hint: the verdict meets any error itself
                asked.update(_asked(pr, given_flags))

        hints = threading.Thread(target=gather, daemon=True, name="beamalloc-flags-asked")
        hints.start()

        def ahead() -> dict[str, list[FlagSet]]:
            hints.join()
            return asked

        pr.ahead = ahead
        with contextlib.suppress(Exception):
            verdict(pr.snap, given_flags, trace=pr.trace, predictor=pr)
            self._ok = True

    def settled_without_turnover(self) -> bool:
        """Done, and no prediction of the first read has futures the turnover decides between
        (advice/predict.Predictor.turnover_decides): the verdict is the same whatever it is."""
        return not self._thread.is_alive() and self._ok and not self._pr.turnover_decides

    def join(self) -> None:
        self._thread.join()

    def end(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        """The command's way out (an ExitStack's, before the Predictor's own exit): having
        worked, wait for the replays, whose files the Predictor holds until then. On an error
        (the node failed after its first read: exit 3; an interrupt) leave at once, the
        replays abandoned: the files the Predictor holds (a recorded trace's) are removed now,
        which ends a replay of them at its next step, and a native history replay (no file)
        is left to the thread; its errors are dropped, and a daemon, it dies with the
        process (tests/test_recommend_abandon.py: exit 3, promptly)."""
        if exc_type is None:
            self.join()
        else:
            # A trace the thread writes meanwhile is removed by the thread (Predictor._trace).
            self._pr.__exit__(None, None, None)
        return False


def _record_trace(reader: Reader, node: str, seconds: float, path: Path) -> Path | None:
    """`beamalloc trace --node NODE --duration S -o PATH`, for `recommend --trace-for S`; None
    (and one line on stderr: the prediction then replays a fitted workload) where eBPF is not
    available here."""
    from beamalloc.ebpf.errors import EbpfUnavailable
    from beamalloc.ebpf.run import Options, run

    reader.term.note(f"tracing {node}'s allocations for {seconds:g} s with eBPF "
                     "(docs/ebpf.md) to replay them from its carriers")
    o = reader.opts
    opts = Options(node=node, duration=seconds, output=str(path), quiet=True, libc=False,
                   cookie_file=o.cookie_file, timeout=o.timeout, access=o.access,
                   term=reader.term)
    try:
        run(opts)
    except (EbpfUnavailable, OSError) as e:
        reader.term.say(f"no trace: {e}; the prediction replays a workload fitted to the "
                        "snapshot")
        return None
    return path
