"""`beamalloc trace`: attach, follow, detach, then write the trace or return the summary
(cli/commands/trace.py prints it: JSON, or reporters/trace.py's tables).

Modes (docs/ebpf.md): ``carrier`` (syscall tracepoints, mseg/sys_alloc and libc probes: cheap
enough for production), ``block`` (every alloc_util call; summary aggregated in the kernel, or a
full trace with ``-o``), and block-level sampling (``--sample F``: attached for a slice, detached
for the rest of the period; ``--max-overhead PCT`` picks F from the measured call rate).

Detach is in a ``finally``: SIGINT and SIGTERM only set a flag, the end of ``--duration`` and the
target's death end the loop, and every path out removes every probe of ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beamalloc.ebpf import beam, kernel
from beamalloc.ebpf.errors import EbpfUnavailable
from beamalloc.errors import InputError

if TYPE_CHECKING:
    from beamalloc.collector.access import Access
    from beamalloc.console import Terminal
from beamalloc.trace import TraceHeader

#: --max-overhead: floor of the calibrated cost of a probe hit, and of the probes-in fraction.
#: A calibration reads 0 where both its measures are blind (a slice shorter than the 10 ms
#: tick of system time, and total CPU flat on a busy machine); the floor is then the cheapest
#: hit measured here, a trap on an emulated instruction plus its BPF work (~560 ns + ~100 ns:
#: docs/ebpf.md "Where the cost goes"), so the cap errs on the safe side.
MIN_HIT_COST_S = 5.0e-7
MIN_FRACTION = 0.01
POLL_MS = 100


@dataclass
class Options:
    pid: int | None = None
    node: str | None = None
    duration: float | None = None
    output: str | None = None
    level: str = "block"  # "block" or "carrier"; "all" = both
    sample: float | None = None
    slice_s: float = 1.0
    max_overhead: float | None = None  # percent
    libc: bool = True
    cookie_file: str | None = None  # where no `access` is given (the CLI always gives one)
    timeout: float = 10.0
    quiet: bool = False
    #: How the hidden node reaches --node (docs/access.md; None: access.current()).
    access: Access | None = None
    #: The run's terminal its lines go to (beamalloc/console.py; None: stderr).
    term: Terminal | None = None


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


def _say(opts: Options, msg: str, always: bool = False) -> None:
    if opts.quiet and not always:
        return
    if opts.term is not None:
        opts.term.say(f"beamalloc: {msg}")  # erases a progress line first, escapes controls
    else:
        print(f"beamalloc: {msg}", file=sys.stderr, flush=True)


def _target(opts: Options) -> tuple[int, Any]:
    """(pid, snapshot or None). A node name must be a node on this host."""
    if opts.node:
        from beamalloc.collector import cookie, live

        # the run's Access resolved the cookie once for every read of the command
        ck = (opts.access.cookie() if opts.access is not None
              else cookie.resolve_cookie(opts.cookie_file))
        snap = live.snapshot_node(opts.node, ck, timeout=opts.timeout, access=opts.access)
        if snap.os_pid is None or not _alive(snap.os_pid):
            raise InputError(f"{opts.node} is not running on this host (its pid "
                             f"{snap.os_pid} is not here): trace runs where the node runs")
        return snap.os_pid, snap
    assert opts.pid is not None
    return opts.pid, None


def _flags_of(pid: int) -> str:
    """The +M flags on the emulator's command line (docs/erts/alloc_util.md §2), as `erl` takes
    them.

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


def run(opts: Options) -> dict[str, Any]:
    """The summary document (ebpf/summary.py), or with ``-o`` what the trace file holds."""
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
    if proc.blind and opts.level != "carrier":
        if opts.output:  # a trace for replay is made of block events only
            raise EbpfUnavailable(f"no block-level trace of pid {pid}: {proc.blind}")
        # Everything else still reaches the node: follow it there and say what is unseen.
        _say(opts, f"block level unavailable: {proc.blind}; following the carrier level "
             "(syscalls, libc) only", always=True)
        opts = replace(opts, level="carrier")
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


def _trace(bcc: Any, proc: beam.BeamProcess, snap: Any, opts: Options,
           stop: _Stop) -> dict[str, Any]:
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
    return {"output": str(out), "events": stats.written, "elapsed_s": elapsed,
            "ended_by": why, "lost_events": lost, "lost": header.extra["lost"],
            "unattributed": stats.unattributed,
            "calls": {f"{proc.allocators.get(a, a)}:{op}": n
                      for (a, op), n in sorted(stats.calls.items())}}


def _summary(bcc: Any, proc: beam.BeamProcess, snap: Any, opts: Options,
             stop: _Stop) -> dict[str, Any]:
    from beamalloc.ebpf.blocks import BlockProbes
    from beamalloc.ebpf.carriers import CarrierProbes
    from beamalloc.ebpf.summary import block_summary, carrier_summary

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
        sampler = _Sampler(opts, blocks, proc.pid)
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
                              "not measured when sampling") if sampler.sampled else None,
                     "unseen": _unseen(proc, carriers)},
        }
        if sampler.sampled:
            cal = sampler.calibration()
            doc["mode"].update({
                "slices": sampler.slices,
                "probes_in_fraction": round(sampler.probes_in_s / elapsed, 4) if elapsed else 0,
                "target_fraction": round(sampler.fraction, 4),
                "calibration": {k: (round(v, 9) if v is not None else None)
                                for k, v in cal.items()}})
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
    return doc


def _unseen(proc: beam.BeamProcess, carriers: Any) -> str | None:
    """What this run could not follow and why (one line), or None."""
    parts = []
    if proc.blind:
        parts.append(f"alloc_util's calls (block level): {proc.blind}")
    if carriers is not None and carriers.unseen:
        parts.append(f"{', '.join(carriers.unseen)} (carrier level): no symbol")
    return "; ".join(parts) or None


def _cpu_s(pid: int) -> tuple[float, float]:
    """(system, all) CPU seconds of every thread of `pid`. All: the scheduler's nanosecond
    accounting (/proc/PID/task/*/schedstat). System: /proc/PID/stat, whose user/system split
    is sampled at the tick (10 ms here), so a short window of sub-microsecond hits often
    reads 0 there."""
    total = 0
    for f in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(f.read_text().split()[0])
    try:
        stime = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[12])
    except (OSError, IndexError, ValueError):
        stime = 0
    return stime / os.sysconf("SC_CLK_TCK"), total / 1e9


class _Sampler:
    """Time slicing of the block-level probes: attached for ``slice_s``, then detached until
    the probes have been in place (trapping) a fraction F of the time.

    Probes in place = the counted slice plus the time until the hot probes are gone at detach
    (BlockProbes.detach: they go first); the off time is sized from that measured time, so F
    bounds the trapping, not just the counting. With ``--max-overhead`` F follows from a cost
    per probe hit calibrated on the target itself: a trap runs in the target's context, so
    the target's CPU rate while attached − while detached, per hit per second, is the cost of
    a hit. Measured twice, each blind somewhere: its system time (the trap itself, seen even
    when the target is CPU-bound and its total cannot grow, but sampled at the tick) and its
    total CPU (exact to the ns, but flat on a saturated target); the larger is taken, so the
    cap errs on the safe side. The target's own CPU use while detached is what the overhead
    is relative to. All are re-measured in every slice and every off period."""

    BASELINE_S = 0.5  # --max-overhead: a detached window to measure the target first

    def __init__(self, opts: Options, blocks: Any, pid: int) -> None:
        self.blocks = blocks
        self.opts = opts
        self.pid = pid
        self.sampled = blocks is not None and (opts.sample is not None
                                               or opts.max_overhead is not None)
        self.fraction = opts.sample if opts.sample is not None else 1.0
        self.attached_s = 0.0  # counted (every probe in place)
        self.probes_in_s = 0.0  # counted + until the hot probes were gone
        self.slices = 0
        self._att = [0.0, 0.0, 0.0, 0]  # seconds attached, system and all CPU meanwhile, hits
        self._bare = [0.0, 0.0, 0.0]  # seconds detached, system and all CPU meanwhile
        self._since: float | None = None
        self._mark: tuple[float, float, float] | None = None  # (t, system, all) of a window
        self._cpu0 = (0.0, 0.0)
        self._calls = 0
        self._next = time.monotonic()
        if blocks is None:
            return
        if opts.max_overhead is not None:
            self._open_bare()
            self._next = time.monotonic() + self.BASELINE_S
        else:
            self._on()

    def _open_bare(self) -> None:
        self._mark = (time.monotonic(), *_cpu_s(self.pid))

    def _close_bare(self) -> None:
        if self._mark is None:
            return
        t0, s0, c0 = self._mark
        s1, c1 = _cpu_s(self.pid)
        self._bare[0] += time.monotonic() - t0
        self._bare[1] += s1 - s0
        self._bare[2] += c1 - c0
        self._mark = None

    def _on(self) -> None:
        self._close_bare()
        if self.sampled:
            self.blocks.clear_pending()
        self.blocks.attach()  # counting starts once every probe is in (blocks.bpf.c, enabled)
        self._since = time.monotonic()
        self._cpu0 = _cpu_s(self.pid)
        self._next = self._since + (self.opts.slice_s if self.sampled else 1e18)

    def _off(self) -> None:
        start = time.monotonic()
        cpu1 = _cpu_s(self.pid)
        slice_s = start - (self._since or start)
        hot_s = self.blocks.detach()  # counting stops before the first probe goes
        self._open_bare()
        calls = self.blocks.stats()["calls"]
        self._att[0] += slice_s
        self._att[1] += cpu1[0] - self._cpu0[0]
        self._att[2] += cpu1[1] - self._cpu0[1]
        self._att[3] += calls - self._calls
        self._calls = calls
        self.attached_s += slice_s
        self.probes_in_s += slice_s + hot_s
        self.slices += 1
        self._since = None
        if self.opts.max_overhead is not None:
            self.fraction = self._fraction_for(self.opts.max_overhead / 100)
        # Probes are in slice + hot_s per period: the period is that over F.
        self._next = max(time.monotonic(), start - slice_s + (slice_s + hot_s) / self.fraction)

    def calibration(self) -> dict[str, float | None]:
        """What --max-overhead decides from: hits/s while attached, the cost of a hit, the
        target's CPU use (cores) while detached."""
        att_s, att_sys, att_cpu, hits = self._att
        bare_s, bare_sys, bare_cpu = self._bare
        rate = hits / att_s if att_s else None
        cost = None
        if hits and att_s and bare_s:
            cost = max(0.0, att_sys / att_s - bare_sys / bare_s,
                       att_cpu / att_s - bare_cpu / bare_s) * att_s / hits
        return {"hits_per_s": rate, "per_hit_cost_s": cost,
                "target_cpu": bare_cpu / bare_s if bare_s else None}

    def _fraction_for(self, budget: float) -> float:
        """Probes-in fraction F so that F × hits/s × cost ≤ budget × the target's CPU use."""
        c = self.calibration()
        rate, cost, cpu = c["hits_per_s"], c["per_hit_cost_s"], c["target_cpu"]
        if not rate or cost is None or cpu is None:
            return self.fraction
        probe_cpu = rate * max(cost, MIN_HIT_COST_S)  # cores the probes take while in
        return min(1.0, max(MIN_FRACTION, budget * max(cpu, 0.01) / probe_cpu))

    def step(self) -> None:
        if self.blocks is None or not self.sampled:
            time.sleep(POLL_MS / 1000)
            return
        now = time.monotonic()
        if now >= self._next:
            if self._since is not None:
                # --max-overhead decides F after its first slice: that one always ends.
                if self.fraction < 1 or (self.opts.max_overhead is not None
                                         and not self.slices):
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
