"""Bench: `beamalloc analyze` of a big crash dump against `wc -l` of the same file (issue 28
item 1: within 5x, under 100 MiB of peak memory).

    .venv/bin/python tests/bench/bench_crashdump.py [--mib 500] [--runs 3] [--keep PATH]
    .venv/bin/python tests/bench/bench_crashdump.py --dump PATH   # a dump --keep wrote
    .venv/bin/python tests/bench/bench_crashdump.py --procs 262144 --keep PATH  # many processes
    .venv/bin/python tests/bench/bench_crashdump.py --dump PATH --base ../main/.venv/bin/beamalloc

The dump is made from the largest real dump of ../shared/samples/real-dumps: its header, memory
and allocator sections once, its other sections (processes, their stacks, heaps and messages,
ETS tables, binaries, modules, atoms) repeated until the file holds --mib MiB, then `=end`.
Each run times `wc -l FILE`, `beamalloc analyze --json FILE` (which also reads the processes)
and `beamalloc analyze --json --no-processes FILE`, alternated, from the page cache (one read
of each before timing); the ratios are of minima measured in this run, of wall and of CPU time
(user + system), and the peak RSS is the child's own (os.wait4's rusage). `analyze SMALL` is the
same command on the real dump the big one was made from: what any dump costs (start-up, imports,
its allocators), whatever its size. `--base EXE` alternates another build's `beamalloc` (a base
commit's) in the same run. A plain script, not a test: tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DUMPS = REPO.parent / "shared" / "samples" / "real-dumps"
ONCE = re.compile(rb"=(allocator:|memory\n|node:|end\n|erl_crash_dump:)")


def make_dump(path: Path, mib: int) -> int:
    """Write a dump of about `mib` MiB at `path`; the number of =proc sections in it."""
    src = max(DUMPS.glob("*.dump"), key=lambda p: p.stat().st_size).read_bytes()
    starts = [0] + [m.start() + 1 for m in re.finditer(rb"\n=", src)]
    parts = [src[a:b] for a, b in zip(starts, [*starts[1:], len(src)], strict=True)]
    once = [p for p in parts if ONCE.match(p) and not p.startswith(b"=end")]
    many = b"".join(p for p in parts if not ONCE.match(p))
    if not many.endswith(b"\n"):
        many += b"\n"
    copies = max(1, (mib << 20) // len(many))
    with open(path, "wb") as f:
        f.write(b"".join(once))
        for _ in range(copies):
            f.write(many)
        f.write(b"=end\n")
    return many.count(b"\n=proc:") * copies


def make_proc_dump(path: Path, n: int) -> int:
    """Write a dump of `n` =proc sections (the real dump's own, cycled, each with a pid of its
    own) after its header, memory and allocator sections: a node at the default process limit
    (262,144) costs the holders their most records. The number of =proc sections."""
    src = max(DUMPS.glob("*.dump"), key=lambda p: p.stat().st_size).read_bytes()
    starts = [0] + [m.start() + 1 for m in re.finditer(rb"\n=", src)]
    parts = [src[a:b] for a, b in zip(starts, [*starts[1:], len(src)], strict=True)]
    once = [p for p in parts if ONCE.match(p) and not p.startswith(b"=end")]
    procs = [p if p.endswith(b"\n") else p + b"\n" for p in parts if p.startswith(b"=proc:")]
    with open(path, "wb") as f:
        f.write(b"".join(once))
        for i in range(n):
            p = procs[i % len(procs)]
            f.write(b"=proc:<0.%d.0>" % i + p[p.index(b"\n"):])
        f.write(b"=end\n")
    return n


def count_procs(path: Path) -> int:
    """The =proc sections of a dump, read in blocks."""
    n, tail = 0, b""
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            n += (tail + block).count(b"\n=proc:")
            tail = block[-6:]
    return n


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Wall time, CPU time (user + system) and peak RSS (bytes) of one child."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} exited with {os.waitstatus_to_exitcode(status)}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the dump here and keep it")
    ap.add_argument("--dump", type=Path, help="time this dump (one --keep wrote) instead")
    ap.add_argument("--procs", type=int, help="make a dump of this many =proc sections instead")
    ap.add_argument("--base", help="another beamalloc executable to time alike (a base's)")
    args = ap.parse_args()
    if not DUMPS.is_dir():
        print(f"skipped: {DUMPS} is absent")
        return 0
    exe = str(Path(sys.executable).parent / "beamalloc")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.dump or args.keep or Path(tmp) / "erl_crash.dump"
        procs = (count_procs(path) if args.dump else make_proc_dump(path, args.procs)
                 if args.procs else make_dump(path, args.mib))
        size = path.stat().st_size
        small = str(max(DUMPS.glob("*.dump"), key=lambda p: p.stat().st_size))
        cmds = {"wc -l": ["wc", "-l", str(path)],
                "analyze": [exe, "analyze", "--json", str(path)],
                "analyze --no-processes": [exe, "analyze", "--json", "--no-processes",
                                           str(path)],
                "analyze SMALL": [exe, "analyze", "--json", small]}
        if args.base:
            cmds |= {f"base {k}": [args.base, *c[1:]] for k, c in list(cmds.items())[1:]}
        for cmd in cmds.values():  # into the page cache, and a check that each one works
            run(cmd)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        cpu: dict[str, list[float]] = {k: [] for k in cmds}
        rss: dict[str, int] = dict.fromkeys(cmds, 0)
        for _ in range(args.runs):
            for k, cmd in cmds.items():
                t, c, m = run(cmd)
                times[k].append(t)
                cpu[k].append(c)
                rss[k] = max(rss[k], m)
    floor, cpu_floor = min(times["wc -l"]), max(min(cpu["wc -l"]), 1e-3)
    print(f"{size / (1 << 20):.0f} MiB dump, {procs} =proc sections; wc -l {floor:.3f} s "
          f"({cpu_floor:.3f} s CPU)")
    for k in cmds:
        if k != "wc -l":
            # CPU time too: on a shared machine it moves less than wall time with the load
            print(f"{k}: {min(times[k]):.3f} s, {min(times[k]) / floor:.1f}x wc -l; CPU "
                  f"{min(cpu[k]):.3f} s, {min(cpu[k]) / cpu_floor:.1f}x; peak RSS "
                  f"{rss[k] / (1 << 20):.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
