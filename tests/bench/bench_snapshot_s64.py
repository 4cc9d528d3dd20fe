"""Bench: live snapshot of a +S 64 node (64 instances per allocator), hidden-node start included.

    .venv/bin/python tests/bench/bench_snapshot_s64.py [--runs N] [--schedulers S]

Prints the wall time of snapshot_node() (goal: under 1.5 s), the time the same system_info
calls take inside the target (timer:tc, run one after the other as a local recon_alloc
snapshot would), and the ratio of the two. A plain script, not a test: tests never assert
wall-clock times.
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

from beamalloc.collector import live

HOST = socket.gethostname().split(".")[0]

# Runs in the target (its own -eval): answers {From, go} with the microseconds the collected
# calls take there, called sequentially.
TARGET_EVAL = """
register(bench, self()),
Calls = fun() ->
    Allocs = [sys_alloc, mseg_alloc, erts_mmap, alloc_util
              | erlang:system_info(alloc_util_allocators)],
    erlang:memory(),
    [erlang:system_info(K) || K <- [otp_release, version, wordsize, schedulers]],
    os:getpid(),
    [erlang:system_info({allocator, A}) || A <- Allocs]
end,
Loop = fun L() -> receive {From, go} -> {T, _} = timer:tc(Calls), From ! {bench, T}, L() end end,
Loop().
"""


PHASES = ("hidden node boot (spawn to the agent's main)", "connect + handshake",
          "the agent's concurrent erpc calls", "output, decode, Snapshot build, cleanup")


def _phases(raw: str, start: float, end: float) -> tuple[float, ...]:
    """Split one snapshot's wall time using the agent's timestamps (same clock as time.time())."""
    t = {k: int(v) / 1e6 for k, v in re.findall(r"\{(main|connected|calls_sent|replies_in),(\d+)\}",
                                                  raw)}
    return (t["main"] - start, t["calls_sent"] - t["main"], t["replies_in"] - t["calls_sent"],
            end - t["replies_in"])


def _registered(name: str) -> bool:
    out = subprocess.run(["epmd", "-names"], capture_output=True, text=True).stdout
    return f"name {name} at port" in out


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
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--schedulers", type=int, default=64)
    args = ap.parse_args()

    name, cookie = f"bench_{secrets.token_hex(4)}", secrets.token_hex(12)
    node = f"{name}@{HOST}"
    # The bench's own target: its cookie may be on its command line; beamalloc's node never.
    proc = subprocess.Popen(
        ["erl", "-sname", name, "-setcookie", cookie, "-noshell", "+S", str(args.schedulers),
         "-eval", TARGET_EVAL],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _registered(name):
            if proc.poll() is not None or time.monotonic() > deadline:
                print("target node did not start", file=sys.stderr)
                return 1
            time.sleep(0.05)
        live.erlang_ebin()  # compile the agent once; its cache is not what we measure

        walls, phases = [], []
        for _ in range(args.runs):
            t0, w0 = time.perf_counter(), time.time()
            snap = live.snapshot_node(node, cookie)
            walls.append(time.perf_counter() - t0)
            phases.append(_phases(snap.raw or "", w0, w0 + walls[-1]))
        inside = [u / 1e6 for u in _in_target_us(node, cookie, args.runs)]

        n_inst = len(snap.allocators)
        wall, here = statistics.median(walls), statistics.median(inside)
        print(f"target: +S {args.schedulers}, OTP {snap.otp_release}, {n_inst} alloc_util "
              f"instances, {len(snap.mseg)} mseg instances, raw term {len(snap.raw or '')} chars")
        print(f"snapshot_node() wall, hidden-node start included: median {wall:.3f} s "
              f"(min {min(walls):.3f}, max {max(walls):.3f}, {args.runs} runs; goal < 1.5 s)")
        for i, label in enumerate(PHASES):
            print(f"  {label:<48} median {statistics.median(p[i] for p in phases) * 1000:6.1f} ms")
        print(f"same system_info calls inside the target (timer:tc, sequential): median "
              f"{here * 1000:.1f} ms (min {min(inside) * 1000:.1f}, max {max(inside) * 1000:.1f})")
        print(f"ratio wall / in-target: {wall / here:.1f}x")
        return 0 if wall < 1.5 else 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
