"""Fixtures of the eBPF tests: the compiled stdin-driven workloads and a binchurn node."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
from ebpfhelp import ROOT, Churn, check_bpf


@pytest.fixture(scope="session")
def ebin() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="beamalloc-ebpf-test-")
    for module in ("binchurn", "spikes"):
        subprocess.run(["erlc", "-o", d, str(ROOT / f"samples/workloads/{module}.erl")],
                       check=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def churn(ebin: str) -> Iterator[Churn]:
    c = Churn(ebin)
    yield c
    c.stop()


@pytest.fixture
def bpf_ready() -> None:
    """What ebpfhelp.requires_bpf asks for: tracing works here (fails as root if it does not)."""
    check_bpf()
