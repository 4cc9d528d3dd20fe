"""Shared test helpers: paths to the samples and fixtures, and the CLI run as users run it.

A module of its own, not conftest.py: tests/live and tests/ebpf have conftest.py files too, and
only one module can be imported as `conftest`."""

from __future__ import annotations

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
