"""`beamalloc demo`: what the tool is for, in three nodes (issue 22 item 10).

1. A node carrying a stale setting under churn (`+MBas bf`: no carrier migration, best fit into
   the holes) runs samples/workloads/churn.erl: a base set of binaries churned, a spike, a drop
   back, then churn that replaces the survivors, still going on; it is read twice a second apart
   (carriers included: the turnover decides between the futures, advice/predict.py), analyzed,
   and judged: the verdict, its prediction and the flags.
2. Where the verdict is CHANGE FLAGS, a second node started with the advised flags runs the same
   workload, and the measured effect is printed beside the predicted one.
3. Then the case where no flag helps: a burst whose survivors are scattered for good
   (samples/workloads/scatter.erl), NO FLAG HELPS with what does.

The workload of 1 and 2 is DEMO_WORKLOAD with DEMO_ENV. Each node's cookie is random and
reaches it through its environment, never its argv (docs/design.md, "Conventions"); every node
is stopped when its step ends (with --keep-node the last stays until Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beamalloc.errors import InputError
from beamalloc.files import atomic_write_text

if TYPE_CHECKING:
    from beamalloc.advice.records import Prediction
    from beamalloc.console import Terminal

#: Where the workloads live: beside the package in a checkout.
WORKLOADS = Path(__file__).resolve().parent.parent / "samples" / "workloads"
READY_TIMEOUT = 120.0


def compile_workload(name: str, outdir: str) -> None:
    src = WORKLOADS / f"{name}.erl"
    if not src.exists():
        raise InputError(f"workload {src} not found (the demo runs from a beamalloc checkout)")
    erlc = shutil.which("erlc")
    if erlc is None:
        raise InputError("erlc not found: install Erlang (make setup does: erlang-nox erlang-dev)")
    res = subprocess.run([erlc, "-o", outdir, str(src)], capture_output=True, text=True)
    if res.returncode != 0:
        raise InputError(f"cannot compile {src.name}: {res.stderr.strip().splitlines()[-1]}")


class WorkloadNode:
    """A local node running a workload module; a context manager that always stops it."""

    def __init__(
        self, module: str, extra_args: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.module = module
        self.extra_args = extra_args or []
        self.env = env or {}
        self.cookie = secrets.token_hex(16)
        self.name = f"beamalloc_demo_{secrets.token_hex(4)}"
        self.node = ""
        self._dir = tempfile.mkdtemp(prefix="beamalloc-demo-")
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> WorkloadNode:
        compile_workload(self.module, self._dir)
        env = {**os.environ, "FRAG_COOKIE": self.cookie, **self.env}
        for k in ("ERL_FLAGS", "ERL_AFLAGS", "ERL_ZFLAGS"):
            env.pop(k, None)
        self.proc = subprocess.Popen(
            [
                "erl",
                "-sname",
                self.name,
                "-noshell",
                "-pa",
                self._dir,
                *self.extra_args,
                "-eval",
                f"{self.module}:main()",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        host = os.uname().nodename.split(".")[0]
        self.node = f"{self.name}@{host}"
        return self

    def wait_ready(self, on_line=None, timeout: float = READY_TIMEOUT) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            line = line.strip()
            if on_line:
                on_line(line)
            if line == "ready":
                return
            if time.monotonic() > deadline:
                break
        raise InputError(f"the workload node did not get ready (last output: {line!r})")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


#: The workload the stale setting runs under, and the setting (issue 22 item 10).
DEMO_WORKLOAD = "churn"
#: Survivors replaced by churn that goes on while the node is read (binaries a second per worker).
DEMO_ENV = {"CHURN_MODE": "turnover", "CHURN_LOAD": "20000"}
STALE = ("+MBas", "bf")
#: Seconds between the two reads of step 1: the node's turnover (advice/predict.py).
SECOND_READ = 1.0
#: The case where no flag helps: survivors scattered over every carrier, kept for good.
SCATTERED_WORKLOAD = "scatter"


def _node_step(console: Any, module: str, args: list[str], what: str,
               env: dict[str, str] | None = None, twice: bool = False) -> tuple[Any, Any]:
    """Start `module` under `args`, wait until it is ready and snapshot it live (`twice`: again
    SECOND_READ later, for the turnover between); the node is stopped on the way out (also on
    failure). Returns the (last) snapshot and the turnover or None."""
    from beamalloc.advice.predict import measure_turnover
    from beamalloc.collector.live import snapshot_node

    with WorkloadNode(module, extra_args=args, env=env) as wl:
        console.print(f"Started {wl.node} {what}", markup=False, soft_wrap=True)
        wl.wait_ready(on_line=lambda s: console.print(f"  workload: {s}", style="dim",
                                                      markup=False))
        snap = snapshot_node(wl.node, wl.cookie, timeout=30.0)
        if not twice:
            return snap, None
        time.sleep(SECOND_READ)
        second = snapshot_node(wl.node, wl.cookie, timeout=30.0)
        return second, measure_turnover(snap, second)


def _measured(out: Any, before: Any, after: Any, allocator: str,
              run: Prediction | None) -> None:
    """The measured change of `allocator`'s unused bytes beside the predicted one."""
    from beamalloc.advice import wording
    from beamalloc.advice.diff import diff
    from beamalloc.units import human

    d = diff(before, after, ("stale setting", "advised flags"))
    row = next((t for t in d.types if t.allocator == allocator), None)
    if row is None or row.a is None or row.b is None or not row.a.unused:
        out.print(f"Measured: {allocator} is not on both nodes.", markup=False)
        return
    a, b = row.a.unused, row.b.unused
    line = (f"Measured on the second node: {allocator} unused {human(a)} -> {human(b)} "
            f"({wording.change((b - a) / a)})")
    if run is not None:
        line += f"; predicted {wording.figure(run)}"
    out.print(line + ".", markup=False, soft_wrap=False)
    out.print(f"diff: {d.verdict.headline}", markup=False)


def run_demo(term: Terminal, report_path: str = "demo-report.html",
             keep_node: bool = False) -> int:
    from beamalloc.advice import wording
    from beamalloc.advice.recommend import CHANGE, verdict
    from beamalloc.analyzer.analysis import analyze
    from beamalloc.htmlreport.html import write_report
    from beamalloc.reporters.analyze import render

    console = term.console(stderr=True)
    out = term.console()
    console.print(f"1/3  A node carrying a stale setting, `{' '.join(STALE)}` (no carrier "
                  f"migration), under {DEMO_WORKLOAD}: a base set of 600-1000 B binaries, a "
                  "spike, a drop back, then churn that replaces the survivors; read twice, "
                  f"{SECOND_READ:g} s apart.", markup=False)
    snap, turn = _node_step(console, DEMO_WORKLOAD, list(STALE), f"with {' '.join(STALE)}",
                            env=DEMO_ENV, twice=True)
    snap_path = Path(report_path).with_name("demo-snapshot.json")
    atomic_write_text(snap_path, snap.to_json())
    result = analyze(snap)
    rec = verdict(snap, turnover=turn)
    v = rec.verdict
    # the verdict's line first, as `analyze` and `recommend` print it (reporters/analyze.py)
    render(result, out, top=12, verdict=v)
    out.print()
    if rec.emulator_flags:
        out.print(f"Paste: {rec.emulator_flags}", markup=False, soft_wrap=True)
    out.print(f"Details, with the evidence and cost of each flag: beamalloc recommend "
              f"{snap_path}", markup=False, soft_wrap=True)
    analyses, snaps = [result], [snap]
    console.print()
    if v.state == CHANGE:
        # the flags as the operator adds them: after the ones in force, one by one
        advised = [x for r in v.advised for x in (r.flag, r.value)]
        console.print(f"2/3  The same workload on a node started with the advised flags, after "
                      f"the stale one: {' '.join(STALE + tuple(advised))}", markup=False)
        after, _ = _node_step(console, DEMO_WORKLOAD, [*STALE, *advised],
                              "with the advised flags", env=DEMO_ENV)
        after_path = Path(report_path).with_name("demo-after.json")
        atomic_write_text(after_path, after.to_json())
        top = next((r for r in v.advised if r.prediction is not None and not r.trade_off), None)
        if top is not None:
            runs = rec.proposal.runs if rec.proposal is not None else ()
            run = next((x for x in runs if x.allocator == top.allocator), None)
            _measured(out, snap, after, top.allocator, run)
        analyses.append(analyze(after))
        snaps.append(after)
    else:
        console.print(f"2/3  Skipped: on this run the verdict is {v.state}, so there are no flags "
                      "to apply (one snapshot can leave another carrier map: run the demo again)",
                      markup=False)
    console.print()
    console.print(f"3/3  Where no flag helps: {SCATTERED_WORKLOAD}, a burst whose survivors stay "
                  "for good, scattered over every carrier.", markup=False)
    with WorkloadNode(SCATTERED_WORKLOAD) as wl:
        console.print(f"Started {wl.node}", markup=False)
        wl.wait_ready(on_line=lambda s: console.print(f"  workload: {s}", style="dim",
                                                      markup=False))
        from beamalloc.collector.live import snapshot_node

        scattered = snapshot_node(wl.node, wl.cookie, timeout=30.0)
        out.print()
        for line in wording.lines(verdict(scattered).verdict):
            out.print(line, markup=False)
        analyses.append(analyze(scattered))
        snaps.append(scattered)
        write_report(analyses, report_path, snapshots=snaps)
        # soft_wrap: a command must reach the user whole, however long its path
        console.print(f"\nWrote {report_path} and {snap_path}.", markup=False, soft_wrap=True)
        console.print(f"Next: beamalloc analyze {snap_path} --json", markup=False, soft_wrap=True)
        if keep_node:
            console.print(f"{wl.node} keeps running; press Ctrl-C to stop it.")
            with contextlib.suppress(KeyboardInterrupt):
                wl.proc.wait()  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    from beamalloc.console import Terminal

    sys.exit(run_demo(Terminal()))
