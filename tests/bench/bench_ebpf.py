"""Bench: what following a busy node with eBPF costs it (issue 5, "Must hold" 4).

    .venv/bin/python tests/bench/bench_ebpf.py [--seconds S] [--pairs P]

Runs binchurn's `run P MS` (P sender/receiver pairs of 1 KB binaries, CPU-bound) bare, then
under: the carrier level, the block-level summary, the block-level full trace, a bare bpftrace
count of the same block-level probes (the floor of any uprobe tool), bcc's memleak, and the
sampled block-level summary (--sample 0.1, --max-overhead 10). Prints binaries sent per second
and each ratio (bare rate / traced rate: 1.0 = free). A plain script, not a test: tests never
assert times. Targets: carrier <= 1.1x bare; full trace <= 1.2x the bpftrace floor; sampled
<= 1.5x bare.

A sampled run's cost is an average over its periods (probes in for a slice plus their
detach, then out; docs/ebpf.md): those runs last --sampled-seconds (default 40, about three
periods of --sample 0.1) and are compared with a bare run of the same length just before.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "ebpf"))

from ebpfhelp import Churn  # noqa: E402

from beamalloc.ebpf import beam  # noqa: E402


def _bpftrace_floor(binary: str, pid: int) -> list[str]:
    """Count the same entry and return probes as the full trace (blocks.probes())."""
    probes = [f"uprobe:{binary}:{s}" for s in beam.ALLOC_FUNCS + beam.FREE_FUNCS
              + beam.REALLOC_FUNCS]
    probes += [f"uretprobe:{binary}:{s}" for s in beam.ALLOC_FUNCS + beam.REALLOC_FUNCS]
    return ["bpftrace", "-p", str(pid), "-e", ",".join(probes) + " { @[probe] = count(); }"]


def _wait_attached(proc: subprocess.Popen[str], marker: str, timeout: float = 120) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if marker in line:
            time.sleep(0.5)
            return
        if not line and proc.poll() is not None:
            raise RuntimeError(f"tracer exited: {proc.stdout.read()[-400:]}")
    raise RuntimeError("tracer did not attach")


def measure(churn: Churn, pairs: int, seconds: float, tool: list[str] | None,
            marker: str) -> float:
    proc = None
    if tool:
        proc = subprocess.Popen(tool, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        _wait_attached(proc, marker)
    try:
        sent = int(churn.cmd(f"run {pairs} {int(seconds * 1000)}")[1])
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
    return sent / seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--sampled-seconds", type=float, default=40.0)
    args = ap.parse_args()
    ebin = tempfile.mkdtemp(prefix="beamalloc-bench-")
    subprocess.run(["erlc", "-o", ebin, str(ROOT / "samples/workloads/binchurn.erl")],
                   check=True)
    churn = Churn(ebin)
    out = tempfile.mkdtemp(prefix="beamalloc-bench-trace-")
    try:
        pid = str(churn.pid)
        me = [sys.executable, "-m", "beamalloc.cli", "trace", "--pid", pid, "--json"]
        binary = beam.beam_binary(churn.pid)
        memleak = shutil.which("memleak-bpfcc")
        long = args.sampled_seconds
        runs = [
            ("bare", None, "", args.seconds),
            ("carrier level", [*me, "--level", "carrier"], "Ctrl-C", args.seconds),
            ("block summary", me, "Ctrl-C", args.seconds),
            ("block full trace", [*me, "-o", f"{out}/t.batr"], "Ctrl-C", args.seconds),
            ("bpftrace floor", _bpftrace_floor(binary, churn.pid), "Attaching", args.seconds),
        ]
        if memleak:
            runs.append(("bcc memleak", [memleak, "-p", pid, "--combined-only", "60"],
                         "Attaching", args.seconds))
        runs += [
            ("bare (long)", None, "", long),
            ("block sampled 0.1", [*me, "--sample", "0.1"], "Ctrl-C", long),
            ("bare (long) again", None, "", long),
            ("max-overhead 10", [*me, "--max-overhead", "10"], "Ctrl-C", long),
        ]
        rates = {}
        for name, tool, marker, secs in runs:
            rates[name] = measure(churn, args.pairs, secs, tool, marker)
            print(f"{name:20s} {rates[name]:12.0f} binaries/s", flush=True)
        bare, floor = rates["bare"], rates["bpftrace floor"]
        print(f"\nslowdown (bare rate / rate), {os.cpu_count()} CPUs, {args.pairs} pairs:")
        for name, r in rates.items():
            if name.startswith(("block sampled", "max-overhead")):
                ref = ("bare (long)" if name.startswith("block sampled")
                       else "bare (long) again")
                print(f"  {name:20s} {rates[ref] / r:6.2f}x bare (the bare run of the same "
                      f"length just before)")
            else:
                print(f"  {name:20s} {bare / r:6.2f}x bare   {floor / r:6.2f}x the bpftrace "
                      "floor")
    finally:
        churn.stop()
        shutil.rmtree(ebin, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
