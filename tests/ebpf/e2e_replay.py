"""End to end (issue 5, item 5): trace a real workload with `beamalloc trace -o`, replay the trace
through refalloc under the node's own flags, and compare binary_alloc's carriers with the node's
own `erlang:system_info({allocator, binary_alloc})` taken at the end of the trace.

    .venv/bin/python tests/ebpf/e2e_replay.py [--workers W] [--per-worker N] [--seed S]
                                              [--flags "+MBas aobf ..."]

prints the predicted-vs-measured table (root and BPF needed). tests/ebpf/test_e2e_replay.py
asserts on the same rows.

The node is fresh and quiescent when the tracer attaches: samples/workloads/binlife.erl first
collects every process (nothing from boot is freed later), its workload starts only after the
tracer says it is attached and ends, all processes collected, before the tracer stops, so the
trace holds the whole life of every binary the workload makes. The node's own statistics are
read after the tracer has detached (the node idles in between); a reading once the tracer is
attached begins the "max since last call" period, so the last one's middle values are the peaks
of the traced period (docs/erts/alloc_util.md §6.1). What the trace cannot hold is counted and
reported: frees and reallocs of blocks allocated before it began (per allocator), events the
tracer lost, and the replay's own anomalies.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ebpfhelp import ROOT, Tracer

from beamalloc.collector.system_info import add_system_info
from beamalloc.collector.terms import parse_term
from beamalloc.refalloc.replay import replay_snapshot
from beamalloc.snapshot import AllocatorInstance, Snapshot
from beamalloc.trace import ALLOCATOR_NAMES, Op, open_trace

WORKLOAD = ROOT / "samples" / "workloads" / "binlife.erl"
ALLOCATOR = "binary_alloc"
STATS = ("mbcs carriers_size", "mbcs carriers", "sbcs carriers_size")
DETAIL = ("pool carriers",)  # per instance only: a pooled carrier is counted in mbcs above


class BinLife:
    """A binlife node (samples/workloads/binlife.erl) answering commands on its stdin."""

    def __init__(self, ebin: str, flags: str = "") -> None:
        self.name = f"t_e2e_{secrets.token_hex(3)}"
        self.proc = subprocess.Popen(
            ["erl", "-noshell", *flags.split(), "-pa", ebin, "-eval", "binlife:main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.readline() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid  # erl execs erlexec, which execs beam.smp

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def cmd(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.readline()

    def info(self) -> list[AllocatorInstance]:
        """binary_alloc's instances as the node reports them (begins a new max period)."""
        reply = self.cmd("info")
        assert reply.startswith("info ["), reply[:200]
        snap = Snapshot(node=self.name, source="live")
        add_system_info(snap, ALLOCATOR, parse_term(reply[5:] + "."))
        return snap.instances(ALLOCATOR)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def stats(insts: list[AllocatorInstance]) -> dict[str, tuple[int, int]]:
    """(final, peak) of the compared statistics summed over the instances; a pooled carrier
    counts as an mbcs carrier of the instance that created it (docs/erts/alloc_util.md §5). The
    peak is
    the sum of each instance's own maximum, for the node and the model alike."""
    out = dict.fromkeys(STATS + DETAIL, (0, 0))

    def add(key: str, final: int, peak: int) -> None:
        out[key] = (out[key][0] + final, out[key][1] + peak)

    for i in insts:
        p = i.mbcs_pool
        add("mbcs carriers_size", i.mbcs.carriers_size.current + (p.carriers_size if p else 0),
            i.mbcs.carriers_size.last_max)
        add("mbcs carriers", i.mbcs.carriers.current + (p.carriers if p else 0),
            i.mbcs.carriers.last_max)
        add("sbcs carriers_size", i.sbcs.carriers_size.current, i.sbcs.carriers_size.last_max)
        add("pool carriers", p.carriers if p else 0, 0)
    return out


@dataclass
class TraceCounts:
    """What the trace holds, per allocator name, and what it cannot hold."""

    allocs: Counter[str] = field(default_factory=Counter)
    frees: Counter[str] = field(default_factory=Counter)
    reallocs: Counter[str] = field(default_factory=Counter)
    unknown_frees: Counter[str] = field(default_factory=Counter)  # of blocks made before it
    unknown_reallocs: Counter[str] = field(default_factory=Counter)
    live_at_end: Counter[str] = field(default_factory=Counter)
    by_instance: Counter[tuple[str, int]] = field(default_factory=Counter)  # allocs


def count_trace(path: Path) -> tuple[Any, TraceCounts]:
    c = TraceCounts()
    with open_trace(path) as r:
        header = r.header
        live: dict[int, str] = {}
        for ev in r:
            a = ALLOCATOR_NAMES.get(ev.allocator, str(ev.allocator))
            if ev.op == Op.ALLOC:
                c.allocs[a] += 1
                c.by_instance[(a, ev.instance)] += 1
                live[ev.id] = a
            elif ev.op == Op.FREE:
                c.frees[a] += 1
                if live.pop(ev.id, None) is None:
                    c.unknown_frees[a] += 1
            else:
                c.reallocs[a] += 1
                if live.pop(ev.id, None) is None:
                    c.unknown_reallocs[a] += 1
                live[ev.new_id] = a
        for a in live.values():
            c.live_at_end[a] += 1
    return header, c


@dataclass
class Result:
    flags: str
    schedulers: int
    before: dict[str, tuple[int, int]]
    measured: dict[str, tuple[int, int]]
    predicted: dict[str, tuple[int, int]]
    tracer: dict[str, Any]
    counts: TraceCounts
    anomalies: dict[str, int]
    workload: str
    per_instance: dict[int, tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]]

    def rows(self) -> list[tuple[str, str, int, int, float]]:
        out = []
        for key in STATS:
            for j, when in enumerate(("final", "peak")):
                p, m = self.predicted[key][j], self.measured[key][j]
                out.append((when, key, p, m, rel(p, m)))
        return out

    def table(self) -> str:
        c = self.counts
        lines = [
            f"{ALLOCATOR}, flags {self.flags or '(defaults)'}, {self.schedulers} schedulers; "
            f"workload: {self.workload}",
            f"trace: {sum(c.allocs.values())} allocs, {sum(c.frees.values())} frees, "
            f"{sum(c.reallocs.values())} reallocs; lost events {self.tracer['lost_events']} "
            f"{self.tracer['lost']}",
            f"{ALLOCATOR} in the trace: {c.allocs[ALLOCATOR]} allocs, {c.frees[ALLOCATOR]} frees "
            f"({c.unknown_frees[ALLOCATOR]} of blocks from before the trace), "
            f"{c.reallocs[ALLOCATOR]} reallocs ({c.unknown_reallocs[ALLOCATOR]} of blocks from "
            f"before), {c.live_at_end[ALLOCATOR]} live at the end; all allocators: "
            f"{sum(c.unknown_frees.values())} frees of blocks from before",
            f"replay anomalies: {self.anomalies}",
            "node at the start of the trace (final): "
            + ", ".join(f"{k} {v[0]}" for k, v in self.before.items()),
            "",
            "| when | statistic | predicted | measured | error |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [f"| {w} | {k} | {p} | {m} | {e:.1%} |" for w, k, p, m, e in self.rows()]
        lines += ["", "per instance (predicted / measured, final and peak):"]
        for ix, (p, m) in sorted(self.per_instance.items()):
            lines.append(f"  instance {ix}: " + "; ".join(
                f"{k} {p[k][0]}/{m[k][0]}, {p[k][1]}/{m[k][1]}" for k in STATS + DETAIL))
        return "\n".join(lines)


def rel(pred: int, meas: int) -> float:
    return 0.0 if pred == meas else abs(pred - meas) / max(meas, 1)


def run_e2e(ebin: str, workdir: Path, *, workers: int = 4, per_worker: int = 1500,
            seed: int = 1, flags: str = "") -> Result:
    node = BinLife(ebin, flags)
    trace = workdir / "binlife.batr"
    try:
        assert node.cmd("settle") == "settled"
        tr = Tracer("--pid", str(node.pid), "-o", str(trace), "--json")
        # Read inside the trace: the reply (a long line to the node's stdout) passes through
        # binary_alloc, and its blocks outlive the command.
        before = stats(node.info())
        assert node.cmd("mark") == "marked"  # the peaks from here on
        done = node.cmd(f"run {workers} {per_worker} {seed}")
        assert done.startswith("done "), done
        rc, out, err = tr.stop()
        assert rc == 0, err
        after = node.info()
        measured = stats(after)
    finally:
        node.stop()
    header, counts = count_trace(trace)
    res = replay_snapshot(trace, header.flags, schedulers=header.schedulers)
    model = res.snapshot.instances(ALLOCATOR)
    predicted = stats(model)
    per_instance = {i.instance: (stats([i]), stats([j for j in after if j.instance == i.instance]))
                    for i in model}
    return Result(header.flags, header.schedulers, before, measured, predicted, tr.json(out),
                  counts, res.snapshot.extra["replay"]["anomalies"],
                  f"binlife run {workers} {per_worker} {seed} -> {done}", per_instance)


def compile_workload(dest: str) -> None:
    subprocess.run(["erlc", "-o", dest, str(WORKLOAD)], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--per-worker", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flags", default="", help="+M flags for the node (and so the replay)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="beamalloc-e2e-"))
    try:
        compile_workload(str(tmp))
        r = run_e2e(str(tmp), tmp, workers=args.workers, per_worker=args.per_worker,
                    seed=args.seed, flags=args.flags)
        print(r.table())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
