"""What each stage of one `beamalloc recommend ARGS...` costs, run in this process as the command
runs (cli/main.py `main`), its stages timed where they are called: prints one JSON object on
stderr's last line. tests/bench/bench_recommend.py runs it as a child per run.

    python tests/bench/recommend_stages.py recommend NODE --cookie-file F --json ...

Stages (wall seconds, and CPU seconds of the thread that ran them; of the whole process for
`ahead`, `history` and `replays`, whose passes run in a pool):
`imports` (the modules the command loads, pulled in front), `first_read` (allocators),
`process_scan`, `ets` (threads beside the first read over our own client: they overlap it),
`wait` (sleeps of the main thread), `second_read`, `second_scan`,
`turnover` (the counters read again until they show it), `join` (waiting for the
replays run ahead), `verdict` (recommend(): the replays not done ahead
and the rules), `render` (from the verdict to the exit); `ahead` is the replays' thread, which
overlaps the wait, and `history`/`replays` the predictor's calibration and its replay passes
wherever they ran. Startup (the interpreter) is the child's wall minus `total`, its CPU the
child's minus `total_cpu`: the bench computes them.
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

T0 = time.perf_counter()
C0 = time.process_time()
stages: dict[str, list[float]] = {}  # name -> [wall, cpu, calls]


def _add(name: str, wall: float, cpu: float) -> None:
    s = stages.setdefault(name, [0.0, 0.0, 0])
    s[0] += wall
    s[1] += cpu
    s[2] += 1


def _timed(name: Callable[[], str] | str, fn: Callable[..., Any], main_only: bool = False,
           threads: bool = False) -> Callable[..., Any]:  # fmt: skip
    """`fn` timed: its wall, and the CPU of the calling thread (of the whole process with
    `threads`: the replays run in a pool, while the main thread mostly waits)."""
    clock = time.process_time if threads else time.thread_time

    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
        if main_only and threading.current_thread() is not threading.main_thread():
            return fn(*a, **k)
        t, c = time.perf_counter(), clock()
        try:
            return fn(*a, **k)
        finally:
            _add(name() if callable(name) else name, time.perf_counter() - t, clock() - c)

    return wrapper


def _nth(first: str, later: str) -> Callable[[], str]:
    seen = [0]

    def name() -> str:
        seen[0] += 1
        return first if seen[0] == 1 else later

    return name


def main() -> int:
    t, c = time.perf_counter(), time.process_time()
    from beamalloc.advice import predict, reading
    from beamalloc.advice import recommend as rec
    from beamalloc.cli.commands import recommend as _cmd  # noqa: F401
    from beamalloc.collector import ets, live, processes

    # the reporter the command renders with: --json prints the paste block alone, without rich
    importlib.import_module("beamalloc.reporters." + ("paste" if "--json" in sys.argv
                                                      else "recommend"))  # fmt: skip
    cli = importlib.import_module("beamalloc.cli.main")  # the package's `main` is the function

    _add("imports", time.perf_counter() - t, time.process_time() - c)
    live.snapshot_node = _timed(_nth("first_read", "second_read"), live.snapshot_node)
    processes.scan_node = _timed(_nth("process_scan", "second_scan"), processes.scan_node)
    ets.scan_ets = _timed("ets", ets.scan_ets)
    time.sleep = _timed("wait", time.sleep, main_only=True)
    rec.recommend = _timed("verdict", rec.recommend)
    reading._Ahead.join = _timed("join", reading._Ahead.join, main_only=True)
    reading._Ahead._run = _timed("ahead", reading._Ahead._run, threads=True)
    reading.Reader.turnover = _timed("turnover", reading.Reader.turnover)
    predict.Predictor._history = _timed("history", predict.Predictor._history, threads=True)
    predict.Predictor._history_replays_under = _timed(
        "replays", predict.Predictor._history_replays_under, threads=True)  # fmt: skip
    src = reading.recommend_source
    done: list[float] = []

    def source(*a: Any, **k: Any) -> Any:
        try:
            return src(*a, **k)
        finally:
            done.extend((time.perf_counter(), time.process_time()))

    reading.recommend_source = source
    rc = cli.main(sys.argv[1:])
    end, cend = time.perf_counter(), time.process_time()
    if done:
        _add("render", end - done[0], cend - done[1])
    out = {k: {"wall": round(v[0], 4), "cpu": round(v[1], 4), "calls": v[2]}
           for k, v in stages.items()}  # fmt: skip
    out["total"] = {"wall": round(end - T0, 4), "cpu": round(cend - C0, 4), "calls": 1}
    sys.stdout.flush()
    print(json.dumps(out), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
