"""Shared test helpers: paths to the samples and fixtures, and the CLI run as users run it.

A module of its own, not conftest.py: tests/live and tests/ebpf have conftest.py files too, and
only one module can be imported as `conftest`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
