"""Replay speed of refalloc against glibc malloc on the same 20-million-event trace (issue 4).

Builds refalloc's `bench` example (release) and tests/bench/glibc_replay.c (cc -O2), writes a
synthetic binary_alloc trace (steady state of up to 50 000 live blocks freed at random, dense
ids), then in the same run replays it through refalloc (bf, aoffcbf: read + decode + model) and
through glibc (read + decode + malloc/free). Prints events per second and the ratio to glibc,
and the peak RSS of a replay of a 2-million-event trace with the same live set beside the
20-million one: replay memory follows the live blocks, not the trace length.

Usage: python tests/bench/bench_replay.py [EVENTS] [MAX_LIVE]
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
ENV = {**os.environ, "PATH": f"{Path.home() / '.cargo' / 'bin'}:{os.environ.get('PATH', '')}"}


def sh(*cmd: str | Path) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True,
                          env=ENV).stdout  # fmt: skip


def main() -> int:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000_000
    max_live = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
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
              f"{big.stat().st_size / 1e6:.0f} MB")  # fmt: skip
        n, secs, _rss = sh(glibc, big).split()
        g_rate = int(n) / float(secs)
        print(f"glibc malloc      {g_rate / 1e6:6.2f} M events/s  ({float(secs):.2f} s)")
        for strategy in ("bf", "aoffcbf"):
            n, secs, rss, _live = sh(BENCH, "replay", big, strategy).split()
            rate = int(n) / float(secs)
            _, _, rss_small, _ = sh(BENCH, "replay", small, strategy).split()
            print(
                f"refalloc {strategy:8s} {rate / 1e6:6.2f} M events/s  ({float(secs):.2f} s)  "
                f"refalloc time / glibc time {g_rate / rate:4.2f}  peak RSS {int(rss) // 1024} MiB "
                f"({events} events) vs {int(rss_small) // 1024} MiB ({events // 10} events)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
