"""Tracing a beam.smp without alloc_util's symbols: Debian's OTP 29 (its chroot runtime,
tests/otp.py) exports only the NIF and driver API and ships no .symtab (docs/erts/releases.md §3).
`trace` follows it at the carrier level through /proc/PID/root and says in one line what it
cannot see and why; a trace file is refused; `recommend --trace-for` replays the fitted workload
instead and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import otp
import pytest
from ebpfhelp import Churn, Tracer, probes_in_kernel, requires_bpf

pytestmark = [requires_bpf, pytest.mark.live]

STRIPPED = "29"


@pytest.fixture
def churn29() -> Churn:
    c = Churn(None, sname=True, release=STRIPPED)
    yield c
    c.stop()


def test_followed_at_the_carrier_level_and_says_what_it_cannot_see(churn29: Churn) -> None:
    tr = Tracer("--pid", str(churn29.pid), "--json")  # the default level: block
    (note,) = tr.notes  # one line before the usual "following ..." one
    assert note.startswith("beamalloc: block level unavailable: beam.smp has no symbol for "
                           "alloc_util"), note
    assert note.endswith("; following the carrier level (syscalls, libc) only"), note
    probes = probes_in_kernel(churn29.pid)
    churn29.cmd("keep 20 1000000")  # 20 single-block carriers of 1 MB: 20 mmaps
    rc, out, err = tr.stop()
    assert rc == 0, err
    doc = tr.json(out)
    assert doc["mode"]["level"] == "carrier" and "blocks" not in doc
    unseen = doc["mode"]["unseen"]
    assert "beam.smp has no symbol for alloc_util (erts_alcu_alloc_thr_pref and 20 more)" in unseen
    assert "no debug file /usr/lib/debug/.build-id/" in unseen
    assert "erts_mseg_alloc_opt" in unseen  # mseg's own entry points are not exported either
    mmap = doc["carriers"]["syscalls"]["mmap"]["all"]
    assert mmap["count"] >= 20 and mmap["bytes"] >= 20 * 1_000_000, mmap
    # libc is probed in the node's own root, not the host's
    root = f"/proc/{churn29.pid}/root/"
    assert any("libc" in p and root in p for p in probes), probes
    assert "foreign_malloc" in doc


def test_block_trace_file_is_refused_in_one_line(churn29: Churn, tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "trace", "--pid",
                        str(churn29.pid), "-o", str(tmp_path / "t.batr")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"beamalloc: no block-level trace of pid {churn29.pid}: beam.smp "
                           "has no symbol for alloc_util"), line
    assert not (tmp_path / "t.batr").exists()
    assert probes_in_kernel(churn29.pid) == []


def test_recommend_trace_for_falls_back_to_the_fitted_workload(churn29: Churn) -> None:
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "recommend", churn29.node,
                        "--trace-for", "1", "--json", "--rate-seconds", "0"],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "BEAMALLOC_COOKIE": churn29.cookie})
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("no trace:")]
    assert len(notes) == 1, r.stderr
    assert "has no symbol for alloc_util" in notes[0]
    assert notes[0].endswith("the prediction replays a workload fitted to the snapshot")
    rec = json.loads(r.stdout)
    assert rec["verdict"] is not None
    workloads = {f["predicted"]["workload"] for f in rec["findings"]
                 if isinstance(f.get("predicted"), dict) and "workload" in f["predicted"]}
    assert "traced" not in workloads


def test_the_release_is_what_the_runtime_says() -> None:
    """The stripped runtime is OTP 29 (its own erl says so), so these tests test that release."""
    n = otp.start_node(release=STRIPPED)
    try:
        assert n.eval("erlang:system_info(otp_release)").strip() == '"29"'
    finally:
        n.stop()
