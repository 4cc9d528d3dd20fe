"""Shared test helpers: paths to the samples and fixtures, and the CLI run as users run it.

A module of its own, not conftest.py: tests/live and tests/ebpf have conftest.py files too, and
only one module can be imported as `conftest`."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SAMPLES = ROOT / "samples" / "otp25"


def run_cli(
    *args: str, input: bytes | None = None, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`beamalloc ARGS` in a subprocess, exactly as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "beamalloc.cli", *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env=env,
        **({"text": True} if input is None else {}),
    )


def ctrl_c_reaches() -> None:
    """`preexec_fn` of a process a test sends SIGINT as Ctrl-C: SIGINT at its default. A suite
    started in the background by a shell without job control (`make test &` in a script) runs
    with SIGINT and SIGQUIT ignored, which every child inherits across exec, and Python installs
    no KeyboardInterrupt handler over an ignored SIGINT: the test would then see a tool that
    ignores Ctrl-C, as it rightly does when its parent ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serve_in_thread(srv: Any) -> Callable[[], None]:
    """Run a waitress server in a daemon thread; call the result to stop it. Closing the socket
    under the running select() makes that select fail with EBADF: expected then, not reported."""
    stopping = threading.Event()

    def run() -> None:
        try:
            srv.run()
        except OSError:
            if not stopping.is_set():
                raise

    threading.Thread(target=run, daemon=True).start()

    def stop() -> None:
        stopping.set()
        srv.close()

    return stop


class SecretWatch:
    """While open, polls /proc for a secret in any process's argv, and in the environment of
    beamalloc's hidden nodes (argv holds `beamalloc_`); `skip` is a pid allowed to have it (a
    test's own target node, started with -setcookie). `seen` holds the hidden nodes it saw, so
    a test can tell that something was checked."""

    def __init__(self, secret: str, skip: int | None = None) -> None:
        self.secret = secret.encode()
        self.skip = skip
        self.seen: set[int] = set()
        self.leaks: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SecretWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for d in Path("/proc").iterdir():
                if not d.name.isdigit() or int(d.name) == self.skip:
                    continue
                try:
                    cmd = (d / "cmdline").read_bytes()
                    if b"beamalloc_" in cmd:
                        self.seen.add(int(d.name))
                        if self.secret in (d / "environ").read_bytes():
                            self.leaks.append(f"environ of {d.name}")
                except OSError:
                    continue
                if self.secret in cmd:
                    self.leaks.append(f"argv of {d.name}: {cmd[:80]!r}")


def run_capped(*args: str, timeout: float, address_space: int = 2 << 30,
               env: dict[str, str] | None = None) -> tuple[int, str, str, int]:
    """`beamalloc ARGS` in a subprocess under an address-space limit (a regression then fails
    with MemoryError instead of taking the machine's memory); returns its exit code, stdout,
    stderr and peak resident bytes. The peak is GNU time's %M: the rusage of a process forked
    from `time` itself, since a child forked from this (large) test process would count this
    process's pages in its own maximum. A run past `timeout` is killed and fails the test."""
    import os
    import resource
    import shutil
    import tempfile

    time_bin = shutil.which("time", path="/usr/bin:/bin")
    if time_bin is None:
        import pytest

        pytest.skip("GNU time (/usr/bin/time) is not installed: it measures the peak")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile() as peak:
        proc = subprocess.Popen([time_bin, "-f", "%M", "-o", peak.name, sys.executable, "-m",
                                 "beamalloc.cli", *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, preexec_fn=limit, env=env,
                                start_new_session=True)  # its group: time and beamalloc
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise AssertionError(f"beamalloc {' '.join(args)} ran past {timeout} s") from None
        out.seek(0)
        err.seek(0)
        text = Path(peak.name).read_text().split()
        rss = int(text[-1]) * 1024 if text and text[-1].isdigit() else 0
        assert rss > 0, f"GNU time measured no peak: {text}"
        return (proc.returncode, out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"), rss)


def assert_unprivileged(got: dict[str, Any]) -> dict[str, Any]:
    """What a target's attack on our hidden node reported (its `os:cmd` of `id` and
    /proc/self/status, and a read of the operator's file): `nobody`, no capability, NoNewPrivs,
    the file out of reach (docs/robustness.md, "What a target can do to us")."""
    import pwd

    text = got["cmd"] if isinstance(got["cmd"], str) else str(got["cmd"])
    nobody = pwd.getpwnam("nobody")
    assert f"uid={nobody.pw_uid}(" in text and "uid=0(" not in text, text
    assert f"gid={nobody.pw_gid}(" in text and "groups=0(" not in text
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{cap}:\t0000000000000000" in text, text
    assert "NoNewPrivs:\t1" in text
    assert got["secret"] == ("error", "eacces"), got["secret"]
    return got
