"""Bench: what per-carrier data (instrument:carriers/1) adds to a live snapshot.

    .venv/bin/python tests/bench/bench_carriers.py [--runs N] [--gib G]

Two real nodes:
- big: about G GiB (default 2) of 600-1400 byte binaries in binary_alloc, with +MBlmbcs 1024 so
  that they fill 2,000 or more 1 MiB carriers (goal: carriers add at most 0.5 s to a snapshot);
- many: 100,000 binaries above a 1 KiB sbct (+MBsbct 1): 100,000 single-block carriers (goal: a
  bounded answer, the cap said in the output, not a stall).
For each, snapshot_node() with carriers (the default cap, collector/instrument.py MAX_CARRIERS)
and without (max_carriers=0), alternated, N runs each: medians, the difference and the ratio,
all measured in this run. The big node also checks that the carriers add up to the counters'
carrier bytes. A plain script, not a test: tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time

from beamalloc.analyzer import metrics as m
from beamalloc.collector import live
from beamalloc.limits import MAX_CARRIERS

HOST = socket.gethostname().split(".")[0]

#: Each of 2 processes allocates its share of binaries and keeps them (and the node idles).
FILL = """
N = {n}, Self = self(),
[spawn(fun() -> L = [binary:copy(<<7>>, {lo} + rand:uniform({span})) || _ <- lists:seq(1, N div 2)],
                Self ! done, receive stop -> length(L) end end) || _ <- [1, 2]],
[receive done -> ok end || _ <- [1, 2]],
io:format("ready~n"),
receive stop -> ok end.
"""


def start(flags: list[str], n: int, lo: int, span: int) -> tuple[subprocess.Popen[str], str, str]:
    name, cookie = f"bench_{secrets.token_hex(4)}", secrets.token_hex(12)
    proc = subprocess.Popen(
        ["erl", "-sname", name, "-setcookie", cookie, "-noshell", *flags,
         "-eval", FILL.format(n=n, lo=lo, span=span)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "ready" not in line:
        stop(proc)
        sys.exit(f"the bench node did not start: {line.strip()}")
    return proc, f"{name}@{HOST}", cookie


def stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def timed(node: str, cookie: str, cap: int) -> tuple[float, object]:
    t = time.perf_counter()
    snap = live.snapshot_node(node, cookie, timeout=120.0, max_carriers=cap)
    return time.perf_counter() - t, snap


def compare(label: str, node: str, cookie: str, runs: int, caps: list[int]) -> dict[int, object]:
    times: dict[int, list[float]] = {c: [] for c in caps}
    last: dict[int, object] = {}
    timed(node, cookie, caps[-1])  # warm: the first use loads instrument on the target
    for _ in range(runs):
        for c in caps:
            dt, last[c] = timed(node, cookie, c)
            times[c].append(dt)
    base = statistics.median(times[0])
    print(f"{label}: median of {runs} snapshots each (hidden-node boot included)")
    for c in caps:
        med = statistics.median(times[c])
        s = last[c]
        got = "counters only" if c == 0 else (
            f"cap {c:,}: {len(s.carriers or ()):,} carriers read, {s.carriers_skipped:,} skipped")
        print(f"  {got:<58} {med:6.3f} s  (+{med - base:.3f} s, x{med / base:.2f})")
    return last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gib", type=float, default=2.0)
    args = ap.parse_args()

    n = int(args.gib * (1 << 30) / 1040)  # 600-1400 byte binaries, ~1040 B with headers
    proc, node, cookie = start(["+MBlmbcs", "1024"], n, 600, 800)
    try:
        snaps = compare(f"big: {n:,} binaries", node, cookie, args.runs, [0, MAX_CARRIERS])
        s = snaps[MAX_CARRIERS]
        cs = s.carriers_of("binary_alloc")
        counters = sum(m.container_size(i, "current", "carriers_size")
                       for i in s.instances("binary_alloc"))
        print(f"  binary_alloc: {len(cs):,} carriers, {sum(c.size for c in cs) / (1 << 30):.3f} "
              f"GiB by instrument, {counters / (1 << 30):.3f} GiB by the counters "
              f"(difference {sum(c.size for c in cs) - counters:+,} B)")
    finally:
        stop(proc)

    proc, node, cookie = start(["+MBsbct", "1"], 100_000, 1500, 500)
    try:
        snaps = compare("many: 100,000 binaries above sbct", node, cookie, max(1, args.runs // 2),
                        [0, MAX_CARRIERS, 1_000_000])
        for note in snaps[MAX_CARRIERS].notes:
            print(f"  note: {note}")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
