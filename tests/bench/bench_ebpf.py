"""Bench: what following a busy node with eBPF costs it (issue 5, "Must hold" 4).

    .venv/bin/python tests/bench/bench_ebpf.py [--seconds S] [--pairs P]

Runs binchurn's `run P MS` (P sender/receiver pairs of 1 KB binaries, CPU-bound) bare, then
under: the carrier level, the block-level summary, the block-level full trace, the sampled
block-level summary (--sample 0.1), a bare bpftrace count of the same block-level probes (the
floor of any uprobe tool), and bcc's memleak. Prints binaries sent per second and each ratio
(bare rate / traced rate: 1.0 = free). A plain script, not a test: tests never assert times.
Targets: carrier <= 1.1x bare; full trace <= 1.2x the bpftrace floor; sampled <= 1.5x bare.
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
        runs = [
            ("bare", None, ""),
            ("carrier level", [*me, "--level", "carrier"], "Ctrl-C"),
            ("block summary", me, "Ctrl-C"),
            ("block full trace", [*me, "-o", f"{out}/t.batr"], "Ctrl-C"),
            ("block sampled 0.1", [*me, "--sample", "0.1"], "Ctrl-C"),
            ("bpftrace floor", _bpftrace_floor(binary, churn.pid), "Attaching"),
        ]
        if memleak:
            runs.append(("bcc memleak", [memleak, "-p", pid, "--combined-only", "60"],
                         "Attaching"))
        rates = {}
        for name, tool, marker in runs:
            rates[name] = measure(churn, args.pairs, args.seconds, tool, marker)
            print(f"{name:20s} {rates[name]:12.0f} binaries/s", flush=True)
        bare, floor = rates["bare"], rates["bpftrace floor"]
        print(f"\nslowdown (bare rate / rate), {os.cpu_count()} CPUs, {args.pairs} pairs:")
        for name, r in rates.items():
            print(f"  {name:20s} {bare / r:6.2f}x bare   {floor / r:6.2f}x the bpftrace floor")
    finally:
        churn.stop()
        shutil.rmtree(ebin, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
