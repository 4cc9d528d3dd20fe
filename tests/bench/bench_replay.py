"""Replay speed of refalloc against glibc malloc on the same 20-million-event trace (issue 4;
issue 28 item 6: at least 1.5x glibc's speed on every strategy).

Builds refalloc's `bench` example (release) and tests/bench/glibc_replay.c (cc -O2), writes a
synthetic binary_alloc trace (steady state of up to 50 000 live blocks freed at random, dense
ids), then in the same run replays it through refalloc under every strategy (read + decode +
model) and through glibc (read + decode + malloc/free). Prints events per second, the ratio of
refalloc's time to glibc's and glibc's speed over refalloc's (the "x glibc" figure),
the trace decoding alone (its share of refalloc's time), and the peak RSS of a replay of a
2-million-event trace with the same live set beside the 20-million one: replay memory follows
the live blocks, not the trace length.

Each replay runs REPEAT times (default 3), alternating programs, and the fastest run counts: on a
shared machine the slower runs measure the other jobs. Both wall time and the thread's CPU time
are shown (CPU time leaves out the time other processes held the core; cache contention stays).

A before/after of a model change: build `bench` at the base commit, copy the binary away and
name it in BENCH_REPLAY_BASE; its replays then alternate with the current ones and each strategy
gets a second line, the base's figures against the same glibc runs.

Usage: python tests/bench/bench_replay.py [EVENTS] [MAX_LIVE] [REPEAT] [STRATEGY,...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "refalloc"
BENCH = CRATE / "target" / "release" / "examples" / "bench"
#: Every `as` strategy (docs/erts/alloc_util.md §2.1; refalloc/src/config.rs Strategy::ALL).
STRATEGIES = ("bf", "aobf", "aoff", "aoffcbf", "aoffcaobf", "ageffcaoff", "ageffcbf",
              "ageffcaobf", "gf", "af")
ENV = {**os.environ, "PATH": f"{Path.home() / '.cargo' / 'bin'}:{os.environ.get('PATH', '')}"}


def sh(*cmd: str | Path) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True,
                          env=ENV).stdout  # fmt: skip


def main() -> int:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000_000
    max_live = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    strategies = sys.argv[4].split(",") if len(sys.argv) > 4 else list(STRATEGIES)
    sh("cargo", "build", "-q", "--release", "--no-default-features", "--example", "bench",
       "--manifest-path", CRATE / "Cargo.toml")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        glibc = t / "glibc_replay"
        sh("cc", "-O2", "-o", glibc, ROOT / "tests" / "bench" / "glibc_replay.c")
        big, small = t / "big.batr", t / "small.batr"
        sh(BENCH, "gen", big, str(events), str(max_live))
        sh(BENCH, "gen", small, str(events // 10), str(max_live))
        print(f"trace: {events} events, up to {max_live} live blocks, "
              f"{big.stat().st_size / 1e6:.0f} MB; best of {repeat} runs each")  # fmt: skip
        runs: dict[str, list[tuple[float, float, list[str]]]] = {}
        base = os.environ.get("BENCH_REPLAY_BASE")
        cmds = {
            "glibc": [glibc, big],
            "decode": [BENCH, "decode", big],
            **{s: [BENCH, "replay", big, s] for s in strategies},
            **({f"base {s}": [base, "replay", big, s] for s in strategies} if base else {}),
        }
        for _ in range(repeat):
            for name, cmd in cmds.items():
                out = sh(*cmd).split()
                assert int(out[0]) == events, out
                runs.setdefault(name, []).append((float(out[1]), float(out[-1]), out))
        wall = {k: min(r[0] for r in v) for k, v in runs.items()}
        cpu = {k: min(r[1] for r in v) for k, v in runs.items()}

        def rates(k: str) -> str:
            return (f"{events / wall[k] / 1e6:6.2f} M events/s wall ({wall[k]:.2f} s), "
                    f"{events / cpu[k] / 1e6:6.2f} M events/s CPU ({cpu[k]:.2f} s)")  # fmt: skip

        print(f"glibc malloc      {rates('glibc')}")
        print(f"trace decoding    {rates('decode')}")
        for strategy in strategies:
            rss = int(runs[strategy][0][2][2])
            rss_small = int(sh(BENCH, "replay", small, strategy).split()[2])
            print(
                f"refalloc {strategy:10s} {rates(strategy)}\n"
                f"    refalloc time / glibc time: wall "
                f"{wall[strategy] / wall['glibc']:4.2f}, CPU {cpu[strategy] / cpu['glibc']:4.2f}"
                f" ({cpu['glibc'] / cpu[strategy]:4.2f}x glibc); "
                f"peak RSS {rss // 1024} MiB ({events} events) vs {rss_small // 1024} MiB "
                f"({events // 10} events)"
            )
            if base:
                b = cpu[f"base {strategy}"]
                print(f"    base ({base}): {events / b / 1e6:6.2f} M events/s CPU ({b:.2f} s, "
                      f"{cpu['glibc'] / b:4.2f}x glibc); base time / now: "
                      f"{b / cpu[strategy]:4.2f}")  # fmt: skip
        below = [s for s in strategies if cpu["glibc"] / cpu[s] < 1.5]
        print(f"below 1.5x glibc (CPU): {', '.join(below) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
