"""`beamalloc demo`: show the whole path on a node whose binary_alloc fragments.

Starts a local node running samples/workloads/frag.erl (churn, a spike to ten times the live
set, a random drop back, churn again), snapshots it live, prints the analysis, writes an HTML
report and stops the node. The demo node's cookie is random and reaches it through its
environment, never its argv (docs/design.md, "Conventions").
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

from beamalloc.errors import InputError
from beamalloc.files import atomic_write_text

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


def run_demo(report_path: str = "demo-report.html", keep_node: bool = False) -> int:
    from beamalloc.analyzer.analysis import analyze
    from beamalloc.analyzer.recommend import recommend
    from beamalloc.collector.live import snapshot_node
    from beamalloc.console import wide_console
    from beamalloc.reporters.analyze import render
    from beamalloc.reporters.html import write_report
    from beamalloc.reporters.recommend import summary

    console = wide_console(stderr=True)
    with WorkloadNode("frag") as wl:
        console.print(
            f"Started {wl.node}: steady churn of 600-1000 B binaries, a spike to 10x "
            "the live set, a random drop back to the base, churn again."
        )
        wl.wait_ready(on_line=lambda s: console.print(f"  workload: {s}", style="dim"))
        snap = snapshot_node(wl.node, wl.cookie, timeout=30.0)
        snap_path = Path(report_path).with_name("demo-snapshot.json")
        atomic_write_text(snap_path, snap.to_json())
        result = analyze(snap)
        out = wide_console()
        render(result, out, top=12)
        out.print()
        for line in summary(recommend(snap)):
            out.print(line, markup=False)
        out.print(f"Details, with the evidence and cost of each flag: "
                  f"beamalloc recommend {snap_path}", markup=False, soft_wrap=True)
        write_report([result], report_path, snapshots=[snap])
        # soft_wrap: a command must reach the user whole, however long its path
        console.print(f"\nWrote {report_path} and {snap_path}.", markup=False, soft_wrap=True)
        console.print(f"Next: beamalloc analyze {snap_path} --json", markup=False, soft_wrap=True)
        if keep_node:
            console.print(f"{wl.node} keeps running; press Ctrl-C to stop it.")
            with contextlib.suppress(KeyboardInterrupt):
                wl.proc.wait()  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(run_demo())
