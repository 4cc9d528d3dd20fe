"""CSV traces through `beamalloc replay`'s one entry point (refalloc/replay.py replay_snapshot):
refalloc's native CSV rows (refalloc/src/csv.rs) against the same events in the binary format,
and against the reference reader's path (the whole file converted by beamalloc/trace.py first),
in one run (issue 13 item 4: at least 5 M events/s).

Writes a synthetic binary_alloc trace with refalloc's `bench` example (EVENTS events, up to
MAX_LIVE live blocks), converts it to CSV once, numbered types (`csv`) and once with the header
naming them as a traced node's does, so rows carry type names (`csv-named`: what `write_csv`
writes for an eBPF trace; names from docs/erts/erts_types_otp25.tsv), then times each path
REPEAT times, alternating, and keeps the fastest. Both clocks are printed: the CSV path reads
rows on one thread while the model replays on another, so wall time is what a user waits (with
a second core free) and CPU time, the sum of both threads, is the work done (the figure that
holds on a busy machine).

`--base SO`: a copy of an earlier build's extension (beamalloc/_refalloc*.so) whose CSV path
is timed too, alternating with this build's, so a change is measured against its base in one run
(the machine's load then weighs on both alike).

Usage: python tests/bench/bench_csv.py [--base SO] [EVENTS] [MAX_LIVE] [REPEAT]
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from unittest import mock

import beamalloc
from beamalloc import _refalloc, trace
from beamalloc.refalloc import replay
from beamalloc.trace import TypeInfo

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "refalloc"
BENCH = CRATE / "target" / "release" / "examples" / "bench"
ENV = {**os.environ, "PATH": f"{Path.home() / '.cargo' / 'bin'}:{os.environ.get('PATH', '')}"}


def type_table() -> dict[int, tuple[str, int]]:
    """ERTS type number -> (name, allocator number), OTP 25's (docs/erts/alloc_util.md §7)."""
    out = {}
    with open(ROOT / "docs" / "erts" / "erts_types_otp25.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            n, _t, _hex, _macro, a, _alloc, _c, _class, desc = line.rstrip("\n").split("\t")
            out[int(n)] = (desc, int(a))
    return out


TYPES = type_table()


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def load_base(so: str) -> ModuleType:
    """Another build of the extension, beside this one (a separate file: its own module)."""
    spec = importlib.util.spec_from_file_location("beamalloc._refalloc", so)
    assert spec is not None and spec.loader is not None, so
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def under(mod: ModuleType, fn: Callable[[], object]) -> Callable[[], None]:
    """`fn` with `mod` as beamalloc._refalloc (replay.py imports it from the package per call,
    and this build's `_refalloc` is already the package's attribute, imported above)."""
    assert beamalloc._refalloc is _refalloc

    def run() -> None:
        with mock.patch.object(beamalloc, "_refalloc", mod):
            fn()

    return run


def main() -> int:
    args = sys.argv[1:]
    base = None
    if args[:1] == ["--base"]:
        base = load_base(args[1])
        args = args[2:]
    events = int(args[0]) if len(args) > 0 else 900_000
    max_live = int(args[1]) if len(args) > 1 else 50_000
    repeat = int(args[2]) if len(args) > 2 else 3
    subprocess.run(["cargo", "build", "-q", "--release", "--no-default-features", "--example",
                    "bench", "--manifest-path", str(CRATE / "Cargo.toml")],
                   check=True, env=ENV)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        binary, csv = t / "t.batr", t / "t.csv"
        subprocess.run([str(BENCH), "gen", str(binary), str(events), str(max_live)], check=True)
        trace.convert(binary, csv)
        named = t / "named.csv"
        with trace.open_trace(binary) as r:
            evs = list(r)
            header = r.header
        header.types = [TypeInfo(n, *TYPES[n]) for n in sorted({e.type for e in evs})]
        trace.write_csv(named, header, evs)
        del evs
        print(f"trace: {events} events, CSV {csv.stat().st_size / 1e6:.0f} MB, binary "
              f"{binary.stat().st_size / 1e6:.0f} MB; best of {repeat} runs each")  # fmt: skip

        def reference() -> None:
            # The reader before the native rows: every CSV converted by beamalloc/trace.py.
            with mock.patch.object(replay, "native_csv_rows", lambda _path: None):
                replay.replay_snapshot(csv)

        runs: dict[str, list[tuple[float, float]]] = {}
        paths = {"csv": lambda: replay.replay_snapshot(csv),
                 "csv-named": lambda: replay.replay_snapshot(named),
                 "binary": lambda: replay.replay_snapshot(binary)}  # fmt: skip
        if base is not None:
            paths["csv-base"] = under(base, paths["csv"])
        for i in range(repeat):
            for name, fn in paths.items():
                runs.setdefault(name, []).append(timed(fn))
            if i == 0:  # the reference path is slow: one run is enough for its ratio
                runs["reference"] = [timed(reference)]
        best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in runs.items()}
        for name in ("csv", "csv-named", "csv-base", "binary", "reference"):
            if name not in best:
                continue
            w, c = best[name]
            print(f"{name:9s} {events / c / 1e6:6.2f} M events/s CPU ({c:.3f} s), "
                  f"{events / w / 1e6:6.2f} M events/s wall ({w:.3f} s)")
        bw, bc = best["binary"]
        for name in ("csv", "csv-named", "csv-base"):
            if name in best:
                w, c = best[name]
                print(f"{name:9s} / binary time: CPU {c / bc:.2f} ({bc / c:.2f}x of .batr), "
                      f"wall {w / bw:.2f}")
        print(f"reference / native CSV: {best['reference'][1] / best['csv'][1]:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
