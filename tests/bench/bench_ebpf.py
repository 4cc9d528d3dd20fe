"""Bench: what following a busy node with eBPF costs it (issue 13 item 6; docs/ebpf.md).

    .venv/bin/python tests/bench/bench_ebpf.py [--seconds S] [--pairs P] [--rounds R]
                                              [--sampled-seconds S | --no-sampled]
                                              [--only GROUP] [--bpf-stats]
    .venv/bin/python tests/bench/bench_ebpf.py --probe-costs   # one hit, where it sits

One binchurn node runs `run P MS` (P sender/receiver pairs of 1 KB binaries, CPU-bound: every
scheduler busy) once per run; a run's figure is binaries sent per second. Paired rounds: each
tool runs in a group next to its own references, the order rotating from round to round, and
each round gives a ratio against the references of the same round:

  carrier level     [bare, carrier]                         ratio: bare rate / tool rate
  block level       [bare, bpftrace floor, points floor,    and against the floor (floor
                     block summary, block full trace]       rate / tool rate); 1.0 = free
  bcc memleak       [bare, memleak]

The "bpftrace floor" is bpftrace counting hits (`@[probe] = count()`) of the probes the block
level uses, put where bpftrace puts them (each function's first instruction): the cost of the
traps alone, what any uprobe tool placed there pays. The "points floor" is the same bare count
(a one-line BPF program, per-CPU counter) at the tracer's own attach points
(ebpf/placement.py moves the free probes past a flags-only test): what is left above it is the
tracer's own BPF and reader work. Medians over the rounds, with min-max.

Counts: each traced run brackets the workload with the node's own `calls` counters
(erlang:system_info({allocator, A}), docs/erts/alloc_util.md §6.1) and prints traced - node
per allocator; the trace window is a little wider than the bracket (the two readings
themselves), so exact = a small non-negative difference, never a loss. CPU: the node's and the
tracer's CPU seconds per 1,000 binaries (robust on a shared machine: a trap is system time of
the node; the reader's work is the tracer's).

A plain script, not a test: tests never assert times. The sampled modes (--sample 0.1,
--max-overhead 10) run --sampled-seconds (default 40: their cost is an average over periods
of probes in and out) once each, next to a bare run of the same length.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "ebpf"))

from ebpfhelp import Churn  # noqa: E402

from beamalloc.ebpf import beam, blocks  # noqa: E402

#: The bare count at the tracer's attach points (see the module doc), run as its own process.
POINTS_FLOOR = r"""
import sys, signal, time
from beamalloc.ebpf import beam, blocks, kernel
bcc = kernel.preflight()
proc = beam.inspect(int(sys.argv[1]))
b = bcc.BPF(text=b'BPF_PERCPU_ARRAY(hits, u64, 1); int hit(void *ctx) '
                 b'{ int k = 0; u64 *v = hits.lookup(&k); if (v) *v += 1; return 0; }')
placed = blocks.placement(proc.binary)
for p, addr in placed:
    att = b.attach_uprobe if p.kind == "entry" else b.attach_uretprobe
    att(name=proc.binary.encode(), addr=addr, fn_name=b"hit", pid=proc.pid)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
print("Attaching", len(placed), "probes", flush=True)
signal.sigwait({signal.SIGINT})
print("hits", sum(b["hits"][0]), flush=True)
"""


#: --probe-costs: what one uprobe hit costs where it sits, on functions of known code (x86-64).
PROBE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
long f_test(long, long, long);  /* test %rdx,%rdx; je: the way erts_alcu_free_thr_pref opens */
long f_push(long, long, long);  /* push %rbx first: the way erts_alcu_alloc_thr_pref opens */
__asm__(".text\n.globl f_test\n.type f_test,@function\nf_test:\n test %rdx,%rdx\n"
        " je 1f\n push %rbx\n mov %rdi,%rax\n add %rsi,%rax\n pop %rbx\n1: ret\n"
        ".globl f_push\n.type f_push,@function\nf_push:\n push %rbx\n mov %rdi,%rax\n"
        " add %rsi,%rax\n pop %rbx\n ret\n");
static double cpu(void) {
    struct rusage r; getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}
int main(int argc, char **argv) {
    long n = atol(argv[1]), s = 0;
    long (*f)(long, long, long) = argv[2][0] == 't' ? f_test : f_push;
    getchar();
    double t0 = cpu();
    for (long i = 0; i < n; i++) s += f(i, i, i | 1);
    printf("%.1f %ld\n", (cpu() - t0) / n * 1e9, s & 1);
    return 0;
}
"""


def probe_costs(calls: int) -> None:
    """CPU ns per call of a 5-instruction function, bare and with a one-line BPF counter on it:
    on a single-stepped instruction (test), on emulated ones (je, push), as a uretprobe."""
    from beamalloc.ebpf import kernel, placement, procmem

    bcc = kernel.preflight()
    tmp = Path(tempfile.mkdtemp(prefix="beamalloc-probecost-"))
    try:
        (tmp / "p.c").write_text(PROBE_C)
        subprocess.run(["gcc", "-O2", "-o", str(tmp / "p"), str(tmp / "p.c")], check=True)
        exe = str(tmp / "p")
        syms = _elf_syms(exe)  # a plain executable exports nothing in .dynsym
        t, p = syms["f_test"], syms["f_push"]
        je = t + placement.entry_offset(procmem.code_bytes(exe, t, 16))
        cases = [("no probe", "t", []), ("uprobe on test (single-stepped)", "t", [("u", t)]),
                 ("uprobe on the je after it", "t", [("u", je)]),
                 ("uprobe on push", "p", [("u", p)]), ("uretprobe", "p", [("r", p)]),
                 ("uprobe + uretprobe", "p", [("u", p), ("r", p)])]
        print(f"{'probe':34s} {'ns/call':>9s}   ({calls:,} calls, CPU time of the caller)")
        for name, fn, where in cases:
            b = bcc.BPF(text=b"BPF_PERCPU_ARRAY(hits, u64, 1); int hit(void *ctx) "
                             b"{ int k = 0; u64 *v = hits.lookup(&k); if (v) *v += 1; return 0; }")
            proc = subprocess.Popen([exe, str(calls), fn], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            for kind, addr in where:
                att = b.attach_uprobe if kind == "u" else b.attach_uretprobe
                att(name=exe.encode(), addr=addr, fn_name=b"hit", pid=proc.pid)
            out, _ = proc.communicate("\n")
            hits = sum(b["hits"][0])
            b.cleanup()
            print(f"{name:34s} {float(out.split()[0]):9.1f}   hits {hits:,}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _elf_syms(exe: str) -> dict[str, int]:
    """Link-time addresses of the executable's functions (its .symtab, through nm)."""
    out = subprocess.run(["nm", exe], capture_output=True, text=True, check=True).stdout
    return {w[2]: int(w[0], 16) for w in (ln.split() for ln in out.splitlines()) if len(w) == 3}


@dataclass
class Tool:
    name: str
    argv: list[str] | None  # None: bare
    marker: str = ""  # the line the tool prints once attached
    checks: bool = False  # prints the beamalloc JSON document: compare counts with the node


@dataclass
class Run:
    rate: float
    node_cpu_ms: float  # node CPU ms per 1,000 binaries
    tracer_cpu_ms: float
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (traced, node)
    lost: int | None = None  # events the tracer reports lost (beamalloc's JSON)
    bpf_ns: dict[str, int] = field(default_factory=dict)  # --bpf-stats: program -> ns per run

    @property
    def cpu_ms(self) -> float:
        return self.node_cpu_ms + self.tracer_cpu_ms


def _bpftrace_floor(binary: str, pid: int) -> list[str]:
    """A count of the same entry and return probes as the block level, at the symbols."""
    probes = [f"uprobe:{binary}:{p.sym}" if p.kind == "entry" else
              f"uretprobe:{binary}:{p.sym}" for p in blocks.probes()]
    return ["bpftrace", "-p", str(pid), "-e", ",".join(probes) + " { @[probe] = count(); }"]


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _wait_attached(proc: subprocess.Popen[str], marker: str, timeout: float = 180) -> None:
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


def _counts(doc: dict, c0: dict, c1: dict) -> dict[str, tuple[int, int]]:
    """(traced, node) alloc and free calls of the busy allocators."""
    out = {}
    for a in ("binary_alloc", "eheap_alloc"):
        for i, op in ((0, "alloc"), (1, "free")):
            node = c1[a][i] - c0[a][i]
            if "blocks" in doc:  # summary
                traced = doc["blocks"].get(a, {}).get("calls", {}).get(op, 0)
            elif "calls" in doc:  # full trace: events written, by owner and op number
                traced = doc["calls"].get(f"{a}:{i}", 0)
            else:
                continue
            out[f"{a} {op}"] = (traced, node)
    return out


def _bpf_runs() -> dict[int, tuple[str, int, int]]:
    """id -> (name, run_cnt, run_time_ns) of every loaded BPF program (bpf_stats on)."""
    r = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    return {p["id"]: (p.get("name", "?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in json.loads(r.stdout or "[]")}


def measure(churn: Churn, pairs: int, seconds: float, tool: Tool,
            bpf_stats: bool = False) -> Run:
    proc = None
    if tool.argv:
        proc = subprocess.Popen(tool.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        _wait_attached(proc, tool.marker)
    out = ""
    try:
        c0 = churn.calls() if tool.checks else {}
        tr0 = _cpu_s(proc.pid) if proc is not None else 0.0
        b0 = _bpf_runs() if bpf_stats and proc is not None else {}
        n0, t0 = _cpu_s(churn.pid), time.monotonic()
        sent = int(churn.cmd(f"run {pairs} {int(seconds * 1000)}")[1])
        n1, t1 = _cpu_s(churn.pid), time.monotonic()
        b1 = _bpf_runs() if b0 else {}
        tr1 = _cpu_s(proc.pid) if proc is not None else 0.0
        if tool.checks:  # the pairs' processes end (and free their last binaries) just after
            time.sleep(0.5)
        c1 = churn.calls() if tool.checks else {}
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                out, _ = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
    # The tracer's CPU during the run only: not its compile, attach or write-out.
    run = Run(sent / (t1 - t0), (n1 - n0) / sent * 1e6, (tr1 - tr0) / sent * 1e6)
    for pid_, (name, cnt, ns) in b1.items():  # programs that ran during the run: ns per run
        _n, cnt0, ns0 = b0.get(pid_, (name, 0, 0))
        if cnt - cnt0 > 1000:
            run.bpf_ns[f"{name}#{pid_}"] = round((ns - ns0) / (cnt - cnt0))
    if tool.checks:
        docs = [ln for ln in out.splitlines() if ln.startswith("{")]
        if docs:
            doc = json.loads(docs[-1])
            run.counts = _counts(doc, c0, c1)
            run.lost = doc.get("lost_events", doc.get("lost", {}).get("total"))
    return run


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):5.2f}x  ({min(xs):.2f}-{max(xs):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one run")
    ap.add_argument("--pairs", type=int, default=8, help="binchurn sender/receiver pairs")
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds per group")
    ap.add_argument("--sampled-seconds", type=float, default=40.0)
    ap.add_argument("--no-sampled", action="store_true", help="skip the sampled modes")
    ap.add_argument("--only", choices=("carrier", "block", "memleak"), action="append",
                    help="run only these groups (repeatable)")
    ap.add_argument("--probe-costs", action="store_true",
                    help="only measure one probe hit where it sits (needs gcc), then exit")
    ap.add_argument("--bpf-stats", action="store_true",
                    help="turn on kernel.bpf_stats_enabled and print each program's ns per "
                    "run (adds its own cost to every BPF program while on)")
    args = ap.parse_args()
    if args.bpf_stats:
        was = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
        try:
            return _main(args)
        finally:
            Path("/proc/sys/kernel/bpf_stats_enabled").write_text(was)
    return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.probe_costs:
        probe_costs(500_000)
        return 0
    if args.seconds <= 0 or args.rounds < 1 or args.pairs < 1:
        print("bench_ebpf: --seconds, --rounds and --pairs must be positive", file=sys.stderr)
        return 2
    ebin = tempfile.mkdtemp(prefix="beamalloc-bench-")
    subprocess.run(["erlc", "-o", ebin, str(ROOT / "samples/workloads/binchurn.erl")],
                   check=True)
    churn = Churn(ebin)
    out = tempfile.mkdtemp(prefix="beamalloc-bench-trace-")
    try:
        pid = str(churn.pid)
        me = [sys.executable, "-m", "beamalloc.cli", "trace", "--pid", pid, "--json"]
        binary = beam.beam_binary(churn.pid)
        bare = Tool("bare", None)
        floor = Tool("bpftrace floor", _bpftrace_floor(binary, churn.pid), "Attaching")
        points = Tool("points floor", [sys.executable, "-c", POINTS_FLOOR, pid], "Attaching")
        groups = {
            "carrier": [bare, Tool("carrier level", [*me, "--level", "carrier"], "Ctrl-C",
                                   checks=False)],
            "block": [bare, floor, points,
                      Tool("block summary", me, "Ctrl-C", checks=True),
                      Tool("block full trace", [*me, "-o", f"{out}/t.batr"], "Ctrl-C",
                           checks=True)],
        }
        memleak = shutil.which("memleak-bpfcc")
        if memleak:  # it probes libc: it sees nothing of the BEAM's own allocators
            groups["memleak"] = [bare, Tool("bcc memleak", [memleak, "-p", pid,
                                                            "--combined-only", "60"],
                                            "Attaching")]
        groups = {g: tools for g, tools in groups.items() if not args.only or g in args.only}
        rows: dict[str, list[Run]] = {}
        ratios: dict[str, dict[str, list[float]]] = {}
        cpu_ratios: dict[str, dict[str, list[float]]] = {}
        print(f"{os.cpu_count()} CPUs, binchurn {args.pairs} pairs, {args.seconds:g} s runs, "
              f"{args.rounds} rounds; load average {os.getloadavg()[0]:.2f} at the start",
              flush=True)
        for g, tools in groups.items():
            for r in range(args.rounds):
                k = r % len(tools)
                order = tools[k:] + tools[:k]  # rotate: every tool takes every position
                got = {}
                for tool in order:
                    got[tool.name] = run = measure(churn, args.pairs, args.seconds, tool,
                                                   args.bpf_stats)
                    rows.setdefault(tool.name if tool.argv else f"bare ({g})", []).append(run)
                    extra = " ".join(f"{k2}: {t - n:+d}" for k2, (t, n) in run.counts.items())
                    print(f"  {g} round {r + 1}: {tool.name:18s} {run.rate:10.0f} binaries/s"
                          f"  node {run.node_cpu_ms:6.2f} ms/1k  tracer "
                          f"{run.tracer_cpu_ms:5.2f} ms/1k  {extra}", flush=True)
                    if run.bpf_ns:
                        print("      BPF ns per run: " + ", ".join(
                            f"{k} {v}" for k, v in sorted(run.bpf_ns.items())), flush=True)
                for tool in tools:
                    if not tool.argv:
                        continue
                    me_, rt = got[tool.name], ratios.setdefault(tool.name, {})
                    rt.setdefault("bare", []).append(got["bare"].rate / me_.rate)
                    for ref in ("bpftrace floor", "points floor"):
                        if ref in got and tool.name != ref:
                            rt.setdefault(ref, []).append(got[ref].rate / me_.rate)
                    cpu_rt = cpu_ratios.setdefault(tool.name, {})
                    for ref in ("bare", "bpftrace floor"):
                        if ref in got and tool.name != ref:
                            cpu_rt.setdefault(ref, []).append(me_.cpu_ms / got[ref].cpu_ms)
        if not args.no_sampled and (not args.only or "block" in args.only):
            long = args.sampled_seconds
            for name, extra in (("block sampled 0.1", ["--sample", "0.1"]),
                                ("max-overhead 10", ["--max-overhead", "10"])):
                b = measure(churn, args.pairs, long, bare)
                s = measure(churn, args.pairs, long, Tool(name, [*me, *extra], "Ctrl-C"))
                ratios[name] = {"bare": [b.rate / s.rate]}
                cpu_ratios[name] = {"bare": [s.cpu_ms / b.cpu_ms]}
                rows[name] = [s]
                print(f"  {name}: bare {b.rate:.0f}, traced {s.rate:.0f} binaries/s "
                      f"({long:g} s each)", flush=True)
        print(f"\nslowdown = reference rate / rate in the same round (1.00 = free); median "
              f"(min-max) over rounds; load average {os.getloadavg()[0]:.2f} at the end")
        for name, rt in ratios.items():
            cols = [f"{_spread(v)} {ref}" for ref, v in rt.items()]
            runs = rows[name]
            cpu = (f"node {statistics.median(x.node_cpu_ms for x in runs):6.2f} ms/1k, tracer "
                   f"{statistics.median(x.tracer_cpu_ms for x in runs):5.2f} ms/1k")
            print(f"  {name:18s} " + "   ".join(cols) + f"   [{cpu}]")
        print("\nCPU per binary (node + tracer) / the reference's in the same round: what the "
              "rates show on an idle machine, and what a loaded one still measures")
        for name, rt in cpu_ratios.items():
            print(f"  {name:18s} " + "   ".join(f"{_spread(v)} {ref}" for ref, v in rt.items()))
        for name, runs in rows.items():
            if name.startswith("bare"):
                print(f"  {name:18s} {statistics.median(x.rate for x in runs):10.0f} "
                      f"binaries/s median, node "
                      f"{statistics.median(x.node_cpu_ms for x in runs):6.2f} ms/1k")
        checked = [(name, run) for name, runs in rows.items() for run in runs if run.counts]
        if checked:
            print("\ncounts (traced - node, per run; the window is a little wider than the "
                  "node's bracket):")
            for name, run in checked:
                print(f"  {name:18s} " + "  ".join(
                    f"{k}: {t:,} vs {n:,} ({t - n:+d})" for k, (t, n) in run.counts.items())
                    + f"  lost {run.lost}")
    finally:
        churn.stop()
        shutil.rmtree(ebin, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
