"""Helpers of the eBPF tests (the fixtures are in conftest.py): a binchurn node driven over its
stdin, and `beamalloc trace` run as users run it. Without root they skip; as root a missing
BPF, bcc, header or tracefs piece fails them with its reason."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import otp
import pytest

from beamalloc.ebpf import kernel
from beamalloc.ebpf.errors import EbpfUnavailable

ROOT = Path(__file__).resolve().parents[2]
HOST = socket.gethostname().split(".")[0]


def _bpf_missing() -> str | None:
    try:
        kernel.preflight()
    except EbpfUnavailable as e:
        return str(e)
    return None


MISSING = _bpf_missing()


def check_bpf() -> None:
    """As root on Linux (CI, `make test` after `make setup`) tracing must work: a broken bcc,
    kernel headers or tracefs fails the test with the reason. Only a run without root, where
    nothing can be traced, skips."""
    if MISSING is None:
        return
    if os.geteuid() == 0 and sys.platform == "linux":
        pytest.fail(f"eBPF is broken on this machine (run `make setup`): {MISSING}", pytrace=False)
    pytest.skip(f"needs root to trace: {MISSING}")


requires_bpf = pytest.mark.usefixtures("bpf_ready")


class Churn:
    """A workload node answering commands on its stdin: samples/workloads/binchurn.erl, or
    another stdin-driven `module` of that folder, started with the emulator `flags`."""

    def __init__(self, ebin: str | None, sname: bool = False, module: str = "binchurn",
                 flags: Sequence[str] = (), release: str = otp.SYSTEM) -> None:  # fmt: skip
        """Under `release` (tests/otp.py: 27 and 29 run in their chroots, compiled by their
        own erlc; `ebin` is then not used)."""
        self.cookie = f"C{secrets.token_hex(10)}"
        self.name = f"t_ebpf_{secrets.token_hex(3)}"
        self.release = release
        if release != otp.SYSTEM or ebin is None:
            ebin = otp.compile_workload(release, module)
        argv = otp.runtime(release).argv("erl", "-noshell", *flags, "-pa", ebin)
        if sname:
            argv += ["-sname", self.name, "-setcookie", self.cookie]
        self.proc = subprocess.Popen([*argv, "-eval", f"{module}:main()"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.readline() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid  # erl execs erlexec, which execs beam.smp

    @property
    def node(self) -> str:
        return f"{self.name}@{HOST}"

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def cmd(self, line: str) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        words = self.readline().split()
        assert words and words[0] != "error", f"{line}: {words}"
        return words

    def calls(self) -> dict[str, tuple[int, int, int]]:
        w = self.cmd("calls")[1:]
        return {w[i]: (int(w[i + 1]), int(w[i + 2]), int(w[i + 3])) for i in range(0, len(w), 4)}

    def blocks(self) -> dict[str, tuple[int, int]]:
        w = self.cmd("blocks")[1:]
        return {w[i]: (int(w[i + 1]), int(w[i + 2])) for i in range(0, len(w), 3)}

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


class Tracer:
    """`beamalloc trace ARGS` in the background; ready once it has said it is attached."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "beamalloc.cli", "trace", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        assert self.proc.stderr is not None
        self.notes: list[str] = []  # lines said before it attached (what it cannot see)
        while "Ctrl-C stops" not in (line := self.proc.stderr.readline()):
            assert line and len(self.notes) < 5, "".join(self.notes) + line
            self.notes.append(line.strip())

    def stop(self, sig: int = signal.SIGINT, timeout: float = 120) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def json(self, out: str) -> dict:
        return json.loads(out.strip().splitlines()[-1])


def probes_in_kernel(target: int) -> list[str]:
    """Uprobes attached to the beam.smp or libc of process `target` right now: tracefs's
    uprobe_events (probes made through tracefs) and bpftool's perf and link lists (probes made
    with perf_event_open). The tracer names a binary by /proc/PID/root/…, so probes other
    tracers on this machine hold on other processes are not counted."""
    found = []
    mine = f"/proc/{target}/"
    events = Path("/sys/kernel/tracing/uprobe_events")
    if events.exists():
        found += [ln for ln in events.read_text().splitlines() if mine in ln]
    for what in ("perf", "link"):
        r = subprocess.run(["bpftool", "-j", what, "list"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        for item in json.loads(r.stdout or "[]"):
            text = json.dumps(item)
            if "uprobe" in text and mine in text and ("beam" in text or "libc" in text):
                found.append(text)
    return found
