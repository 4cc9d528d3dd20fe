"""Bench: the process scan of a node with 300,000 processes, both ways it is made.

    .venv/bin/python tests/bench/bench_processes.py [--runs N] [--processes P]

Alternates, N times on one target: scan_node() over our own client (collector/dist.py, the
default on plain TCP: our side decodes every process_info reply and reduces it), the same with
$BEAMALLOC_HIDDEN_NODE=1 (a hidden BEAM boots, reduces there and sends the reduction), and
`snapshot_node()` of the same node (the allocators: the floor a live command pays anyway).
Prints the medians and the ratios direct / hidden and direct / snapshot (goal: a scan within
3 s, issue 12 item 1), whether the scan was complete or how much of the node it read within its
budget, where the time went (listing, ordering, reading, reporting, totals and groups, and the
decoding of the replies), and the first pass made inside the target itself (timer:tc, one
process, no distribution). A plain script, not a test: tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time

from beamalloc.collector import live, processes, relay

HOST = socket.gethostname().split(".")[0]

# Runs in the target: spawns the idle processes, then answers {From, go} with the microseconds
# the scan's first pass takes there (every process, the first pass's items).
TARGET_EVAL = """
[spawn(fun() -> receive stop -> ok end end) || _ <- lists:seq(1, N)],
register(bench, self()),
Items = [memory, total_heap_size, message_queue_len, initial_call, status, binary, reductions],
Loop = fun L() -> receive {From, go} ->
    {T, _} = timer:tc(fun() -> [erlang:process_info(P, Items) || P <- erlang:processes()] end),
    From ! {bench, T}, L() end end,
Loop().
"""


def _registered(node: str, cookie: str) -> bool:
    code = f"io:format(\"~p\", [erpc:call('{node}', erlang, whereis, [bench])]), halt()."
    out = subprocess.run(
        ["erl", "-sname", f"bench_probe_{secrets.token_hex(3)}", "-setcookie", cookie, "-hidden",
         "-noshell", "-eval", code], capture_output=True, text=True, timeout=60).stdout
    return "<" in out


def _in_target_us(node: str, cookie: str, runs: int) -> list[int]:
    code = (f"T = '{node}', R = [begin {{bench, T}} ! {{self(), go}}, "
            f"receive {{bench, U}} -> U end end || _ <- lists:seq(1, {runs})], "
            "io:format(\"~w~n\", [R]), halt().")
    out = subprocess.run(
        ["erl", "-sname", f"bench_probe_{secrets.token_hex(3)}", "-setcookie", cookie, "-hidden",
         "-noshell", "-eval", code], capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    return [int(x) for x in re.findall(r"\d+", out)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--processes", type=int, default=300_000)
    args = ap.parse_args()

    name, cookie = f"bench_{secrets.token_hex(4)}", secrets.token_hex(12)
    node = f"{name}@{HOST}"
    proc = subprocess.Popen(
        ["erl", "-sname", name, "-setcookie", cookie, "-noshell", "+P", "4194304",
         "-eval", f"N = {args.processes}, " + TARGET_EVAL],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _registered(node, cookie):
            if proc.poll() is not None or time.monotonic() > deadline:
                print("target node did not start", file=sys.stderr)
                return 1
            time.sleep(0.5)
        relay.erlang_ebin()  # compile once; the cache is not what we measure
        walls: dict[str, list[float]] = {"direct": [], "hidden": [], "snapshot": []}
        tables: dict[str, list[processes.ProcessTable]] = {"direct": [], "hidden": []}
        for _ in range(args.runs):
            for way in ("direct", "hidden"):
                os.environ[live.ENV_HIDDEN_NODE] = "1" if way == "hidden" else "0"
                t0 = time.perf_counter()
                tables[way].append(processes.scan_node(node, cookie, timeout=30))
                walls[way].append(time.perf_counter() - t0)
            os.environ[live.ENV_HIDDEN_NODE] = "0"
            t0 = time.perf_counter()
            live.snapshot_node(node, cookie, timeout=30)
            walls["snapshot"].append(time.perf_counter() - t0)
        inside = [u / 1e6 for u in _in_target_us(node, cookie, args.runs)]
        med = {k: statistics.median(v) for k, v in walls.items()}
        here = statistics.median(inside)
        t = tables["direct"][-1]
        print(f"target: {t.count:,} processes, budget {processes.BUDGET_MS} ms / "
              f"{processes.MAX_PROCESSES:,} processes; {args.runs} runs, alternated")
        for k, v in walls.items():
            print(f"{k:<9} median {med[k]:.3f} s (min {min(v):.3f}, max {max(v):.3f})")
        print(f"ratio direct / hidden node: {med['direct'] / med['hidden']:.2f}; "
              f"direct / snapshot: {med['direct'] / med['snapshot']:.2f} (goal: a scan "
              "within 3 s)")
        for way, ts in tables.items():
            print(f"{way}: read " + ", ".join(f"{x.scanned:,}{'' if x.complete else ' (budget)'}"
                                              for x in ts))
            for k in ("listed", "ordered", "read", "reported", "summed"):
                ms = statistics.median(x.timings_ms.get(k, 0) for x in ts)
                print(f"  {k:<10} median {ms:7.1f} ms")
        decode = statistics.median(x.timings_ms.get("decoded", 0) for x in tables["direct"])
        print(f"direct: of these, decoding the replies: median {decode:.1f} ms")
        print(f"first pass inside the target (timer:tc, one process): median {here * 1000:.1f} ms "
              f"(min {min(inside) * 1000:.1f}, max {max(inside) * 1000:.1f}); direct / it: "
              f"{med['direct'] / here:.1f}x")
        with open("/proc/loadavg") as f:
            print(f"load average while measured: {f.read().split()[0]} (2 cores, shared)")
        return 0 if med["direct"] < 3 else 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
