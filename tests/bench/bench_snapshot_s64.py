"""Bench: cold live snapshot of a +S 64 node (64 instances per allocator), end to end.

    .venv/bin/python tests/bench/bench_snapshot_s64.py [--runs N] [--schedulers S]

Two ways, interleaved run by run against the same target, so that load on the machine hits
both alike (read the ratios, not the absolute times):

- direct: collector/dist.py, our own distribution client (what snapshot_node() does for plain
  TCP distribution), no BEAM booted on our side;
- hidden node: a hidden BEAM of ours relaying the same calls (collector/relay.py: the path of
  TLS distribution; $BEAMALLOC_HIDDEN_NODE=1).

Each is split into connect (epmd, our name, the handshake; the hidden node: from its main, once
booted), the calls (in the target, on the wire and decoded as they arrive), decode (of that, our
decoding; the allocator replies are read to records there, collector/native/src/alloc_reply.rs),
carriers (instrument reads; the Snapshot's start is built meanwhile), build (the Snapshot's
rest once the reply is in) and the rest (the hidden node's boot and cleanup; for the direct
way, closing). Then the same system_info calls timed inside the target (timer:tc, sequential;
once more with every carrier scan, what the snapshot asks on top), and a watch's sample over a
kept connection:
the calls in the target plus the decoding of their replies, without the Snapshot build, over a
collector/session.py Session, our own client's and the relay's (the watch's hidden node).

Then whole processes, interleaved: `beamalloc snapshot NODE --json --max-carriers 0` against a
stock `erl -hidden` making the same calls with erpc (STOCK_EVAL), CPU time (user + system, the
kernel's accounting of each child) compared by median (issue 28 item 2: ours at most the stock
one's); and the direct snapshot's wall against the in-target time of the calls plus one
connection (the direct way's connect phase): at most 3x.

Per carrier (issue 28 item 2: half the issue's 8 us to build and 6 us to encode): a reply
read with its carriers, their lists repeated up to about --per-carrier N carriers, built into a
Snapshot and encoded (to_json, compact) against the same reply without carriers; the difference
over the count, best of 5. The whole snapshot's encoding (to_json, compact: ~600 instances,
its carriers, the raw term) against its build's CPU. Encoding once: `beamalloc snapshot NODE
--json` run in this process, counting the JSON encodings (json.dumps) and term-text writings
(the raw term) it makes.

Goals (issue 13 item 5): direct median <= 0.25 s; a kept-connection sample <= 50 ms. A plain
script, not a test: tests never assert wall-clock times. Exit status 0 when both goals hold.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from beamalloc.collector import build, collect, live, relay, session
from beamalloc.collector.access import Access
from beamalloc.collector.transport import Transport

HOST = socket.gethostname().split(".")[0]

# Runs in the target (its own -eval): answers {From, go} with the microseconds the collected
# calls take there, called sequentially; {From, scans}: the same calls, then the carrier scan
# of every scheduler's instances of every alloc_util allocator (what a snapshot reading
# carriers asks on top, one instrument:carriers/1 per scheduler id, as collect.py does).
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
Scans = fun() ->
    Calls(),
    Utils = erlang:system_info(alloc_util_allocators),
    [instrument:carriers(#{scheduler_ids => [I], allocator_types => Utils,
                           histogram_start => 128, histogram_width => 18})
     || I <- lists:seq(0, erlang:system_info(schedulers))]
end,
Loop = fun L() -> receive {From, go} -> {T, _} = timer:tc(Calls), From ! {bench, T}, L();
                          {From, scans} -> {T, _} = timer:tc(Scans), From ! {bench, T}, L()
                  end end,
Loop().
"""

# The same calls from a stock hidden node, one erpc each (what an operator's `erl -hidden`
# would do by hand); ~s is the target's name.
STOCK_EVAL = """
N = list_to_atom("~s"),
As = [sys_alloc, mseg_alloc, erts_mmap, alloc_util
      | erpc:call(N, erlang, system_info, [alloc_util_allocators])],
erpc:call(N, erlang, memory, []),
[erpc:call(N, erlang, system_info, [K]) || K <- [otp_release, version, wordsize, schedulers]],
erpc:call(N, os, getpid, []),
[erpc:call(N, erlang, system_info, [{allocator, A}]) || A <- As],
halt().
"""

PHASES = ("connect", "calls", "decode", "carriers", "overlapped", "build", "build_cpu", "rest")


def _phases(snap, wall: float, lt: dict[str, float]) -> dict[str, float]:
    """One snapshot's wall time split with the reply's timestamps (Unix microseconds, the same
    clock as time.time()) and the timings snapshot_node() filled in (`lt`)."""
    raw = snap.raw or ""
    t = {k: int(v) / 1e6 for k, v in
         re.findall(r"\{(main|connected|calls_sent|replies_in),(\d+)\}", raw)}
    carriers = lt.get("carriers_s", 0.0)
    calls = t["replies_in"] - t["calls_sent"]
    out = {"connect": t["connected"] - t["main"] if "connected" in t else float("nan"),
           "calls": calls, "decode": lt.get("decode_s", 0.0), "carriers": carriers,
           "overlapped": lt.get("build_overlapped", 0.0),
           "build": lt.get("build", 0.0), "build_cpu": lt.get("build_cpu", 0.0)}
    out["rest"] = wall - sum(v for k, v in out.items()
                             if k not in ("decode", "overlapped", "build_cpu"))
    # the whole build's CPU: its start while the carriers were scanned, and its rest after
    out["build_all_cpu"] = lt.get("build_cpu", 0.0) + lt.get("build_overlapped_cpu", 0.0)
    return out


def _registered(name: str) -> bool:
    out = subprocess.run(["epmd", "-names"], capture_output=True, text=True).stdout
    return f"name {name} at port" in out


def _in_target_us(node: str, cookie: str, runs: int, what: str = "go") -> list[int]:
    code = (f"T = '{node}', R = [begin {{bench, T}} ! {{self(), {what}}}, "
            f"receive {{bench, U}} -> U end end || _ <- lists:seq(1, {runs})], "
            "io:format(\"~w~n\", [R]), halt().")
    out = subprocess.run(
        ["erl", "-sname", f"bench_probe_{secrets.token_hex(3)}", "-setcookie", cookie, "-hidden",
         "-noshell", "-eval", code], capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    return [int(x) for x in re.findall(r"\d+", out)]


def _snap(node: str, cookie: str, hidden: bool, carriers: int) -> tuple[float, dict, object]:
    if hidden:
        os.environ[live.ENV_HIDDEN_NODE] = "1"
    timings: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        snap = live.snapshot_node(node, cookie, max_carriers=carriers, timings=timings)
        wall = time.perf_counter() - t0
    finally:
        os.environ.pop(live.ENV_HIDDEN_NODE, None)
    return wall, _phases(snap, wall, timings), snap


def _kept(node: str, cookie: str, runs: int) -> tuple[list[float], list[float], int, list[float]]:
    """Samples over a kept connection (collector/session.py, what a watch would hold): the wall
    of the calls, of which decoding, the bytes per sample, and the whole sample with the
    Snapshot built."""
    walls, decodes, whole = [], [], []
    nbytes = 0
    with session.Session(cookie, access=Access()) as s:
        for _ in range(runs + 1):
            def work(conn: Transport, deadline: float) -> None:
                d0, b0 = conn.stats["decode_s"], conn.stats["bytes"]
                t0 = time.perf_counter()
                collect.collect(conn, node, 0, deadline, 0, 0)
                walls.append(time.perf_counter() - t0)
                decodes.append(conn.stats["decode_s"] - d0)
                nonlocal nbytes
                nbytes = conn.stats["bytes"] - b0
            s.run(node, 30.0, work)
            t0 = time.perf_counter()
            s.snapshot(node, 30.0)
            whole.append(time.perf_counter() - t0)
    return walls[1:], decodes[1:], nbytes, whole[1:]


def _session(node: str, cookie: str, runs: int) -> list[float]:
    """Samples through the watch's hidden node (a relayed Session): request to decoded reply."""
    os.environ[live.ENV_HIDDEN_NODE] = "1"
    try:
        with session.Session(cookie) as s:
            walls = []
            for _ in range(runs + 1):
                t0 = time.perf_counter()
                s.run(node, 30.0, lambda conn, deadline: collect.collect(conn, node, 0, deadline,
                                                                         0, 0))
                walls.append(time.perf_counter() - t0)
            return walls[1:]
    finally:
        os.environ.pop(live.ENV_HIDDEN_NODE, None)


def _child_cpu(cmd: list[str], env: dict[str, str]) -> float:
    """User + system seconds of one run of `cmd`, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _processes(node: str, cookie: str, runs: int) -> tuple[list[float], list[float]]:
    """CPU of `beamalloc snapshot` and of a stock hidden erl making the same calls, alternating."""
    ours_cmd = [str(Path(sys.executable).parent / "beamalloc"), "snapshot", node, "--json",
                "--max-carriers", "0"]  # fmt: skip
    env = {**os.environ, "BEAMALLOC_COOKIE": cookie}
    ours, stock = [], []
    for _ in range(runs):
        ours.append(_child_cpu(ours_cmd, env))
        # The bench's own probe: its cookie may be on its command line; beamalloc's never is.
        stock.append(_child_cpu(
            ["erl", "-sname", f"bench_stock_{secrets.token_hex(3)}", "-setcookie", cookie,
             "-hidden", "-noshell", "-eval", STOCK_EVAL.replace("~s", node)], env))
    return ours, stock


def _best(f: Callable[[], object], runs: int = 5) -> float:
    """The least CPU seconds of `runs` calls of `f`."""
    out = []
    for _ in range(runs):
        t0 = time.process_time()
        f()
        out.append(time.process_time() - t0)
    return min(out)


def _per_carrier(node: str, cookie: str, want: int) -> tuple[int, float, float]:
    """(carriers, build us, encode us) per carrier: a reply with its carriers repeated up to
    about `want`, against the same reply without them."""
    with session.Session(cookie, access=Access()) as s:
        reply = s.run(node, 30.0, lambda conn, d: collect.collect(conn, node, 100_000, d, 0, 0))
    body = list(reply[1])
    i = next(k for k, x in enumerate(body) if x[0] == "carriers")
    answers = body[i][1]
    have = sum(len(a[1][1]) for _, a in answers if isinstance(a, tuple) and a[0] == "ok")
    k = max(1, want // max(1, have))
    many = [(inst, (a[0], (a[1][0], a[1][1] * k))) if isinstance(a, tuple) and a[0] == "ok"
            else (inst, a) for inst, a in answers]  # fmt: skip
    body[i] = (body[i][0], many)
    body = [(x[0], have * k * 2) if x[0] == "carriers_cap" else x for x in body]
    bare = [x for x in body if x[0] not in ("carriers", "carriers_skipped", "carriers_cap")]
    with_c = build.build_peer_snapshot(node, body)
    without = build.build_peer_snapshot(node, bare)
    n = len(with_c.carriers or [])
    b = _best(lambda: build.build_peer_snapshot(node, body)) - _best(
        lambda: build.build_peer_snapshot(node, bare))
    e = _best(with_c.to_json) - _best(without.to_json)
    return n, b / n * 1e6, e / n * 1e6


def _encodings(node: str, cookie: str) -> tuple[int, int, int, int]:
    """`beamalloc snapshot NODE --json --max-carriers 0` in this process: (JSON encodings,
    term-text writings, the longest of them, bytes written)."""
    from beamalloc.cli.main import main as cli_main
    from beamalloc.collector import terms

    counts = {"json": 0, "text": 0, "text_max": 0}
    dumps, text = json.dumps, terms.term_text

    def count_dumps(*a: object, **k: object) -> str:
        counts["json"] += 1
        return dumps(*a, **k)  # type: ignore[arg-type]

    def count_text(*a: object) -> str:
        counts["text"] += 1
        out = text(*a)  # type: ignore[arg-type]
        counts["text_max"] = max(counts["text_max"], len(out))
        return out

    out = io.StringIO()
    os.environ["BEAMALLOC_COOKIE"] = cookie
    json.dumps, terms.term_text = count_dumps, count_text  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(out):
            rc = cli_main(["snapshot", node, "--json", "--max-carriers", "0"])
    finally:
        json.dumps, terms.term_text = dumps, text  # type: ignore[assignment]
        os.environ.pop("BEAMALLOC_COOKIE", None)
    assert rc == 0
    return counts["json"], counts["text"], counts["text_max"], len(out.getvalue())


def _ms(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1000:7.1f} ms (min {min(xs) * 1000:.1f}, "
            f"max {max(xs) * 1000:.1f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--schedulers", type=int, default=64)
    ap.add_argument("--max-carriers", type=int, default=live.MAX_CARRIERS)
    ap.add_argument("--per-carrier", type=int, default=20_000,
                    help="carriers the per-carrier figures are measured over")
    args = ap.parse_args()

    name, cookie = f"bench_{secrets.token_hex(4)}", secrets.token_hex(12)
    node = f"{name}@{HOST}"
    # The bench's own target: its cookie may be on its command line; beamalloc's never is.
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
        relay.erlang_ebin()  # compile the relay once; its cache is not what we measure
        for hidden in (False, True):  # warm both (the target's first-call atoms, instrument)
            _snap(node, cookie, hidden, args.max_carriers)

        res: dict[bool, list[tuple[float, dict]]] = {False: [], True: []}
        for _ in range(args.runs):
            for hidden in (False, True):
                wall, ph, snap = _snap(node, cookie, hidden, args.max_carriers)
                res[hidden].append((wall, ph))
        inside = [u / 1e6 for u in _in_target_us(node, cookie, args.runs)]
        scans = [u / 1e6 for u in _in_target_us(node, cookie, args.runs, "scans")]
        kept, kept_decode, kept_bytes, kept_whole = _kept(node, cookie, args.runs)
        session = _session(node, cookie, args.runs)

        direct = [w for w, _ in res[False]]
        hidden_n = [w for w, _ in res[True]]
        print(f"target: +S {args.schedulers}, OTP {snap.otp_release}, {len(snap.allocators)} "
              f"alloc_util instances, {len(snap.mseg)} mseg instances, {len(snap.carriers)} "
              f"carriers read (--max-carriers {args.max_carriers}), raw term "
              f"{len(snap.raw or '')} chars; {args.runs} runs each, interleaved")
        print(f"cold snapshot_node(), direct:      {_ms(direct)}   goal <= 250 ms")
        print(f"cold snapshot_node(), hidden node: {_ms(hidden_n)}   (baseline)")
        print(f"  ratio direct / hidden node (medians): "
              f"{statistics.median(direct) / statistics.median(hidden_n):.2f}")
        print(f"  {'phase, median ms':<22} {'direct':>9} {'hidden':>9}")
        for k in PHASES:
            a = statistics.median(p[k] for _, p in res[False]) * 1000
            b = statistics.median(p[k] for _, p in res[True]) * 1000
            label = {"calls": "calls (target+wire)", "decode": "  of which decode",
                     "overlapped": "  of which build", "build": "build (after)",
                     "build_cpu": "  build's CPU", "rest": "rest (boot, cleanup)"}.get(k, k)
            print(f"  {label:<22} {a:9.1f} {b:9.1f}")
        here = statistics.median(inside)
        print(f"same system_info calls inside the target (timer:tc, sequential): {_ms(inside)}")
        print(f"  ratio direct wall / in-target: {statistics.median(direct) / here:.1f}x")
        print("watch sample over a kept connection (calls in the target + decode, no build):")
        print(f"  Session (our client):     {_ms(kept)}   goal <= 50 ms; decode "
              f"{statistics.median(kept_decode) * 1000:.1f} ms of {kept_bytes} bytes")
        print(f"  Session (relay):          {_ms(session)}")
        print(f"  the whole sample with its Snapshot built, our client: {_ms(kept_whole)}")
        print(f"  ratio kept / in-target: {statistics.median(kept) / here:.1f}x")
        connect = statistics.median(p["connect"] for _, p in res[False])
        print(f"direct wall / (in-target + one connection, {connect * 1000:.1f} ms): "
              f"{statistics.median(direct) / (here + connect):.1f}x   goal <= 3x")
        scanned = statistics.median(direct) / (statistics.median(scans) + connect)
        print(f"  the calls and every carrier scan inside the target: {_ms(scans)}; direct "
              f"wall / (that + one connection): {scanned:.1f}x")
        ours, stock = _processes(node, cookie, args.runs)
        print(f"CPU of the whole process, --max-carriers 0: beamalloc snapshot "
              f"{_ms(ours)}; stock erl -hidden, same calls {_ms(stock)}")
        print(f"  ratio (medians): {statistics.median(ours) / statistics.median(stock):.2f}"
              f"   goal <= 1")
        build_cpu = statistics.median(p["build_all_cpu"] for _, p in res[False])
        enc = _best(snap.to_json)
        print(f"Snapshot.to_json (compact) of the last snapshot: {enc * 1000:.1f} ms CPU, best "
              f"of 5; its whole build's CPU (median) {build_cpu * 1000:.1f} ms: ratio "
              f"{enc / build_cpu:.2f}" if build_cpu else "")
        n, b_us, e_us = _per_carrier(node, cookie, args.per_carrier)
        print(f"per carrier, {n} carriers (this node's, repeated): build {b_us:.2f} us, "
              f"encode {e_us:.2f} us; against the issue's 8 + 6 us: {b_us / 8:.2f}x and "
              f"{e_us / 6:.2f}x   goal <= 0.5x each")
        nj, nt, longest, size = _encodings(node, cookie)
        print(f"`beamalloc snapshot NODE --json`: {nj} JSON encoding(s), {nt} term-text "
              f"writing(s) (the raw term, {longest} chars, and erts_mmap's few), {size} bytes "
              "out   goal: encoded once")
        ok = statistics.median(direct) <= 0.25 and statistics.median(kept) <= 0.05
        return 0 if ok else 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
