"""`beamalloc trace`: attach, follow, detach, then write the trace or print the summary.

Modes (docs/ebpf.md): ``carrier`` (syscall tracepoints, mseg/sys_alloc and libc probes: cheap
enough for production), ``block`` (every alloc_util call; summary aggregated in the kernel, or a
full trace with ``-o``), and block-level sampling (``--sample F``: attached for a slice, detached
for the rest of the period; ``--max-overhead PCT`` picks F from the measured call rate).

Detach is in a ``finally``: SIGINT and SIGTERM only set a flag, the end of ``--duration`` and the
target's death end the loop, and every path out removes every probe of ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beamalloc.ebpf import beam, kernel
from beamalloc.ebpf.errors import EbpfUnavailable
from beamalloc.errors import InputError
from beamalloc.trace import TraceHeader

#: Seconds a trapped uprobe hit costs here (entry + return), for --max-overhead's estimate;
#: measured by tests/bench/bench_ebpf.py on this VM (traps are dear in a VM).
PROBE_HIT_COST_S = 2.0e-6
POLL_MS = 100


@dataclass
class Options:
    pid: int | None = None
    node: str | None = None
    duration: float | None = None
    output: str | None = None
    json: bool = False
    level: str = "block"  # "block" or "carrier"; "all" = both
    sample: float | None = None
    slice_s: float = 1.0
    max_overhead: float | None = None  # percent
    libc: bool = True
    cookie_file: str | None = None
    timeout: float = 10.0
    quiet: bool = False


class _Stop:
    def __init__(self) -> None:
        self.reason: str | None = None

    def __call__(self, signum: int, _frame: Any) -> None:
        self.reason = signal.Signals(signum).name


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _say(opts: Options, msg: str) -> None:
    if not opts.quiet:
        print(f"beamalloc: {msg}", file=sys.stderr, flush=True)


def _target(opts: Options) -> tuple[int, Any]:
    """(pid, snapshot or None). A node name must be a node on this host."""
    if opts.node:
        from beamalloc.collector import cookie, live

        snap = live.snapshot_node(opts.node, cookie.resolve_cookie(opts.cookie_file),
                                  timeout=opts.timeout)
        if snap.os_pid is None or not _alive(snap.os_pid):
            raise InputError(f"{opts.node} is not running on this host (its pid "
                             f"{snap.os_pid} is not here): trace runs where the node runs")
        return snap.os_pid, snap
    assert opts.pid is not None
    return opts.pid, None


def _flags_of(pid: int) -> str:
    """The +M flags on the emulator's command line (alloc_util.md §2), as `erl` takes them.

    erlexec hands `+MBas aobf` (from the command line, ERL_FLAGS, ERL_AFLAGS, ERL_ZFLAGS or an
    args file) to beam.smp as `-MBas aobf`, before the first `--`."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return ""
    out: list[str] = []
    for i, a in enumerate(argv[1:], 1):
        if a == "--":
            break
        if a[:2] in ("+M", "-M") and len(a) > 2 and i + 1 < len(argv):
            out += ["+" + a[1:], argv[i + 1]]
    return " ".join(out)


def build_header(proc: beam.BeamProcess, snap: Any, t0_ns: int, threads: dict[int, str],
                 losses: dict[str, int], extra: dict[str, Any]) -> TraceHeader:
    options = None
    if snap is not None:
        options = {}
        for inst in snap.allocators:
            options.setdefault(inst.allocator, {})[str(inst.instance)] = inst.options
    schedulers = snap.schedulers if snap is not None and snap.schedulers else max(
        1, sum(1 for n in threads.values() if n.endswith("_scheduler")))
    lost = sum(v for k, v in losses.items() if k != "calls")
    return TraceHeader(
        node=snap.node if snap is not None else None,
        otp=(snap.otp_release if snap is not None and snap.otp_release else "25"),
        erts=snap.erts_version if snap is not None else None,
        schedulers=schedulers,
        flags=_flags_of(proc.pid),
        options=options,
        types=proc.types,
        threads=threads,
        clock={"source": "monotonic", "t0_ns": t0_ns},
        source="ebpf",
        extra={"pid": proc.pid, "lost_events": lost, "complete": lost == 0,
               "lost": {k: v for k, v in losses.items() if k != "calls"}, **extra},
    )


def run(opts: Options) -> int:
    if opts.output and (opts.sample is not None or opts.max_overhead is not None):
        raise InputError("a trace for replay needs every call: --sample and --max-overhead "
                         "apply to the summary")
    if opts.output and opts.level == "carrier":
        raise InputError("-o writes block-level events: drop --level carrier")
    if opts.sample is not None and not 0 < opts.sample <= 1:
        raise InputError(f"--sample takes a fraction in (0, 1], not {opts.sample}")
    bcc = kernel.preflight()
    pid, snap = _target(opts)
    proc = beam.inspect(pid)
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if opts.output:
            return _trace(bcc, proc, snap, opts, stop)
        return _summary(bcc, proc, snap, opts, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _loop(opts: Options, stop: _Stop, pid: int, step: Any) -> str:
    """Call step() until a signal, the duration or the target's end; return why it ended."""
    deadline = time.monotonic() + opts.duration if opts.duration else None
    while True:
        if stop.reason:
            return stop.reason
        if deadline is not None and time.monotonic() >= deadline:
            return "duration"
        if not _alive(pid):
            return "target exited"
        step()


def _trace(bcc: Any, proc: beam.BeamProcess, snap: Any, opts: Options, stop: _Stop) -> int:
    from beamalloc.ebpf.blocks import BlockProbes
    from beamalloc.ebpf.tracefile import write_trace

    out = Path(opts.output)  # type: ignore[arg-type]
    probes = BlockProbes(bcc, proc, trace=True)
    threads = proc.threads()
    with tempfile.TemporaryDirectory(prefix="beamalloc-raw-",
                                     dir=str(out.parent) if out.parent.exists() else None) as tmp:
        raw = Path(tmp) / "events.raw"
        try:
            with open(raw, "wb") as f:
                sink = probes.open_sink(f)
                t0 = time.monotonic_ns()  # bpf_ktime_get_ns is CLOCK_MONOTONIC too
                probes.attach()
                _say(opts, f"tracing every alloc_util call of pid {proc.pid}; Ctrl-C stops")
                t_start = time.monotonic()
                why = _loop(opts, stop, proc.pid, lambda: probes.poll(POLL_MS))
                probes.detach()
                elapsed = time.monotonic() - t_start
                probes.drain(sink)
                losses = probes.stats()
        finally:
            probes.close()
        threads.update(proc.threads())
        header = build_header(proc, snap, t0, threads, losses,
                              {"ended_by": why, "elapsed_s": round(elapsed, 3)})
        stats = write_trace(raw, out, header, proc)
    lost = header.extra["lost_events"]
    _say(opts, f"wrote {out}: {stats.written} events in {elapsed:.1f} s ({why}); "
         + (f"LOST {lost} events {header.extra['lost']}" if lost else "no events lost"))
    if opts.json:
        print(json.dumps({"output": str(out), "events": stats.written, "elapsed_s": elapsed,
                          "ended_by": why, "lost_events": lost, "lost": header.extra["lost"],
                          "unattributed": stats.unattributed,
                          "calls": {f"{proc.allocators.get(a, a)}:{op}": n
                                    for (a, op), n in sorted(stats.calls.items())}}))
    return 0


def _summary(bcc: Any, proc: beam.BeamProcess, snap: Any, opts: Options, stop: _Stop) -> int:
    from beamalloc.ebpf.blocks import BlockProbes
    from beamalloc.ebpf.carriers import CarrierProbes
    from beamalloc.ebpf.summary import block_summary, carrier_summary, render

    blocks = carriers = None
    attached_s = 0.0
    try:
        if opts.level in ("carrier", "all"):
            carriers = CarrierProbes(bcc, proc, libc=opts.libc)
        if opts.level in ("block", "all"):
            sampling = opts.sample is not None or opts.max_overhead is not None
            # Sampling counts calls at entry only: no return trap, and fewer probes to detach
            # after each slice (outstanding bytes are not measured when sampling anyway).
            blocks = BlockProbes(bcc, proc, trace=False, returns=not sampling)
        sampler = _Sampler(opts, blocks)
        _say(opts, f"following pid {proc.pid} ({opts.level} level"
             + (", sampled" if sampler.sampled else "") + "); Ctrl-C stops")
        t_start = time.monotonic()
        why = _loop(opts, stop, proc.pid, sampler.step)
        attached_s = sampler.finish()
        elapsed = time.monotonic() - t_start
        doc: dict[str, Any] = {
            "pid": proc.pid, "node": snap.node if snap is not None else None,
            "elapsed_s": round(elapsed, 3), "ended_by": why,
            "mode": {"level": opts.level, "sampled": sampler.sampled,
                     "attached_fraction": (round(attached_s / elapsed, 4) if sampler.sampled
                                           and elapsed else 1.0),
                     "note": ("calls are scaled by 1/attached_fraction; outstanding bytes are "
                              "not measured when sampling") if sampler.sampled else None},
        }
        losses = blocks.stats() if blocks else {}
        doc["lost"] = {**{k: v for k, v in losses.items() if k != "calls"},
                       "total": sum(v for k, v in losses.items() if k != "calls")}
        if blocks:
            frac = attached_s / elapsed if sampler.sampled and elapsed else 1.0
            doc["blocks"] = block_summary(proc, blocks.histogram(), elapsed, frac)
        if carriers:
            doc["carriers"] = carrier_summary(proc, carriers.stats(), elapsed)
            if opts.libc:
                doc["foreign_malloc"] = carriers.foreign()
    finally:
        for p in (blocks, carriers):
            if p is not None:
                with contextlib.suppress(Exception):
                    p.close()
    if opts.json:
        print(json.dumps(doc))
    else:
        from beamalloc.cli import wide_console

        render(doc, wide_console())
    return 0


class _Sampler:
    """Time slicing of the block-level probes: attached ``slice_s``, then detached for the
    rest of the period; with --max-overhead the attached fraction follows the call rate."""

    def __init__(self, opts: Options, blocks: Any) -> None:
        self.blocks = blocks
        self.opts = opts
        self.sampled = blocks is not None and (opts.sample is not None
                                               or opts.max_overhead is not None)
        self.fraction = opts.sample if opts.sample is not None else 1.0
        self.attached_s = 0.0
        self._since: float | None = None
        self._calls = 0
        self._next = time.monotonic()
        if blocks is not None:
            self._on()

    def _on(self) -> None:
        if self.sampled:
            self.blocks.clear_pending()
        self.blocks.attach()  # counting starts once every probe is in (blocks.bpf.c, enabled)
        self._since = time.monotonic()
        self._next = self._since + (self.opts.slice_s if self.sampled else 1e18)

    def _off(self) -> None:
        start = time.monotonic()  # counting stops before the first probe goes
        slice_s = start - (self._since or start)
        self.attached_s += slice_s
        self._since = None
        self.blocks.detach()
        if self.opts.max_overhead is not None and slice_s > 0:
            calls = self.blocks.stats()["calls"]
            rate = (calls - self._calls) / slice_s  # probe hits per second while attached
            self._calls = calls
            cpus = os.cpu_count() or 1
            cost = rate * PROBE_HIT_COST_S / cpus  # fraction of the machine while attached
            want = self.opts.max_overhead / 100 / cost if cost > 0 else 1.0
            self.fraction = min(1.0, max(0.01, want))
        # The period is the slice over the fraction; attaching and detaching eat into the
        # detached part (they take ~1 s here).
        now = time.monotonic()
        self._next = start + max(0.0, slice_s / self.fraction - slice_s)
        self._next = max(self._next, now)

    def step(self) -> None:
        if self.blocks is None or not self.sampled:
            time.sleep(POLL_MS / 1000)
            return
        now = time.monotonic()
        if now >= self._next:
            if self._since is not None:
                if self.fraction < 1:
                    self._off()
                else:
                    self._next = now + self.opts.slice_s
            else:
                self._on()
        time.sleep(min(POLL_MS / 1000, max(0.0, self._next - time.monotonic())))

    def finish(self) -> float:
        if self.blocks is None:
            return 0.0
        if self._since is not None:
            self._off()
        return self.attached_s


def main_args(args: Any) -> int:
    """Entry from beamalloc.cli (the `trace` subcommand)."""
    opts = Options(pid=args.pid, node=args.node, duration=args.duration, output=args.output,
                   json=args.json, level=args.level, sample=args.sample,
                   slice_s=args.slice_ms / 1000, max_overhead=args.max_overhead,
                   libc=not args.no_libc, cookie_file=args.cookie_file, timeout=args.timeout)
    try:
        return run(opts)
    except EbpfUnavailable:
        raise
    except OSError as e:
        raise EbpfUnavailable(f"trace failed: {e}") from None
