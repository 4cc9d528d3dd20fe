"""Why the process scan keeps erlang:processes/0 on OTP 28+ (docs/erts/releases.md §4): what
walking the table with processes_iterator/0 + processes_next/1 would cost a reader that runs no
code on the target. processes_next/1 takes the iterator the previous call returned, so from here
it is one sequential rex round trip per pid at least; the floor is processes/0 in the same run.

    .venv/bin/python tests/bench/bench_processes_iterator.py [--processes 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import otp

from beamalloc.collector import access as access_mod
from beamalloc.collector import dist, live


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=20_000)
    ap.add_argument("--calls", type=int, default=2_000)
    a = ap.parse_args()
    release = "29" if otp.missing("29") is None else otp.SYSTEM
    n = otp.start_node(["+P", "1048576"], release=release, eval_=(
        f"[spawn(fun() -> receive stop -> ok end end) || _ <- lists:seq(1, {a.processes})]"))
    try:
        time.sleep(2)
        c = dist.Connection(n.node, n.cookie, access_mod.current(), time.monotonic() + 20,
                            live.NAME_POOL, False)
        try:
            t = time.perf_counter()
            pids = c.call("erlang", "processes", [], time.monotonic() + 60)
            listed = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(a.calls):
                c.call("erlang", "node", [], time.monotonic() + 60)
            trip = (time.perf_counter() - t) / a.calls
        finally:
            c.close()
        walk = trip * len(pids)
        print(f"OTP {release}: processes/0 listed {len(pids)} pids in {listed * 1000:.1f} ms; "
              f"a sequential round trip {trip * 1e6:.0f} us, so processes_next/1 walks them in "
              f">= {walk:.2f} s: >= {walk / listed:.0f}x processes/0")
    finally:
        n.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
